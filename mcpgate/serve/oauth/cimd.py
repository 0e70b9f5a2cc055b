"""Client ID Metadata Documents: an https URL as a client id, its document fetched and checked.

    resolver = cimd.Resolver(settings)          # build once per app and keep it (cheap; the cache is shared)
    if cimd.is_document_url(client_id):          # an https URL: treat it as a CIMD client id
        doc = resolver.client(client_id)         # -> ClientDocument, or raises CimdError (invalid_client)

A client id URL must be on MCPGATE_OAUTH_CIMD_ALLOWLIST (an exact URL, or a prefix ending in "/"), https,
with a path, and no fragment, userinfo or dot segments. Its document is fetched with safe_fetch (public
addresses only, no redirects, size cap, deadline) and must carry client_id equal to the URL exactly,
client_name, and redirect_uris: a non-empty list, each an https or loopback http URI (redirects.problem with
no allowlist). token_endpoint_auth_method must be "none" (absent means none here); a document with a client
secret is refused. Documents are cached (Cache-Control max-age clamped to 5 min..24 h, 1 h without one) in a
bounded LRU; a failure is cached for FAILURE_TTL seconds so a bad URL is not fetched again in a loop.
"""

from __future__ import annotations

import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from mcpgate.config.settings import Settings
from mcpgate.serve.oauth import redirects, safe_fetch

MAX_DOCUMENT_BYTES = 16 * 1024
FETCH_TIMEOUT = 5.0
CACHE_ENTRIES = 256
MIN_TTL, DEFAULT_TTL, MAX_TTL = 300.0, 3600.0, 86400.0
FAILURE_TTL = 30.0
GRANT_TYPES = frozenset({"authorization_code", "refresh_token"})


class CimdError(Exception):
    """The client id URL or its document is not acceptable: answer invalid_client with str(exc) as the
    error_description (safe to show)."""

    error = "invalid_client"

    def __init__(self, description: str) -> None:
        # RFC 6749's error_description alphabet: printable ASCII without " and \
        super().__init__("".join(ch if " " <= ch <= "~" and ch not in '"\\' else "?" for ch in description))


@dataclass(frozen=True)
class ClientDocument:
    """A checked client metadata document. A public client (no secret, token_endpoint_auth_method none)."""

    client_id: str  # the document's URL, exactly
    client_name: str
    redirect_uris: tuple[str, ...]  # non-empty; each passed redirects.problem(uri, ())
    token_endpoint_auth_method: str = "none"
    grant_types: tuple[str, ...] = ("authorization_code",)  # a subset of GRANT_TYPES (RFC 7591 default)
    response_types: tuple[str, ...] = ("code",)
    scope: str | None = None  # space-separated scopes the client asks for, when it says
    client_uri: str | None = None
    logo_uri: str | None = None

    def metadata(self) -> dict[str, Any]:
        """The RFC 7591 client metadata form (for Authlib's client model)."""
        fields: dict[str, Any] = {
            "client_id": self.client_id,
            "client_name": self.client_name,
            "redirect_uris": list(self.redirect_uris),
            "token_endpoint_auth_method": self.token_endpoint_auth_method,
            "grant_types": list(self.grant_types),
            "response_types": list(self.response_types),
        }
        for name in ("scope", "client_uri", "logo_uri"):
            if getattr(self, name) is not None:
                fields[name] = getattr(self, name)
        return fields


def is_document_url(client_id: str) -> bool:
    """Whether a client id is a URL to resolve (https:), rather than a registered client's id."""
    return client_id.startswith("https://")


def url_problem(url: str, allowlist: tuple[str, ...]) -> str | None:
    """Why `url` is not an acceptable client id URL under `allowlist`, or None."""
    if not allowlist:
        return "client id metadata documents are not accepted here (MCPGATE_OAUTH_CIMD_ALLOWLIST is empty)"
    shape = _shape_problem(url)
    if shape:
        return shape
    if not any(url == entry or (entry.endswith("/") and url.startswith(entry)) for entry in allowlist):
        return f"client id {url} is not on this server's client id metadata document allowlist"
    return None


def _shape_problem(url: str) -> str | None:
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        return "a client id URL must not contain whitespace or control characters"
    if "#" in url:
        return "a client id URL must not carry a fragment"
    try:
        parts = urlsplit(url)
        host, _port = parts.hostname, parts.port
    except ValueError:
        return "the client id URL is malformed"
    if parts.scheme != "https" or not host:
        return "a client id URL must be an https URL with a host"
    if "@" in parts.netloc:
        return "a client id URL must not carry userinfo"
    if not parts.path or parts.path == "/":
        return "a client id URL must have a path"
    segments = parts.path.split("/")
    if any(seg.lower() in (".", "..", "%2e", "%2e%2e", ".%2e", "%2e.") for seg in segments):
        return "a client id URL must not contain . or .. path segments"
    return None


class _Entry:
    __slots__ = ("document", "error", "expires")

    def __init__(self, document: ClientDocument | None, error: str | None, expires: float) -> None:
        self.document, self.error, self.expires = document, error, expires


