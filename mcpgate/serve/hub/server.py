"""A group of servers as one published server: its sessions' and pooled children are HubChildren."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcpgate.config.settings import Settings
from mcpgate.core.sessions import new_session_id
from mcpgate.serve.hub.spec import HubSpec
from mcpgate.serve.hub.views import NOTHING, Resolver, pool_key
from mcpgate.serve.servers.server import PublishedServer

if TYPE_CHECKING:
    from mcpgate.core.views import View
    from mcpgate.serve.cluster.instances import Cluster
    from mcpgate.serve.hub.child import HubMember
    from mcpgate.serve.sessions.session import Session

HUB_ARGV0 = "mcpgate-hub"  # argv[0] of a group's spec: names no program, only the group (its era is remembered)


class HubServer(PublishedServer):
    """A published group: routing, sessions, the pool, HTTP+SSE and both eras are PublishedServer's; only its
    children differ (serve/hub/child.py)."""

    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], float] = time.monotonic,
        *,
        name: str,
        members: tuple[HubMember, ...],
        cluster: Cluster | None = None,
        minter: Callable[[], str] = new_session_id,
    ) -> None:
        argv = (HUB_ARGV0, name, *(f"{m.name}={m.prefix}" for m in members))
        spec = HubSpec(
            argv=argv,
            env=None,
            cwd=None,
            stderr=settings.stderr,
            max_line_bytes=settings.max_message_bytes,
            max_write_queue_bytes=settings.write_queue_bytes,
            close_timeout=settings.close_timeout,
            term_timeout=settings.term_timeout,
            label_prefix=f"{name}/",
            members=members,
            in_flight=settings.hub_in_flight,
            uris=settings.hub_uris,
            init_timeout=settings.start_timeout,
        )
        super().__init__(settings, clock, name=name, argv=argv, cluster=cluster, minter=minter, spec=spec)
        self.members = members
        self.pool.resolve = Resolver(lambda: self.views)  # pooled HubChildren: one per (principal, view)

    # -- views: the caller's decides per member (serve/hub/views.py) --
    def member_view(self, environ: dict[str, Any]) -> View | None:
        return self.views.view(environ) if self.views is not None else None

    def pool_key(self, principal: str, environ: dict[str, Any]) -> str:
        if self.views is None:
            return principal
        return pool_key(principal, self.views.token(self.views.key(environ)))

    def _new_session(self, session_id: str, owner: str, view: View | None = None) -> Session:
        """A session's HubChild is made for its caller's view; with views on and none given (a session taken
        over without one), for the view that shows nothing: never every member."""
        if view is None and self.views is not None:
            view = NOTHING
        return super()._new_session(session_id, owner, view)

    def command_problem(self) -> str | None:
        """None while one member at least can start (the others are left out, each logged)."""
        problems = [f"{m.name}: {problem}" for m in self.members if (problem := m.problem())]
        if self.members and len(problems) == len(self.members):
            return "no server of this endpoint can start (" + "; ".join(problems) + ")"
        return None
