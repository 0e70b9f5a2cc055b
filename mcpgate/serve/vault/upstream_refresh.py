"""A refresh of one principal's upstream tokens (upstream_oauth.py), one holder at a time across the fleet.

With refresh-token rotation a refresh token is good for one refresh: two workers (or two instances) presenting the
same one at once would have the second refused (`invalid_grant`), and an authorization server that detects reuse
revokes the whole grant, the first's new tokens with it. So a refresh is done under a short lease of the vault's
store per principal and server (store.lease: a SQLite transaction, or Redis SET NX PX), which lapses after
LEASE_TTL so a holder that died does not block. Who does not get the lease waits (at most WAIT) and reads again:
the tokens the holder saved are used instead of refreshing; when the lease comes free and the tokens are still
the old ones, it refreshes itself. A refused refresh after which newer tokens are found (someone refreshed
meanwhile) is not the end of the sign-in; only the tokens seen refused, and nothing newer, are.

    refresh(signin, store, principal, seen) -> Refreshed
        .record   the tokens to use now (None: none newer)
        .over     the sign-in cannot go on (the refresh refused and nothing newer saved, or the tokens gone)
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any, Protocol

import gevent

from mcpgate.relay.oauth import flow
from mcpgate.relay.oauth.discovery import SignInError
from mcpgate.serve.vault.store import VaultStore

log = logging.getLogger("mcpgate.vault")

LEASE = "refresh:"  # the lease's name, + the server's
LEASE_TTL = flow.HTTP_TIMEOUT + 10.0  # longer than a holder's refresh may take (its token request's timeout)
WAIT = LEASE_TTL + 5.0  # the longest a refresh waits for another holder's (past a dead holder's lease)
STEP, MAX_STEP = 0.05, 0.5  # between looks at the store while another holds the lease (doubling)
REFRESH_MARGIN = 60.0  # a token is refreshed this long before it expires


class TokenRows(Protocol):
    """Where a server's token records are kept (upstream_oauth.UpstreamSignIn)."""

    server: str

    def tokens(self, principal: str) -> dict[str, Any] | None: ...
    def write_tokens(self, principal: str, record: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class Refreshed:
    record: dict[str, Any] | None = None  # newer tokens than the ones seen: use these
    over: bool = False  # the sign-in cannot go on: the authorization server refused, or it was ended


def expiring(tokens: dict[str, Any], margin: float = REFRESH_MARGIN) -> bool:
    expires_at = tokens.get("expires_at")
    return isinstance(expires_at, (int, float)) and expires_at - margin <= time.time()


def _newer(record: dict[str, Any], seen: dict[str, Any]) -> bool:
    """Tokens other than the ones seen, and not expired (a holder's refresh saved them: no need for another)."""
    tokens = record.get("tokens") or {}
    return tokens.get("access_token") != seen.get("access_token") and not expiring(tokens, 0.0)


def refresh(signin: TokenRows, store: VaultStore, principal: str, seen: dict[str, Any]) -> Refreshed:
    """Newer tokens than `seen`: another holder's, else a refresh now under the lease (see the docstring)."""
    name, holder = LEASE + signin.server, secrets.token_urlsafe(12)
    deadline, step = time.monotonic() + WAIT, STEP
    while True:
        record = signin.tokens(principal)
        if record is None:
            return Refreshed(over=True)  # signed out meanwhile
        if _newer(record, seen) and not expiring(record.get("tokens") or {}):
            return Refreshed(record)
        if store.lease(principal, name, holder, LEASE_TTL):
            break
        if time.monotonic() >= deadline:
            log.warning("a token refresh for server %s waited %.0f s for another's: not refreshed", signin.server, WAIT)
            return Refreshed(record if _newer(record, seen) else None)
        gevent.sleep(step)
        step = min(MAX_STEP, step * 2)
    try:
        return _refresh_held(signin, principal, seen)
    finally:
        store.release(principal, name, holder)


def _refresh_held(signin: TokenRows, principal: str, seen: dict[str, Any]) -> Refreshed:
    """The refresh itself, the lease held: read again (a holder may have saved just before it was taken)."""
    record = signin.tokens(principal)
    if record is None:
        return Refreshed(over=True)
    if _newer(record, seen) and not expiring(record.get("tokens") or {}):
        return Refreshed(record)
    tokens = record.get("tokens") or {}
    refresh_token, endpoint = tokens.get("refresh_token"), record.get("token_endpoint")
    if not refresh_token or not endpoint:
        return Refreshed(record) if _newer(record, seen) else Refreshed(over=True)
    try:
        renewed = flow.refresh(record["client"], endpoint, refresh_token, record["resource"], tokens.get("scope"))
    except SignInError as exc:
        again = signin.tokens(principal)  # saved meanwhile by a holder whose lease had lapsed, or without one
        if again is not None and (again.get("tokens") or {}).get("refresh_token") != refresh_token:
            return Refreshed(again)
        log.warning("refreshing a token for server %s failed: %s", signin.server, exc)
        refused = isinstance(exc, flow.RefreshRejected)  # else the authorization server could not be reached
        return Refreshed(record if not refused and _newer(record, seen) else None, over=refused)
    record["tokens"] = renewed
    signin.write_tokens(principal, record)
    return Refreshed(record)
