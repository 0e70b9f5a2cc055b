"""A hostile network against the real worker (gunicorn, mcpgate.serve.front.worker), over raw sockets.

The corpus: malformed or abusive requests (framing, request lines, Host, methods, headers, bodies, JSON-RPC
garbage, session abuse), each answered with a 4xx or a JSON-RPC error, each followed on its connection by a
plain request that is answered intact when the connection may go on and never when it must close, and each
followed by a bystander session's tools/call that must be served. Then the slow clients: idle keep-alive
connections and slowloris heads are closed, silent sockets cannot take the slots an open session needs, a
stalled body is refused, and streams in progress are never cut by any of these timeouts.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple

import pytest

from mcpgate.core.wire import SESSION_ID
from tests.support import Gateway, call, init_body, open_session, sse_messages

TIMEOUTS = {  # short, so a test sees every timeout pass; no figure is asserted
    "MCPGATE_KEEPALIVE_TIMEOUT": "1",
    "MCPGATE_HEADER_TIMEOUT": "2",
    "MCPGATE_BODY_TIMEOUT": "2",
    "MCPGATE_KEEPALIVE": "0.5",
    "MCPGATE_SSE_AFTER": "1",
    "MCPGATE_MAX_BODY_BYTES": "65536",
}
WAIT = 15.0  # seconds a test waits for something the worker must do (only so a broken worker fails, not hangs)


class Answer(NamedTuple):
    status: int
    headers: dict[str, str]
    body: bytes


class Exchange(NamedTuple):
    answers: list[Answer]
    closed: bool  # the worker closed the connection after its answers


def parse(data: bytes, methods: list[str]) -> list[Answer]:
    """The complete responses in `data`, for requests made with `methods` in order (HEAD: no body)."""
    answers: list[Answer] = []
    while data and len(answers) < len(methods):
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            break
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        status = int(status_line.split(" ")[1])
        if methods[len(answers)] == "HEAD" or status in (204, 304):
            body, data = b"", rest
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size_line, _, rest = rest.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                if size == 0:
                    rest = rest.partition(b"\r\n")[2]
                    break
                body, rest = body + rest[:size], rest[size + 2 :]
            data = rest
        else:
            length = int(headers.get("content-length", "0"))
            body, data = rest[:length], rest[length:]
        answers.append(Answer(status, headers, body))
    if data:
        answers.append(Answer(-1, {}, data))  # bytes that are not a response to anything asked: corruption
    return answers


def exchange(port: int, data: bytes, methods: list[str], timeout: float = WAIT) -> Exchange:
    """Send `data` on one connection, read until the worker closes it or `timeout` passes."""
    received = b""
    closed = False
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
        except OSError:
            pass  # refused while still sending: what was answered still counts
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                chunk = sock.recv(65536)
                if not chunk:
                    closed = True
                    break
                received += chunk
        except ConnectionResetError:
            closed = True
        except TimeoutError:
            pass
    return Exchange(parse(received, methods), closed)


def request(method: str, target: str, host: str, headers: str = "", body: bytes = b"") -> bytes:
    """A request's bytes: `headers` are extra raw field lines (each ending in CRLF)."""
    length = f"Content-Length: {len(body)}\r\n" if body else ""
    return f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n{headers}{length}\r\n".encode("latin-1") + body


MCP = "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
INIT = json.dumps(init_body()).encode()


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    gw = Gateway(TIMEOUTS)
    try:
        gw.wait_ready()
        yield gw
    finally:
        gw.stop()


@pytest.fixture(scope="module")
def bystander(gateway: Gateway) -> dict[str, str]:
    """An established session, whose calls must be served between the abuse."""
    return open_session(gateway)


def bystander_call(gw: Gateway, headers: dict[str, str], message: str = "still here") -> None:
    reply = gw.request("POST", body=call("echo", {"message": message}), headers=headers, timeout=WAIT)
    assert reply.status == 200, reply
    body = sse_messages(reply.body)[-1] if reply.content_type.startswith("text/event-stream") else reply.json()
    assert body["result"]["content"][0]["text"] == message, reply


# -- the corpus -------------------------------------------------------------------------------------------------

