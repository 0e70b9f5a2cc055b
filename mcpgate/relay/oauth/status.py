"""`mcpgate-relay --auth-status URL` and `mcpgate-relay --logout URL`: what is held for a server, and forgetting it.

Both print on stdout and exit; neither prints a token, a secret or a device code. --auth-status exits
0 when a token is held for the server and 1 when none is; --logout exits 0 either way and says
whether there was anything to forget.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timezone

from mcpgate.config.relay_settings import RelaySettings
from mcpgate.relay import errors
from mcpgate.relay.oauth.store import Record, TokenStore

Print = Callable[[str], None]


def run(settings: RelaySettings, print_fn: Print = print) -> int:
    """The action the settings ask for (--logout first when both are given)."""
    store = TokenStore(settings.config_dir or None)
    if settings.logout:
        return logout(store, settings.url, print_fn)
    return auth_status(store, settings.url, print_fn)


def logout(store: TokenStore, url: str, print_fn: Print) -> int:
    held = store.peek(url)
    if store.forget(url):
        issuer = f" (issuer {held.issuer})" if held and held.issuer else ""
        print_fn(f"forgot the sign-in held for {errors.redact(url)}{issuer}")
    else:
        print_fn(f"nothing was held for {errors.redact(url)}")
    return 0


def auth_status(store: TokenStore, url: str, print_fn: Print) -> int:
    record = store.peek(url)
    print_fn(f"server: {errors.redact(url)}")
    print_fn(f"file: {store.path(url)}")
    if record is None:
        print_fn("nothing held (not signed in)")
        return 1
    for line in describe(record):
        print_fn(line)
    return 0 if record.tokens.get("access_token") or record.tokens.get("refresh_token") else 1


def describe(record: Record, now: float | None = None) -> list[str]:
    """The record in lines for a person: never a token or a secret."""
    now = time.time() if now is None else now
    client, tokens = record.client, record.tokens
    lines = [f"issuer: {record.issuer or '(none: the server publishes no authorization server metadata)'}"]
    if client.get("client_id"):
        kind = "confidential" if client.get("client_secret") else "public"
        source = client.get("source") or "unknown"
        lines.append(f"client: {client['client_id']} ({source}, {kind})")
    else:
        lines.append("client: none registered")
    lines.append(f"scopes: {tokens.get('scope') or '(none named)'}")
    lines.append(f"access token: {_expiry(tokens, now)}")
    lines.append(f"refresh token: {'held' if tokens.get('refresh_token') else 'none'}")
    others = sorted(name or "(no issuer)" for name in record.others)
    if others:
        lines.append(f"also on file for other issuers: {', '.join(others)}")
    return lines


def _expiry(tokens: dict[str, object], now: float) -> str:
    if not tokens.get("access_token"):
        return "none"
    expires_at = tokens.get("expires_at")
    if not isinstance(expires_at, (int, float)):
        return "held (no expiry given)"
    when = datetime.fromtimestamp(expires_at, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    left = expires_at - now
    if left <= 0:
        return f"expired at {when}"
    return f"held, expires at {when} (in {_duration(left)})"


def _duration(seconds: float) -> str:
    minutes = int(seconds // 60)
    if minutes < 1:
        return f"{int(seconds)} s"
    if minutes < 120:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60} min"
