"""How one HTTP exchange of the relay is sent: straight to the urllib3 pool requests would send it on.

The requests.Session owns the settings (headers, proxies, TLS verification, cookies) and the urllib3 connection
pools. What requests works out per URL (the pool, the request target, the session's headers) is worked out once,
with requests' own adapter methods, and kept in a Route (at most MAX_ROUTES, then worked out anew); each
exchange then goes straight to that pool's urlopen(), without requests' per-call preparation, which cost more
CPU than the rest of a relayed call. Contract of `Routes.exchange`: one attempt, no retry and no redirect
followed (the retry policy is HttpClient.send's), failures mapped to the relay's errors, cookies the upstream
sets kept in the session's jar and sent back; the reply comes back up to its headers (HttpReply), its body
not read.
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

from mcpgate.relay import errors

MAX_ROUTES = 16
# Every failure surfaces at once (the retry policy is HttpClient.send's); redirects are not followed.
NO_RETRIES = urllib3.Retry(total=False, redirect=False)


class HttpReply:
    """An upstream reply up to its headers; `raw` is urllib3's response, its body not read yet."""

    __slots__ = ("headers", "raw", "reason", "status_code")

    def __init__(self, raw: urllib3.HTTPResponse) -> None:
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

    @property
    def usable(self) -> bool:
        return self.pool.pool is not None  # None once closed (urllib3 1.x closes the pools it evicts)


class Routes:
    """The routes of one requests.Session and its adapter (mounted for http and https), by URL."""

    def __init__(self, session: requests.Session, adapter: HTTPAdapter) -> None:
        self.session, self.adapter = session, adapter
        self._routes: dict[str, Route] = {}

    def exchange(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout: urllib3.Timeout
    ) -> HttpReply:
        """One attempt, on the session's own urllib3 pool for the URL."""
        with errors.mapped(url):
            route = self._route(url)
            raw = route.pool.urlopen(
                method,
                route.target,
                body=body,
                headers=self._headers(route, method, url, headers),
                timeout=timeout,
                retries=NO_RETRIES,
                redirect=False,
                assert_same_host=False,
                preload_content=False,
                decode_content=False,
            )
        if "Set-Cookie" in raw.headers:
            extract_cookies_to_jar(self.session.cookies, requests.Request(method, url).prepare(), raw)
        return HttpReply(cast(urllib3.HTTPResponse, raw))  # what an HTTPConnectionPool returns

    def clear(self) -> None:
        """Let go of every route (urllib3 2.x closes a dropped pool's idle connections when it is collected)."""
        self._routes.clear()

    def _route(self, url: str) -> Route:
        route = self._routes.get(url)
        if route is None or not route.usable:
            if len(self._routes) >= MAX_ROUTES:
                self._routes.clear()
            route = self._routes[url] = self._resolve(url)
        return route

    def _resolve(self, url: str) -> Route:
        """What requests' Session.send and HTTPAdapter.send work out for a URL, by their own methods."""
        session, adapter = self.session, self.adapter
        prepared = session.prepare_request(requests.Request("GET", url))
        pool = adapter.get_connection_with_tls_context(prepared, session.verify, session.proxies, session.cert)
        adapter.cert_verify(pool, prepared.url or url, session.verify, session.cert)
        # Cookies change between calls: _headers adds them when there are any.
        headers = {name: _text(value) for name, value in prepared.headers.items() if name.lower() != "cookie"}
        return Route(pool, adapter.request_url(prepared, session.proxies), headers)

    def _headers(self, route: Route, method: str, url: str, headers: Mapping[str, str]) -> dict[str, str]:
        """The route's headers with the call's on top (names compare case-insensitively) and any cookies."""
        for header in headers.items():
            check_header_validity(header)
        names = {name.lower() for name in headers}
        merged = {name: value for name, value in route.headers.items() if name.lower() not in names}
        merged.update(headers)
        if self.session.cookies:  # only once the upstream has set one
            cookie = self.session.prepare_request(requests.Request(method, url)).headers.get("Cookie")
            if cookie:
                merged["Cookie"] = _text(cookie)
        return merged


def _text(value: str | bytes) -> str:
    """A header value requests holds, as text (requests accepts bytes values too)."""
    return value if isinstance(value, str) else value.decode("latin-1")
