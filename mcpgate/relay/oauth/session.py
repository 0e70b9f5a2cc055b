"""The relay's OAuth state for one server: what the transport asks before and after each exchange.

    authorization()            the Authorization value to send (refreshed shortly before expiry)
    on_unauthorized(h, sent)   a 401: adopt another relay's newer token, refresh, or sign in; True = retry
    on_forbidden(h, sent)      a 403 insufficient_scope: sign in again for the union of scopes; True = retry
    accepted(sent)             a reply that was not 401/403 came back for `sent`

Sign-in is serialised twice: greenlets of this relay behind one lock (the first to get a 401 signs
in, the others retry with its token), relays sharing the config directory behind the store's file
lock (the second finds the first one's token). A token from an interactive sign-in that the server
refuses before accepting it once ends in an error, not in another sign-in: the browser never opens
in a loop. Step-up asks for each set of scopes at most once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol

import gevent.lock

from mcpgate.config.relay_settings import TOKEN_ENV, RelaySettings
from mcpgate.relay import errors
from mcpgate.relay.oauth.discovery import (
    Challenge,
    Discovery,
    SignInError,
    choose_scope,
    discover,
    origin,
    parse_challenge,
)

if TYPE_CHECKING:  # loaded when the relay first signs in or refreshes (_http): an idle relay does without it
    import requests

log = logging.getLogger("mcpgate.relay")

REFRESH_MARGIN = 60.0  # refresh this long before expiry
DISCOVERY_TIMEOUT = 30.0
MAX_SCOPE_SETS = 8  # distinct step-up scope sets tried per process


class Record(Protocol):
    """The store's record for a server (mcpgate.relay.oauth.store.Record)."""

    issuer: str | None
    client: dict[str, Any]

    def bind(self, issuer: str | None) -> bool: ...

    tokens: dict[str, Any]
    metadata: dict[str, Any]


class Store(Protocol):
    def locked(self, server_url: str) -> AbstractContextManager[Any]: ...
    def peek(self, server_url: str) -> Any: ...


