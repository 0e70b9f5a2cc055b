"""Bundled demo MCP server: newline-delimited JSON-RPC over stdio, standard library only.

mcpgate serves it when no command is configured. It exercises what a gateway must relay: concurrent
requests, progress, cancellation, server->client requests (elicitation, sampling), notifications,
resources, a resource template and a prompt. Run: ``python -m mcpgate.demo_server``. Logs go to stderr.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO
from urllib.parse import unquote

from mcpgate import __version__
from mcpgate.demo_tools import LOG_LEVELS, TOOLS, Cancelled, Json, ToolContext, ToolError, text_result

SUPPORTED_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_VERSION = SUPPORTED_VERSIONS[-1]
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
RESOURCE_NOT_FOUND = -32002
EOF_GRACE_SECONDS = 0.5  # on stdin EOF, quick in-flight tool calls may still answer; the rest are cancelled
CAPABILITIES: Json = {
    "tools": {"listChanged": True},
    "resources": {"subscribe": False, "listChanged": True},
    "prompts": {"listChanged": True},
    "logging": {},
}
README = """# mcpgate demo server

A small MCP server bundled with mcpgate, served when no command is configured.
Tools: echo, add, slow, bytes, ask_name, sample, notify_change, log.
Resources: demo://readme, demo://time and the template demo://echo/{text}. Prompt: greet.
"""
ECHO_PREFIX = "demo://echo/"
RESOURCES = [
    {"uri": "demo://readme", "name": "readme", "description": "About this demo", "mimeType": "text/markdown"},
    {"uri": "demo://time", "name": "time", "description": "Current UTC time", "mimeType": "text/plain"},
]
TEMPLATES = [
    {
        "uriTemplate": ECHO_PREFIX + "{text}",
        "name": "echo",
        "description": "Reads back {text}",
        "mimeType": "text/plain",
    }
]
PROMPTS = [
    {
        "name": "greet",
        "description": "Greet someone warmly",
        "arguments": [{"name": "name", "description": "Who to greet", "required": True}],
    }
]
log = logging.getLogger("mcpgate.demo_server")


class RpcError(Exception):
    """Answered as a JSON-RPC error response."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.error: Json = {"code": code, "message": message, **({} if data is None else {"data": data})}


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _key(msg_id: Any) -> str:
    return json.dumps(msg_id)  # keeps the ids "1" and 1 apart


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _encode(msg: Json) -> bytes:
    try:
        return (json.dumps(msg, ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n").encode()
    except UnicodeEncodeError:  # lone surrogates: fall back to \u escapes
        return (json.dumps(msg, separators=(",", ":"), allow_nan=False) + "\n").encode()


def _param(params: Json, name: str, kind: type) -> Any:
    if not isinstance(value := params.get(name), kind):
        raise RpcError(INVALID_PARAMS, f"Invalid params: '{name}' must be a {kind.__name__}")
    return value


class DemoServer:
    def __init__(self, out: BinaryIO) -> None:
        self.protocol_version = LATEST_VERSION
        self.client_capabilities: Json = {}
        self.log_level = LOG_LEVELS[0]
        self._out, self._closed = out, False
        self._write_lock = threading.Lock()  # one writer at a time; whole lines only
        self._lock = threading.Lock()  # guards _calls and _pending
        self._calls: dict[str, threading.Event] = {}  # in-flight tools/call id -> its cancellation event
        self._pending: dict[str, queue.Queue[Json | None]] = {}  # our request id -> where its response goes
        self._ids = itertools.count(1)
        self._methods: dict[str, Callable[[Json], Json]] = {
            "initialize": self._initialize,
            "ping": lambda p: {},
            "logging/setLevel": self._set_level,
            "tools/list": lambda p: {"tools": [listing for _, listing in TOOLS.values()]},
            "resources/list": lambda p: {"resources": RESOURCES},
            "resources/templates/list": lambda p: {"resourceTemplates": TEMPLATES},
            "resources/read": self._read_resource,
            "prompts/list": lambda p: {"prompts": PROMPTS},
            "prompts/get": self._get_prompt,
        }

    def send(self, msg: Json, unless: threading.Event | None = None) -> bool:
        """Write one line; dropped once `unless` is set (a cancelled request gets nothing more)."""
        line = _encode(msg)
        with self._write_lock:
            if self._closed or (unless is not None and unless.is_set()):
                return False
            try:
                self._out.write(line)
                self._out.flush()
            except (OSError, ValueError) as exc:
                self._closed = True
                log.warning("stdout closed (%s); dropping further output", exc)
        return not self._closed

    def _reply_error(self, msg_id: Any, error: RpcError) -> None:
        self.send({"jsonrpc": "2.0", "id": msg_id, "error": error.error})

    def serve(self, inp: BinaryIO) -> bool:
        """Handle lines until stdin EOF; returns whether shutdown was clean."""
        for line in inp:
            self.handle_line(line)
        return self.shutdown()

    def handle_line(self, raw: bytes) -> None:
        if not raw.strip():
            return
        try:
            msg = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            log.warning("malformed line: %s", exc)
            return self._reply_error(None, RpcError(PARSE_ERROR, "Parse error", str(exc)[:200]))
        if isinstance(msg, dict) and "method" not in msg and ("result" in msg or "error" in msg):
            return self._on_response(msg)
        msg_id = msg.get("id") if isinstance(msg, dict) else None
        reply_id = msg_id if _valid_id(msg_id) else None
        if (
            not isinstance(msg, dict)
            or msg.get("jsonrpc") != "2.0"
            or not isinstance(msg.get("method"), str)
            or ("id" in msg and reply_id is None)
        ):
            return self._reply_error(reply_id, RpcError(INVALID_REQUEST, "Invalid Request"))
        method, params = msg["method"], msg.get("params", {})
        if "id" not in msg:
            return self._on_notification(method, params if isinstance(params, dict) else {})
        if not isinstance(params, dict):
            return self._reply_error(msg_id, RpcError(INVALID_PARAMS, "Invalid params: params must be an object"))
        if method == "tools/call":
            return self._start_tool_call(msg_id, params)
        try:
            if (handler := self._methods.get(method)) is None:
                raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}")
            self.send({"jsonrpc": "2.0", "id": msg_id, "result": handler(params)})
        except RpcError as exc:
            self._reply_error(msg_id, exc)
        except Exception:  # a handler bug must not kill the server (logged with its traceback)
            log.exception("internal error in %s", method)
            self._reply_error(msg_id, RpcError(INTERNAL_ERROR, "Internal error"))

    def _on_notification(self, method: str, params: Json) -> None:
        if method != "notifications/cancelled":
            return  # notifications/initialized and the rest need no action
        with self._lock:
            cancelled = self._calls.get(_key(params.get("requestId")))
        if cancelled is None:
            log.info("cancellation of unknown or finished request %r ignored", params.get("requestId"))
            return
        with self._write_lock:  # once set, nothing more is written for that request
            cancelled.set()

    def _on_response(self, msg: Json) -> None:
        with self._lock:
            waiting = self._pending.pop(_key(msg.get("id")), None)
        if waiting is None:
            log.warning("response with unknown id %r ignored", msg.get("id"))
        else:
            waiting.put(msg)

    def _initialize(self, params: Json) -> Json:
        requested = params.get("protocolVersion")
        self.protocol_version = requested if requested in SUPPORTED_VERSIONS else LATEST_VERSION
        capabilities = params.get("capabilities")
        self.client_capabilities = capabilities if isinstance(capabilities, dict) else {}
        return {
            "protocolVersion": self.protocol_version,
            "capabilities": CAPABILITIES,
            "serverInfo": {"name": "mcpgate-demo", "version": __version__},
            "instructions": "A demo server bundled with mcpgate; read demo://readme.",
        }

    def _set_level(self, params: Json) -> Json:
        if (level := _param(params, "level", str)) not in LOG_LEVELS:
            raise RpcError(INVALID_PARAMS, f"Invalid params: unknown log level {level!r}")
        self.log_level = level
        return {}

    def _read_resource(self, params: Json) -> Json:
        uri = _param(params, "uri", str)
        if uri == "demo://readme":
            mime, text = "text/markdown", README
        elif uri == "demo://time":
            mime, text = "text/plain", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        elif uri.startswith(ECHO_PREFIX):
            mime, text = "text/plain", unquote(uri[len(ECHO_PREFIX) :])
        else:
            raise RpcError(RESOURCE_NOT_FOUND, "Resource not found", {"uri": uri})
        return {"contents": [{"uri": uri, "mimeType": mime, "text": text}]}

    def _get_prompt(self, params: Json) -> Json:
        if (name := _param(params, "name", str)) != "greet":
            raise RpcError(INVALID_PARAMS, f"Invalid params: unknown prompt {name!r}")
        arguments = params.get("arguments")
        who = arguments.get("name") if isinstance(arguments, dict) else None
        if not isinstance(who, str) or not who:
            raise RpcError(INVALID_PARAMS, "Invalid params: missing required argument 'name'")
        return {
            "description": "Greet someone warmly",
            "messages": [{"role": "user", "content": {"type": "text", "text": f"Please greet {who} warmly."}}],
        }

    def _start_tool_call(self, msg_id: Any, params: Json) -> None:
        """tools/call runs on its own thread so a slow tool never blocks other requests."""
        name = params.get("name")
        if (tool := TOOLS.get(name) if isinstance(name, str) else None) is None:
            return self._reply_error(msg_id, RpcError(INVALID_PARAMS, f"Unknown tool: {name}"))
        meta = params.get("_meta")
        ctx = ToolContext(self, meta.get("progressToken") if isinstance(meta, dict) else None)
        with self._lock:
            duplicate = _key(msg_id) in self._calls
            self._calls.setdefault(_key(msg_id), ctx.cancelled)
        if duplicate:
            return self._reply_error(msg_id, RpcError(INVALID_REQUEST, "Request id already in flight"))
        threading.Thread(
            target=self._run_tool,
            args=(msg_id, tool[0], ctx, params.get("arguments")),
            name=f"tool-{name}",
            daemon=True,
        ).start()

    def _run_tool(self, msg_id: Any, run: Callable[[ToolContext, Json], Json], ctx: ToolContext, args: Any) -> None:
        response: Json = {"jsonrpc": "2.0", "id": msg_id}
        try:
            if args is not None and not isinstance(args, dict):
                raise ToolError("arguments must be an object")
            response["result"] = run(ctx, args or {})
        except Cancelled:
            log.info("tools/call %r cancelled; no response sent", msg_id)
            ctx.cancelled.set()  # makes the send below a no-op
        except ToolError as exc:
            response["result"] = text_result(str(exc), is_error=True)
        except Exception:  # a tool bug answers Internal error (logged with its traceback)
            log.exception("tools/call %r failed", msg_id)
            response["error"] = RpcError(INTERNAL_ERROR, "Internal error").error
        with self._lock:  # released before the answer goes out: a client may reuse an id once answered
            self._calls.pop(_key(msg_id), None)
        self.send(response, unless=ctx.cancelled)

    def request_client(self, method: str, params: Json, cancelled: threading.Event) -> Json:
        """Send a server->client request and wait for its result. Raises Cancelled or ToolError."""
        req_id = f"srv-{next(self._ids)}"
        waiting: queue.Queue[Json | None] = queue.Queue(maxsize=1)
        with self._lock:
            self._pending[_key(req_id)] = waiting
        try:
            if not self.send({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params}, unless=cancelled):
                raise Cancelled()
            while True:
                try:
                    response = waiting.get(timeout=0.05)
                    break
                except queue.Empty:
                    if cancelled.is_set():
                        self.send(
                            {
                                "jsonrpc": "2.0",
                                "method": "notifications/cancelled",
                                "params": {"requestId": req_id, "reason": "tool call cancelled"},
                            }
                        )
                        raise Cancelled() from None
        finally:
            with self._lock:
                self._pending.pop(_key(req_id), None)
        if response is None:  # stdin closed
            raise Cancelled()
        if "error" in response:
            error = response["error"] if isinstance(response["error"], dict) else {}
            raise ToolError(f"the client answered {method} with an error: {error.get('message')}")
        if not isinstance(result := response.get("result"), dict):
            raise ToolError(f"the client answered {method} without a result object")
        return result

    def shutdown(self) -> bool:
        """On stdin EOF: fail client requests, let quick calls answer, cancel the rest, stop writing."""
        with self._lock:
            waiting, self._pending = list(self._pending.values()), {}
        for box in waiting:
            box.put(None)
        deadline = time.monotonic() + EOF_GRACE_SECONDS
        while self._calls and time.monotonic() < deadline:
            time.sleep(0.01)
        with self._lock:
            calls = list(self._calls.values())
        for cancelled in calls:
            cancelled.set()
        if not self._write_lock.acquire(timeout=2):
            return False  # a writer is stuck on a full pipe
        self._closed = True
        self._write_lock.release()
        return True


USAGE = """\
usage: mcpgate-demo-server   (or: python -m mcpgate.demo_server)

mcpgate's bundled demo MCP server: it speaks MCP as newline-delimited JSON-RPC on stdin and stdout, so a host or
a gateway starts it and talks to it; typed in a terminal it waits for JSON-RPC on stdin (Ctrl-D ends it).
`gunicorn mcpgate.wsgi` serves it over HTTP when MCPGATE_COMMAND is empty. Its tools: echo, add, slow, bytes,
ask_name (elicitation), sample (sampling), notify_change, log; a resource, a resource template and a prompt.
"""


def main(argv: list[str] | None = None) -> int:
    """Serve the demo on stdin/stdout until stdin EOF; returns the exit code (0; 2 for an unknown argument)."""
    args = sys.argv[1:] if argv is None else argv
    if args:  # no options: --help (or anything) prints the usage instead of waiting for input
        print(USAGE, end="", file=sys.stdout if args[0] in ("-h", "--help") else sys.stderr)
        return 0 if args[0] in ("-h", "--help") else 2
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="mcpgate-demo %(levelname)s: %(message)s")
    if sys.stdin.isatty():
        logging.info("waiting for JSON-RPC messages on stdin, one per line (Ctrl-D ends; --help says more)")
    if not DemoServer(sys.stdout.buffer).serve(sys.stdin.buffer):
        sys.stderr.flush()  # a thread is stuck writing stdout: skip interpreter cleanup, which would wait on it
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
