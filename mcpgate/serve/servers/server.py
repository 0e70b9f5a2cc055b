"""The gateway's state in one worker: settings, the session registry, spawning and reaping."""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import gevent
from gevent.event import AsyncResult

from mcpgate.child.limits import ChildLimits
from mcpgate.child.process import ChildProcess
from mcpgate.child.spawn import ChildSpawnError, child_environment, child_user, resolve_executable, split_command
from mcpgate.config.settings import Settings
from mcpgate.core.sessions import SessionRegistry, new_session_id
from mcpgate.serve.cluster import caps
from mcpgate.serve.kinds import EndCause
from mcpgate.serve.modern.pool import Pool
from mcpgate.serve.modern.pooled_child import verdict_key
from mcpgate.serve.sessions.kept import keeper_for
from mcpgate.serve.sessions.session import Session
from mcpgate.serve.sessions.spec import ChildSpec
from mcpgate.serve.sessions.stream import StreamLimits

if TYPE_CHECKING:  # each feature's modules are imported where it is configured (tests/test_lazy_imports.py)
    from mcpgate.core.views import View
    from mcpgate.serve.cluster.instances import Cluster
    from mcpgate.serve.metrics import Tally
    from mcpgate.serve.pins.guard import ServerPins
    from mcpgate.serve.servers.remote_entry import RemoteEntry
    from mcpgate.serve.servers.search_view import SearchView
    from mcpgate.serve.servers.views_file import ViewTable
    from mcpgate.serve.vault.vault import SlotFill

log = logging.getLogger("mcpgate.server")

DEMO_COMMAND = [sys.executable, "-m", "mcpgate.demo_server"]
DEFAULT_NAME = "default"  # the one server of MCPGATE_COMMAND, at MCPGATE_PATH