H = "{host}"  # filled with the gateway's loopback Host by each case
CLOSE = "close"  # the connection must be closed after the one 400: a request hidden behind it is never answered
GOES_ON = "goes on"  # the connection may stay open: the request after it is answered intact (or it closes)


class Case(NamedTuple):
    data: str | bytes  # {host} and {port} are filled in
    expect: str
    method: str = "POST"


def _post(headers: str, body: str = "", target: str = "/mcp") -> str:
    return f"POST {target} HTTP/1.1\r\nHost: {H}\r\n{headers}\r\n{body}"


SMUGGLED = "GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n"  # a hidden request inside a body framed two ways
FRAMING = {
    "CL and TE": _post("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n" + SMUGGLED),
    "TE and CL": _post("Transfer-Encoding: chunked\r\nContent-Length: 60\r\n", "0\r\n\r\n" + SMUGGLED),
    "two differing CL": _post("Content-Length: 0\r\nContent-Length: 40\r\n", SMUGGLED),
    "two equal CL": _post("Content-Length: 2\r\nContent-Length: 2\r\n", "{}"),
    "CL +57": _post("Content-Length: +2\r\n", "{}"),
    "CL 5_7": _post("Content-Length: 0_2\r\n", "{}"),
    "CL 0x39": _post("Content-Length: 0x2\r\n", "{}"),
    "CL -1": _post("Content-Length: -1\r\n", "{}"),
    "CL 5 7": _post("Content-Length: 0 2\r\n", "{}"),
    "CL as a list": _post("Content-Length: 2, 2\r\n", "{}"),
    "CL empty": _post("Content-Length: \r\n", "{}"),
    "CL with a unicode digit": _post("Content-Length: \xb2\r\n", "{}"),
    "TE gzip": _post("Transfer-Encoding: gzip\r\n", "{}"),
    "TE chunked, gzip": _post("Transfer-Encoding: chunked, gzip\r\n", "2\r\n{}\r\n0\r\n\r\n"),
    "TE gzip, chunked": _post("Transfer-Encoding: gzip, chunked\r\n", "2\r\n{}\r\n0\r\n\r\n"),
    "TE identity": _post("Transfer-Encoding: identity\r\n", "{}"),
    "TE in two fields": _post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "0\r\n\r\n"),
    "TE with a space in the name": _post("Transfer-Encoding : chunked\r\n", "0\r\n\r\n" + SMUGGLED),
    "TE folded": _post("Transfer-Encoding:\r\n chunked\r\n", "0\r\n\r\n"),
    "a chunk size that is not hex": _post(MCP + "Transfer-Encoding: chunked\r\n", "zz\r\n{}\r\n0\r\n\r\n"),
    "a chunk size with a sign": _post(MCP + "Transfer-Encoding: chunked\r\n", "+2\r\n{}\r\n0\r\n\r\n"),
    "a chunk without its CRLF": _post(MCP + "Transfer-Encoding: chunked\r\n", "2\r\n{}XX0\r\n\r\n" + SMUGGLED),
    "HEAD with a body": "HEAD /mcp HTTP/1.1\r\nHost: {host}\r\nContent-Length: 2\r\n\r\n{}",
    "bare LF line ends": "POST /mcp HTTP/1.1\nHost: {host}\nContent-Length: 2\n\n{}",
    "a NUL in a field": _post("X-Thing: a\x00b\r\nContent-Length: 2\r\n", "{}"),
    "a field line over the limit": _post("X-Pad: " + "a" * 9000 + "\r\n"),
    "too many fields": _post("".join(f"X-{i}: v\r\n" for i in range(120))),
    "a field without a colon": _post("no colon here\r\n"),
    "an Expect gunicorn does not know": _post("Expect: 200-ok\r\nContent-Length: 2\r\n", "{}"),
}
REQUEST_LINES = {
    "HTTP/0.9": "GET /healthz\r\n\r\n",
    "HTTP/2.0 over HTTP/1": "GET /healthz HTTP/2.0\r\nHost: {host}\r\n\r\n",
    "a version with three parts": "GET /healthz HTTP/1.1.1\r\nHost: {host}\r\n\r\n",
    "a version with an underscore": "GET /healthz HTTP/1_1\r\nHost: {host}\r\n\r\n",
    "a lowercase version": "GET /healthz http/1.1\r\nHost: {host}\r\n\r\n",
    "two spaces": "GET  /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n",
    "tabs for spaces": "GET\t/healthz\tHTTP/1.1\r\nHost: {host}\r\n\r\n",
    "a method that is not a token": "G(T /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n",
    "a target without a slash": "GET healthz HTTP/1.1\r\nHost: {host}\r\n\r\n",
    "a target with a fragment": "GET /healthz#top HTTP/1.1\r\nHost: {host}\r\n\r\n",
    "a target with a control character": "GET /heal\x01thz HTTP/1.1\r\nHost: {host}\r\n\r\n",
    "* for a GET": "GET * HTTP/1.1\r\nHost: {host}\r\n\r\n",
    "CONNECT": "CONNECT {host} HTTP/1.1\r\nHost: {host}\r\n\r\n",
    "absolute-form with userinfo": "GET http://user@{host}/healthz HTTP/1.1\r\nHost: {host}\r\n\r\n",
    "absolute-form of another scheme": "GET ftp://{host}/healthz HTTP/1.1\r\nHost: {host}\r\n\r\n",
    "absolute-form with a list for authority": "GET http://{host},evil.example/ HTTP/1.1\r\nHost: {host}\r\n\r\n",
    "a request line over the limit": "GET /" + "a" * 9000 + " HTTP/1.1\r\nHost: {host}\r\n\r\n",
}
HOSTS = {
    "two Hosts": "GET /healthz HTTP/1.1\r\nHost: {host}\r\nHost: evil.example\r\n\r\n",
    "a Host that is a list": "GET /healthz HTTP/1.1\r\nHost: {host},evil.example\r\n\r\n",
    "no Host in HTTP/1.1": "GET /healthz HTTP/1.1\r\n\r\n",
    "a Host with a space": "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1 evil.example\r\n\r\n",
    "a Host with a path": "GET /healthz HTTP/1.1\r\nHost: {host}/x\r\n\r\n",
    "a Host with userinfo": "GET /healthz HTTP/1.1\r\nHost: evil@{host}\r\n\r\n",
    "a Host with a port too large": "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:99999\r\n\r\n",
    "a broken IPv6 literal": "GET /healthz HTTP/1.1\r\nHost: [::1\r\n\r\n",
}
ABUSE = {  # well-framed requests the gateway refuses: the connection may go on
    "a Host not allowed (421)": "GET /healthz HTTP/1.1\r\nHost: evil.example\r\n\r\n",
    "absolute-form naming another host (421)": "GET http://evil.example/healthz HTTP/1.1\r\nHost: {host}\r\n\r\n",
    "an Origin not allowed (403)": _post(MCP + "Origin: https://evil.example\r\nContent-Length: 2\r\n", "{}"),
    "HEAD on the endpoint (405)": Case("HEAD /mcp HTTP/1.1\r\nHost: {host}\r\n\r\n", GOES_ON, "HEAD"),
    "HEAD on a path that is not there (404)": Case("HEAD /nope HTTP/1.1\r\nHost: {host}\r\n\r\n", GOES_ON, "HEAD"),
    "PUT on the endpoint": _post(MCP + "Content-Length: 2\r\n", "{}").replace("POST", "PUT", 1),
    "PATCH on the endpoint": _post(MCP + "Content-Length: 2\r\n", "{}").replace("POST", "PATCH", 1),
    "TRACE on the endpoint": "TRACE /mcp HTTP/1.1\r\nHost: {host}\r\n\r\n",
    "an unknown method": "BREW /mcp HTTP/1.1\r\nHost: {host}\r\n\r\n",
    "POST on a Flask path": _post("Content-Length: 2\r\n", "{}", target="/healthz"),
    "a path that is not there": "GET /../../etc/passwd HTTP/1.1\r\nHost: {host}\r\n\r\n",
    "POST without Accept": _post("Content-Type: application/json\r\nContent-Length: 2\r\n", "{}"),
    "POST accepting JSON only": _post(
        "Accept: application/json\r\nContent-Type: application/json\r\nContent-Length: 2\r\n", "{}"
    ),
    "POST without Content-Type": _post("Accept: application/json, text/event-stream\r\nContent-Length: 2\r\n", "{}"),
    "POST of text/plain": _post(
        "Accept: application/json, text/event-stream\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n", "{}"
    ),
    "GET without Accept of SSE": "GET /mcp HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n\r\n",
    "a body over the limit": _post(MCP + "Content-Length: 70000\r\n", "{" * 70000),
    "a chunked body over the limit": _post(
        MCP + "Transfer-Encoding: chunked\r\n", "11170\r\n" + "[" * 70000 + "\r\n0\r\n\r\n"
    ),
}
RPC = {  # JSON-RPC garbage and session abuse, each a well-framed POST
    "an empty body": "",
    "a truncated object": '{"jsonrpc": "2.0", "id": 1, "method": "ping"',
    "not JSON": "hello",
    "invalid UTF-8": b"\xff\xfe{}",
    "null": "null",
    "a number": "42",
    "a string": '"initialize"',
    "an empty batch": "[]",
    "an empty object": "{}",
    "JSON-RPC 1.0": '{"jsonrpc": "1.0", "id": 1, "method": "ping"}',
    "no method": '{"jsonrpc": "2.0", "id": 1}',
    "a method that is a number": '{"jsonrpc": "2.0", "id": 1, "method": 7}',
    "an id that is an object": '{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}',
    "params that are a string": '{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": "x"}',
    "deep nesting": "[" * 30000 + "]" * 30000,
    "NaN for an id": '{"jsonrpc": "2.0", "id": NaN, "method": "ping"}',
    "a ping without a session": '{"jsonrpc": "2.0", "id": 1, "method": "ping"}',
    "a response to nothing, without a session": '{"jsonrpc": "2.0", "id": 99, "result": {}}',
}
SESSIONS = {  # (extra headers, body, method)
    "an unknown session": (
        f"{SESSION_ID}: 0123456789abcdef0123456789abcdef\r\n",
        '{"jsonrpc":"2.0","id":1,"method":"ping"}',
    ),
    "a session id of 8000 bytes": (f"{SESSION_ID}: {'a' * 8000}\r\n", '{"jsonrpc":"2.0","id":1,"method":"ping"}'),
    "a session id with a control character": (
        f"{SESSION_ID}: ab\x7fcd\r\n",
        '{"jsonrpc":"2.0","id":1,"method":"ping"}',
    ),
    "two session ids": (
        f"{SESSION_ID}: aaaa\r\n{SESSION_ID}: bbbb\r\n",
        '{"jsonrpc":"2.0","id":1,"method":"ping"}',
    ),
    "a protocol version that is not one": (
        f"{SESSION_ID}: {{sid}}\r\nMCP-Protocol-Version: 1999-01-01\r\n",
        '{"jsonrpc":"2.0","id":1,"method":"ping"}',
    ),
    "a tool that does not exist": (
        f"{SESSION_ID}: {{sid}}\r\nMCP-Protocol-Version: 2025-11-25\r\n",
        json.dumps(call("no-such-tool", {}, msg_id=7)),
    ),
    "a method that does not exist": (
        f"{SESSION_ID}: {{sid}}\r\nMCP-Protocol-Version: 2025-11-25\r\n",
        '{"jsonrpc":"2.0","id":8,"method":"no/such/method"}',
    ),
    "a second initialize on a session": (
        f"{SESSION_ID}: {{sid}}\r\nMCP-Protocol-Version: 2025-11-25\r\n",
        INIT.decode(),
    ),
}