class DocumentCache:
    """Checked documents and recent failures by URL, at most `entries`, least recently used out first."""

    def __init__(self, entries: int = CACHE_ENTRIES, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._limit = entries
        self._clock = clock
        self._lock = threading.Lock()

    def get(self, url: str) -> _Entry | None:
        with self._lock:
            entry = self._entries.get(url)
            if entry is None:
                return None
            if entry.expires <= self._clock():
                del self._entries[url]
                return None
            self._entries.move_to_end(url)
            return entry

    def put(self, url: str, entry: _Entry) -> None:
        with self._lock:
            self._entries[url] = entry
            self._entries.move_to_end(url)
            while len(self._entries) > self._limit:
                self._entries.popitem(last=False)

    def now(self) -> float:
        return self._clock()

    def __len__(self) -> int:
        return len(self._entries)


_SHARED = DocumentCache()


class Resolver:
    """Client ids that are document URLs, resolved to checked documents.

    The keyword arguments exist for tests (a loopback server, a test CA, a clock); production uses the
    defaults: public addresses only, https only, the process-wide cache.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        cache: DocumentCache | None = None,
        allow_address: safe_fetch.AddressPolicy = safe_fetch.public_only,
        allow_http: bool = False,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float = FETCH_TIMEOUT,
        max_bytes: int = MAX_DOCUMENT_BYTES,
    ) -> None:
        self._allowlist = settings.oauth_cimd_allowlist
        self._cache = _SHARED if cache is None else cache
        self._allow_address = allow_address
        self._allow_http = allow_http
        self._ssl_context = ssl_context
        self._timeout = timeout
        self._max_bytes = max_bytes

    @property
    def enabled(self) -> bool:
        """Whether any document URL is accepted (for client_id_metadata_document_supported)."""
        return bool(self._allowlist)

    def client(self, client_id: str) -> ClientDocument:
        """The checked document of `client_id`; raises CimdError (invalid_client) with a clear description."""
        problem = url_problem(client_id, self._allowlist)
        if problem:
            raise CimdError(problem)
        entry = self._cache.get(client_id)
        if entry is None:
            entry = self._resolve(client_id)
            self._cache.put(client_id, entry)
        if entry.document is None:
            raise CimdError(entry.error or "the client id metadata document is not usable")
        return entry.document

    def _resolve(self, url: str) -> _Entry:
        try:
            fetched = safe_fetch.fetch(
                url,
                max_bytes=self._max_bytes,
                timeout=self._timeout,
                allow_address=self._allow_address,
                allow_http=self._allow_http,
                ssl_context=self._ssl_context,
            )
            document = parse_document(url, fetched.data)
        except (safe_fetch.FetchError, CimdError) as exc:
            message = f"client id metadata document {url}: {exc}"
            return _Entry(None, message, self._cache.now() + FAILURE_TTL)
        return _Entry(document, None, self._cache.now() + cache_ttl(fetched.headers.get("cache-control")))


def cache_ttl(cache_control: str | None) -> float:
    """How long to keep a document: its max-age clamped to MIN_TTL..MAX_TTL, DEFAULT_TTL without one
    (no-store and no-cache count as 0, hence MIN_TTL: the document is needed again within the flow)."""
    if not cache_control:
        return DEFAULT_TTL
    seconds: float | None = None
    for directive in cache_control.lower().split(","):
        name, _, value = directive.strip().partition("=")
        if name in ("no-store", "no-cache"):
            seconds = 0.0
        elif name == "max-age" and seconds is None:
            value = value.strip().strip('"')
            seconds = float(value) if (value.isascii() and value.isdigit()) else None
    if seconds is None:
        return DEFAULT_TTL
    return min(MAX_TTL, max(MIN_TTL, seconds))


def parse_document(url: str, data: Any) -> ClientDocument:
    """The checked document fetched from `url`; raises CimdError naming the first problem."""
    if not isinstance(data, dict):
        raise CimdError("the document is not a JSON object")
    if data.get("client_id") != url:
        raise CimdError("its client_id is not the document's URL exactly")
    name = data.get("client_name")
    if not isinstance(name, str) or not name.strip():
        raise CimdError("client_name is missing")
    method = data.get("token_endpoint_auth_method", "none")
    if method != "none":
        raise CimdError(
            f"token_endpoint_auth_method {method!r} is not supported for client id metadata documents "
            '(only "none": a public client with PKCE)'
        )
    if "client_secret" in data or "client_secret_expires_at" in data:
        raise CimdError("a client id metadata document must not carry a client secret")
    grants = _strings(data, "grant_types", ("authorization_code",))
    unknown = sorted(set(grants) - GRANT_TYPES)
    if unknown or "authorization_code" not in grants:
        raise CimdError(f"grant_types must include authorization_code and only {sorted(GRANT_TYPES)}")
    if _strings(data, "response_types", ("code",)) != ("code",):
        raise CimdError('response_types must be ["code"]')
    return ClientDocument(
        client_id=url,
        client_name=name.strip(),
        redirect_uris=_redirect_uris(data.get("redirect_uris")),
        grant_types=grants,
        scope=_optional_string(data, "scope"),
        client_uri=_optional_string(data, "client_uri"),
        logo_uri=_optional_string(data, "logo_uri"),
    )


def _redirect_uris(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(uri, str) for uri in value):
        raise CimdError("redirect_uris must be a non-empty list of strings")
    for uri in value:
        problem = redirects.problem(uri, ())
        if problem:
            raise CimdError(f"redirect URI {uri} refused: {problem}")
    return tuple(value)


def _strings(data: dict[str, Any], name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    value = data.get(name)
    if value is None:
        return default
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise CimdError(f"{name} must be a list of strings")
    return tuple(value)


def _optional_string(data: dict[str, Any], name: str) -> str | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise CimdError(f"{name} must be a string")
    return value
