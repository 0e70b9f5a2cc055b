"""The tasks extension (SEP-2663, `io.modelcontextprotocol/tasks`, 2026-07-28): the pure decisions the gateway makes
about it, and the holds that keep a pooled child while it has tasks.

A server may answer a `tools/call` with a CreateTaskResult (resultType "task", a flat Task with `taskId`) when the
request declared the extension in its clientCapabilities; the client then names that task in `tasks/get`,
`tasks/update` and `tasks/cancel` (params.taskId, mirrored in the Mcp-Name header). `tasks/result` and
`tasks/list` are not part of the extension (-32601). A request for a task method that does not declare the
extension is refused with -32021 (MissingRequiredClientCapability) naming it; a task id the server does not
recognise is -32602.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any, Final

from mcpgate.core import jsonrpc
from mcpgate.core.modern import MISSING_CLIENT_CAPABILITY, Failure

EXTENSION: Final = "io.modelcontextprotocol/tasks"
METHODS: Final = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
TASK_RESULT: Final = "task"  # the resultType of a CreateTaskResult
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})


def declares(capabilities: Mapping[str, Any]) -> bool:
    """Whether a request's clientCapabilities declare the extension (an object under extensions, empty or not)."""
    extensions = capabilities.get("extensions")
    return isinstance(extensions, dict) and isinstance(extensions.get(EXTENSION), dict)


def missing_extension(method: str) -> Failure:
    """The refusal of a request that needs the extension its client did not declare (400 / -32021)."""
    return Failure(
        400,
        MISSING_CLIENT_CAPABILITY,
        f"Missing required client capability: {method} needs the {EXTENSION} extension "
        "(declare it under extensions in the request's clientCapabilities)",
        {"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
    )


def unknown_task(detail: str = "") -> Failure:
    """The refusal of a task id that names no task this principal can reach here (400 / -32602)."""
    return Failure(400, jsonrpc.INVALID_PARAMS, "Invalid params: unknown task" + (f": {detail}" if detail else ""))


def lost_task(why: str) -> Failure:
    """A task the gateway routed once and can no longer reach (its process or instance has gone): -32602 too, as
    for any task the server does not know any more, with the reason."""
    return Failure(400, jsonrpc.INVALID_PARAMS, f"Invalid params: the task is lost: {why}")


def task_id(params: object) -> str | None:
    """params.taskId when it is a non-empty string."""
    value = params.get("taskId") if isinstance(params, dict) else None
    return value if isinstance(value, str) and value else None


def is_created(result: object) -> bool:
    """Whether a result is a CreateTaskResult (resultType "task" with a string taskId)."""
    return isinstance(result, dict) and result.get("resultType") == TASK_RESULT and task_id(result) is not None


def names_task(method: str, result: object) -> bool:
    """Whether a child's result for `method` names a task the gateway rewrites: a CreateTaskResult answering
    tools/call (the one request the extension lets a server answer with a task), or any task method's answer."""
    return method in METHODS or (method == "tools/call" and is_created(result))


def with_task_id(result: dict[str, Any], value: str) -> dict[str, Any]:
    """A copy of a Task-shaped result (CreateTaskResult, a tasks/get DetailedTask) naming the task `value`."""
    return {**result, "taskId": value}


def hold_for(result: Mapping[str, Any], limit: float) -> float:
    """Seconds a task may still be asked for after it was created: its ttlMs (integer milliseconds; null, absent or
    not a positive integer: unlimited), never more than `limit`."""
    ttl = result.get("ttlMs")
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
        return limit
    return min(limit, ttl / 1000)


def is_terminal(result: object) -> bool:
    return isinstance(result, dict) and result.get("status") in TERMINAL


class Holds:
    """The tasks one process holds, each until its deadline, at most `limit` of them: past it the one due first is
    let go (add returns it), so the table is bounded however many tasks a child creates."""

    __slots__ = ("_due", "_heap", "limit")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("a child holds at least one task")
        self.limit = limit
        self._due: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._due)

    def add(self, task: str, deadline: float) -> str | None:
        """Hold `task` until `deadline` (a later deadline for a task already held wins); the task let go to make
        room, if any."""
        if deadline <= self._due.get(task, float("-inf")):
            return None
        dropped = None
        if task not in self._due and len(self._due) >= self.limit:
            dropped = self._pop()
        self._due[task] = deadline
        heapq.heappush(self._heap, (deadline, task))
        self._compact()
        return dropped

    def release(self, task: str) -> None:
        self._due.pop(task, None)

    def live(self, now: float) -> bool:
        """Whether any task is held at `now` (those past their deadline are let go here)."""
        while self._heap:
            deadline, task = self._heap[0]
            current = self._due.get(task) == deadline
            if current and deadline > now:
                break
            heapq.heappop(self._heap)  # past its deadline, or left behind by a later deadline or a release
            if current:
                del self._due[task]
        return bool(self._due)

    def holds(self, task: str, now: float) -> bool:
        due = self._due.get(task)
        return due is not None and due > now

    def _pop(self) -> str | None:
        while self._heap:
            deadline, task = heapq.heappop(self._heap)
            if self._due.get(task) == deadline:
                del self._due[task]
                return task
        return None

    def _compact(self) -> None:
        """Heap entries left by later deadlines and releases: rebuilt when they outnumber the live ones."""
        if len(self._heap) > 2 * len(self._due) + 16:
            self._heap = [(due, task) for task, due in self._due.items()]
            heapq.heapify(self._heap)