def corpus() -> dict[str, Case]:
    cases: dict[str, Case] = {}
    for name, data in {**FRAMING, **REQUEST_LINES, **HOSTS}.items():
        method = "HEAD" if data.startswith("HEAD") else "GET"
        cases[name] = Case(data, CLOSE, method)
    for name, item in ABUSE.items():
        cases[name] = item if isinstance(item, Case) else Case(item, GOES_ON)
    for name, body in RPC.items():
        raw = body if isinstance(body, bytes) else body.encode()
        cases[name] = Case(f"POST /mcp HTTP/1.1\r\nHost: {H}\r\n{MCP}".encode() + _length(raw) + raw, GOES_ON)
    for name, (headers, text) in SESSIONS.items():
        cases[name] = Case(_post(MCP + headers + f"Content-Length: {len(text)}\r\n", text), GOES_ON)
    return cases


def _length(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body)


CORPUS = corpus()
FOLLOW = "GET /healthz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"


def fill(data: str | bytes, gw: Gateway, sid: str) -> bytes:
    raw = data if isinstance(data, bytes) else data.encode("latin-1")
    host = f"127.0.0.1:{gw.port}".encode()
    return raw.replace(b"{host}", host).replace(b"{sid}", sid.encode())


def refused(answer: Answer) -> bool:
    """A 4xx, or a JSON-RPC error (in a JSON body or the last SSE event)."""
    if 400 <= answer.status < 500:
        return True
    if answer.status != 200:
        return False
    text = answer.body.decode(errors="replace")
    messages = sse_messages(answer.body) if answer.headers.get("content-type", "").startswith("text/event") else []
    message = messages[-1] if messages else json.loads(text)
    return "error" in message or bool(message.get("result", {}).get("isError"))


