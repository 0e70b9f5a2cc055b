"""HubChild: an in-process child with ChildProcess's surface that is one MCP server made of several.

It is what a group's spec makes (serve/hub/spec.py), so a 2025 session, the 2026-07-28 pool and its bridge, and
HTTP+SSE talk to it as to any child. `start()` starts one member child per member server through that server's
own `spec.process(...)` (a stdio ChildProcess, or whatever that spec makes), held as a MemberChild
(serve/hub/member.py: spoken to through the legacy/modern bridge when its server speaks only 2026-07-28, so
the hub speaks 2025 to every member); a member that cannot start is logged and left out (its names absent; a
call naming it is told why) until it is tried again. Every message is handed to the pure multiplexer
(mcpgate/core/hub.py) and what it decides is done here: bytes to a member, a message to `on_message`, a member
closed, a timer, a departed member's retry timer (one per member) and its new child (core/hub_retry.py: a
remote upstream down when the session started, a stdio server that could not start or ended, come back).
Each member child's callbacks carry its generation: what a replaced child still says is dropped. A member back
in one hub is tried at once by the worker's other hubs waiting for the same server (their sessions, the pool's
children and its spare): they need not wait out their own backoff once one of them reached it.

It has no process: `pid` is None and it never signals anything. `close()` closes every member and, once they
are gone (bounded by their own stop ladders), calls `on_exit` once; every retry timer is cancelled then, and the
owner's callbacks and the members' ways back to the hub are dropped (no reference cycle is left). A
member's exit is logged and its names vanish (list_changed) until it comes back; when the last member is gone,
the HubChild ends too.
"""

from __future__ import annotations

import functools
import logging
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gevent
import gevent.event

from mcpgate.child.ladder import KILL_GRACE
from mcpgate.child.limits import Usage
from mcpgate.child.process import OnMessage
from mcpgate.child.spawn import ChildSpawnError
from mcpgate.child.waits import wait_set
from mcpgate.core import hub, hub_messages, jsonrpc
from mcpgate.core.jsonrpc import Notification, Request, Response
from mcpgate.core.tool_filter import ToolFilter
from mcpgate.core.views import View
from mcpgate.serve.hub.member import MemberChild
from mcpgate.serve.hub.views import member_tools
from mcpgate.serve.servers import watchdog

if TYPE_CHECKING:
    from mcpgate.serve.sessions.spec import ChildSpec

log = logging.getLogger("mcpgate.hub")

MEMBER_GRACE = 1.0  # seconds beyond a member's own stop ladder its end is waited for

_HUBS: weakref.WeakSet[HubChild] = weakref.WeakSet()  # the worker's hubs that are not closed (for `Back`)


@dataclass(frozen=True)
class HubMember:
    """One member server of a group: its name, its namespace prefix, and how its children are made (a stdio
    ChildSpec, a remote server's spec: the hub never knows which)."""

    name: str
    prefix: str
    spec: ChildSpec
    problem: Callable[[], str | None] = field(default=lambda: None, compare=False)  # why it cannot start now
    tools: ToolFilter | None = None  # its own tools_allow / tools_deny: hidden on the aggregate too


