"""HubChild: an in-process child with ChildProcess's surface that is one MCP server made of several.

It is what a group's spec makes (serve/hub/spec.py), so a 2025 session, the 2026-07-28 pool and its bridge, and
HTTP+SSE talk to it as to any child. `start()` starts one member child per member server through that server's
own `spec.process(...)` (a stdio ChildProcess, or whatever that spec makes), held as a MemberChild
(serve/hub/member.py: spoken to through the legacy/modern bridge when its server speaks only 2026-07-28, so
the hub speaks 2025 to every member); a member that cannot start is logged and left out (its names absent; a
call naming it is told why). Every message is handed to the pure
multiplexer (mcpgate/core/hub.py) and what it decides is done here: bytes to a member, a message to
`on_message`, a member closed, a timer.

It has no process: `pid` is None and it never signals anything. `close()` closes every member and, once they
are gone (bounded by their own stop ladders), calls `on_exit` once. A member's exit is logged and its names
vanish (list_changed); when the last member is gone, the HubChild ends too.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gevent
import gevent.event

from mcpgate.child.limits import Usage
from mcpgate.child.process import OnMessage
from mcpgate.child.spawn import ChildSpawnError
from mcpgate.core import hub, hub_messages, jsonrpc
from mcpgate.core.jsonrpc import Notification, Request, Response
from mcpgate.core.tool_filter import ToolFilter
from mcpgate.core.views import View
from mcpgate.serve.hub.member import MemberChild
from mcpgate.serve.hub.views import member_tools
from mcpgate.serve.servers import watchdog

if TYPE_CHECKING:
    from mcpgate.serve.sessions.session import ChildSpec

log = logging.getLogger("mcpgate.hub")

MEMBER_GRACE = 1.0  # seconds beyond a member's own stop ladder its end is waited for
KILL_GRACE = 5.0  # as ChildProcess waits after SIGKILL


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
        self._started = self._closing = False
        self._reason, self._cause = "", "stopped"
        self._done = gevent.event.Event()
        self._timers: set[gevent.Greenlet] = set()
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
        failed = []
        for name, member in self.members.items():
            if self._closing:  # closed while starting: the rest are not started
                break
            child = MemberChild(  # 2025 to the hub whatever its server's era (serve/hub/member.py)
                member.spec,
                on_message=functools.partial(self._from_member, name),
                on_exit=functools.partial(self._member_exit, name),
                label=f"{self.label}/{name}",
                extra=self._extra,
            )
            try:
                child.start()
            except Exception as exc:  # noqa: BLE001 - a member's spawn failure, or a remote's: the others go on
                log.warning("hub %s: server %s cannot start: %s; going on without it", self.label, name, exc)
                failed.append(f"{name}: {exc}")
                self._apply(self.core.unavailable(name, f"it cannot start ({exc})", time.monotonic()))
                continue
            self._children[name] = child
            watchdog.register(child.child, functools.partial(self.core.oldest, name))
            if self._closing:  # closed while a member was starting (a start may yield): this one goes too
                child.close(self._reason, self._cause)
        if not self._children:
            self._closing = True
            self.exit_reason, self.end_cause = "no member could start", "crash"
            self._done.set()
            raise ChildSpawnError("no server of this endpoint could be started: " + "; ".join(failed))

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
        self._reason, self._cause = reason, cause
        for timer in self._timers:
            timer.kill(block=False)
        for child in list(self._children.values()):
            child.close(reason, cause)
        gevent.spawn(self._finish)

    def stop(self, reason: str, timeout: float | None = None, cause: str = "stopped") -> bool:
        self.close(reason, cause)
        return self.join(self._member_wait if timeout is None else timeout)

    def join(self, timeout: float) -> bool:
        return bool(self._done.wait(timeout))

    def _finish(self) -> None:
        try:
            deadline = time.monotonic() + self._member_wait
            for child in list(self._children.values()):
                child.join(max(0.0, deadline - time.monotonic()))
        finally:
            self.exit_reason, self.end_cause = self._reason, self._cause
            log.info("hub %s ended: %s", self.label, self._reason)
            try:
                self._on_exit(self._reason)
            except Exception:  # as ChildProcess: a callback's failure must not stop the end
                log.exception("hub %s: on_exit callback failed", self.label)
            finally:
                self._done.set()

    # -- members --------------------------------------------------------------------------------------------------
    def _from_member(self, name: str, message: Request | Notification | Response) -> None:
        if not self._closing:
            self._apply(self.core.from_member(name, message, time.monotonic()))

    def _member_exit(self, name: str, reason: str) -> None:
        if self._closing:
            return
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