def test_the_corpus_is_large() -> None:
    assert len(CORPUS) >= 60


@pytest.mark.parametrize("name", CORPUS)
def test_each_abuse_is_refused_and_the_worker_serves_on(gateway: Gateway, bystander: dict[str, str], name: str) -> None:
    case = CORPUS[name]
    sid = bystander[SESSION_ID]
    result = exchange(gateway.port, fill(case.data, gateway, sid) + fill(FOLLOW, gateway, sid), [case.method, "GET"])
    assert result.answers, result
    first = result.answers[0]
    assert refused(first), result
    if case.method == "HEAD":
        assert first.body == b"", result
    if case.expect == CLOSE:
        assert first.status in (400, 414) and result.closed and len(result.answers) == 1, result
    else:  # the next request on the connection is answered intact, or the connection was closed after the first
        follow = result.answers[1:]
        assert [a.status for a in follow] in ([200], []), result
        if follow:
            assert json.loads(follow[0].body)["status"] == "ok", result
    bystander_call(gateway, bystander)


# -- Host and the request target ----------------------------------------------------------------------------


def test_an_absolute_form_target_is_served_and_its_authority_is_the_host(gateway: Gateway) -> None:
    host = f"127.0.0.1:{gateway.port}"
    ok = exchange(gateway.port, request("POST", f"http://{host}/mcp", "evil.example", MCP, INIT), ["POST"], 5)
    assert ok.answers[0].status == 200 and SESSION_ID.lower() in ok.answers[0].headers, ok
    other = exchange(gateway.port, request("POST", "http://evil.example/mcp", host, MCP, INIT), ["POST"], 5)
    assert other.answers[0].status == 421, other