class PublishedServer:
    """One published server. MCPGATE_COMMAND's is named "default"; a named server of MCPGATE_CONFIG is given
    its command (argv, env on top of the configured one, cwd) and labels its children "<name>/...". In a fleet
    (REDIS_URL) it is given the `cluster` (its pool's states and its caps are the fleet's) and the cluster's
    `minter`, whose session ids name this instance (serve/cluster/instances.py); else plain random ids."""

    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], float] = time.monotonic,
        *,
        name: str = DEFAULT_NAME,
        argv: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        cluster: Cluster | None = None,
        minter: Callable[[], str] = new_session_id,
        slots: SlotFill | None = None,  # per-user credentials in its children's env/args (serve/vault)
        remote: RemoteEntry | None = None,  # a remote server: its children are RemoteChildren (serve/remote)
        spec: ChildSpec | None = None,  # its children's spec when given (a group's HubSpec: serve/hub/spec.py)
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.name = name
        self.tally: Tally | None = None  # child exits, drops, write-queue closes for /metrics (MCPGATE_METRICS)
        if settings.metrics:
            from mcpgate.serve.metrics import Tally

            self.tally = Tally()
        self.sessions: SessionRegistry[Session] = SessionRegistry(
            settings.max_sessions, settings.session_idle_ttl, minter
        )
        if argv is not None:
            self.argv = list(argv)
        else:
            self.argv = split_command(settings.command) if settings.command else list(DEMO_COMMAND)
        self.user = child_user(settings.child_user, settings.child_group)  # checked at start (mcpgate.child.boundary)
        self.env = child_environment({**self._configured_env(), **(env or {})}, user=self.user)
        self.child_spec = ChildSpec(
            argv=tuple(self.argv),
            env=self.env,
            cwd=cwd or settings.cwd or None,
            stderr=settings.stderr,
            max_line_bytes=settings.max_message_bytes,
            max_write_queue_bytes=settings.write_queue_bytes,
            close_timeout=settings.close_timeout,
            term_timeout=settings.term_timeout,
            watch=self.tally.child_ended if self.tally else None,
            label_prefix=f"{name}/" if argv is not None else "",
            limits=ChildLimits.of(settings),
            user=self.user,
            slots=slots,
        )
        self.reachability: Callable[[], str | None] | None = None  # a remote server's: why it is unreachable
        if remote is not None:
            from mcpgate.serve.remote.spec import RemoteSpec  # the relay's client side, only for a remote server

            remote_spec = RemoteSpec.of(settings, name, remote, self.child_spec.watch)
            self.child_spec, self.reachability = remote_spec, lambda: remote_spec.reachability.problem
        if spec is not None:
            self.child_spec = spec
        self.stream_limits = StreamLimits(
            messages=settings.stream_queue,
            bytes=settings.stream_queue_bytes,
            stall_timeout=settings.stream_stall_timeout,
            replay_events=settings.replay_events,
            replay_bytes=settings.replay_bytes,
            on_drop=self.tally.stream_dropped if self.tally else None,
        )
        self.pool = Pool(settings, self.child_spec, self.stream_limits, clock, cluster)
        self._reaper: gevent.Greenlet | None = None
        self._stopping: set[ChildProcess] = set()  # children of ended sessions still going down the ladder
        self.closing = False
        self.caps = caps.for_server(settings, name, cluster)
        self.cluster = cluster
        self.keeper = keeper_for(settings, name, cluster)  # what a takeover replays (serve/cluster/takeover.py)
        self.pins: ServerPins | None = None  # pinned tool definitions (None: MCPGATE_TOOL_PINS off)
        if settings.tool_pins != "off":
            from mcpgate.serve.pins.guard import pins_for

            self.pins = pins_for(settings, name, cluster)
        self.reviving: dict[str, AsyncResult] = {}  # sessions being taken over here: their requests wait
        self.views: ViewTable | None = None  # MCPGATE_CONFIG's views (serve/servers/views_file.py); None: none
        self.search: SearchView | None = None  # the search view (MCPGATE_TOOL_SEARCH), when on
        if settings.tool_search:
            from mcpgate.serve.servers.search_view import SearchView

            self.search = SearchView(settings, clock)

    def _configured_env(self) -> dict[str, str]:
        env = {name: os.environ[name] for name in self.settings.pass_env if name in os.environ}
        env.update(self.settings.child_env)
        return env

    def command_problem(self) -> str | None:
        """Why the configured command cannot be started right now (a remote server: why its last connection
        attempt failed), or None."""
        if self.reachability is not None:
            return self.reachability()
        try:
            resolve_executable(self.argv[0], self.env.get("PATH", ""))
        except ChildSpawnError as exc:
            return str(exc)
        return None

    def open_session(self, owner: str, view: View | None = None) -> Session:
        """Register a session owned by a principal and start its child (SessionLimitReached, ChildSpawnError);
        `view`: the caller's, for a child made per view (a group's: serve/hub/views.py)."""
        self.caps.acquire(owner)  # MCPGATE_PRINCIPAL_SESSIONS, across the fleet (PrincipalLimitReached)
        try:
            session = self.sessions.create(functools.partial(self._new_session, owner=owner, view=view), self.clock())
            try:
                session.start()
            except BaseException:
                self.sessions.remove(session.id)
                raise
        except BaseException:
            self.caps.release(owner)
            raise
        log.info("session %s opened (child %s)", session.label, session.child.pid or "remote")
        self._ensure_reaper()
        return session

    def adopt_session(self, session_id: str, owner: str, view: View | None = None) -> Session:
        """A session taken over under its own id (serve/cluster/takeover.py), its child started, not registered
        yet: `register` it once its handshake is replayed (until then its requests wait for the takeover)."""
        self.sessions.room()
        self.caps.acquire(owner)
        try:
            session = self._new_session(session_id, owner, view)
            session.start()
        except BaseException:
            self.caps.release(owner)
            raise
        return session

    def register(self, session: Session) -> None:
        """Register a session taken over (SessionLimitReached: the caller ends it)."""
        self.sessions.adopt(session.id, session, self.clock())
        self._ensure_reaper()

    def member_view(self, environ: dict[str, Any]) -> View | None:
        """The view a child of this server is made for (None: its children do not depend on the caller's view;
        a group's do: serve/hub/server.py)."""
        return None

    def pool_key(self, principal: str, environ: dict[str, Any]) -> str:
        """The pool's key of the caller's children (a group's: the principal and its view)."""
        return principal

    def _new_session(self, session_id: str, owner: str, view: View | None = None) -> Session:
        s = self.settings
        return Session(
            session_id,
            owner,
            self.child_spec,
            buffer_messages=s.buffer_messages,
            buffer_bytes=s.buffer_bytes,
            limits=self.stream_limits,
            replay_streams=s.replay_streams,
            on_end=self._forget,
            clock=self.clock,
            verdict=verdict_key(self.child_spec),  # a 2026-07-28-only server's sessions are bridged (its era)
            view=view,
        )

    def get(self, session_id: str, owner: str) -> Session | None:
        """The session, when it exists and belongs to this principal: another principal's session is answered
        exactly like an unknown one (no oracle), and is not touched."""
        session = self.sessions.get(session_id)
        if session is not None and session.owner != owner:
            return None
        if session is not None:
            self.sessions.touch(session_id, self.clock())
        return session

    def touch(self, session: Session) -> None:
        self.sessions.touch(session.id, self.clock())

    def live_children(self) -> int:
        count = self.pool.live_children()
        for session_id in self.sessions:
            session = self.sessions.get(session_id)
            if session is not None and session.child.alive:
                count += 1
        return count

    def in_flight(self) -> int:
        """Requests being answered: sessions' requests the child has not answered yet, and pooled children's
        calls (one parked for its client's input included). A graceful stop drains them first."""
        count = sum(child.load for group in self.pool.groups.values() for child in group.children)
        for session_id in self.sessions:
            session = self.sessions.get(session_id)
            if session is not None:
                count += session.router.in_flight
        return count

    def _forget(self, session: Session, reason: str) -> None:
        self.sessions.remove(session.id)
        self.caps.release(session.owner)
        if self.keeper is not None:
            self.keeper.ended(session.id, shutting_down=reason == EndCause.SHUTTING_DOWN)
        self._stopping = {child for child in self._stopping if not child.join(0)}
        self._stopping.add(session.child)

    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.dead:
            self._reaper = gevent.spawn(self._reap_forever)

    def _reap_forever(self) -> None:
        interval = min(30.0, max(0.05, self.settings.session_idle_ttl / 4))
        while len(self.sessions):
            gevent.sleep(interval)
            self.reap_idle()

    def reap_idle(self) -> None:
        if self.keeper is not None:  # the kept sessions' records live on while their sessions do
            self.keeper.refresh()
        for session_id in self.sessions.expired(self.clock()):
            session = self.sessions.get(session_id)
            if session is not None:
                session.end(EndCause.IDLE)

    def end_quiet_sessions(self) -> int:
        """End (as at shutdown: released for a takeover) every session with no request in flight; how many are
        left. Checked and ended without yielding, so no request can slip in between."""
        busy = 0
        for session_id in self.sessions:
            session = self.sessions.get(session_id)
            if session is None:
                continue
            if session.router.in_flight:
                busy += 1
            else:
                session.end(EndCause.SHUTTING_DOWN)
        return busy

    def shutdown(self, timeout: float, cause: EndCause = EndCause.SHUTTING_DOWN) -> None:
        """End every session and wait (bounded) for the children to exit. SHUTTING_DOWN leaves the sessions' kept
        records for a takeover; SERVER_REPLACED (a reload) deletes them: the server they were opened on is gone."""
        self.closing = True
        self._stopping.update(self.pool.shutdown())
        for session_id in self.sessions:
            session = self.sessions.get(session_id)
            if session is not None:
                session.end(cause)
        deadline = time.monotonic() + timeout
        for child in list(self._stopping):
            child.join(max(0.0, deadline - time.monotonic()))
