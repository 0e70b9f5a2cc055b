"""Cheap MCP clients for the bench: HTTP/1.1 on one kept-alive connection, and NDJSON over pipes.

The load's clients share the machine's cores with the gateways they measure, so every microsecond a client
spends on a call is one a gateway does not get: a `requests` loop costs about 0.45 ms a call by itself, and
http.client about 90 us (its header parsing goes through the email package). The HTTP client here is
LeanConnection, http.client's subset the bench uses (request, getresponse, read, getheader, close): a request
is one send of bytes whose head is made once per headers dict, the reply's head is split by hand and its body
read by Content-Length, chunked framing or to the connection's end. One connection per session, bodies built
as bytes, replies parsed with json.loads (JSON or SSE, whichever the gateway sends).
"""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import subprocess
import time
from subprocess import DEVNULL
from typing import IO

import procs

PROTOCOL_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"
ACCEPT = "application/json, text/event-stream"


class BenchError(RuntimeError):
    """A gateway answered wrongly (status, body or id); the measurement counts it as an error."""


def initialize_body(msg_id: int = 0) -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": msg_id,
            "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "mcpgate-bench", "version": "1.0"},
            },
        }
    ).encode()


INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'


def echo_body(msg_id: int, message: str = "hello") -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"message":"%s"}}}' % (
        msg_id,
        message.encode(),
    )


def blob_body(msg_id: int, size: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"blob","arguments":{"size":%d}}}' % (
        msg_id,
        size,
    )


# The per-request _meta of a 2026-07-28 request (no initialize, no session): the same bytes on every call.
MODERN_META = (
    b'"_meta":{"io.modelcontextprotocol/protocolVersion":"%s","io.modelcontextprotocol/clientCapabilities":{}}'
    % MODERN_VERSION.encode()
)


def modern_echo_body(msg_id: int, message: str = "hello") -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{"message":"%s"},%s}}'
        % (msg_id, message.encode(), MODERN_META)
    )


def modern_blob_body(msg_id: int, size: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"blob","arguments":{"size":%d},%s}}' % (
        msg_id,
        size,
        MODERN_META,
    )


def find_reply(body: bytes, content_type: str, msg_id: int) -> dict:
    """The JSON-RPC response with `msg_id` in a JSON or SSE body."""
    if content_type.startswith("text/event-stream"):
        candidates = []
        for event in body.split(b"\n\n"):
            data = b"\n".join(line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:"))
            if data:
                candidates.append(json.loads(data))
    else:
        parsed = json.loads(body)
        candidates = parsed if isinstance(parsed, list) else [parsed]
    for message in candidates:
        if isinstance(message, dict) and message.get("id") == msg_id and "method" not in message:
            if "result" not in message:
                raise BenchError(f"error reply: {str(message)[:200]}")
            return message
    raise BenchError(f"no reply with id {msg_id} in {content_type or 'no content type'} body: {body[:200]!r}")


def text_of(reply: dict) -> str:
    return reply["result"]["content"][0]["text"]


MAX_HEAD = 64 * 1024  # a reply's status line and headers
READ_BYTES = 256 * 1024


class LeanResponse:
    """A reply up to its headers (http.client.HTTPResponse's subset: status, getheader, read); the body is read
    when asked (a GET stream's never is)."""

    def __init__(self, conn: LeanConnection, status: int, headers: dict[str, str], keep: bool) -> None:
        self.conn, self.status, self.headers, self.keep = conn, status, headers, keep

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name.lower(), default)

    def read(self, amt: int | None = None) -> bytes:
        conn, headers = self.conn, self.headers
        length = headers.get("content-length")
        if length is not None:
            body = conn.take(int(length))
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            parts = []
            while True:
                size = int(conn.line().split(b";", 1)[0], 16)
                if size == 0:
                    while conn.line():  # trailers, up to the empty line
                        pass
                    break
                parts.append(conn.take(size))
                conn.line()
            body = b"".join(parts)
        elif self.status in (204, 304):
            body = b""
        else:  # to the connection's end
            body = conn.rest()
            self.keep = False
        if not self.keep:
            conn.close()
        return body if amt is None else body[:amt]