def test_head_replies_carry_no_body_and_the_next_reply_is_intact(gateway: Gateway) -> None:
    host = f"127.0.0.1:{gateway.port}"
    for target, status in (("/mcp", 405), ("/healthz", 200)):
        data = request("HEAD", target, host) + fill(FOLLOW, gateway, "")
        result = exchange(gateway.port, data, ["HEAD", "GET"])
        assert [a.status for a in result.answers] == [status, 200], result
        assert result.answers[0].body == b"" and json.loads(result.answers[1].body)["status"] == "ok", result
        if target == "/mcp":
            assert result.answers[0].headers["allow"] == "GET, POST, DELETE", result


# -- slow clients ---------------------------------------------------------------------------------------------


def closed_within(sock: socket.socket, timeout: float = WAIT) -> bool:
    """Whether the worker closes the connection (whatever it says first) before `timeout`."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_idle_keepalive_connections_are_closed(gateway: Gateway) -> None:
    socks = [socket.create_connection(("127.0.0.1", gateway.port)) for _ in range(20)]
    try:
        for sock in socks:
            sock.sendall(request("GET", "/healthz", f"127.0.0.1:{gateway.port}"))
            assert b"200 OK" in sock.recv(65536)
        assert all(closed_within(sock) for sock in socks)
    finally:
        for sock in socks:
            sock.close()


def test_headers_dribbled_a_byte_at_a_time_are_cut_off(gateway: Gateway, bystander: dict[str, str]) -> None:
    head = request("GET", "/healthz", f"127.0.0.1:{gateway.port}", "".join(f"X-{i}: v\r\n" for i in range(40)))
    with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
        sock.settimeout(0.2)
        for byte in head[:-1]:  # never the last byte: the head is never complete
            try:
                sock.sendall(bytes([byte]))
                if sock.recv(65536) == b"":
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        else:
            pytest.fail("a head dribbled for longer than the header timeout was never cut off")
        bystander_call(gateway, bystander)


def test_a_stalled_body_is_refused_and_the_connection_closed(gateway: Gateway, bystander: dict[str, str]) -> None:
    with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
        sock.sendall(request("POST", "/mcp", f"127.0.0.1:{gateway.port}", MCP + "Content-Length: 100\r\n"))
        sock.sendall(b'{"jsonrpc": ')  # and nothing more
        bystander_call(gateway, bystander)
        sock.settimeout(WAIT)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 400"), answer


def test_streams_in_progress_outlive_every_timeout(gateway: Gateway) -> None:
    """A GET stream and a long tool call's SSE reply, both longer than every read timeout, are not cut."""
    headers = open_session(gateway)
    host = f"127.0.0.1:{gateway.port}"
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k not in ("Content-Type",))
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=WAIT) as stream:
        stream.sendall(
            f"GET /mcp HTTP/1.1\r\nHost: {host}\r\n{extra}".encode().replace(b"Accept: application/json, ", b"Accept: ")
            + b"\r\n"
        )
        slow = json.dumps(call("slow", {"seconds": 4, "steps": 2}, msg_id=5)).encode()
        reply = gateway.request("POST", body=slow, headers=headers, timeout=WAIT)
        assert reply.status == 200 and sse_messages(reply.body)[-1]["result"]["content"][0]["text"] == "done after 4 s"
        received, closed = b"", False
        stream.settimeout(0.2)
        deadline = time.monotonic() + 1.5  # keepalives come every 0.5 s: the stream is still being written
        while time.monotonic() < deadline and not closed:
            try:
                chunk = stream.recv(65536)
            except TimeoutError:
                continue
            closed, received = not chunk, received + chunk
        assert received.startswith(b"HTTP/1.1 200") and received.count(b": keepalive") >= 2 and not closed, received


