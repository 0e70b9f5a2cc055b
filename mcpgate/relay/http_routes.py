"""How one HTTP exchange of the relay is sent: straight to the urllib3 pool requests would send it on.

The requests.Session owns the settings (headers, proxies, TLS verification, cookies) and the urllib3 connection
pools. What requests works out per URL (the pool, the request target, the session's headers) is worked out once,
with requests' own adapter methods, and kept in a Route (at most MAX_ROUTES, then worked out anew); each
exchange then goes straight to that pool's urlopen(), without requests' per-call preparation, which cost more
CPU than the rest of a relayed call; a plain-HTTP route without a proxy goes to relay/fast_http.py's pool
instead, cheaper again (urllib3's and http.client's per-request work was half of a relayed call's).
Contract of `Routes.exchange`: one attempt, no retry and no redirect followed (the retry policy is
HttpClient.send's), failures mapped to the relay's errors, cookies the upstream sets kept in the session's jar
and sent back; the reply comes back up to its headers (HttpReply), its body not read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import requests
import urllib3
from requests.adapters import HTTPAdapter
from requests.cookies import extract_cookies_to_jar
from requests.utils import check_header_validity

from mcpgate.relay import errors, fast_http

MAX_ROUTES = 16
MAX_MERGED = 256
# Every failure surfaces at once (the retry policy is HttpClient.send's); redirects are not followed.
NO_RETRIES = urllib3.Retry(total=False, redirect=False)


class HttpReply:
    """An upstream reply up to its headers; `raw` is urllib3's response, its body not read yet."""

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
    """How requests would send to one URL, worked out once."""

    pool: urllib3.HTTPConnectionPool  # with the session's TLS and proxy settings applied
    target: str  # the path and query, or the whole URL through a plain-HTTP proxy
    headers: dict[str, str]  # the session's headers, plus credentials from the URL's user info
    fast: fast_http.Pool | None = None  # plain HTTP, no proxy, no client certificate: relay/fast_http.py

    @property
    def usable(self) -> bool:
        return self.fast is not None or self.pool.pool is not None  # None once closed (urllib3 1.x closes evicted)


class Routes:
    """The routes of one requests.Session and its adapter (mounted for http and https), by URL."""

    def __init__(self, session: requests.Session, adapter: HTTPAdapter, pool_size: int = 10) -> None:
        self.session, self.adapter, self.pool_size = session, adapter, pool_size
        self._routes: dict[str, Route] = {}
        self._cookies = bool(session.cookies)  # a cookie jar's len() walks every cookie: asked only once one came
        # a call's headers merged with its route's, by URL and call headers (the same few on every call), each
        # header checked once; emptied whenever a route is worked out anew
        self._merged: dict[tuple[str, tuple[tuple[str, str], ...]], dict[str, str]] = {}

    def exchange(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout: urllib3.Timeout
    ) -> HttpReply:
        """One attempt, on the session's own urllib3 pool for the URL."""
        with errors.mapped(url):
            route = self._route(url)
            sent = self._headers(route, method, url, headers)
            raw: urllib3.BaseHTTPResponse | fast_http.FastReply
            if route.fast is not None:
                raw = route.fast.exchange(method, route.target, sent, body, timeout, url)
            else:
                raw = route.pool.urlopen(
                    method,
                    route.target,
                    body=body,
                    headers=sent,
                    timeout=timeout,
                    retries=NO_RETRIES,
                    redirect=False,
                    assert_same_host=False,
                    preload_content=False,
                    decode_content=False,
                )
        if "Set-Cookie" in raw.headers:
            self._cookies = True
            extract_cookies_to_jar(self.session.cookies, requests.Request(method, url).prepare(), raw)
        if isinstance(raw, fast_http.FastReply):
            return HttpReply(raw)
        return HttpReply(cast(urllib3.HTTPResponse, raw))  # what an HTTPConnectionPool returns

    def clear(self) -> None:
        """Let go of every route (urllib3 2.x closes a dropped pool's idle connections when it is collected)."""
        for route in self._routes.values():
            if route.fast is not None:
                route.fast.clear()
        self._routes.clear()

    def _route(self, url: str) -> Route:
        route = self._routes.get(url)
        if route is None or not route.usable:
            if len(self._routes) >= MAX_ROUTES:
                self.clear()
            route = self._routes[url] = self._resolve(url)
            self._merged.clear()
        return route

    def _resolve(self, url: str) -> Route:
        """What requests' Session.send and HTTPAdapter.send work out for a URL, by their own methods."""
        session, adapter = self.session, self.adapter
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
        existing = next((r.fast for r in self._routes.values() if r.fast and r.fast.serves(pool.host, pool.port)), None)
        return existing or fast_http.Pool(pool.host, pool.port or 80, self.pool_size)

    def _headers(self, route: Route, method: str, url: str, headers: Mapping[str, str]) -> dict[str, str]:
        """The route's headers with the call's on top (names compare case-insensitively) and any cookies; the
        dict returned is shared by the calls with the same headers, never changed."""
        key = (url, tuple(headers.items()))
        merged = self._merged.get(key)
        if merged is None:
            for header in key[1]:
                check_header_validity(header)
            names = {name.lower() for name in headers}
            merged = {name: value for name, value in route.headers.items() if name.lower() not in names}
            merged.update(headers)
            if len(self._merged) >= MAX_MERGED:
                self._merged.clear()
            self._merged[key] = merged
        if self._cookies and self.session.cookies:  # only once the upstream has set one
            cookie = self.session.prepare_request(requests.Request(method, url)).headers.get("Cookie")
            if cookie:
                return {**merged, "Cookie": _text(cookie)}
        return merged


def _text(value: str | bytes) -> str:
    """A header value requests holds, as text (requests accepts bytes values too)."""
    return value if isinstance(value, str) else value.decode("latin-1")
