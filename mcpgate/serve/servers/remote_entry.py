"""A remote server's entry of MCPGATE_CONFIG (one with a `url`), read and checked into a RemoteEntry: where its
upstream is, how to speak to it, and its credentials.

    parse(raw, where) -> RemoteEntry      raises RemoteEntryError (a SettingsError) naming `where` and the field

The entry: `{"url": "http(s)://...", "transport": "streamable-http" | "sse", "headers": {str: str},
"era": "auto" | "2025" | "2026-07-28", "auth": {...}, "prefix": str, "resurrect": bool, "mcpgate": {...}}`
(`serverUrl` is read as `url`; "prefix", "resurrect" and "mcpgate" are config_file's, like a stdio entry's).
`transport` defaults to "streamable-http"; a desktop host's `type` is read as the transport ("http",
"streamable-http", "streamableHttp", "streamable_http"; "sse"), and one given with a different `transport` is an
error. A header value may name environment variables as `${NAME}`, read when the file is loaded: an unset one is
an error naming the variable; the values are never logged or shown in an error, and the headers the relay sets
itself (framing, the upstream session, the protocol version) are refused. `era` is the relay's --protocol-era
(auto: each client the way it speaks; 2025: 2025 sessions upstream; 2026-07-28: stateless). `auth` is
`{"type": "bearer", "token_env": "NAME"}` (the token read from NAME when the file is loaded),
`{"type": "client_credentials", ...}` (mcpgate/relay/oauth/client_credentials.py parses it) or
`{"type": "user_oauth", ...}` (mcpgate/serve/vault/upstream_oauth.py parses it). An entry with a `command` or an
unknown key is an error.

RemoteEntryError derives from SettingsError and not from config_file's ConfigError: config_file imports this
module, so this module does not import it back. Its message is complete: config_file raises its ConfigError with
`str(exc)`.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from mcpgate.config import validators
from mcpgate.config.declarations import SettingsError

KEYS = ("url", "serverUrl", "type", "transport", "headers", "era", "auth", "resurrect", "prefix", "mcpgate")
# A remote entry's `type` or `transport` spellings (desktop hosts write several), as the transport they name.
TRANSPORTS = {
    "streamable-http": "streamable-http",
    "http": "streamable-http",
    "streamableHttp": "streamable-http",
    "streamable_http": "streamable-http",
    "sse": "sse",
}
ERAS = {"auto": "auto", "2025": "legacy", "2026-07-28": "modern"}  # the era as the relay's --protocol-era
ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Headers the relay sets itself (framing, the upstream session, the protocol version): never from the file.
OWN_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "accept",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
    }
)


class RemoteEntryError(SettingsError):
    """The entry cannot be served: the message starts with `where` and names the field, never a secret."""


@dataclass(frozen=True)
class RemoteEntry:
    """A remote server's upstream: where, how, and its credentials. The resolved header values and the token
    are secrets: never in the repr (a log line or an error showing an entry never shows them)."""

    url: str
    transport: str = "streamable-http"  # "streamable-http" | "sse"
    era: str = "auto"  # "auto" | "2025" | "2026-07-28"
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    bearer_token: str | None = field(default=None, repr=False)  # auth "bearer": the token read from its variable
    auth_source: str = field(default="", repr=False)  # auth "client_credentials": its object, as JSON (compared)
    auth: Any = field(default=None, repr=False, compare=False)  # ... and what client_credentials.parse made of it

    @property
    def protocol_era(self) -> str:
        """The era as the relay's --protocol-era names it."""
        return ERAS[self.era]


def parse(raw: dict[str, Any], where: str) -> RemoteEntry:
    """A `url` entry's upstream (see the module's docstring); its prefix, resurrect and mcpgate are left alone."""
    if "command" in raw:
        raise RemoteEntryError(f"{where}: has both a url and a command: a server is either remote (url) or stdio")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        allowed = ", ".join(key for key in KEYS if key != "serverUrl")
        raise RemoteEntryError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))} for a remote server (allowed: {allowed})"
        )
    if "url" in raw and "serverUrl" in raw:
        raise RemoteEntryError(f"{where}: give url or serverUrl, not both")
    url = raw.get("url", raw.get("serverUrl"))
    if not isinstance(url, str) or validators.url(url) or any(ch.isspace() for ch in url):
        raise RemoteEntryError(f"{where}: url must be an http:// or https:// URL")
    era = raw.get("era", "auto")
    if era not in ERAS:
        raise RemoteEntryError(f'{where}: era must be "auto", "2025" or "2026-07-28" (got {era!r})')
    headers = _headers(raw.get("headers", {}), where)
    token, auth_source, auth = _auth(raw.get("auth"), f"{where}: auth")
    if (token or auth is not None) and any(key.lower() == "authorization" for key, _ in headers):
        raise RemoteEntryError(f"{where}: give auth or an Authorization header, not both")
    return RemoteEntry(url, _transport(raw, where), era, headers, token, auth_source, auth)