class LeanConnection:
    """http.client.HTTPConnection's subset the bench uses, for less of the client's own CPU a call (the module's
    docstring). A closed connection is opened again by the next request; a reply on a connection the server
    closed raises http.client.RemoteDisconnected, as http.client does."""

    def __init__(self, host: str, port: int, timeout: float = 120.0) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self.sock: socket.socket | None = None
        self.buf = b""
        self.heads: dict[tuple, bytes] = {}

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> None:
        key = (method, path, *(headers or {}).items())
        head = self.heads.get(key)
        if head is None:
            if len(self.heads) >= 64:
                self.heads.clear()
            lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
            lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
            head = self.heads[key] = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        if self.sock is None:
            self.sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.buf = b""
        if body is None:
            self.sock.sendall(head + b"\r\n")
        else:
            self.sock.sendall(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)

    def getresponse(self) -> LeanResponse:
        while True:
            end = self.buf.find(b"\r\n\r\n")
            while end < 0:
                if len(self.buf) > MAX_HEAD:
                    raise http.client.HTTPException("a reply head past 64 KiB")
                if not self.fill():
                    self.close()
                    raise http.client.RemoteDisconnected("the server closed the connection without a reply")
                end = self.buf.find(b"\r\n\r\n")
            head, self.buf = self.buf[:end], self.buf[end + 4 :]
            lines = head.decode("latin-1").split("\r\n")
            version, status = lines[0].split(" ", 2)[:2]
            if not 100 <= int(status) < 200:  # else an interim reply: the real one follows
                break
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            key = name.strip().lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        connection = headers.get("connection", "").lower()
        keep = "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)
        return LeanResponse(self, int(status), headers, keep)

    def fill(self) -> bool:
        if self.sock is None:
            return False
        data = self.sock.recv(READ_BYTES)
        self.buf += data
        return bool(data)

    def take(self, size: int) -> bytes:
        buf = self.buf
        if len(buf) < size:  # the rest read in pieces and joined once (a body of megabytes is not copied per read)
            assert self.sock is not None
            parts, have = [buf], len(buf)
            while have < size:
                data = self.sock.recv(max(READ_BYTES, size - have))
                if not data:
                    raise http.client.IncompleteRead(b"".join(parts))
                parts.append(data)
                have += len(data)
            buf = b"".join(parts)
        data, self.buf = buf[:size], buf[size:]
        return data

    def line(self) -> bytes:
        end = self.buf.find(b"\r\n")
        while end < 0:
            if not self.fill():
                raise http.client.IncompleteRead(self.buf)
            end = self.buf.find(b"\r\n")
        data, self.buf = self.buf[:end], self.buf[end + 2 :]
        return data

    def rest(self) -> bytes:
        parts = [self.buf]
        while self.sock is not None and (data := self.sock.recv(READ_BYTES)):
            parts.append(data)
        self.buf = b""
        return b"".join(parts)

    def close(self) -> None:
        sock, self.sock = self.sock, None
        self.buf = b""
        if sock is not None:
            sock.close()


