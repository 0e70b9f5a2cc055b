"""The tasks extension (SEP-2663) through the pool: a task lives in the one pooled child that created it, so every
request naming it goes back to that child, on the instance that holds it.

A child's CreateTaskResult reaches the client with its taskId wrapped, as a modern child's requestState is
(child_state.py): a core/request_state token sealed with its own key (a fleet's instances derive it from the
cluster key), bound to the principal and to this server, naming the instance and the pooled child (its label,
unique per pool and never reused: a slot's next child is another label) and carrying the child's own task id byte
for byte. Its ttlMs is lowered to MCPGATE_TASK_HOLD when longer or unlimited: the token expires then.

tasks/get, tasks/update and tasks/cancel (Mcp-Name mirrors params.taskId, checked by the ladder) are served here:
  - a request that does not declare the extension: 400 / -32021, data.requiredCapabilities naming it (whatever
    the child's era: a legacy child has no tasks, and the answer is the extension's);
  - the token opened: an altered, expired or bare one, or one sealed for another principal or server, is an
    unknown task (400 / -32602), and reaches no child;
  - another live instance holds it: Forward (the Endpoint sends the request there); an instance gone from the
    directory, or a child that has ended: the task is lost (400 / -32602 saying so), at once;
  - else the request goes to that child under the child's own task id, whatever the load of the principal's other
    children, and the child's answer comes back with the client's token as its taskId.
tasks/result and tasks/list are not part of the extension: -32601 (the ladder's method check). A legacy child has
no tasks of the extension (the gateway does not bridge 2025-11-25 tasks): its tool marked taskSupport "required"
is refused with -32021 for a client that did not declare the extension (refuse_untasked).

A child holding tasks is not stopped as idle (nor to make room for another principal) until each task's hold has
passed: its ttlMs from its creation, at most MCPGATE_TASK_HOLD; at most MCPGATE_POOL_CHILD_TASKS tasks per child are
held (past it the one due first is let go: its child may then be reaped, and the task is lost).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcpgate.core import jsonrpc
from mcpgate.core import tasks as core_tasks
from mcpgate.core.capabilities import client_capabilities
from mcpgate.core.jsonrpc import Request
from mcpgate.core.modern import Failure
from mcpgate.core.request_state import Opened, StateSealer, carried, carry
from mcpgate.serve.cluster.forwarding import Forward
from mcpgate.serve.cluster.issuer import Issuer
from mcpgate.serve.front.http import Refusal
from mcpgate.serve.modern.pooled_child import Call, PooledChild
from mcpgate.serve.modern.tool_notes import ToolNotes

if TYPE_CHECKING:  # the fleet's modules only in a fleet's worker (REDIS_URL)
    from mcpgate.serve.cluster.instances import Cluster

log = logging.getLogger("mcpgate.pool")

# A wrapped task id travels in a header (Mcp-Name): a child's own id longer than about 1.4 KB is not carried.
MAX_TOKEN_CHARS = 2048


@dataclass(frozen=True, slots=True)
class Routed:
    """Where a client's task id leads: the child holding the task (its label) and the child's own task id."""

    holder: str
    task: str


class Tasks:
    """One pool's task ids (sealed, opened) and the holds that keep a child while it has tasks."""

    def __init__(
        self, server: str, hold: float, per_child: int, clock: Callable[[], float], fleet: Cluster | None
    ) -> None:
        self.server, self.hold, self.per_child, self.clock = server, hold, per_child, clock
        self.issuer = Issuer.of(fleet, b"mcpgate task id")  # its own key: no requestState opens as a task id
        self.sealer = StateSealer(self.issuer.key, ttl=hold, max_chars=MAX_TOKEN_CHARS)
        self.holds: dict[str, core_tasks.Holds] = {}  # by child label; a child's entry goes with it (forget)

    # -- from the child --------------------------------------------------------------------------------------
    def on_result(self, child: PooledChild, call: Call, result: dict[str, Any]) -> dict[str, Any] | None:
        """The child's result as the client gets it (None: a task id that cannot be carried)."""
        result = self._capped(result)
        if call.task_id is not None:  # tasks/get, tasks/update, tasks/cancel: the client's token, as it came
            return core_tasks.with_task_id(result, call.task_id) if "taskId" in result else result
        own = core_tasks.task_id(result)
        assert own is not None  # concerns() checked it
        try:
            token = self.sealer.seal(
                call.principal, carry(child.label, own), 0, binding=self._binding(), instance=self.issuer.instance
            )
        except ValueError as exc:
            log.warning("pooled child %s: its task id cannot be carried: %s", child.label, exc)
            return None
        holds = self.holds.get(child.label)
        if holds is None:
            holds = self.holds[child.label] = core_tasks.Holds(self.per_child)
        dropped = holds.add(own, self.clock() + core_tasks.hold_for(result, self.hold))
        if dropped is not None:
            log.warning(
                "pooled child %s holds %d tasks (MCPGATE_POOL_CHILD_TASKS): the one due first is no longer held",
                child.label,
                self.per_child,
            )
        return core_tasks.with_task_id(result, token)

    def _capped(self, result: dict[str, Any]) -> dict[str, Any]:
        """ttlMs no longer than the hold (the token's life): a longer or unlimited one is lowered to it."""
        if "ttlMs" not in result:
            return result
        limit = int(self.hold * 1000)
        ttl = result.get("ttlMs")
        if isinstance(ttl, int) and not isinstance(ttl, bool) and 0 < ttl <= limit:
            return result
        return {**result, "ttlMs": limit}

    # -- the pool's questions -----------------------------------------------------------------------------
    def holding(self, child: PooledChild) -> bool:
        """Whether the child still holds a task (it is then neither idle nor free to stop)."""
        holds = self.holds.get(child.label)
        return holds is not None and holds.live(self.clock())

    def forget(self, child: PooledChild, *, closing: bool = False) -> None:
        """The child has ended: its tasks are lost (a request naming one is told so). Said as a warning unless the
        gateway is shutting down (`closing`)."""
        holds = self.holds.pop(child.label, None)
        if holds is not None and holds.live(self.clock()):
            say = log.info if closing else log.warning
            say("pooled child %s ended holding %d task(s): they are lost", child.label, len(holds))

    # -- from the client -----------------------------------------------------------------------------------
    def route(self, principal: str, request: Request) -> Routed:
        """The child and its task id for a task method's params.taskId: a Refusal for a token this principal was not
        given for this server (unknown) or whose instance has gone (lost); Forward when another instance holds it."""
        token = core_tasks.task_id(request.params)
        opened = self.sealer.open(token, principal, binding=self._binding()) if token is not None else None
        parts = carried(opened.continuation) if isinstance(opened, Opened) else None
        if not isinstance(opened, Opened) or parts is None:
            expired = opened is not None and not isinstance(opened, Opened) and opened.reason == "expired"
            raise refusal(
                core_tasks.lost_task("held longer than MCPGATE_TASK_HOLD") if expired else _unknown(), request
            )
        home = self.issuer.home(opened.instance)
        if home == "forward":
            raise Forward(opened.instance)
        if home == "restart":
            raise refusal(
                core_tasks.lost_task(f"the gateway instance holding it ({opened.instance}) has gone"), request
            )
        return Routed(*parts)

    def _binding(self) -> str:
        return jsonrpc.encode([self.server, "task"]).decode("utf-8")