class HubChild:
    """See the module docstring."""

    pid: int | None = None
    returncode: int | None = None
    limits = None  # its members have theirs (the watchdog watches each member)

    def __init__(
        self,
        members: Sequence[HubMember],
        *,
        on_message: OnMessage,
        on_exit: Callable[[str], None],
        label: str,
        in_flight: int,
        uris: int,
        init_timeout: float = hub.INIT_TIMEOUT,
        extra: Mapping[str, Any] | None = None,
        view: View | None = None,
    ) -> None:
        self.label = label
        if view is not None:  # the caller's view decides per member (serve/hub/views.py)
            members = [m for m in members if view.sees(m.name)]
        self.members = {m.name: m for m in members}
        self.core = hub.Hub(
            [
                hub_messages.Member(m.name, m.prefix, m.tools if view is None else member_tools(m.name, m.tools, view))
                for m in members
            ],
            in_flight=in_flight,
            uris=uris,
            init_timeout=init_timeout,
        )
        self.usage = Usage()
        self.exit_reason: str | None = None
        self.end_cause = ""
        self._on_message, self._on_exit = on_message, on_exit
        self._extra = dict(extra or {})
        self._children: dict[str, MemberChild] = {}
        self._replaced: list[MemberChild] = []  # children replaced by a member's new one, still ending
        self._started = self._closing = False
        self._reason, self._cause = "", "stopped"
        self._done = gevent.event.Event()
        self._timers: set[gevent.Greenlet] = set()
        self._retries: dict[str, gevent.Greenlet] = {}  # a departed member's next attempt, one per member
        self._restarting: set[str] = set()  # members whose new child is being started
        self._generation: dict[str, int] = {}  # of each member's current child
        # how long the members' own stop ladders may take (their specs'), the SIGKILL grace, and a margin
        ladders = [2 * m.spec.close_timeout + m.spec.term_timeout for m in members]
        self._member_wait = max(ladders, default=0.0) + KILL_GRACE + MEMBER_GRACE

    @property
    def alive(self) -> bool:
        return self._started and not self._closing

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start every member (ChildSpawnError only when none can start: its message names each one's reason)."""
        if self._started or self._closing:
            raise RuntimeError("HubChild can be started once, and not after close()")
        self._started = True
        _HUBS.add(self)
        failed = []
        try:
            for name in self.members:
                if self._closing:  # closed while starting: the rest are not started
                    break
                problem = self._start_member(name)
                if problem is not None:
                    failed.append(f"{name}: {problem}")
                    self._apply(self.core.unavailable(name, f"it cannot start ({problem})", time.monotonic()))
        except BaseException:  # a member's spec refused the caller (SlotsEmpty: a credential or sign-in of theirs is
            self._abandon()  # missing, answered with its page): the members started are stopped, none left running
            raise
        if not self._children:
            self._closing = True
            _HUBS.discard(self)
            self._cancel_timers()
            self.exit_reason, self.end_cause = "no member could start", "crash"
            self._release()
            self._done.set()
            raise ChildSpawnError("no server of this endpoint could be started: " + "; ".join(failed))

    def _abandon(self) -> None:
        """The start failed: stop the members started so far (no on_exit: the start's caller has the failure)."""
        self._closing = True
        _HUBS.discard(self)
        self._cancel_timers()
        for child in list(self._children.values()):
            child.close("a server of this endpoint could not start", "stopped")
        self.exit_reason, self.end_cause = "a server of this endpoint could not start", "crash"
        self._release()
        self._done.set()

    def send(self, data: bytes) -> bool:
        """One message of the client's; never blocks. False once closing."""
        if not self.alive:
            return False
        message = jsonrpc.parse(data)
        if isinstance(message, (Request, Notification, Response)):
            self._apply(self.core.from_client(message, time.monotonic()), deferred=True)
        return True

    def close(self, reason: str, cause: str = "stopped") -> None:
        """Close every member; `on_exit` follows once they are gone. Idempotent, never blocks."""
        if self._closing:
            return
        self._closing = True
        _HUBS.discard(self)
        self._reason, self._cause = reason, cause
        self._cancel_timers()
        for child in list(self._children.values()):
            child.close(reason, cause)
        gevent.spawn(self._finish)

    def stop(self, reason: str, timeout: float | None = None, cause: str = "stopped") -> bool:
        self.close(reason, cause)
        return self.join(self._member_wait if timeout is None else timeout)

    def join(self, timeout: float) -> bool:
        return wait_set(self._done, timeout)

    def _finish(self) -> None:
        try:
            deadline = time.monotonic() + self._member_wait
            while self._restarting and time.monotonic() < deadline:  # a new child starting: closed once started
                gevent.sleep(0.05)
            for child in [*self._replaced, *self._children.values()]:
                child.join(max(0.0, deadline - time.monotonic()))
        finally:
            self._cancel_timers()
            self.exit_reason, self.end_cause = self._reason, self._cause
            log.info("hub %s ended: %s", self.label, self._reason)
            try:
                self._on_exit(self._reason)
            except Exception:  # as ChildProcess: a callback's failure must not stop the end
                log.exception("hub %s: on_exit callback failed", self.label)
            finally:
                self._release()
                self._done.set()

    def _release(self) -> None:
        """Ended (on_exit has run, or the start failed): drop what points back at the owner (its callbacks, and the
        principal and on_revoke in `extra`) and each member's way back to this hub, so no reference cycle is left
        (each member child drops its own callbacks once it is gone)."""
        self._on_message, self._on_exit, self._extra = _ignored, _ignored, {}
        for child in [*self._replaced, *self._children.values()]:
            child.release()

    # -- members --------------------------------------------------------------------------------------------------
    def _start_member(self, name: str) -> str | None:
        """Start a (new) child for member `name`; why it cannot start, or None."""
        generation = self._generation[name] = self._generation.get(name, 0) + 1
        child = MemberChild(  # 2025 to the hub whatever its server's era (serve/hub/member.py)
            self.members[name].spec,
            on_message=functools.partial(self._from_member, name, generation),
            on_exit=functools.partial(self._member_exit, name, generation),
            label=f"{self.label}/{name}",
            extra=self._extra,
        )
        try:
            child.start()
        except Exception as exc:  # noqa: BLE001 - a member's spawn failure, or a remote's: the others go on
            log.warning("hub %s: server %s cannot start: %s; going on without it", self.label, name, exc)
            return str(exc)
        old = self._children.get(name)
        self._replaced = [c for c in self._replaced if not c.join(0)]
        if old is not None and not old.join(0):
            self._replaced.append(old)
        self._children[name] = child
        watchdog.register(child.child, functools.partial(self.core.oldest, name))
        if self._closing:  # closed while a member was starting (a start may yield): this one goes too
            child.close(self._reason, self._cause)
            if self._done.is_set():  # and the hub has ended already: it was released with the others
                child.release()
        return None

    def _retry(self, name: str) -> None:
        """A departed member's Retry came (its timer's greenlet)."""
        self._retries.pop(name, None)
        if not self._closing:
            self._apply(self.core.retry(name, time.monotonic()))

    def _restart(self, name: str) -> None:
        """Start a departed member's new child (the core's StartMember) and tell the core how it went."""
        self._restarting.add(name)
        try:
            problem = self._start_member(name)
        except Exception as exc:  # noqa: BLE001 - its spec refused to make a child (a credential, a limit): later
            log.warning("hub %s: server %s cannot start: %s", self.label, name, exc)
            problem = str(exc)
        finally:
            self._restarting.discard(name)
        if self._closing:
            return
        now = time.monotonic()
        if problem is not None:
            self._apply(self.core.unavailable(name, f"it cannot start ({problem})", now))
        else:
            self._apply(self.core.started(name, now))

    def _from_member(self, name: str, generation: int, message: Request | Notification | Response) -> None:
        if not self._closing and self._generation.get(name) == generation:
            self._apply(self.core.from_member(name, message, time.monotonic()))

    def _member_exit(self, name: str, generation: int, reason: str) -> None:
        if self._closing or self._generation.get(name) != generation:
            return  # a replaced child's end: its member has a new one
        log.warning("hub %s: server %s ended (%s); its names are gone", self.label, name, reason)
        self._apply(self.core.member_gone(name, f"it ended ({reason})", time.monotonic()))
        if not self.core.live():
            self.close("every server of this endpoint ended", "crash")

    # -- doing what the core decided -------------------------------------------------------------------------------
    def _apply(self, outs: list[hub_messages.Out], *, deferred: bool = False) -> None:
        to_client: list[Request | Notification | Response] = []
        for out in outs:
            if isinstance(out, hub_messages.ToMember):
                child = self._children.get(out.member)
                if child is not None:
                    child.from_hub(out.data)
            elif isinstance(out, hub_messages.ToClient):
                to_client.append(out.message)
            elif isinstance(out, hub_messages.CloseMember):
                child = self._children.get(out.member)
                if child is not None:
                    log.warning("hub %s: server %s closed: %s", self.label, out.member, out.reason)
                    child.close(out.reason)
            elif isinstance(out, hub_messages.Wake):
                self._wake(out.delay)
            elif isinstance(out, hub_messages.Retry):
                self._arm(out.member, out.delay)
            elif isinstance(out, hub_messages.StartMember):
                self._restart(out.member)
            elif isinstance(out, hub_messages.Back):
                self._tell_others(out.member)
            else:
                log.warning("hub %s: %s", self.label, out.text)
        if not to_client:
            return
        if deferred:  # answered while the client's send() is on the stack: delivered after it returns
            gevent.spawn(self._deliver, to_client)
        else:
            self._deliver(to_client)

    def _deliver(self, messages: list[Request | Notification | Response]) -> None:
        for message in messages:
            if self._closing:
                return
            try:
                self._on_message(message)
            except Exception:  # as ChildProcess: a callback's failure must not stop the hub
                log.exception("hub %s: on_message callback failed", self.label)

    def _wake(self, delay: float) -> None:
        timer = gevent.spawn_later(delay, self._tick)
        self._timers.add(timer)
        timer.link(self._timers.discard)

    def _tick(self) -> None:
        if not self._closing:
            self._apply(self.core.tick(time.monotonic()))

    def _arm(self, name: str, delay: float) -> None:
        """The member's next attempt after `delay` seconds (replacing its timer, if any: one per member)."""
        if self._closing:
            return
        old = self._retries.pop(name, None)
        if old is not None:
            old.kill(block=False)
        self._retries[name] = gevent.spawn_later(delay, self._retry, name)

    def _tell_others(self, name: str) -> None:
        """Member `name` is back: the other hubs waiting for the same server try it now."""
        spec = self.members[name].spec
        for other in list(_HUBS):
            if other is not self:
                for waiting in [n for n, m in other.members.items() if m.spec is spec and n in other._retries]:
                    other._arm(waiting, 0.0)

    def _cancel_timers(self) -> None:
        for timer in [*self._timers, *self._retries.values()]:
            timer.kill(block=False)
        self._retries.clear()


def _ignored(_what: object) -> None:
    """An ended hub's on_message and on_exit: it has no owner any more."""