class HttpSession:
    """One MCP session over one kept-alive connection (LeanConnection; an http.client one works too)."""

    def __init__(self, port: int, path: str = "/mcp", host: str = "127.0.0.1", timeout: float = 120.0) -> None:
        self.path = path
        self.conn: LeanConnection | http.client.HTTPConnection = LeanConnection(host, port, timeout=timeout)
        self.session_id: str | None = None
        self.version = PROTOCOL_VERSION
        self.next_id = 1
        self.stream: LeanResponse | http.client.HTTPResponse | None = None
        self.headers = {"Accept": ACCEPT, "Content-Type": "application/json"}

    def post(self, body: bytes, msg_id: int | None, headers: dict[str, str] | None = None) -> dict | None:
        headers = headers or self.headers
        try:
            self.conn.request("POST", self.path, body, headers)
            resp = self.conn.getresponse()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # The server closed this kept-alive connection while it sat idle (mcpgate does after
            # MCPGATE_KEEPALIVE_TIMEOUT, as most servers do): a new connection, once, as HTTP clients do.
            self.conn.close()
            self.conn.request("POST", self.path, body, headers)
            resp = self.conn.getresponse()
        data = resp.read()
        if msg_id is None:
            if resp.status not in (200, 202, 204):
                raise BenchError(f"notification answered {resp.status}: {data[:200]!r}")
            return None
        if resp.status != 200:
            raise BenchError(f"HTTP {resp.status}: {data[:200]!r}")
        if self.session_id is None:
            self.session_id = resp.getheader("Mcp-Session-Id")
        return find_reply(data, resp.getheader("Content-Type") or "", msg_id)

    def initialize(self) -> HttpSession:
        reply = self.post(initialize_body(0), 0)
        assert reply is not None
        if not self.session_id:
            raise BenchError("initialize reply carried no Mcp-Session-Id")
        self.version = reply["result"].get("protocolVersion", PROTOCOL_VERSION)
        self.headers = {**self.headers, "Mcp-Session-Id": self.session_id, "MCP-Protocol-Version": self.version}
        self.post(INITIALIZED, None)
        return self

    def echo(self, message: str = "hello") -> None:
        msg_id = self.next_id
        self.next_id += 1
        reply = self.post(echo_body(msg_id, message), msg_id)
        if text_of(reply) != message:  # type: ignore[arg-type]
            raise BenchError(f"echo returned {text_of(reply)!r}")  # type: ignore[arg-type]

    def blob(self, size: int) -> None:
        msg_id = self.next_id
        self.next_id += 1
        reply = self.post(blob_body(msg_id, size), msg_id)
        if len(text_of(reply)) != size:  # type: ignore[arg-type]
            raise BenchError(f"blob of {size} bytes came back with {len(text_of(reply))}")  # type: ignore[arg-type]

    def open_get_stream(self) -> LeanResponse | http.client.HTTPResponse:
        """Open the session's GET stream on this session's connection (which it then occupies)."""
        self.conn.request(
            "GET",
            self.path,
            headers={
                "Accept": "text/event-stream",
                "Mcp-Session-Id": self.session_id or "",
                "MCP-Protocol-Version": self.version,
            },
        )
        resp = self.conn.getresponse()
        if resp.status != 200:
            raise BenchError(f"GET stream answered {resp.status}: {resp.read(200)!r}")
        self.stream = resp  # held with the session: the connection stays open until close()
        return resp

    def delete(self) -> None:
        try:
            self.conn.request(
                "DELETE",
                self.path,
                headers={"Mcp-Session-Id": self.session_id or "", "MCP-Protocol-Version": self.version},
            )
            self.conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            pass

    def close(self) -> None:
        self.conn.close()


class StatelessSession(HttpSession):
    """MCP 2026-07-28 over the same kept-alive connection: no initialize, no session; every request is one
    POST carrying its revision and method in headers and the client's capabilities in params._meta."""

    def __init__(self, port: int, path: str = "/mcp", host: str = "127.0.0.1", timeout: float = 120.0) -> None:
        super().__init__(port, path, host, timeout)
        self.version = MODERN_VERSION
        self.headers = {**self.headers, "MCP-Protocol-Version": MODERN_VERSION, "Mcp-Method": "tools/call"}
        self.echo_headers = {**self.headers, "Mcp-Name": "echo"}
        self.blob_headers = {**self.headers, "Mcp-Name": "blob"}

    def initialize(self) -> StatelessSession:
        return self  # nothing to set up: the first echo is the first request

    def echo(self, message: str = "hello") -> None:
        msg_id = self.next_id
        self.next_id += 1
        reply = self.post(modern_echo_body(msg_id, message), msg_id, self.echo_headers)
        if text_of(reply) != message:  # type: ignore[arg-type]
            raise BenchError(f"echo returned {text_of(reply)!r}")  # type: ignore[arg-type]

    def blob(self, size: int) -> None:
        msg_id = self.next_id
        self.next_id += 1
        reply = self.post(modern_blob_body(msg_id, size), msg_id, self.blob_headers)
        if len(text_of(reply)) != size:  # type: ignore[arg-type]
            raise BenchError(f"blob of {size} bytes came back with {len(text_of(reply))}")  # type: ignore[arg-type]

    def open_get_stream(self) -> LeanResponse | http.client.HTTPResponse:
        raise BenchError("2026-07-28 has no GET stream")

    def delete(self) -> None:
        pass  # no session to end


CLIENTS = {"legacy": HttpSession, "modern": StatelessSession}  # Spec.client -> the session class


