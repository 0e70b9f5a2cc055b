"""Which tools a published server shows its clients: MCPGATE_TOOLS_ALLOW and MCPGATE_TOOLS_DENY.

A hidden tool is one not on a non-empty allow list, or on the deny list. It vanishes from the result of
every tools/list request, and a tools/call naming it is answered by the gateway exactly as a server
answers a tool it does not have (-32602 "Unknown tool: <name>"), never forwarded: nothing tells the
client it exists. With both lists empty there is no filter at all (`ToolFilter.of` is None), so the
paths that carry messages do nothing new.

Only tools/list results are ever decoded here. Even those are not, when their bytes surely name no
hidden tool (`may_hide`: a deny list only, and none of its names in the bytes), so a large listing
passes as it came.

Pinned tool definitions (MCPGATE_TOOL_PINS, core/pins.py) act here too, through the server's `PinGuard`
given to `of`: every tools/list result is then decoded and shown to it (it pins what it sees first and
records changes), the names it returns are left out of that result, and a call of a tool it `blocks` is
answered as a hidden tool's. Without a guard (pins off) nothing of this runs.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Protocol

from mcpgate.core.jsonrpc import INVALID_PARAMS, Id, Request, Response, error_response

LIST = "tools/list"
CALL = "tools/call"
# Names made only of these characters have one JSON spelling apart from \u escapes (no short escape
# stands for any of them), so a byte search finds every occurrence of such a name.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


class PinGuard(Protocol):
    """A server's pinned tool definitions in force (serve/pins/guard.py's ServerPins)."""

    def listed(self, tools: list[Any], complete: bool) -> frozenset[str]:
        """Review a tools/list result's tools (`complete`: its last page): the names to leave out of it."""
        ...

    def blocks(self, name: str) -> bool:
        """Whether a call of this tool is refused (its definition awaits approval)."""
        ...

    def __hash__(self) -> int: ...  # the filters are cached by their lists and guard


@dataclass(frozen=True, slots=True)
class ToolFilter:
    allow: frozenset[str]  # empty: every tool not denied
    deny: frozenset[str]
    _needles: tuple[bytes, ...] | None  # the deny list's names as JSON strings; None: no byte test is sure
    pins: PinGuard | None = None  # the server's pinned tool definitions, when in force

    @classmethod
    def of(cls, allow: tuple[str, ...], deny: tuple[str, ...], *, pins: PinGuard | None = None) -> ToolFilter | None:
        """The filter for these lists and pins (one per distinct triple), or None when the lists are empty and
        there are no pins."""
        return _build(tuple(allow), tuple(deny), pins)

    def visible(self, name: str) -> bool:
        shown = (not self.allow or name in self.allow) and name not in self.deny
        return shown and (self.pins is None or not self.pins.blocks(name))

    def hidden_call(self, message: Request) -> str | None:
        """The tool's name when `message` is a tools/call of a hidden tool, else None (a call that names no
        tool goes on to the server, which answers it)."""
        if message.method != CALL or not isinstance(message.params, dict):
            return None
        name = message.params.get("name")
        return name if isinstance(name, str) and not self.visible(name) else None

    @staticmethod
    def refusal(request_id: Id, name: str) -> dict[str, Any]:
        """The answer to a call of a hidden tool: what a server says of a tool it does not have."""
        return error_response(request_id, INVALID_PARAMS, f"Unknown tool: {name}")

    def may_hide(self, raw: bytes | None) -> bool:
        """False when these bytes of a tools/list response surely name no hidden tool (they pass as they are,
        undecoded); True when they must be decoded to tell."""
        if self._needles is None or raw is None or b"\\u" in raw:  # pins: _needles is None
            return True
        return any(needle in raw for needle in self._needles)

    def result(self, result: object) -> dict[str, Any] | None:
        """A tools/list result without its hidden tools (the same object when it hides none), or None when it
        is not a tools/list result (not an object, or its `tools` not a list). Other members, `nextCursor`
        among them, are kept."""
        if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
            return None
        tools: list[Any] = result["tools"]
        if self.pins is not None:
            pinned = self.pins.listed(tools, complete=result.get("nextCursor") is None)
            shown = [tool for tool in tools if self._shows(tool) and not _named(tool, pinned)]
        else:
            shown = [tool for tool in tools if self._shows(tool)]
        return result if len(shown) == len(tools) else {**result, "tools": shown}

    def response(self, message: Response) -> Response | None:
        """A child's response to a tools/list request without the hidden tools: the message itself when it
        hides none (or is an error), a new one otherwise; None when its result cannot be read as a listing
        (the caller passes it unchanged, and logs it)."""
        if message.is_error or not self.may_hide(message.raw):
            return message
        try:
            obj = message.full()
        except (ValueError, RecursionError):
            return None
        result = self.result(obj.get("result"))
        if result is None:
            return None
        if result is obj["result"]:
            return message
        return Response(message.id, {**obj, "result": result})

    def _shows(self, tool: object) -> bool:
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str):
            return not self.allow  # no name: no allowed tool (and none a deny list names)
        return (not self.allow or name in self.allow) and name not in self.deny


def pinned(tools: ToolFilter | None, pins: PinGuard | None) -> ToolFilter | None:
    """`tools` (a view's filter, say) with the server's pins too (`tools` itself without pins)."""
    if pins is None or (tools is not None and tools.pins is pins):
        return tools
    if tools is None:
        return _build((), (), pins)
    return _build(tuple(sorted(tools.allow)), tuple(sorted(tools.deny)), pins)


def _named(tool: object, names: frozenset[str]) -> bool:
    return bool(names) and isinstance(tool, dict) and tool.get("name") in names


@functools.lru_cache(maxsize=64)
def _build(allow: tuple[str, ...], deny: tuple[str, ...], pins: PinGuard | None) -> ToolFilter | None:
    allowed = frozenset(name for name in allow if name)
    denied = frozenset(name for name in deny if name)
    if not allowed and not denied and pins is None:
        return None
    plain = not allowed and pins is None and all(_PLAIN_NAME.fullmatch(name) for name in denied)
    needles = tuple(b'"' + name.encode() + b'"' for name in sorted(denied)) if plain else None
    return ToolFilter(allowed, denied, needles, pins)
