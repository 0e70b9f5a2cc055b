"""The demo server's tools: each a function of (context, arguments) returning a tool result.

Standard library only, like the server (mcpgate/demo_server.py) that lists and runs them.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

Json = dict[str, Any]
MAX_BYTES = 16 * 1024 * 1024  # largest `bytes` tool result
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


class ToolError(Exception):
    """Answered as a tool result with isError true."""


class Cancelled(Exception):
    """The request was cancelled (or stdin closed): no response is sent."""


def text_result(text: str, structured: Json | None = None, is_error: bool = False) -> Json:
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


class ClientLink(Protocol):
    """The connection to the client as tools see it (the demo server is one): what the client declared at
    initialize, and a way to write to it and to ask it something."""

    @property
    def protocol_version(self) -> str: ...

    @property
    def client_capabilities(self) -> Json: ...

    @property
    def log_level(self) -> str: ...

    def send(self, msg: Json, unless: threading.Event | None = None) -> bool: ...

    def request_client(self, method: str, params: Json, cancelled: threading.Event) -> Json: ...


@dataclass
class ToolContext:
    """What a tool run sees: its progress token, its cancellation event, and a way to talk to the client."""

    link: ClientLink
    progress_token: Any
    cancelled: threading.Event = field(default_factory=threading.Event)

    @property
    def capabilities(self) -> Json:
        return self.link.client_capabilities

    @property
    def protocol_version(self) -> str:
        return self.link.protocol_version

    @property
    def log_level(self) -> str:
        return self.link.log_level

    def notify(self, method: str, params: Json) -> None:
        self.link.send({"jsonrpc": "2.0", "method": method, "params": params}, unless=self.cancelled)

    def progress(self, progress: int, total: int, message: str) -> None:
        if self.progress_token is not None:
            params = {"progressToken": self.progress_token, "progress": progress, "total": total, "message": message}
            self.notify("notifications/progress", params)

    def request(self, method: str, params: Json) -> Json:
        """A client request answered within this tool run. Raises Cancelled or ToolError."""
        return self.link.request_client(method, params, self.cancelled)


def _echo(ctx: ToolContext, args: Json) -> Json:
    return text_result(_arg(args, "message", str))


def _add(ctx: ToolContext, args: Json) -> Json:
    total = _arg(args, "a", float) + _arg(args, "b", float)
    if not math.isfinite(total):
        raise ToolError("the sum is not a finite number")
    return text_result(str(total), structured={"result": total})


def _slow(ctx: ToolContext, args: Json) -> Json:
    seconds, steps = _arg(args, "seconds", float, 2), _arg(args, "steps", int, 5)
    if not 0 <= seconds <= 60 or not 1 <= steps <= 1000:
        raise ToolError("seconds must be within 0..60 and steps within 1..1000")
    for step in range(1, steps + 1):
        if ctx.cancelled.wait(seconds / steps):
            raise Cancelled()
        ctx.progress(step, steps, f"step {step} of {steps}")
    return text_result(f"done after {seconds:g} s")


def _bytes(ctx: ToolContext, args: Json) -> Json:
    if not 0 <= (size := _arg(args, "size", int)) <= MAX_BYTES:
        raise ToolError(f"size must be within 0..{MAX_BYTES}")
    return text_result("x" * size)


def _ask_name(ctx: ToolContext, args: Json) -> Json:
    elicitation = ctx.capabilities.get("elicitation")
    if not isinstance(elicitation, dict) or (elicitation and "form" not in elicitation):
        raise ToolError("ask_name needs a client that declared the 'elicitation' (form) capability at initialize")
    schema = {"type": "object", "properties": {"name": {"type": "string", "title": "Name"}}, "required": ["name"]}
    params: Json = {"message": "What is your name?", "requestedSchema": schema}
    if ctx.protocol_version >= "2025-11-25":  # `mode` exists since 2025-11-25
        params = {"mode": "form", **params}
    result = ctx.request("elicitation/create", params)
    action, content = result.get("action"), result.get("content")
    if action in ("decline", "cancel"):
        return text_result("declined" if action == "decline" else "cancelled")
    name = content.get("name") if isinstance(content, dict) else None
    if action != "accept" or not isinstance(name, str):
        raise ToolError(f"unexpected elicitation result: {json.dumps(result)}")
    return text_result(f"Hello, {name}")


def _sample(ctx: ToolContext, args: Json) -> Json:
    prompt = _arg(args, "prompt", str)
    if not isinstance(ctx.capabilities.get("sampling"), dict):
        raise ToolError("sample needs a client that declared the 'sampling' capability at initialize")
    params = {"messages": [{"role": "user", "content": {"type": "text", "text": prompt}}], "maxTokens": 100}
    content = ctx.request("sampling/createMessage", params).get("content")
    if isinstance(content, list):  # a 2025-11-25 result may carry a list of blocks
        content = next((c for c in content if isinstance(c, dict) and c.get("type") == "text"), None)
    if not isinstance(content, dict) or content.get("type") != "text" or not isinstance(content.get("text"), str):
        raise ToolError("the client's sampling result has no text content")
    return text_result(content["text"])


def _notify_change(ctx: ToolContext, args: Json) -> Json:
    ctx.notify("notifications/tools/list_changed", {})
    ctx.notify("notifications/resources/list_changed", {})
    return text_result("sent")


def _log(ctx: ToolContext, args: Json) -> Json:
    level, message = _arg(args, "level", str), _arg(args, "message", str)
    if level not in LOG_LEVELS:
        raise ToolError(f"level must be one of: {', '.join(LOG_LEVELS)}")
    if LOG_LEVELS.index(level) >= LOG_LEVELS.index(ctx.log_level):
        ctx.notify("notifications/message", {"level": level, "logger": "demo", "data": message})
    return text_result("logged")


def _tool(
    run: Callable[[ToolContext, Json], Json],
    description: str,
    properties: Json,
    *required: str,
    output: Json | None = None,
) -> tuple[Callable[[ToolContext, Json], Json], Json]:
    name = run.__name__.lstrip("_")
    listing = {
        "name": name,
        "description": description,
        "inputSchema": {"type": "object", "properties": properties, "required": list(required)},
    }
    return run, listing if output is None else {**listing, "outputSchema": output}


_NUMBER, _STRING = {"type": "number"}, {"type": "string"}
TOOLS = {
    entry[1]["name"]: entry
    for entry in [
        _tool(_echo, "Return the message unchanged.", {"message": _STRING}, "message"),
        _tool(
            _add,
            "Add two numbers.",
            {"a": _NUMBER, "b": _NUMBER},
            "a",
            "b",
            output={"type": "object", "properties": {"result": _NUMBER}, "required": ["result"]},
        ),
        _tool(
            _slow,
            "Sleep `seconds` in `steps`, sending progress; honours cancellation.",
            {
                "seconds": {"type": "number", "minimum": 0, "maximum": 60, "default": 2},
                "steps": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 5},
            },
        ),
        _tool(
            _bytes,
            "Return a text of exactly `size` characters (for benchmarks).",
            {"size": {"type": "integer", "minimum": 0, "maximum": MAX_BYTES}},
            "size",
        ),
        _tool(_ask_name, "Ask the user's name (elicitation) and greet them.", {}),
        _tool(_sample, "Ask the client's model to answer `prompt` (sampling).", {"prompt": _STRING}, "prompt"),
        _tool(_notify_change, "Send the tools and resources list_changed notifications.", {}),
        _tool(
            _log,
            "Send a log message notification.",
            {"level": {"type": "string", "enum": list(LOG_LEVELS)}, "message": _STRING},
            "level",
            "message",
        ),
    ]
}
