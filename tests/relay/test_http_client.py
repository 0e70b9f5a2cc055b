"""HttpClient sends on requests' own urllib3 pool: what requests would have put on the wire still goes there.

Session headers under the call's, URL credentials, cookies, proxies from the environment,
and the reply size limit, checked against a capturing socket server or the scripted upstream.
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from mcpgate.relay import errors
from mcpgate.relay.http_client import HttpClient
from tests.support.relay import HANG_GUARD, Scripted, ScriptedServer, Seen, http_options, json_reply

BODY = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}}).encode()


class Capture:
    """A loopback HTTP/1.1 server that records each request's raw head and answers a small JSON body."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.conn: socket.socket | None = None
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> Capture:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for sock in (self.sock, self.conn):
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)  # wakes the thread from accept() or recv()
                except OSError:
                    pass
        self._thread.join(HANG_GUARD)
        self.sock.close()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        self.conn = conn
        with conn:
            buffer = b""
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                length = next(
                    (
                        int(line.split(b":", 1)[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                while len(buffer) < length:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    buffer += chunk
                buffer = buffer[length:]
                self.heads.append(head)
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(BODY), BODY)
                )

    def header_lines(self, index: int = -1) -> list[str]:
        return self.heads[index].decode("latin-1").split("\r\n")


@pytest.fixture
def capture() -> Iterator[Capture]:
    with Capture() as server:
        yield server


def _post(http: HttpClient, url: str, headers: dict[str, str]) -> bytes:
    resp = http.send("POST", url, headers, b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    try:
        return http.read_body(resp, url)
    finally:
        http.done(resp)


def test_call_headers_replace_session_headers_whatever_their_case(capture: Capture) -> None:
    url = f"http://127.0.0.1:{capture.port}/mcp"
    http = HttpClient(http_options(headers={"accept": "text/plain", "X-Team": "blue"}, bearer_token="tok"), url)
    try:
        assert _post(http, url, {"Accept": "application/json", "Content-Type": "application/json"}) == BODY
        assert _post(http, url, {"Accept": "text/event-stream"}) == BODY
    finally:
        http.close()
    first, second = capture.header_lines(0), capture.header_lines(1)
    assert first[0] == "POST /mcp HTTP/1.1"
    assert [line for line in first if line.lower().startswith("accept:")] == ["Accept: application/json"]
    assert {
        "X-Team: blue",
        "Authorization: Bearer tok",
        "User-Agent: mcpgate-relay",
        "Content-Type: application/json",
    } <= set(first)
    assert [line for line in second if line.lower().startswith("accept:")] == ["Accept: text/event-stream"]
    assert len(capture.heads) == 2  # one kept-alive connection


def test_url_credentials_become_basic_auth_and_stay_out_of_the_target(capture: Capture) -> None:
    url = f"http://ann:s3cret@127.0.0.1:{capture.port}/mcp?x=1"
    http = HttpClient(http_options(), url)
    try:
        _post(http, url, {})
    finally:
        http.close()
    lines = capture.header_lines()
    assert lines[0] == "POST /mcp?x=1 HTTP/1.1"
    assert f"Authorization: Basic {base64.b64encode(b'ann:s3cret').decode()}" in lines


def test_a_header_value_http_forbids_is_refused_without_quoting_it(capture: Capture) -> None:
    url = f"http://127.0.0.1:{capture.port}/mcp"
    http = HttpClient(http_options(tries=1), url)
    try:
        with pytest.raises(errors.ConfigError) as refused:
            _post(http, url, {"MCP-Protocol-Version": "2025\r\nX-Evil: sekrit"})
    finally:
        http.close()
    assert "sekrit" not in refused.value.message and capture.heads == []


def test_cookies_the_upstream_sets_are_sent_back() -> None:
    def route(seen: Seen, server: ScriptedServer) -> Scripted:
        return json_reply({"jsonrpc": "2.0", "id": 1, "result": {}}, headers={"Set-Cookie": "lb=node-7; Path=/"})

    with ScriptedServer(route) as server:
        http = HttpClient(http_options(), server.url)
        try:
            _post(http, server.url, {})
            _post(http, server.url, {})
        finally:
            http.close()
    first, second = server.requests("POST")
    assert "cookie" not in first.headers and second.headers["cookie"] == "lb=node-7"


def test_a_plain_http_proxy_from_the_environment_gets_the_whole_url(monkeypatch: pytest.MonkeyPatch) -> None:
    with ScriptedServer(lambda seen, server: json_reply({"jsonrpc": "2.0", "id": 1, "result": {}})) as proxy:
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY", "https_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{proxy.port}")
        url = "http://upstream.test:8080/mcp"
        http = HttpClient(http_options(), url)
        try:
            assert _post(http, url, {}) == BODY
        finally:
            http.close()
    (seen,) = proxy.requests("POST")
    assert seen.path == url and seen.headers["host"] == "upstream.test:8080"


def test_a_declared_length_over_the_limit_is_refused_unread() -> None:
    big = {"jsonrpc": "2.0", "id": 1, "result": {"text": "x" * 500}}
    with ScriptedServer(lambda seen, server: json_reply(big)) as server:
        http = HttpClient(http_options(max_message_bytes=100), server.url)
        try:
            resp = http.send("POST", server.url, {}, b"{}")
            with pytest.raises(errors.InvalidUpstream, match="exceeded 100 bytes"):
                http.read_body(resp, server.url)
            http.done(resp)
        finally:
            http.close()


def test_requests_goes_without_a_charset_detector() -> None:
    """The relay keeps charset_normalizer / chardet out of its process, quietly."""
    code = (
        "import sys\n"
        "from mcpgate.relay.cli import _skip_charset_detection\n"
        "_skip_charset_detection()\n"
        "import requests\n"
        "assert sys.modules.get('charset_normalizer') is None and sys.modules.get('chardet') is None\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", code], capture_output=True, text=True, timeout=HANG_GUARD
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
