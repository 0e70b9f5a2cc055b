"""Client ID Metadata Documents (issue 12): the guarded fetcher (serve/oauth/safe_fetch.py) and the resolver
(serve/oauth/cimd.py) against a loopback HTTP(S) server of this module's own (the tests widen the address policy
to let them reach it, and only these tests ever allow http), then the embedded authorization server through
gunicorn refusing a client id off the allowlist and one that resolves to loopback."""

from __future__ import annotations

import datetime
import importlib
import ipaddress
import json
import socket
import ssl
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from mcpgate.config.settings import Settings
from mcpgate.serve.oauth import cimd, safe_fetch
from tests.support import Gateway, serving

ANY_ADDRESS: safe_fetch.AddressPolicy = lambda address: True  # noqa: E731 - the unit tests' wide policy

Route = Callable[[BaseHTTPRequestHandler], None]


@dataclass
class DocumentServer:
    """A loopback server answering `routes` (path -> handler); `hits` counts requests per path."""

    routes: dict[str, Route] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    sni: list[str | None] = field(default_factory=list)
    port: int = 0
    scheme: str = "http"

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"

    def json(self, path: str, document: Any, headers: dict[str, str] | None = None) -> None:
        def answer(handler: BaseHTTPRequestHandler) -> None:
            body = json.dumps(document).encode()
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                handler.send_header(name, value)
            handler.end_headers()
            handler.wfile.write(body)

        self.routes[path] = answer


def _handler(server: DocumentServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            path = urllib.parse.urlsplit(self.path).path
            server.hits[path] = server.hits.get(path, 0) + 1
            route = server.routes.get(path)
            if route is None:
                self.send_error(404)
                return
            route(self)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@dataclass
class Tls:
    """A throwaway CA, a server certificate for localhost signed by it, and a client context trusting it."""

    cert: Path
    key: Path
    client: ssl.SSLContext


def _make_tls(directory: Path) -> Tls:
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mcpgate test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = directory / "server.pem", directory / "server.key"
    cert_path.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    client = ssl.create_default_context(cadata=ca.public_bytes(serialization.Encoding.PEM).decode())
    return Tls(cert_path, key_path, client)


def _serve(server: DocumentServer, tls: Tls | None) -> Iterator[DocumentServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(server))
    httpd.daemon_threads = True
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls.cert, tls.key)
        context.sni_callback = lambda sock, name, ctx: server.sni.append(name)
        httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
        server.scheme = "https"
    server.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return _make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def plain() -> Iterator[DocumentServer]:
    yield from _serve(DocumentServer(), None)


@pytest.fixture
def secure(tls: Tls) -> Iterator[DocumentServer]:
    yield from _serve(DocumentServer(), tls)


def get(url: str, **kwargs: Any) -> Any:
    """safe_fetch.fetch's document, with the unit tests' wide policy and http allowed unless a test says otherwise."""
    options: dict[str, Any] = {"max_bytes": 4096, "timeout": 5.0, "allow_address": ANY_ADDRESS, "allow_http": True}
    return safe_fetch.fetch(url, **{**options, **kwargs}).data


def refused(url: str, words: str, **kwargs: Any) -> str:
    with pytest.raises(safe_fetch.FetchError) as caught:
        get(url, **kwargs)
    assert words in str(caught.value)
    return str(caught.value)


# --- the fetcher -------------------------------------------------------------------------------------------


def test_https_with_sni_and_certificate_for_the_host(secure: DocumentServer, tls: Tls) -> None:
    secure.json("/doc", {"ok": True})
    assert get(secure.url("/doc", "localhost"), allow_http=False, ssl_context=tls.client) == {"ok": True}
    assert secure.sni == ["localhost"]


def test_certificate_for_another_name_is_refused(secure: DocumentServer, tls: Tls) -> None:
    """The certificate names localhost: reaching the same server as 127.0.0.1 fails verification."""
    secure.json("/doc", {"ok": True})
    refused(secure.url("/doc", "127.0.0.1"), "certificate not valid", ssl_context=tls.client)


