"""Bundled demo MCP server: newline-delimited JSON-RPC over stdio, standard library only.

mcpgate serves it when no command is configured. It exercises what a gateway must relay: concurrent
requests, progress, cancellation, server->client requests (elicitation, sampling), notifications,
resources, a resource template and a prompt. Run: ``python -m mcpgate.demo_server``. Logs go to stderr.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Callable
from urllib.parse import unquote

from mcpgate import __version__

Json = dict[str, Any]
SUPPORTED_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_VERSION = SUPPORTED_VERSIONS[-1]
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
RESOURCE_NOT_FOUND = -32002
MAX_BYTES = 16 * 1024 * 1024  # largest `bytes` tool result
EOF_GRACE_SECONDS = 0.5  # on stdin EOF, quick in-flight tool calls may still answer; the rest are cancelled
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
CAPABILITIES: Json = {"tools": {"listChanged": True}, "resources": {"subscribe": False, "listChanged": True},
                      "prompts": {"listChanged": True}, "logging": {}}
README = """# mcpgate demo server

A small MCP server bundled with mcpgate, served when no command is configured.
Tools: echo, add, slow, bytes, ask_name, sample, notify_change, log.
Resources: demo://readme, demo://time and the template demo://echo/{text}. Prompt: greet.
"""
ECHO_PREFIX = "demo://echo/"
RESOURCES = [{"uri": "demo://readme", "name": "readme", "description": "About this demo", "mimeType": "text/markdown"},
             {"uri": "demo://time", "name": "time", "description": "Current UTC time", "mimeType": "text/plain"}]
TEMPLATES = [{"uriTemplate": ECHO_PREFIX + "{text}", "name": "echo", "description": "Reads back {text}",
              "mimeType": "text/plain"}]
PROMPTS = [{"name": "greet", "description": "Greet someone warmly",
            "arguments": [{"name": "name", "description": "Who to greet", "required": True}]}]
log = logging.getLogger("mcpgate.demo_server")


class RpcError(Exception):
    """Answered as a JSON-RPC error response."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.error: Json = {"code": code, "message": message, **({} if data is None else {"data": data})}


class ToolError(Exception):
    """Answered as a tool result with isError true."""


class Cancelled(Exception):
    """The request was cancelled (or stdin closed): no response is sent."""


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


def _text(text: str, structured: Json | None = None, is_error: bool = False) -> Json:
    result: Json = {"content": [{"type": "text", "text": text}], "isError": is_error}
    return result if structured is None else {**result, "structuredContent": structured}


_KINDS = {str: "a string", int: "an integer", float: "a number"}


def _arg(args: Json, name: str, kind: type, default: Any = None) -> Any:
    """A tool argument: kind is str, int, or float for any finite number. Raises ToolError."""
    value = args.get(name, default)
    if kind is int and isinstance(value, float) and value.is_integer():
        value = int(value)
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    else:
        ok = isinstance(value, kind) and not isinstance(value, bool)
    if not ok:
        raise ToolError(f"argument '{name}' must be {_KINDS[kind]}")
    return value


def _param(params: Json, name: str, kind: type) -> Any:
    if not isinstance(value := params.get(name), kind):
        raise RpcError(INVALID_PARAMS, f"Invalid params: '{name}' must be a {kind.__name__}")
    return value


@dataclass
class ToolContext:
    """What a tool run sees: its progress token, its cancellation event, and a way to talk to the client."""

    server: DemoServer
    progress_token: Any
    cancelled: threading.Event = field(default_factory=threading.Event)

    def notify(self, method: str, params: Json) -> None:
        self.server.send({"jsonrpc": "2.0", "method": method, "params": params}, unless=self.cancelled)

    def progress(self, progress: int, total: int, message: str) -> None:
        if self.progress_token is not None:
            params = {"progressToken": self.progress_token, "progress": progress, "total": total, "message": message}
            self.notify("notifications/progress", params)