def _unknown() -> Failure:
    return core_tasks.unknown_task("not a task id this gateway gave this principal, or it has expired")


def refusal(failure: Failure, request: Request) -> Refusal:
    return Refusal(failure.status, failure.code, failure.message, request.id, failure.data)


def start(
    tasks: Tasks,
    holder: Callable[[str, str], PooledChild | None],
    principal: str,
    request: Request,
    new_call: Callable[..., Call],
    stream: Any,
) -> Call:
    """A task method on its way to the child holding the task (see the module docstring for the refusals);
    `holder(principal, label)`: the principal's live child of that label (the pool's)."""
    capabilities = client_capabilities(request)
    if not core_tasks.declares(capabilities):
        raise refusal(core_tasks.missing_extension(request.method), request)
    routed = tasks.route(principal, request)
    child = holder(principal, routed.holder)
    if child is None:
        raise refusal(core_tasks.lost_task("the MCP server process holding it has ended"), request)
    params = request.params if isinstance(request.params, dict) else {}
    token = params["taskId"]
    params = {**params, "taskId": routed.task}
    message = dataclasses.replace(request, params=params, obj={**request.obj, "params": params}, raw=None)
    call = new_call(message, principal, capabilities, stream)
    call.task_id = token
    if not child.start_call(message, call):
        raise Refusal(502, jsonrpc.INTERNAL_ERROR, "Bad Gateway: the MCP server is not taking requests", request.id)
    return call


def refuse_untasked(notes: ToolNotes | None, request: Request) -> None:
    """A tools/call of a tool a legacy child runs only as a 2025-11-25 task (execution.taskSupport "required"),
    from a client that did not declare the extension: 400 / -32021, as the extension answers a request that cannot
    be served without a task. (The gateway does not bridge 2025-11-25 tasks: a client that declared the extension
    gets the child's own answer, -32601 without the 2025-11-25 `task` parameter.)"""
    params = request.params if isinstance(request.params, dict) else {}
    name = params.get("name")
    if notes is None or not isinstance(name, str) or name not in notes.task_required:
        return
    if not core_tasks.declares(client_capabilities(request)):
        raise refusal(core_tasks.missing_extension(f"tools/call of {name!r}"), request)