def test_untrusted_certificate_is_refused(secure: DocumentServer) -> None:
    secure.json("/doc", {"ok": True})
    refused(secure.url("/doc", "localhost"), "certificate not valid")


def test_http_only_with_the_unit_test_flag(plain: DocumentServer) -> None:
    plain.json("/doc", {"ok": True})
    assert get(plain.url("/doc")) == {"ok": True}
    refused(plain.url("/doc"), "only https", allow_http=False)
    refused("ftp://127.0.0.1/doc", "only https")


def test_default_policy_refuses_loopback(secure: DocumentServer, tls: Tls) -> None:
    secure.json("/doc", {"ok": True})
    message = refused(
        secure.url("/doc", "localhost"),
        "non-public address",
        allow_address=safe_fetch.public_only,
        ssl_context=tls.client,
    )
    assert "localhost" in message
    assert secure.hits == {}


def test_every_resolved_address_is_checked(monkeypatch: pytest.MonkeyPatch, plain: DocumentServer) -> None:
    """A name that resolves to one allowed address and one refused one is refused, whatever the order."""
    plain.json("/doc", {"ok": True})
    port = plain.port

    def two_addresses(host: str, *args: Any, **kwargs: Any) -> list[Any]:
        assert host == "twofaced.test"
        return [
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
            (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", port)),
        ]

    monkeypatch.setattr(socket, "getaddrinfo", two_addresses)
    only_loopback: safe_fetch.AddressPolicy = lambda address: address == ipaddress.ip_address("127.0.0.1")  # noqa: E731
    refused(f"http://twofaced.test:{port}/doc", "non-public address (10.0.0.1)", allow_address=only_loopback)
    assert plain.hits == {}


def test_resolved_once_and_connected_to_the_checked_address(
    monkeypatch: pytest.MonkeyPatch, secure: DocumentServer, tls: Tls
) -> None:
    """A rebinding DNS server would answer a second lookup differently: there is none, the connection goes to
    the address checked, and TLS still names the host."""
    secure.json("/doc", {"ok": True})
    real = socket.getaddrinfo
    lookups: list[str] = []

    def rebinding(host: str, *args: Any, **kwargs: Any) -> Any:
        if host == "localhost":
            lookups.append(host)
            if len(lookups) > 1:
                raise socket.gaierror("rebound")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    assert get(secure.url("/doc", "localhost"), allow_http=False, ssl_context=tls.client) == {"ok": True}
    assert lookups == ["localhost"]
    assert secure.sni == ["localhost"]


def test_redirects_are_not_followed(plain: DocumentServer) -> None:
    def redirect(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(302)
        handler.send_header("Location", "/doc")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    plain.routes["/moved"] = redirect
    plain.json("/doc", {"ok": True})
    refused(plain.url("/moved"), "redirects are not followed")
    assert plain.hits == {"/moved": 1}


def _stream(size: int, length: bool) -> Route:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if length:
            handler.send_header("Content-Length", str(size))
        else:
            handler.send_header("Connection", "close")
        handler.end_headers()
        body = b'"' + b"x" * (size - 2) + b'"'
        try:
            handler.wfile.write(body)
        except OSError:
            pass  # the fetcher stopped reading: that is the point
        handler.close_connection = True

    return answer


def test_size_cap(plain: DocumentServer) -> None:
    plain.routes["/small"] = _stream(4096, length=False)
    plain.routes["/declared"] = _stream(100_000, length=True)
    plain.routes["/undeclared"] = _stream(100_000, length=False)
    assert get(plain.url("/small")) == "x" * 4094
    refused(plain.url("/declared"), "larger than 4096 bytes")
    refused(plain.url("/undeclared"), "larger than 4096 bytes")


def test_total_deadline(plain: DocumentServer) -> None:
    """A server that drips a byte at a time never trips a per-read timeout; the fetch's deadline ends it."""
    stop = threading.Event()

    def drip(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Connection", "close")
        handler.end_headers()
        try:
            handler.wfile.write(b'"')
            for _ in range(60):  # three seconds of drips, then the end of a valid document
                if stop.wait(0.05):
                    return
                handler.wfile.write(b"x")
                handler.wfile.flush()
            handler.wfile.write(b'"')
        except OSError:
            pass
        handler.close_connection = True

    plain.routes["/drip"] = drip
    try:
        refused(plain.url("/drip"), "timed out", timeout=1.0, max_bytes=1_000_000)
    finally:
        stop.set()


def test_silent_server_times_out(plain: DocumentServer) -> None:
    stop = threading.Event()

    def silent(handler: BaseHTTPRequestHandler) -> None:
        stop.wait(30)

    plain.routes["/silent"] = silent
    try:
        refused(plain.url("/silent"), "timed out", timeout=0.5)
    finally:
        stop.set()


GEVENT_SLOW_RESOLVER = """
from gevent import monkey
monkey.patch_all()
import gevent, socket
from mcpgate.serve.oauth import safe_fetch
socket.getaddrinfo = lambda *args, **kwargs: gevent.sleep(5)
try:
    safe_fetch.fetch("https://slow.example/doc", max_bytes=100, timeout=0.5)
except safe_fetch.FetchError as exc:
    print(exc)
"""


def test_deadline_bounds_name_resolution_under_gevent() -> None:
    """In the serve worker (gevent), a resolver that never answers is cut off by the fetch's deadline too."""
    done = subprocess.run(
        [sys.executable, "-c", GEVENT_SLOW_RESOLVER], capture_output=True, text=True, timeout=20, check=False
    )
    assert done.stdout.strip() == "fetching from slow.example timed out", done.stderr


def _raw(status: int, content_type: str, body: bytes) -> Route:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return answer


def test_bad_answers(plain: DocumentServer) -> None:
    plain.routes["/html"] = _raw(200, "text/html", b"<html></html>")
    plain.routes["/broken"] = _raw(200, "application/json", b'{"client_id": ')
    plain.routes["/binary"] = _raw(200, "application/json", b"\xff\xfe\x00")
    plain.routes["/error"] = _raw(500, "application/json", b"{}")
    plain.routes["/typed"] = _raw(200, "application/vnd.example+json; charset=utf-8", b"[1]")
    refused(plain.url("/html"), "text/html, not application/json")
    refused(plain.url("/broken"), "not valid JSON")
    refused(plain.url("/binary"), "not valid JSON")
    refused(plain.url("/error"), "answered 500")
    refused(plain.url("/missing"), "answered 404")
    assert get(plain.url("/typed")) == [1]


def test_unreachable_and_unresolvable() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    refused(f"http://127.0.0.1:{port}/doc", "connection refused")
    refused("https://no-such-host.invalid/doc", "does not resolve")


# --- the resolver ------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def document(url: str, **changes: Any) -> dict[str, Any]:
    return {"client_id": url, "client_name": "Test Client", "redirect_uris": ["http://127.0.0.1/callback"], **changes}


def resolver(server: DocumentServer, clock: Clock, entries: int = 16) -> cimd.Resolver:
    settings = Settings.from_env({"MCPGATE_OAUTH_CIMD_ALLOWLIST": f"http://127.0.0.1:{server.port}/clients/"})
    return cimd.Resolver(
        settings,
        cache=cimd.DocumentCache(entries, clock),
        allow_address=ANY_ADDRESS,
        allow_http=True,
        timeout=5.0,
    )


def wide(tls: Tls) -> dict[str, Any]:
    """A Resolver's test options: a fresh cache, any address, the test CA."""
    return {"cache": cimd.DocumentCache(16, Clock()), "allow_address": ANY_ADDRESS, "ssl_context": tls.client}


def cimd_refused(res: cimd.Resolver, url: str, words: str) -> str:
    with pytest.raises(cimd.CimdError) as caught:
        res.client(url)
    assert words in str(caught.value), str(caught.value)
    assert caught.value.error == "invalid_client"
    return str(caught.value)


def test_resolver_https_only_even_with_the_flag(plain: DocumentServer) -> None:
    """The URL rules come before any fetch: an http client id is refused whatever the fetcher allows."""
    res = resolver(plain, Clock())
    url = plain.url("/clients/a.json")
    plain.json("/clients/a.json", document(url))
    cimd_refused(res, url, "https")
    assert plain.hits == {}


def test_resolver_fetches_checks_and_caches(secure: DocumentServer, tls: Tls) -> None:
    clock = Clock()
    prefix = secure.url("/clients/", "localhost")
    settings = Settings.from_env({"MCPGATE_OAUTH_CIMD_ALLOWLIST": prefix})
    cache = cimd.DocumentCache(2, clock)
    res = cimd.Resolver(settings, cache=cache, allow_address=ANY_ADDRESS, ssl_context=tls.client)
    good, cached, wrong, evicted = (prefix + name for name in ("good.json", "short.json", "wrong.json", "x.json"))
    secure.json("/clients/good.json", document(good), {"Cache-Control": "max-age=7200"})
    secure.json("/clients/short.json", document(cached, grant_types=["authorization_code", "refresh_token"]))
    secure.json("/clients/wrong.json", document(good))
    secure.json("/clients/x.json", document(evicted))

    doc = res.client(good)
    assert (doc.client_id, doc.client_name, doc.redirect_uris) == (good, "Test Client", ("http://127.0.0.1/callback",))
    assert doc.token_endpoint_auth_method == "none"
    assert res.client(good) == doc
    assert secure.hits["/clients/good.json"] == 1  # cached
    clock.now += 7199
    res.client(good)
    assert secure.hits["/clients/good.json"] == 1
    clock.now += 2  # past its max-age: fetched again
    res.client(good)
    assert secure.hits["/clients/good.json"] == 2

    assert res.client(cached).grant_types == ("authorization_code", "refresh_token")
    clock.now += cimd.DEFAULT_TTL + 1
    res.client(cached)
    assert secure.hits["/clients/short.json"] == 2  # no Cache-Control: an hour

    # A failure is cached briefly: a bad document is not fetched again in a loop.
    message = cimd_refused(res, wrong, "client_id is not the document's URL")
    assert wrong in message
    cimd_refused(res, wrong, "client_id")
    assert secure.hits["/clients/wrong.json"] == 1
    clock.now += cimd.FAILURE_TTL + 1
    cimd_refused(res, wrong, "client_id")
    assert secure.hits["/clients/wrong.json"] == 2

    # Bounded: two entries, least recently used out first.
    assert len(cache) == 2
    res.client(evicted)
    assert len(cache) == 2
    hits = secure.hits["/clients/short.json"]
    res.client(cached)
    assert secure.hits["/clients/short.json"] == hits + 1


def test_resolver_allowlist_before_any_fetch(secure: DocumentServer, tls: Tls) -> None:
    prefix = secure.url("/clients/", "localhost")
    settings = Settings.from_env({"MCPGATE_OAUTH_CIMD_ALLOWLIST": prefix})
    res = cimd.Resolver(settings, **wide(tls))
    other = secure.url("/elsewhere/a.json", "localhost")
    secure.json("/elsewhere/a.json", document(other))
    cimd_refused(res, other, "not on this server's client id metadata document allowlist")
    cimd_refused(res, prefix + "a/../../elsewhere/a.json", ". or .. path segments")
    assert secure.hits == {}
    off = cimd.Resolver(Settings.from_env({}), cache=cimd.DocumentCache(4, Clock()))
    cimd_refused(off, other, "MCPGATE_OAUTH_CIMD_ALLOWLIST is empty")


def test_resolver_refuses_loopback_by_default(secure: DocumentServer, tls: Tls) -> None:
    prefix = secure.url("/clients/", "localhost")
    settings = Settings.from_env({"MCPGATE_OAUTH_CIMD_ALLOWLIST": prefix})
    res = cimd.Resolver(settings, cache=cimd.DocumentCache(4, Clock()), ssl_context=tls.client)
    url = prefix + "a.json"
    secure.json("/clients/a.json", document(url))
    cimd_refused(res, url, "non-public address")
    assert secure.hits == {}


def test_resolver_document_problems(secure: DocumentServer, tls: Tls) -> None:
    prefix = secure.url("/clients/", "localhost")
    settings = Settings.from_env({"MCPGATE_OAUTH_CIMD_ALLOWLIST": prefix})
    res = cimd.Resolver(settings, **wide(tls))
    cases: dict[str, tuple[dict[str, Any], str]] = {
        "noname.json": ({"client_name": None}, "client_name is missing"),
        "http.json": ({"redirect_uris": ["http://app.example.com/cb"]}, "loopback host"),
        "jwt.json": ({"token_endpoint_auth_method": "private_key_jwt"}, "not supported"),
        "empty.json": ({"redirect_uris": []}, "non-empty list"),
    }
    for name, (changes, words) in cases.items():
        url = prefix + name
        body = {key: value for key, value in document(url, **changes).items() if value is not None}
        secure.json("/clients/" + name, body)
        cimd_refused(res, url, words)
    secure.routes["/clients/big.json"] = _stream(cimd.MAX_DOCUMENT_BYTES + 10, length=False)
    cimd_refused(res, prefix + "big.json", "larger than")
    cimd_refused(res, prefix + "missing.json", "answered 404")


# --- through gunicorn, embedded mode -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    try:
        importlib.import_module("mcpgate.serve.oauth.embedded")
        from mcpgate.serve.oauth import passwords
    except ImportError as exc:  # pragma: no cover - until the embedded server lands
        pytest.skip(f"the embedded authorization server is not there yet ({exc})")
    state = tmp_path_factory.mktemp("state")
    users = f"alice:{passwords.make_hash('correct horse')}"
    env = {
        "MCPGATE_AUTH_MODE": "embedded",
        "MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}",
        "MCPGATE_OAUTH_USERS": users,
        "MCPGATE_STATE_DIR": str(state),
        # On the allowlist, but localhost resolves to loopback: the fetcher must refuse it.
        "MCPGATE_OAUTH_CIMD_ALLOWLIST": "https://localhost/clients/",
    }
    with serving(env, behind=True) as gw:
        yield gw


def authorize(gw: Gateway, client_id: str) -> Any:
    query = urllib.parse.urlencode(
        {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": "http://127.0.0.1:9/callback",
            "code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGKgA8CoUo",
            "code_challenge_method": "S256",
            "state": "s1",
            "scope": "mcp",
        }
    )
    return gw.request("GET", f"/authorize?{query}")


def error_of(reply: Any) -> tuple[str, str]:
    """(error, error_description) of an authorization error page or JSON body (never a redirect: the client
    is not trusted, so its redirect URI is not either)."""
    assert reply.status in (400, 401), reply
    text = reply.body.decode(errors="replace")
    if reply.content_type.startswith("application/json"):
        body = reply.json()
        return body.get("error", ""), body.get("error_description", "")
    error, _, description = text.partition("invalid_client: ")
    return ("invalid_client", description) if description else (error, text)


def test_embedded_refuses_a_client_id_off_the_allowlist(embedded: Gateway) -> None:
    reply = authorize(embedded, "https://clients.example.com/app.json")
    error, description = error_of(reply)
    assert error == "invalid_client", reply
    assert "allowlist" in description, reply
    assert "location" not in reply.headers


def test_embedded_refuses_a_client_id_resolving_to_loopback(embedded: Gateway) -> None:
    reply = authorize(embedded, "https://localhost/clients/app.json")
    error, description = error_of(reply)
    assert error == "invalid_client", reply
    assert "non-public address" in description, reply
    assert "location" not in reply.headers