def test_silent_sockets_cannot_starve_an_open_session(gateway_factory: Callable[..., Gateway]) -> None:
    """More sockets that send nothing than the worker has connections: the oldest of them are closed, and an
    open session's next request is served (the header timeout is long here, so only the budget can do it)."""
    gw = gateway_factory(
        {"MCPGATE_WORKER_CONNECTIONS": "40", "MCPGATE_IDLE_CONNECTIONS": "10", "MCPGATE_HEADER_TIMEOUT": "600"}
    )
    headers = open_session(gw)
    silent = [socket.create_connection(("127.0.0.1", gw.port)) for _ in range(60)]
    try:
        bystander_call(gw, headers)
        assert closed_within(silent[0])
    finally:
        for sock in silent:
            sock.close()


def test_a_reader_that_never_reads_does_not_hold_up_others(gateway: Gateway, bystander: dict[str, str]) -> None:
    headers = open_session(gateway)
    big = json.dumps(call("bytes", {"size": 1_000_000}, msg_id=9)).encode()
    host = f"127.0.0.1:{gateway.port}"
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k != "Content-Type")
    with socket.create_connection(("127.0.0.1", gateway.port)) as lazy:
        lazy.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        for msg_id in range(5):
            body = big.replace(b'"id": 9', b'"id": %d' % (100 + msg_id))
            lazy.sendall(request("POST", "/mcp", host, extra + "Content-Type: application/json\r\n", body))
        for _ in range(3):
            bystander_call(gateway, bystander)