def _echo(ctx: ToolContext, args: Json) -> Json:
    return _text(_arg(args, "message", str))


def _add(ctx: ToolContext, args: Json) -> Json:
    total = _arg(args, "a", float) + _arg(args, "b", float)
    if not math.isfinite(total):
        raise ToolError("the sum is not a finite number")
    return _text(str(total), structured={"result": total})


def _slow(ctx: ToolContext, args: Json) -> Json:
    seconds, steps = _arg(args, "seconds", float, 2), _arg(args, "steps", int, 5)
    if not 0 <= seconds <= 60 or not 1 <= steps <= 1000:
        raise ToolError("seconds must be within 0..60 and steps within 1..1000")
    for step in range(1, steps + 1):
        if ctx.cancelled.wait(seconds / steps):
            raise Cancelled()
        ctx.progress(step, steps, f"step {step} of {steps}")
    return _text(f"done after {seconds:g} s")


def _bytes(ctx: ToolContext, args: Json) -> Json:
    if not 0 <= (size := _arg(args, "size", int)) <= MAX_BYTES:
        raise ToolError(f"size must be within 0..{MAX_BYTES}")
    return _text("x" * size)


def _ask_name(ctx: ToolContext, args: Json) -> Json:
    elicitation = ctx.server.client_capabilities.get("elicitation")
    if not isinstance(elicitation, dict) or (elicitation and "form" not in elicitation):
        raise ToolError("ask_name needs a client that declared the 'elicitation' (form) capability at initialize")
    schema = {"type": "object", "properties": {"name": {"type": "string", "title": "Name"}}, "required": ["name"]}
    params: Json = {"message": "What is your name?", "requestedSchema": schema}
    if ctx.server.protocol_version >= "2025-11-25":  # `mode` exists since 2025-11-25
        params = {"mode": "form", **params}
    result = ctx.server.request_client("elicitation/create", params, ctx.cancelled)
    action, content = result.get("action"), result.get("content")
    if action in ("decline", "cancel"):
        return _text("declined" if action == "decline" else "cancelled")
    name = content.get("name") if isinstance(content, dict) else None
    if action != "accept" or not isinstance(name, str):
        raise ToolError(f"unexpected elicitation result: {json.dumps(result)}")
    return _text(f"Hello, {name}")


def _sample(ctx: ToolContext, args: Json) -> Json:
    prompt = _arg(args, "prompt", str)
    if not isinstance(ctx.server.client_capabilities.get("sampling"), dict):
        raise ToolError("sample needs a client that declared the 'sampling' capability at initialize")
    params = {"messages": [{"role": "user", "content": {"type": "text", "text": prompt}}], "maxTokens": 100}
    content = ctx.server.request_client("sampling/createMessage", params, ctx.cancelled).get("content")
    if isinstance(content, list):  # a 2025-11-25 result may carry a list of blocks
        content = next((c for c in content if isinstance(c, dict) and c.get("type") == "text"), None)
    if not isinstance(content, dict) or content.get("type") != "text" or not isinstance(content.get("text"), str):
        raise ToolError("the client's sampling result has no text content")
    return _text(content["text"])


def _notify_change(ctx: ToolContext, args: Json) -> Json:
    ctx.notify("notifications/tools/list_changed", {})
    ctx.notify("notifications/resources/list_changed", {})
    return _text("sent")


def _log(ctx: ToolContext, args: Json) -> Json:
    level, message = _arg(args, "level", str), _arg(args, "message", str)
    if level not in LOG_LEVELS:
        raise ToolError(f"level must be one of: {', '.join(LOG_LEVELS)}")
    if LOG_LEVELS.index(level) >= LOG_LEVELS.index(ctx.server.log_level):
        ctx.notify("notifications/message", {"level": level, "logger": "demo", "data": message})
    return _text("logged")


