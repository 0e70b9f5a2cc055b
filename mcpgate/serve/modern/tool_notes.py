"""What the pool reads from a child's tools/list once in a while, per principal: the Mcp-Param-* headers each tool
declares (its x-mcp-header annotations: checked against the arguments of a tools/call), and the tools a legacy
child marks `execution.taskSupport: "required"` (2025-11-25 tasks, which the gateway does not bridge: a client
that did not declare the tasks extension is answered -32021 for them, as the extension has it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from mcpgate.core import modern

TOOL_PAGES = 20  # tools/list pages read for the annotations


@dataclass(frozen=True, slots=True)
class ToolNotes:
    headers: dict[str, dict[str, str]] = field(default_factory=dict)  # tool -> {argument: Mcp-Param header}
    task_required: frozenset[str] = frozenset()  # tools a legacy child runs only as 2025-11-25 tasks


class Lister(Protocol):
    """The child whose tools/list is read (modern/pooled_child.py)."""

    @property
    def modern(self) -> bool: ...

    def request_meta(self) -> dict[str, Any]: ...

    def ask(self, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any] | None: ...


def read(child: Lister, timeout: float) -> ToolNotes:
    """The notes from the child's tools/list (TOOL_PAGES pages at most; what could not be read is left out)."""
    found: dict[str, dict[str, str]] = {}
    required: set[str] = set()
    cursor: object = None
    for _page in range(TOOL_PAGES):
        params: dict[str, Any] = {"_meta": child.request_meta()} if child.modern else {}
        if isinstance(cursor, str):
            params["cursor"] = cursor
        answer = child.ask("tools/list", params, timeout)
        result = answer.get("result") if answer is not None else None
        if not isinstance(result, dict):
            break
        for tool in result.get("tools") or []:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                headers = modern.tool_header_params(tool.get("inputSchema")) or {}
                # a header name with "_" never arrives (the worker drops such headers, as proxies do): unchecked
                checked = {arg: header for arg, header in headers.items() if "_" not in header}
                if checked:
                    found[tool["name"]] = checked
                execution = tool.get("execution")
                if not child.modern and isinstance(execution, dict) and execution.get("taskSupport") == "required":
                    required.add(tool["name"])
        cursor = result.get("nextCursor")
        if not isinstance(cursor, str):
            break
    return ToolNotes(found, frozenset(required))
