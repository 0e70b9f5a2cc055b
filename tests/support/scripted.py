"""A scripted upstream in a thread of the test process: each test gives a `route(seen, server) -> Scripted`
function; the server records every request it receives (method, path, headers, body) so a test can assert on
exactly what the relay sent. A Scripted answer's body is a list of steps: bytes are written and flushed, a float
waits, HOLD waits until the server stops, DROP closes the connection without an answer."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOLD = "hold"
DROP = "drop"
Step = bytes | float | str


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None

    @property
    def rpc_method(self) -> str | None:
        message = self.json
        return message.get("method") if isinstance(message, dict) else None


@dataclass
class Scripted:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: list[Step] = field(default_factory=list)


Route = Callable[[Seen, "ScriptedServer"], Scripted]


def json_reply(obj: Any, status: int = 200, headers: dict[str, str] | None = None) -> Scripted:
    data = json.dumps(obj).encode()
    return Scripted(
        status, {"Content-Type": "application/json", "Content-Length": str(len(data)), **(headers or {})}, [data]
    )


def sse_event(obj: Any = None, event_id: str | None = None, retry: int | None = None) -> bytes:
    lines = []
    if event_id is not None:
        lines.append(f"id: {event_id}")
    if retry is not None:
        lines.append(f"retry: {retry}")
    lines.append("data: " + ("" if obj is None else json.dumps(obj)))
    return ("\n".join(lines) + "\n\n").encode()


def sse_reply(*steps: Step, headers: dict[str, str] | None = None) -> Scripted:
    return Scripted(
        200, {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", **(headers or {})}, list(steps)
    )


def result(msg: dict[str, Any], value: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg["id"], "result": value}


def mcp_default(seen: Seen, server: ScriptedServer) -> Scripted:
    """A minimal well-behaved Streamable HTTP server: JSON replies, sessions, no GET stream."""
    if seen.method == "DELETE":
        return Scripted(200)
    if seen.method == "GET":
        return Scripted(405, {"Allow": "POST, DELETE"})
    message = seen.json
    if not isinstance(message, dict) or "id" not in message or "method" not in message:
        return Scripted(202)
    if message["method"] == "initialize":
        version = message["params"]["protocolVersion"]
        return json_reply(
            result(
                message,
                {"protocolVersion": version, "capabilities": {}, "serverInfo": {"name": "scripted", "version": "1"}},
            ),
            headers={"Mcp-Session-Id": server.session_id},
        )
    return json_reply(result(message, {"echo": message["method"]}))


class ScriptedServer:
    def __init__(self, route: Route = mcp_default) -> None:
        self.route = route
        self.seen: list[Seen] = []
        self.session_id = "session-1"
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(10)

    def requests(self, method: str | None = None, rpc: str | None = None) -> list[Seen]:
        with self.lock:
            seen = list(self.seen)
        return [s for s in seen if (method is None or s.method == method) and (rpc is None or s.rpc_method == rpc)]


def _handler(server: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            seen = Seen(
                self.command,
                self.path,
                {k.lower(): v for k, v in self.headers.items()},
                self.rfile.read(length) if length else b"",
            )
            with server.lock:
                server.seen.append(seen)
            reply = server.route(seen, server)
            if reply.body[:1] == [DROP]:
                self.close_connection = True
                return
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self._write(reply.body)

        def _write(self, steps: list[Step]) -> None:
            try:
                for step in steps:
                    if isinstance(step, bytes):
                        self.wfile.write(step)
                        self.wfile.flush()
                    elif step == HOLD:
                        server.stopping.wait(60)
                    elif step == DROP:
                        return
                    elif isinstance(step, float):
                        server.stopping.wait(step)
            except OSError:
                pass

        do_GET = do_POST = do_DELETE = _serve

    return Handler
