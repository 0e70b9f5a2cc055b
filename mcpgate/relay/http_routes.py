"""How one HTTP exchange of the relay is sent: on the relay's own HTTP/1.1 client, or on the urllib3 pool requests
would send it on.

A plain-HTTP URL that goes straight to its server (no proxy in the environment, no user info, a path and query
that requests and urllib3 would send as written: `plain_route`) is sent by relay/fast_http.py with the client's
headers, and neither requests nor urllib3 is loaded for it (~4 MB of an idle relay). Any other URL (HTTPS, a
proxy, credentials in the URL, a path they would rewrite) is worked out by requests, loaded then: the
requests.Session owns the settings (headers, proxies, TLS verification, cookies) and the urllib3 connection pools;
what requests works out per URL (the pool, the request target, the session's headers) is worked out once, with its
own adapter methods, and each exchange goes straight to that pool's urlopen() (or, for a plain-HTTP pool without
a proxy, to relay/fast_http.py's), without requests' per-call preparation. Routes are kept at most MAX_ROUTES,
then worked out anew. Cookies: the first Set-Cookie loads requests, whose jar keeps them and sends them back.
Contract of `Routes.exchange`: one attempt, no retry and no redirect followed (the retry policy is
HttpClient.send's), failures mapped to the relay's errors, cookies the upstream sets kept and sent back; the reply
comes back up to its headers (HttpReply), its body not read.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast
from urllib.parse import urlsplit

from mcpgate.relay import errors, fast_http

if TYPE_CHECKING:
    import requests
    import urllib3
    from requests.adapters import HTTPAdapter

MAX_ROUTES = 16
MAX_MERGED = 256
# What requests checks of a header's name and value (requests.utils.check_header_validity)
_HEADER_NAME = re.compile(r"^[^:\s][^:\r\n]*\Z")
_HEADER_VALUE = re.compile(r"^\S[^\r\n]*\Z|^\Z")
# A URL requests and urllib3 send as written: http, a host name or address (no user info), a port in range, a path
# and query of characters neither re-encodes, percent escapes upper case and not of unreserved characters
_PLAIN_URL = re.compile(
    r"http://(?:[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.?|\[[0-9A-Fa-f:.]+\])"
    r"(?::(?:[1-9][0-9]{0,4}))?(?:[/?](?:[-A-Za-z0-9._~!$&'()*+,;=:@/?]|%[0-9A-F]{2})*)?\Z",
    re.IGNORECASE,
)
_ESCAPE = re.compile(r"%([0-9A-F]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_PROXY_VARIABLES = ("http_proxy", "all_proxy")  # what requests reads for an http URL (urllib.request.getproxies)


class HttpReply:
    """An upstream reply up to its headers; `raw` is urllib3's response or fast_http's, its body not read yet."""

    __slots__ = ("headers", "raw", "reason", "status_code")

    def __init__(self, raw: urllib3.HTTPResponse | fast_http.FastReply) -> None:
        self.raw = raw
        self.status_code = raw.status
        self.reason = raw.reason
        self.headers = raw.headers  # case-insensitive

    def close(self) -> None:
        """Close the connection and give its slot back to the pool (as requests' Response.close does)."""
        self.raw.close()
        self.raw.release_conn()


@dataclass(frozen=True)
class Route:
    """How to send to one URL, worked out once."""

    pool: urllib3.HTTPConnectionPool | None  # requests' pool, its TLS and proxy settings applied (None: plain)
    target: str  # the path and query, or the whole URL through a plain-HTTP proxy
    headers: dict[str, str]  # the session's headers, plus credentials from the URL's user info
    fast: fast_http.Pool | None = None  # plain HTTP, no proxy, no client certificate: relay/fast_http.py

    @property
    def usable(self) -> bool:  # a urllib3 pool is None once closed (urllib3 1.x closes evicted ones)
        return self.fast is not None or (self.pool is not None and self.pool.pool is not None)


def plain_route(url: str) -> tuple[str, int, str] | None:
    """(host, port, target) of a URL that requests and urllib3 would send as written, to its host straight (the
    caller knows there is no proxy); None for any other (requests works it out)."""
    if not _PLAIN_URL.match(url):
        return None
    escapes = _ESCAPE.findall(url)
    if len(escapes) != url.count("%"):  # a lower-case escape: urllib3 makes it upper case
        return None
    if any(chr(int(code, 16)) in _UNRESERVED for code in escapes):  # requests unquotes these
        return None
    parts = urlsplit(url)
    path = parts.path or "/"
    if any(segment in (".", "..") for segment in path.split("/")):  # urllib3 removes dot segments
        return None
    try:
        host, port = parts.hostname, parts.port or 80
    except ValueError:  # a port out of range
        return None
    return (host, port, path + (f"?{parts.query}" if parts.query else "")) if host else None


def proxy_in_environment() -> bool:
    """Whether requests could find a proxy for an http URL in the environment (on Linux and the BSDs the
    environment is all it reads; elsewhere the system's settings may name one: assumed so)."""
    if sys.platform in ("darwin", "win32"):
        return True
    return any(value and name.lower() in _PROXY_VARIABLES for name, value in os.environ.items())


def valid_header(name: str, value: str) -> bool:
    """Whether requests would send a header (name and value without CR, LF or leading space; a name without ':')."""
    return bool(_HEADER_NAME.match(name) and _HEADER_VALUE.match(value))


class Routes:
    """The routes of one client, by URL: plain ones on relay/fast_http.py; the rest on a requests.Session and its
    adapter (mounted for http and https), made when a route first needs them."""

    def __init__(self, headers: dict[str, str], proxies_for: str | None, pool_size: int = 10) -> None:
        """`headers`: the session's (every exchange's, under its own); `proxies_for`: the URL whose proxies from the
        environment requests uses (None: no proxy)."""
        self.headers, self.proxies_for, self.pool_size = headers, proxies_for, pool_size
        self._plain = proxies_for is None or not proxy_in_environment()
        self._session: requests.Session | None = None
        self._adapter: HTTPAdapter | None = None
        self._no_retries: urllib3.Retry | None = None  # every failure surfaces at once; redirects not followed
        self._limits: dict[fast_http.Limits, urllib3.Timeout] = {}  # urllib3's Timeout for each (connect, read)
        self._routes: dict[str, Route] = {}
        self._cookies = False  # a cookie jar's len() walks every cookie: asked only once one came
        # a call's headers merged with its route's, by URL and call headers (the same few on every call), each
        # header checked once; emptied whenever a route is worked out anew
        self._merged: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, str]] = {}

    @property
    def session(self) -> requests.Session:
        """requests' session (requests loaded, the session made, on first use)."""
        if self._session is None:
            self._session, self._adapter = self._requests_session()
        return self._session

    def _requests_session(self) -> tuple[requests.Session, HTTPAdapter]:
        import requests
        from requests.adapters import HTTPAdapter

        session = requests.Session()
        # Read the environment (proxies, CA bundle) once, not on every request: per-request
        # lookups (and a .netrc probe) cost more CPU than the rest of a relayed call.
        session.trust_env = False
        if self.proxies_for is not None:
            session.proxies = requests.utils.get_environ_proxies(self.proxies_for)
        bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
        if bundle:
            session.verify = bundle
        adapter = HTTPAdapter(pool_connections=4, pool_maxsize=self.pool_size, max_retries=0)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.headers.clear()
        session.headers.update(self.headers)
        return session, adapter

    def exchange(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout: fast_http.Limits
    ) -> HttpReply:
        """One attempt, on the route's pool for the URL; `timeout` is (connect, read) seconds."""
        with errors.mapped(url):
            route = self._route(url)
            sent = self._headers(route, method, url, headers)
            raw: urllib3.HTTPResponse | fast_http.FastReply
            if route.fast is not None:
                raw = route.fast.exchange(method, route.target, sent, body, timeout, url)
            else:
                raw = self._urlopen(route, method, sent, body, timeout)
        if "Set-Cookie" in raw.headers:
            self._keep_cookies(method, url, raw)
        return HttpReply(raw)

    def _urlopen(
        self, route: Route, method: str, headers: dict[str, str], body: bytes | None, timeout: fast_http.Limits
    ) -> urllib3.HTTPResponse:
        import urllib3  # loaded with requests, which worked the route out

        if self._no_retries is None:
            self._no_retries = urllib3.Retry(total=False, redirect=False)
        limits = self._limits.get(timeout)
        if limits is None:
            if len(self._limits) >= MAX_ROUTES:
                self._limits.clear()
            limits = self._limits[timeout] = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        assert route.pool is not None  # a route without fast_http's pool has requests'
        raw = route.pool.urlopen(
            method,
            route.target,
            body=body,
            headers=headers,
            timeout=limits,
            retries=self._no_retries,
            redirect=False,
            assert_same_host=False,
            preload_content=False,
            decode_content=False,
        )
        return cast(urllib3.HTTPResponse, raw)  # what an HTTPConnectionPool returns

    def _keep_cookies(self, method: str, url: str, raw: urllib3.HTTPResponse | fast_http.FastReply) -> None:
        """Keep what the upstream set in the session's jar (requests loaded then), sent back from then on."""
        import requests
        from requests.cookies import extract_cookies_to_jar

        jar = self.session.cookies
        self._cookies = True
        extract_cookies_to_jar(jar, requests.Request(method, url).prepare(), raw)

    def clear(self) -> None:
        """Let go of every route (urllib3 2.x closes a dropped pool's idle connections when it is collected)."""
        for route in self._routes.values():
            if route.fast is not None:
                route.fast.clear()
        self._routes.clear()

    def close(self) -> None:
        self.clear()
        if self._session is not None:
            self._session.close()

    def _route(self, url: str) -> Route:
        route = self._routes.get(url)
        if route is None or not route.usable:
            if len(self._routes) >= MAX_ROUTES:
                self.clear()
            route = self._routes[url] = self._resolve(url)
            self._merged.clear()
        return route

    def _resolve(self, url: str) -> Route:
        """A plain route on the client's own headers (every one checked as requests checks them), else what
        requests' Session.send and HTTPAdapter.send work out for the URL, by their own methods."""
        plain = plain_route(url) if self._plain else None
        if plain is not None:
            host, port, target = plain
            for name, value in self.headers.items():
                if not valid_header(name, value):
                    raise _invalid_header(url)
            return Route(None, target, dict(self.headers), self._shared_fast(host, port))
        import requests

        session = self.session
        adapter = cast("HTTPAdapter", self._adapter)
        prepared = session.prepare_request(requests.Request("GET", url))
        pool = adapter.get_connection_with_tls_context(prepared, session.verify, session.proxies, session.cert)
        adapter.cert_verify(pool, prepared.url or url, session.verify, session.cert)
        # Cookies change between calls: _headers adds them when there are any.
        headers = {name: _text(value) for name, value in prepared.headers.items() if name.lower() != "cookie"}
        target = adapter.request_url(prepared, session.proxies)
        return Route(pool, target, headers, self._fast_pool(pool, target))

    def _fast_pool(self, pool: urllib3.HTTPConnectionPool, target: str) -> fast_http.Pool | None:
        """A relay/fast_http.py pool for a plain-HTTP route that goes straight to the server (no proxy: the
        target is a path), else None (urllib3 carries it)."""
        if pool.scheme != "http" or not target.startswith("/") or self.session.cert or pool.host is None:
            return None
        return self._shared_fast(pool.host, pool.port or 80)

    def _shared_fast(self, host: str, port: int) -> fast_http.Pool:
        existing = next((r.fast for r in self._routes.values() if r.fast and r.fast.serves(host, port)), None)
        return existing or fast_http.Pool(host, port, self.pool_size)

    def _headers(self, route: Route, method: str, url: str, headers: Mapping[str, str]) -> dict[str, str]:
        """The route's headers with the call's on top (names compare case-insensitively) and any cookies; the
        dict returned is shared by the calls with the same headers, never changed."""
        key = (url, tuple(headers.items()))
        merged = self._merged.get(key)
        if merged is None:
            for name, value in key[1]:
                if not valid_header(name, value):
                    raise _invalid_header(url)
            names = {name.lower() for name in headers}
            merged = {name: value for name, value in route.headers.items() if name.lower() not in names}
            merged.update(headers)
            if len(self._merged) >= MAX_MERGED:
                self._merged.clear()
            self._merged[key] = merged
        if self._cookies and self.session.cookies:  # only once the upstream has set one
            import requests

            cookie = self.session.prepare_request(requests.Request(method, url)).headers.get("Cookie")
            if cookie:
                return {**merged, "Cookie": _text(cookie)}
        return merged


def _invalid_header(url: str) -> errors.ConfigError:
    # Not the header's value, which may be the bearer token.
    return errors.ConfigError(
        f"invalid request to {errors.redact(url)}: a header value has characters HTTP does not allow"
    )


def _text(value: str | bytes) -> str:
    """A header value requests holds, as text (requests accepts bytes values too)."""
    return value if isinstance(value, str) else value.decode("latin-1")