def _tool(run: Callable[[ToolContext, Json], Json], description: str, properties: Json, *required: str,
          output: Json | None = None) -> tuple[Callable[[ToolContext, Json], Json], Json]:
    name = run.__name__.lstrip("_")
    listing = {"name": name, "description": description,
               "inputSchema": {"type": "object", "properties": properties, "required": list(required)}}
    return run, listing if output is None else {**listing, "outputSchema": output}


_NUMBER, _STRING = {"type": "number"}, {"type": "string"}
TOOLS = {entry[1]["name"]: entry for entry in [
    _tool(_echo, "Return the message unchanged.", {"message": _STRING}, "message"),
    _tool(_add, "Add two numbers.", {"a": _NUMBER, "b": _NUMBER}, "a", "b", output={
        "type": "object", "properties": {"result": _NUMBER}, "required": ["result"]}),
    _tool(_slow, "Sleep `seconds` in `steps`, sending progress; honours cancellation.", {
        "seconds": {"type": "number", "minimum": 0, "maximum": 60, "default": 2},
        "steps": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 5}}),
    _tool(_bytes, "Return a text of exactly `size` characters (for benchmarks).",
          {"size": {"type": "integer", "minimum": 0, "maximum": MAX_BYTES}}, "size"),
    _tool(_ask_name, "Ask the user's name (elicitation) and greet them.", {}),
    _tool(_sample, "Ask the client's model to answer `prompt` (sampling).", {"prompt": _STRING}, "prompt"),
    _tool(_notify_change, "Send the tools and resources list_changed notifications.", {}),
    _tool(_log, "Send a log message notification.",
          {"level": {"type": "string", "enum": list(LOG_LEVELS)}, "message": _STRING}, "level", "message"),
]}


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
            "initialize": self._initialize, "ping": lambda p: {}, "logging/setLevel": self._set_level,
            "tools/list": lambda p: {"tools": [listing for _, listing in TOOLS.values()]},
            "resources/list": lambda p: {"resources": RESOURCES},
            "resources/templates/list": lambda p: {"resourceTemplates": TEMPLATES},
            "resources/read": self._read_resource,
            "prompts/list": lambda p: {"prompts": PROMPTS}, "prompts/get": self._get_prompt}

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
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0" or not isinstance(msg.get("method"), str) \
                or ("id" in msg and reply_id is None):
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
        except Exception:  # noqa: BLE001 - a handler bug must not kill the server
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
        return {"protocolVersion": self.protocol_version, "capabilities": CAPABILITIES,
                "serverInfo": {"name": "mcpgate-demo", "version": __version__},
                "instructions": "A demo server bundled with mcpgate; read demo://readme."}

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
            mime, text = "text/plain", unquote(uri[len(ECHO_PREFIX):])
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
        return {"description": "Greet someone warmly",
                "messages": [{"role": "user", "content": {"type": "text", "text": f"Please greet {who} warmly."}}]}

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
        threading.Thread(target=self._run_tool, args=(msg_id, tool[0], ctx, params.get("arguments")),
                         name=f"tool-{name}", daemon=True).start()

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
            response["result"] = _text(str(exc), is_error=True)
        except Exception:  # noqa: BLE001
            log.exception("tools/call %r failed", msg_id)
            response["error"] = RpcError(INTERNAL_ERROR, "Internal error").error
        self.send(response, unless=ctx.cancelled)
        with self._lock:
            self._calls.pop(_key(msg_id), None)

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
                        self.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                                   "params": {"requestId": req_id, "reason": "tool call cancelled"}})
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


def main(argv: list[str] | None = None) -> int:
    """Serve the demo on stdin/stdout until stdin EOF; returns the exit code (0)."""
    del argv  # no options
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="mcpgate-demo %(levelname)s: %(message)s")
    if not DemoServer(sys.stdout.buffer).serve(sys.stdin.buffer):
        sys.stderr.flush()  # a thread is stuck writing stdout: skip interpreter cleanup, which would wait on it
        os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
