"""The pool: children serving 2026-07-28 requests, grouped by principal.

A principal (the static-token or no-auth case is one; each OAuth subject will be its own) has up to
`pool_children` children, started as load needs: a request takes the least loaded child with room
(`pool_child_requests`); a call on a legacy child whose client may be asked for input needs that child
to itself (stdio ties no child request to the call that caused it, so there must be only one candidate),
and other calls that could ask for input stay off such a child. Past the limit a request waits
(`pool_wait`) for room, then 503. All principals together have up to `pool_children_total` children (those
still stopping counted, so it bounds processes): past it, the least recently used idle child of another
principal is stopped to make room, and when none is idle the request waits as above. A crashed child is
replaced on demand, after a backoff; past `pool_restarts` crashes in a minute the principal's requests get 503
naming the last reason. Idle children stop after `pool_idle_ttl`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gevent
import gevent.event

from mcpgate.child.process import ChildProcess
from mcpgate.child.spawn import ChildSpawnError
from mcpgate.config.settings import Settings
from mcpgate.core import jsonrpc
from mcpgate.core import tasks as core_tasks
from mcpgate.core.jsonrpc import Notification
from mcpgate.serve.front.http import Refusal
from mcpgate.serve.modern import tool_notes
from mcpgate.serve.modern.bridge import Bridge
from mcpgate.serve.modern.child_state import ChildStates
from mcpgate.serve.modern.listen import ListenHub
from mcpgate.serve.modern.pool_group import Group
from mcpgate.serve.modern.pooled_child import Call, Era, PooledChild
from mcpgate.serve.modern.tasks import Tasks
from mcpgate.serve.sessions.spec import ChildSpec
from mcpgate.serve.sessions.stream import StreamLimits
from mcpgate.serve.vault.errors import SlotsEmpty

if TYPE_CHECKING:  # views (MCPGATE_CONFIG's) are imported where they are configured, the fleet with REDIS_URL
    from mcpgate.core.views import View
    from mcpgate.serve.cluster.instances import Cluster

log = logging.getLogger("mcpgate.pool")

EVICT_AFTER = 1.0  # seconds a bridged call waits for a full pool before the oldest parked call is evicted
# Era.LEGACY read once: a member read off its Enum class costs a Python-level attribute call each time in Python
# 3.11 (EnumType's __getattr__ makes the class's attribute lookup the slow hook), about 1,000 instructions
_LEGACY = Era.LEGACY


class Pool:
    def __init__(
        self,
        settings: Settings,
        spec: ChildSpec,
        limits: StreamLimits,
        clock: Callable[[], float],
        cluster: Cluster | None = None,  # the fleet's instances: its states and task ids are the fleet's
    ) -> None:
        self.settings, self.spec, self.limits, self.clock = settings, spec, limits, clock
        self._notes_ttl = max(1.0, settings.cache_ttl_ms / 1000)  # how long the tools' notes are kept (tool_notes)
        self.cluster = cluster
        self.groups: dict[str, Group] = {}
        self.bridge = Bridge(cluster, lambda principal: self.group(principal).wake(), settings.input_ttl, clock)
        self.states = ChildStates(spec.label_prefix, settings.input_ttl, settings.max_body_bytes, cluster)
        self.tasks = Tasks(spec.label_prefix, settings.task_hold, settings.pool_child_tasks, clock, cluster)
        self._reaper: gevent.Greenlet | None = None
        self._numbers = 0
        self._stopping: set[PooledChild] = set()  # stopped on purpose, not yet exited: still processes
        # requests waiting for room under pool_children_total (one list, cleared in place: every child reads it)
        self._waiters: list[gevent.event.Event] = []
        self.closing = False
        # a group's pool (serve/hub/views.py): its keys are a principal and a view, read back at each spawn
        self.resolve: Callable[[str], tuple[str, View | None]] | None = None

    def group(self, principal: str) -> Group:
        group = self.groups.get(principal)
        if group is None:
            group = self.groups[principal] = Group(principal)
        return group

    def live_children(self) -> int:
        return sum(1 for group in self.groups.values() for child in group.children if child.child.alive)

    def total(self) -> int:
        """Children counted against pool_children_total: every principal's, and those still stopping."""
        return sum(len(group.children) for group in self.groups.values()) + len(self._stopping)

    # -- taking a child -----------------------------------------------------------------------------
    def acquire(self, principal: str, bridged: bool = False, candidate: bool = False) -> PooledChild:
        """A ready child of the principal with room for one more call (Refusal 502/503 when there is none;
        ChildSpawnError when its command cannot be started: serve/errors.py's table answers it).

        `bridged`: the call could make a legacy child ask for input; `candidate`: its client may be asked."""
        group = self.groups.get(principal) or self.group(principal)
        if not group.crashes:  # the usual case, a child with room: no clock read, no list made
            child = self._pick(group, bridged, candidate)
            if child is not None:
                return child
        deadline = self.clock() + self.settings.pool_wait
        while True:
            group.refuse_when_crashing(self.clock(), self.settings.pool_restarts)
            child = self._pick(group, bridged, candidate)
            if child is not None:
                return child
            starting = [c for c in group.children if not c.ready.is_set()]
            grows = len(group.children) < self.settings.pool_children  # within the principal's own limit
            if starting or (grows and self._room(group)):
                # a starting child is waited for until its probe ends (bounded by the probe's own timeouts),
                # then picked or refused with the reason it cannot serve
                child = starting[0] if starting else self._spawn(group)
                s = self.settings
                child.ready.wait(s.start_timeout + s.probe_timeout + s.pool_wait + 1.0)
                deadline = max(deadline, self.clock() + 0.1)
                continue
            event = gevent.event.Event()
            group.waiters.append(event)
            if grows:  # the pool as a whole is full: a child's exit or a freed slot anywhere wakes it
                self._waiters.append(event)
            if not event.wait(max(0.0, min(EVICT_AFTER, deadline - self.clock()))) and bridged:
                # every child is taken; one held only by a call parked for its client's input gives way
                self.bridge.evict_oldest(principal)
            if self.clock() >= deadline:
                raise self._busy(group, whole_pool=grows)

    def _busy(self, group: Group, *, whole_pool: bool) -> Refusal:
        if whole_pool:
            what = f"all {self.total()} pooled MCP server processes (MCPGATE_POOL_CHILDREN_TOTAL) are busy"
        else:
            what = f"all {len(group.children)} pooled MCP server processes are busy (MCPGATE_POOL_CHILDREN, "
            what += "MCPGATE_POOL_CHILD_REQUESTS)"
        return Refusal(503, jsonrpc.INTERNAL_ERROR, f"Service Unavailable: {what}", headers={"Retry-After": "5"})

    def _room(self, group: Group) -> bool:
        """Whether a child may start now under pool_children_total; when not, and no child is already on its way
        out, the least recently used idle child of another principal is stopped (its exit wakes the waiters)."""
        if self.total() < self.settings.pool_children_total:
            return True
        if self._stopping:  # room is coming: one eviction at a time, never more than the waiters need
            return False
        idle = [
            (child.last_used, other, child)
            for other in self.groups.values()
            if other is not group
            for child in other.children
            if child.ready.is_set() and not (child.load or self._listened(other, child) or self.tasks.holding(child))
        ]
        if idle:
            _, other, child = min(idle, key=lambda entry: entry[0])
            log.info("pooled child %s stopped to make room (MCPGATE_POOL_CHILDREN_TOTAL)", child.label)
            self._stop(other, child, "stopped to make room for another principal (MCPGATE_POOL_CHILDREN_TOTAL)")
        return False

    @staticmethod
    def _listened(group: Group, child: PooledChild) -> bool:
        return group.hub_child is child and group.hub is not None and len(group.hub) > 0

    def _stop(self, group: Group, child: PooledChild, reason: str) -> None:
        """Stop a child on purpose: out of its group now, counted (as stopping) until it has exited."""
        if child in group.children:
            group.children.remove(child)
        self._stopping.add(child)
        child.close(reason)

    def _wake(self, group: Group) -> None:
        """A slot of `group` is free, or a child has gone: its waiters, and every request waiting for room."""
        if group.waiters:  # every call's release wakes: usually no one waits
            group.wake()
        if self._waiters:
            waiters = self._waiters.copy()
            self._waiters.clear()
            for event in waiters:
                event.set()

    def _pick(self, group: Group, bridged: bool, candidate: bool) -> PooledChild | None:
        """The least loaded child that can take the call (the first of equals), or None. The children are read in
        place, no copy: when one is stopped here the list is read again from its start (the ones before it are
        read the same again), which picks what reading on would have picked."""
        best: PooledChild | None = None
        best_load = limit = self.settings.pool_child_requests
        for child in group.children:
            if child.ended or child.stopping or not child.ready.is_set() or not child.child.alive:
                continue
            if child.redo:  # its era was in doubt: it goes, not as a crash, and a new one is asked afresh
                self._stop(group, child, "restarted to ask its era again")
                return self._pick(group, bridged, candidate)
            if child.problem:  # it cannot serve: it goes, counted as a crash (the next request tries anew)
                group.crashes.append((self.clock(), child.problem))
                self._stop(group, child, child.problem)
                raise Refusal(502, jsonrpc.INTERNAL_ERROR, f"Bad Gateway: {child.problem}")
            if best_load == 0:  # an idle child is picked already: none after it is less loaded (only the checks above)
                continue
            load = len(child.calls)
            if load >= limit:
                continue
            # on a legacy child a bridged call may be asked for input: one candidate at a time, alone
            busy = child.candidate is not None or (candidate and child.bridged_calls > 0)
            if bridged and busy and child.era is _LEGACY:
                continue
            if best is None or load < best_load:
                best, best_load = child, load
        return best

    def _spawn(self, group: Group) -> PooledChild:
        self._numbers += 1
        owner, view = self.resolve(group.principal) if self.resolve is not None else (group.principal, None)
        child = PooledChild(
            self.spec,
            label=f"{self.spec.label_prefix}pool-{self._numbers}",
            probe_timeout=self.settings.probe_timeout,
            start_timeout=self.settings.start_timeout,
            init_timeout=self.settings.pool_wait,
            ttl_ms=self.settings.cache_ttl_ms,
            on_exit=lambda c, reason: self._on_exit(group, c, reason),
            on_input_request=self.bridge.on_input_request,
            on_input_withdrawn=self.bridge.on_input_withdrawn,
            on_listen_message=lambda c, message: self._on_listen_message(group, c, message),
            on_input_required=self._wrap_state,
            clock=self.clock,
            principal=owner,  # its group's alone (a child with user secrets holds this principal's)
            view=view,  # and a hub group's, that principal's view (serve/hub/views.py)
        )
        child.on_release = functools.partial(self._wake, group)
        child.waiters = (group.waiters, self._waiters)  # whether on_release has anyone to wake
        group.children.append(child)  # counted (and waited for by others) from now on
        backoff = group.backoff(self.clock())
        if backoff:
            gevent.sleep(backoff)
        try:
            child.start()
        except (ChildSpawnError, SlotsEmpty):  # the endpoint's table answers it (serve/errors.py), e.g. 502
            group.children.remove(child)  # (SlotsEmpty here: a group's member needs a user's slot: serve/vault)
            raise
        where = child.child.pid or "remote"
        log.info("pooled child %s started for principal %s (pid %s)", child.label, group.principal, where)
        child.ready.rawlink(lambda _event: self._on_ready(group, child))
        self._ensure_reaper()
        return child

    def prewarm(self, principal: str) -> None:
        """Start a spare legacy child unless MCPGATE_POOL_SPARES + 1 children are free (or starting), within the
        pool's limit: a call that may ask its client for input holds its child (parked, until the retry), and a
        cold start is a process and an initialize away."""
        group = self.group(principal)
        coming, s = group.spares_coming, self.settings  # spares on their way, not yet among the children: counted
        full = len(group.children) + coming >= s.pool_children or self.total() + coming >= s.pool_children_total
        if self.closing or group.era is not Era.LEGACY or full:  # a spare never makes others' children stop
            return
        idle = [c for c in group.children if not c.ready.is_set() or not (c.candidate or c.bridged_calls or c.ended)]
        if len(idle) + coming <= self.settings.pool_spares:
            group.spares_coming += 1
            gevent.spawn(self._spawn_spare, group)

    def _spawn_spare(self, group: Group) -> None:
        try:
            self._spawn(group)
        except Refusal as refusal:
            log.warning("could not start a spare pooled child: %s", refusal.message)
        except ChildSpawnError as exc:
            log.error("could not start a spare pooled child: cannot start the MCP server: %s", exc)
        except SlotsEmpty:  # a user's slot deleted meanwhile: the next call is answered with the page (serve/vault)
            log.info("no spare pooled child: a credential slot of its principal is empty")
        finally:
            group.spares_coming -= 1

    def _on_ready(self, group: Group, child: PooledChild) -> None:
        if child.era is not None:
            group.era = child.era
        if child.era is Era.LEGACY:  # spares beside it: see prewarm
            self.prewarm(group.principal)
        group.wake()

    def _on_exit(self, group: Group, child: PooledChild, reason: str) -> None:
        self._stopping.discard(child)
        if child in group.children:
            group.children.remove(child)
        if not child.stopping and not self.closing:
            group.crashes.append((self.clock(), reason))
            log.warning("pooled child %s ended: %s", child.label, reason)
        self.bridge.forget_child(child)
        self.tasks.forget(child, closing=self.closing)
        if group.hub_child is child and group.hub is not None:
            group.hub.end_all(f"MCP server ended: {reason}", graceful=False)
            group.hub, group.hub_child = None, None
        self._wake(group)

    # -- modern children's requestState: sealed for the principal, the retry back to the child that issued it ----
    def _wrap_state(self, child: PooledChild, call: Call, result: dict[str, Any]) -> dict[str, Any] | None:
        """The child's InputRequiredResult as the client gets it: its requestState in the gateway's envelope
        (serve/modern/child_state.py), or a task's id in the tasks' (serve/modern/tasks.py); None when it cannot be
        carried."""
        if core_tasks.names_task(call.method, result):
            return self.tasks.on_result(child, call, result)
        if "requestState" not in result:
            return result
        wrapped = self.states.wrap(call.principal, child.label, call.method, call.name, result["requestState"])
        return None if wrapped is None else {**result, "requestState": wrapped}

    def holder(self, principal: str, label: str) -> PooledChild | None:
        """The principal's child named `label`, while it still serves (a retry goes back to the child that asked)."""
        for child in self.group(principal).children:
            if child.label == label and not (child.ended or child.stopping or child.problem):
                return child
        return None

    # -- the tools' x-mcp-header annotations (Mcp-Param-* headers are checked against them) -------------------
    def tool_notes(self, principal: str) -> tool_notes.ToolNotes:
        """What the principal's tools declare: their Mcp-Param-* headers, {tool: {argument: header name}}, and the
        task-only tools of a legacy child (serve/modern/tool_notes.py), read from a child's tools/list again when
        its list changed (the notes were dropped) or the cache hint's time has passed (as long as a client may cache
        tools/list)."""
        group = self.groups.get(principal) or self.group(principal)
        notes, now = group.tools, self.clock()
        if notes is None or now - group.tools_at > self._notes_ttl:
            notes = group.tools = tool_notes.read(self.acquire(principal), self.settings.pool_wait)
            group.tools_at = now
        return notes

    # -- listen -------------------------------------------------------------------------------------------
    def hub(self, principal: str) -> ListenHub:
        group = self.group(principal)
        if group.hub is None or group.hub_child is None or group.hub_child.ended:
            child = self.acquire(principal)
            group.hub = ListenHub(child, self.limits, self.clock)
            group.hub_child = child
        return group.hub

    def _on_listen_message(self, group: Group, child: PooledChild, message: Notification) -> bool:
        if message.method == "notifications/tools/list_changed":
            group.tools = None
        # every child of the principal runs the same server: a legacy child's unsolicited list_changed or
        # resources/updated is news for the listeners whichever child sent it (the hub keeps a modern child's
        # listen frames to the one child it listens on)
        if group.hub is None or (child.modern and group.hub_child is not child):
            return False
        return group.hub.on_child_message(message)

    # -- idle children and shutdown -------------------------------------------------------------------
    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.dead:
            self._reaper = gevent.spawn(self._reap_forever)

    def _reap_forever(self) -> None:
        interval = min(30.0, max(0.05, self.settings.pool_idle_ttl / 4))
        while any(group.children for group in self.groups.values()):
            gevent.sleep(interval)
            self.reap_idle()

    def reap_idle(self) -> None:
        now = self.clock()
        for group in self.groups.values():
            for child in list(group.children):
                if not child.ready.is_set() or child.load or self._listened(group, child) or self.tasks.holding(child):
                    continue  # a child still starting, or holding a task, is not idle
                if now - child.last_used < self.settings.pool_idle_ttl:
                    continue
                log.info("pooled child %s idle for longer than MCPGATE_POOL_IDLE_TTL", child.label)
                self._stop(group, child, "idle for longer than MCPGATE_POOL_IDLE_TTL")

    def shutdown(self) -> list[ChildProcess]:
        """End every listen stream with its final result and start stopping every child (the caller waits)."""
        self.closing = True
        children: list[PooledChild] = []
        for group in self.groups.values():
            if group.hub is not None:
                group.hub.end_all("the gateway is shutting down", graceful=True)
            children.extend(group.children)
            self._wake(group)
        for child in children:
            child.close("the gateway is shutting down")
        return [child.child for child in [*children, *self._stopping]]