class LineReader:
    """Lines from a pipe, with a timeout on every wait (a stalled relay must not hang the bench)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = bytearray()
        self.start = 0

    def readline(self, timeout: float = 60.0) -> bytes:
        deadline = time.monotonic() + timeout
        while True:
            end = self.buf.find(b"\n", self.start)
            if end >= 0:
                line = bytes(self.buf[self.start : end])
                self.start = end + 1
                if self.start > 1 << 20:
                    del self.buf[: self.start]
                    self.start = 0
                return line
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise BenchError(f"no line within {timeout} s")
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                raise BenchError("the process closed its stdout")
            self.buf += chunk


class PipeSession:
    """An MCP session over NDJSON pipes: the child directly, or a relay in front of an HTTP server."""

    echo_body = staticmethod(echo_body)  # the bytes of one echo call (pipe_in_flight sends them too)
    blob_body = staticmethod(blob_body)

    def __init__(
        self, argv: list[str], env: dict[str, str] | None = None, cwd: str | None = None, stderr: int | IO = DEVNULL
    ) -> None:
        self.proc = procs.register(
            subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                bufsize=0,
                env=env,
                cwd=cwd,
                start_new_session=True,
            )
        )
        self.stdin = self.proc.stdin
        self.reader = LineReader(self.proc.stdout.fileno())  # type: ignore[union-attr]
        self.next_id = 1

    def send(self, data: bytes) -> None:
        self.stdin.write(data + b"\n")  # type: ignore[union-attr]

    def wait_reply(self, msg_id: int, timeout: float = 60.0) -> dict:
        while True:
            line = self.reader.readline(timeout)
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and message.get("id") == msg_id and "method" not in message:
                if "result" not in message:
                    raise BenchError(f"error reply: {line[:200]!r}")
                return message

    def read_any_reply(self, timeout: float = 60.0) -> dict:
        while True:
            line = self.reader.readline(timeout)
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if isinstance(message, dict) and "id" in message and "method" not in message:
                if "result" not in message:
                    raise BenchError(f"error reply: {line[:200]!r}")
                return message

    def initialize(self, timeout: float = 60.0) -> PipeSession:
        self.send(initialize_body(0))
        self.wait_reply(0, timeout)
        self.send(INITIALIZED)
        return self

    def echo(self, message: str = "hello") -> None:
        msg_id = self.next_id
        self.next_id += 1
        self.send(self.echo_body(msg_id, message))
        if text_of(self.wait_reply(msg_id)) != message:
            raise BenchError("echo returned something else")

    def blob(self, size: int) -> None:
        msg_id = self.next_id
        self.next_id += 1
        self.send(self.blob_body(msg_id, size))
        if len(text_of(self.wait_reply(msg_id))) != size:
            raise BenchError("blob came back with another size")

    def close(self, timeout: float = 5.0) -> None:
        """Close stdin, then SIGTERM and SIGKILL the process group if it lingers."""
        try:
            self.stdin.close()  # type: ignore[union-attr]
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            stop_group(self.proc)
        procs.forget(self.proc)
        self.proc.stdout.close()  # type: ignore[union-attr]


class ModernPipeSession(PipeSession):
    """A 2026-07-28 host over NDJSON pipes (a relay run with --protocol-era modern or auto): no initialize; every
    request carries its revision and the host's capabilities in params._meta."""

    echo_body = staticmethod(modern_echo_body)
    blob_body = staticmethod(modern_blob_body)

    def initialize(self, timeout: float = 60.0) -> ModernPipeSession:
        """Nothing to set up; one echo answered (the relay's first request decides its route) within timeout."""
        msg_id = self.next_id
        self.next_id += 1
        self.send(self.echo_body(msg_id, "hello"))
        self.wait_reply(msg_id, timeout)
        return self


PIPE_CLIENTS = {"legacy": PipeSession, "modern": ModernPipeSession}  # RelaySpec.client -> the session class


def stop_group(proc: subprocess.Popen, timeout: float = 10.0) -> None:
    """SIGTERM the process group the bench started (start_new_session=True); SIGKILL what is left of it."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the group (children of a gateway that died)
    except ProcessLookupError:
        pass
    proc.wait(10.0)