def _transport(raw: dict[str, Any], where: str) -> str:
    """The entry's transport: `transport`, or the desktop hosts' `type`; both given must agree."""
    named = {key: raw[key] for key in ("type", "transport") if key in raw}
    for key, value in named.items():
        if value not in TRANSPORTS:
            raise RemoteEntryError(f'{where}: {key} must be "streamable-http" or "sse" (got {value!r})')
    chosen = {TRANSPORTS[value] for value in named.values()}
    if len(chosen) > 1:
        raise RemoteEntryError(f"{where}: type and transport name different transports")
    return chosen.pop() if chosen else "streamable-http"


def _headers(raw: Any, where: str) -> tuple[tuple[str, str], ...]:
    """The headers, every ${NAME} read from the environment; an error names the header, never its value."""
    if not isinstance(raw, dict) or not all(isinstance(value, str) for value in raw.values()):
        raise RemoteEntryError(f'{where}: headers must be a JSON object of strings, for example {{"X-Team": "blue"}}')
    headers = []
    for name, template in raw.items():
        if not name or any(ch == ":" or not 0x21 <= ord(ch) <= 0x7E for ch in name):
            raise RemoteEntryError(f"{where}: headers: {name!r} is not an HTTP header name")
        if name.lower() in OWN_HEADERS:
            raise RemoteEntryError(f"{where}: headers: {name} is mcpgate's to set, not the file's")
        value = _resolved(template, f"{where}: headers.{name}")
        if any(ch in value for ch in "\r\n\0"):
            raise RemoteEntryError(f"{where}: headers.{name}: the value holds a line break or NUL (not shown)")
        headers.append((name, value))
    return tuple(headers)


def _resolved(template: str, where: str) -> str:
    """The template with every ${NAME} replaced by the variable's value (RemoteEntryError naming an unset one)."""
    return ENV_REFERENCE.sub(lambda found: _variable(found[1], where), template)


def _variable(name: str, where: str) -> str:
    value = os.environ.get(name)
    if value is None:
        raise RemoteEntryError(f"{where} names the environment variable {name}, which is not set")
    return value


def _auth(raw: Any, where: str) -> tuple[str | None, str, Any]:
    """(bearer token, client-credentials object as JSON, what client_credentials.parse made of it)."""
    if raw is None:
        return None, "", None
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind == "bearer":
        assert isinstance(raw, dict)
        return _bearer(raw, where), "", None
    if kind == "client_credentials":
        assert isinstance(raw, dict)
        return None, json.dumps(raw, sort_keys=True), _client_credentials(raw, where)
    if kind == "user_oauth":  # each signed-in user signs in to the upstream (serve/vault/upstream_oauth.py)
        assert isinstance(raw, dict)
        try:
            user_oauth = importlib.import_module("mcpgate.serve.vault.upstream_oauth")
            return None, json.dumps(raw, sort_keys=True), user_oauth.parse(raw, where)
        except SettingsError as exc:
            raise RemoteEntryError(str(exc)) from None
    raise RemoteEntryError(
        f'{where} must be {{"type": "bearer", "token_env": "NAME"}} or {{"type": "client_credentials", ...}} '
        'or {"type": "user_oauth", ...}'
    )


def _bearer(raw: dict[str, Any], where: str) -> str:
    """The token of `{"type": "bearer", "token_env": "NAME"}`, read from NAME now."""
    unknown = sorted(set(raw) - {"type", "token_env"})
    if unknown:
        raise RemoteEntryError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} (allowed: type, token_env)")
    env = raw.get("token_env")
    if not isinstance(env, str) or not ENV_REFERENCE.fullmatch("${" + env + "}"):
        raise RemoteEntryError(f"{where}: token_env must name an environment variable")
    token = _variable(env, f"{where}.token_env")
    if not token or validators.token(token):
        raise RemoteEntryError(f"{where}.token_env: {env} is empty or holds characters a bearer token cannot have")
    return token


def _client_credentials(raw: dict[str, Any], where: str) -> Any:
    """What mcpgate/relay/oauth/client_credentials.py makes of the object (imported only when one is named)."""
    try:  # by name: helper module of the relay's OAuth client, imported only when an entry names it
        client_credentials = importlib.import_module("mcpgate.relay.oauth.client_credentials")
    except ImportError:
        raise RemoteEntryError(f"{where}: client_credentials is not available yet in this mcpgate") from None
    try:
        return client_credentials.parse(raw, where)
    except SettingsError as exc:
        raise RemoteEntryError(str(exc)) from None
