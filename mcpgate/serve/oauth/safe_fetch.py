"""Fetch a small JSON document from a URL a stranger chose, without letting them aim the gateway at its own
network (SSRF).

- https only (an `allow_http` flag exists for unit tests against a loopback server; never set it elsewhere);
- the host is resolved once, EVERY address it resolves to must pass `allow_address` (default `public_only`),
  and the connection goes to a checked address: no second lookup a rebinding DNS server could answer
  differently. TLS still names the host (SNI) and its certificate is verified for the host name;
- no redirects (a 3xx is an error), status 200 only, a JSON media type, the size cap enforced while reading
  (Content-Length is not trusted), one deadline for the whole fetch (resolution, connect, TLS, every read).

Errors are `FetchError` whose message is safe to show a client: it names the URL's host, never a secret.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
AddressPolicy = Callable[[IPAddress], bool]

_V4_DENIED = tuple(
    ipaddress.IPv4Network(net)
    for net in (
        "0.0.0.0/8",  # "this network", 0.0.0.0
        "10.0.0.0/8",
        "100.64.0.0/10",  # carrier-grade NAT
        "127.0.0.0/8",
        "169.254.0.0/16",  # link-local (cloud metadata at 169.254.169.254)
        "172.16.0.0/12",
        "192.0.0.0/24",  # IETF protocol assignments
        "192.0.2.0/24",  # documentation
        "192.88.99.0/24",  # 6to4 relay anycast
        "192.168.0.0/16",
        "198.18.0.0/15",  # benchmarking
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and the broadcast address
    )
)
_V6_DENIED = tuple(
    ipaddress.IPv6Network(net)
    for net in (
        "::/96",  # unspecified, loopback, and the deprecated IPv4-compatible form
        "64:ff9b:1::/48",  # local-use NAT64
        "100::/64",  # discard
        "2001::/23",  # IETF protocol assignments, Teredo (2001::/32) among them
        "2001:db8::/32",  # documentation
        "3fff::/20",  # documentation
        "5f00::/16",  # SRv6 segment identifiers
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated)
        "ff00::/8",  # multicast
    )
)
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_CHUNK = 8192


class FetchError(Exception):
    """A document that could not be fetched; str(exc) is safe to show."""


@dataclass(frozen=True)
class Fetched:
    """A fetched JSON document and the response headers (names lower-cased)."""

    data: Any
    headers: dict[str, str]


def public_only(address: IPAddress) -> bool:
    """Whether `address` is a public unicast address: not private, loopback, link-local, CGNAT, reserved,
    multicast, unspecified or documentation, nor one of those wrapped in IPv6 (IPv4-mapped, NAT64, 6to4;
    Teredo and the IPv4-compatible form are refused outright)."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return _public_v4(address.ipv4_mapped)
        if address in _NAT64:
            return _public_v4(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if address.sixtofour is not None:
            return _public_v4(address.sixtofour)
        return not any(address in net for net in _V6_DENIED) and address.is_global
    return _public_v4(address)


def _public_v4(address: ipaddress.IPv4Address) -> bool:
    return not any(address in net for net in _V4_DENIED) and address.is_global


def fetch(
    url: str,
    *,
    max_bytes: int,
    timeout: float,
    allow_address: AddressPolicy = public_only,
    allow_http: bool = False,
    ssl_context: ssl.SSLContext | None = None,
) -> Fetched:
    """GET `url` under the rules above; `ssl_context` replaces the default trust store (tests)."""
    scheme, host, port, target = _target(url, allow_http)
    deadline = time.monotonic() + timeout
    with _deadline(timeout, host):
        addresses = _resolve(host, port, allow_address)
        connection = _connection(scheme, host, port, addresses, deadline, ssl_context)
        try:
            connection.request("GET", target, headers={"Accept": "application/json", "User-Agent": "mcpgate"})
            _left(deadline, host, connection)
            response = connection.getresponse()
            headers = {name.lower(): value for name, value in response.getheaders()}
            _check_response(response.status, headers, host, max_bytes)
            body = _read(response, connection, deadline, max_bytes, host)
        except (OSError, http.client.HTTPException) as exc:
            raise FetchError(f"fetching from {host} failed: {_reason(exc)}") from None
        finally:
            connection.close()
    try:
        return Fetched(json.loads(body), headers)
    except (UnicodeDecodeError, ValueError):
        raise FetchError(f"the document at {host} is not valid JSON") from None


def _target(url: str, allow_http: bool) -> tuple[str, str, int, str]:
    """(scheme, host, port, request target) of an acceptable URL."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        raise FetchError("the URL is malformed") from None
    if parts.scheme != "https" and not (allow_http and parts.scheme == "http"):
        raise FetchError("only https URLs are fetched")
    if not host:
        raise FetchError("the URL has no host")
    if "@" in parts.netloc:
        raise FetchError("the URL must not carry userinfo")
    if any(ch.isspace() or ord(ch) < 0x20 for ch in url):
        raise FetchError("the URL contains whitespace or control characters")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return parts.scheme, host, port or (443 if parts.scheme == "https" else 80), target


def _resolve(host: str, port: int, allow_address: AddressPolicy) -> list[str]:
    """Every address `host` resolves to, all of them allowed, in the resolver's order."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        raise FetchError(f"{host} does not resolve") from None
    addresses: list[str] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        text = str(sockaddr[0]).split("%", 1)[0]
        try:
            address = ipaddress.ip_address(text)
        except ValueError:
            raise FetchError(f"{host} resolves to an unusable address") from None
        if not allow_address(address):
            raise FetchError(f"{host} resolves to a non-public address ({address}); refused")
        if text not in addresses:
            addresses.append(text)
    if not addresses:
        raise FetchError(f"{host} does not resolve")
    return addresses


def _connection(
    scheme: str, host: str, port: int, addresses: list[str], deadline: float, context: ssl.SSLContext | None
) -> http.client.HTTPConnection:
    """A connection to the first checked address that answers."""
    failure: OSError | None = None
    for address in addresses:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        connection: http.client.HTTPConnection
        if scheme == "https":
            connection = _PinnedHTTPS(host, port, address, remaining, context or ssl.create_default_context())
        else:
            connection = _PinnedHTTP(host, port, address, remaining)
        try:
            connection.connect()
            return connection
        except OSError as exc:
            connection.close()
            failure = exc
    if failure is None:
        raise FetchError(f"fetching from {host} timed out")
    raise FetchError(f"connecting to {host} failed: {_reason(failure)}")


class _PinnedHTTP(http.client.HTTPConnection):
    """Plain HTTP to one checked address (the Host header still names the host)."""

    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    """TLS to one checked address, with SNI and certificate verification for the host name."""

    def __init__(self, host: str, port: int, address: str, timeout: float, context: ssl.SSLContext) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._address = address
        self._tls = context

    def connect(self) -> None:
        raw = socket.create_connection((self._address, self.port), self.timeout)
        try:
            self.sock = self._tls.wrap_socket(raw, server_hostname=self.host)
        except BaseException:
            raw.close()
            raise


def _check_response(status: int, headers: dict[str, str], host: str, max_bytes: int) -> None:
    if 300 <= status < 400:
        raise FetchError(f"{host} answered with a redirect ({status}); redirects are not followed")
    if status != 200:
        raise FetchError(f"{host} answered {status}")
    media = headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
        raise FetchError(f"{host} answered {media or 'no content type'}, not application/json")
    length = headers.get("content-length", "")
    if length.isascii() and length.isdigit() and int(length) > max_bytes:
        raise FetchError(f"the document at {host} is larger than {max_bytes} bytes")


def _read(
    response: http.client.HTTPResponse,
    connection: http.client.HTTPConnection,
    deadline: float,
    max_bytes: int,
    host: str,
) -> bytes:
    body = bytearray()
    while True:
        _left(deadline, host, connection)
        chunk = response.read1(_CHUNK)
        if not chunk:
            return bytes(body)
        body += chunk
        if len(body) > max_bytes:
            raise FetchError(f"the document at {host} is larger than {max_bytes} bytes")


def _left(deadline: float, host: str, connection: http.client.HTTPConnection) -> None:
    """Give the socket what is left of the deadline for its next operation (or fail when nothing is)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise FetchError(f"fetching from {host} timed out")
    if connection.sock is not None:
        connection.sock.settimeout(remaining)


@contextmanager
def _deadline(seconds: float, host: str) -> Iterator[None]:
    """Under gevent (the serve worker), the deadline also bounds name resolution; elsewhere the socket
    timeouts bound everything but the resolver."""
    try:
        import gevent
        from gevent import monkey
    except ImportError:  # pragma: no cover - gevent is a serve dependency
        yield
        return
    if not monkey.is_module_patched("socket"):
        yield
        return
    with gevent.Timeout(seconds, FetchError(f"fetching from {host} timed out")):
        yield


def _reason(exc: BaseException) -> str:
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate not valid ({exc.verify_message})"
    if isinstance(exc, ssl.SSLError):
        return "TLS handshake failed"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    return type(exc).__name__