class OAuthSession:
    """One per relay process and server URL."""

    def __init__(self, settings: RelaySettings, store: Store) -> None:
        self.settings = settings
        self.store = store
        self.server_url = settings.url
        self._origin = origin(settings.url)
        self._lock = gevent.lock.RLock()
        self._session: requests.Session | None = None
        self._tokens: dict[str, Any] = {}
        self._client: dict[str, Any] = {}
        self._discovery: Discovery | None = None
        self._loaded = False
        self._unproven: str | None = None  # a signed-in token the server has not accepted yet
        self._tried_scopes: set[frozenset[str]] = set()

    # ---------------------------------------------------------------- the transport's calls

    def covers(self, url: str) -> bool:
        """The token goes only to the server it was issued for (its origin)."""
        if url == self.server_url:  # every MCP exchange: its origin is the tokens' own
            return True
        return origin(url) == self._origin

    def authorization(self) -> str | None:
        if not self._loaded:
            self._load()
        if not self._tokens and self.settings.oauth and not self._tried_scopes:
            with self._lock, self._record() as record:
                if not self._adopt(record):
                    discovery = self._rediscover(record, Challenge())
                    self._sign_in(record, discovery, choose_scope(self.settings.oauth_scope, Challenge(), discovery))
        if self._expiring():
            with self._lock, self._record() as record:
                if self._expiring() and not self._adopt(record):
                    self._refresh(record)
        return self._header()

    def accepted(self, sent: str | None) -> None:
        if sent is not None and sent == self._unproven:
            self._unproven = None

    def on_unauthorized(self, www_authenticate: str | None, sent: str | None = None) -> bool:
        try:
            return self._unauthorized(parse_challenge(www_authenticate), sent)
        except SignInError as exc:
            raise SignInError(
                f"upstream requires authorization (HTTP 401) and signing in failed: {exc.message} "
                f"(or set {TOKEN_ENV} to a bearer token for this server)"
            ) from None

    def _unauthorized(self, challenge: Challenge, sent: str | None) -> bool:
        with self._lock:
            current = self._header()
            if current is not None and current != sent:
                return True  # renewed while this request was out
            with self._record() as record:
                if self._adopt(record):
                    return True
                discovery = self._rediscover(record, challenge)
                if sent is not None and self._tokens.get("refresh_token") and self._refresh(record):
                    return True
                if sent is not None and sent == self._unproven:
                    raise SignInError(
                        "the server refused the token its authorization server just issued; not signing in "
                        f"again (mcpgate-relay --logout {errors.redact(self.server_url)} forgets what is saved)"
                    )
                held = tuple(str(self._tokens.get("scope") or "").split())
                scopes = choose_scope(self.settings.oauth_scope, challenge, discovery, held)
                self._sign_in(record, discovery, scopes)
        return True

    def on_forbidden(self, www_authenticate: str | None, sent: str | None = None) -> bool:
        challenge = parse_challenge(www_authenticate)
        if not challenge.insufficient_scope:
            return False
        with self._lock:
            current = self._header()
            if current is not None and current != sent:
                return True
            with self._record() as record:
                held = tuple(str(self._tokens.get("scope") or "").split())
                discovery = self._rediscover(record, challenge)
                wanted = choose_scope("", challenge, discovery, held)
                if frozenset(wanted) in self._tried_scopes or len(self._tried_scopes) >= MAX_SCOPE_SETS:
                    log.warning("the server still asks for more scope (%s); not asking again", " ".join(wanted))
                    return False
                self._sign_in(record, discovery, wanted)
        return True

    def close(self) -> None:
        if self._session is not None:
            self._session.close()

    @property
    def _http(self) -> requests.Session:
        """The session discovery and sign-in send on, made (requests loaded) when first needed."""
        if self._session is None:
            import requests

            self._session = requests.Session()
        return self._session

    # ---------------------------------------------------------------- state

    def _header(self) -> str | None:
        token = self._tokens.get("access_token")
        return f"Bearer {token}" if token else None

    def _expiring(self) -> bool:
        expires_at = self._tokens.get("expires_at")
        return (
            bool(self._tokens.get("refresh_token"))
            and isinstance(expires_at, (int, float))
            and (time.time() >= expires_at - REFRESH_MARGIN)
        )

    @contextmanager
    def _record(self) -> Iterator[Record]:
        """The store's record under its lock; a lock held too long by another relay is a SignInError."""
        try:
            manager = self.store.locked(self.server_url)
            record = manager.__enter__()
        except TimeoutError as exc:  # the store's StoreLocked
            raise SignInError(f"the sign-in store is busy: {exc}") from None
        try:
            yield record
        except BaseException as exc:
            if not manager.__exit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            manager.__exit__(None, None, None)

    def _load(self) -> None:
        """What an earlier run (or another relay) saved: used until the server refuses it."""
        self._loaded = True
        record = self.store.peek(self.server_url)
        if record is not None:
            self._take(record)

    def _take(self, record: Record) -> None:
        self._tokens = dict(record.tokens or {})
        self._client = dict(record.client or {})
        saved = (record.metadata or {}).get("discovery")
        if isinstance(saved, dict):
            self._discovery = Discovery.from_dict(saved) or self._discovery

    def _adopt(self, record: Record) -> bool:
        """Take the stored token when another relay renewed it (it differs from ours and is fresh)."""
        stored = record.tokens or {}
        access = stored.get("access_token")
        if not access or access == self._tokens.get("access_token"):
            return False
        expires_at = stored.get("expires_at")
        if isinstance(expires_at, (int, float)) and time.time() >= expires_at - REFRESH_MARGIN:
            return False
        self._take(record)
        log.info("using the token another mcpgate-relay obtained for %s", errors.redact(self.server_url))
        return True

    def _rediscover(self, record: Record, challenge: Challenge) -> Discovery:
        """Discovery afresh (the server may have moved to another authorization server); a new issuer
        drops what was bound to the old one."""
        found = discover(self._http, self.server_url, challenge, DISCOVERY_TIMEOUT)
        previous = record.issuer
        if record.bind(found.issuer):
            if previous is not None:
                log.warning(
                    "%s now uses the authorization server %s: its own registration and tokens apply",
                    errors.redact(self.server_url),
                    errors.redact(found.issuer),
                )
            self._tokens, self._client = dict(record.tokens), dict(record.client)
        self._discovery = found
        record.metadata = {**(record.metadata or {}), "discovery": found.to_dict()}
        return found

    # ---------------------------------------------------------------- grants

    def _sign_in(self, record: Record, discovery: Discovery, scopes: tuple[str, ...]) -> None:
        self._tried_scopes.add(frozenset(scopes))
        saved = record.client if record.client and record.client.get("issuer") == discovery.issuer else None
        client, tokens = self._grant(discovery, scopes, saved)
        record.bind(discovery.issuer)
        record.client, record.tokens = client, tokens
        self._tokens, self._client = dict(tokens), dict(client)
        self._unproven = self._header()
        log.info("signed in to %s (scopes: %s)", errors.redact(self.server_url), " ".join(scopes) or "none")

    def _grant(
        self, discovery: Discovery, scopes: tuple[str, ...], saved: dict[str, Any] | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        if self.settings.oauth_client_credentials or self.settings.oauth_device:
            return self._other_grant(discovery, scopes, saved)
        from mcpgate.relay.oauth import flow

        return flow.authorization_code(self.settings, discovery, scopes, saved, self._http)

    def _other_grant(
        self, discovery: Discovery, scopes: tuple[str, ...], saved: dict[str, Any] | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Client credentials or the device grant (mcpgate.relay.oauth.grants), for a client chosen
        in the usual order (no redirect URI: neither grant has one)."""
        import importlib

        from mcpgate.relay.oauth import flow, registration

        grants: Any = importlib.import_module("mcpgate.relay.oauth.grants")  # R2's module

        client = registration.choose(
            self.settings, discovery.metadata, discovery.issuer, saved, None, self._http, DISCOVERY_TIMEOUT
        )
        scope = " ".join(scopes) or None
        timeouts = (self.settings.connect_timeout, DISCOVERY_TIMEOUT)
        key = self.settings.oauth_client_key or None  # private_key_jwt instead of a secret
        try:
            if self.settings.oauth_client_credentials:
                token = grants.client_credentials(
                    discovery.metadata, client, scope, discovery.resource, timeouts=timeouts, private_key=key
                )
            else:
                token = grants.device_code(
                    discovery.metadata,
                    client,
                    scope,
                    discovery.resource,
                    _print,
                    timeout=self.settings.oauth_timeout,
                    timeouts=timeouts,
                    private_key=key,
                )
        except grants.GrantError as exc:
            raise SignInError(str(exc)) from None
        return client, flow.token_record(token, scopes)

    def _refresh(self, record: Record) -> bool:
        """Spend the refresh token (the stored one: another relay may have rotated it); False when it
        is dead (the tokens are dropped, so the next 401 signs in once)."""
        from mcpgate.relay.oauth import flow

        discovery = self._discovery
        refresh_token = (record.tokens or {}).get("refresh_token") or self._tokens.get("refresh_token")
        endpoint = discovery.endpoint("token_endpoint") if discovery else None
        client = record.client or self._client
        if not refresh_token or endpoint is None or discovery is None or not client.get("client_id"):
            return False
        try:
            tokens = flow.refresh(client, endpoint, refresh_token, discovery.resource, self._tokens.get("scope"))
        except flow.RefreshRejected as exc:
            log.warning("refreshing the token for %s failed: %s", errors.redact(self.server_url), exc.message)
            record.tokens, self._tokens = {}, {}
            return False
        record.tokens, self._tokens = tokens, dict(tokens)
        log.info("refreshed the token for %s", errors.redact(self.server_url))
        return True


def _print(text: str) -> None:
    import sys

    print(f"mcpgate-relay: {text}", file=sys.stderr, flush=True)
