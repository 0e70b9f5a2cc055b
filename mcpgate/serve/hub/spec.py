"""What a group's children are made of: its members (each a published server's own ChildSpec), and a ChildSpec
whose `process(...)` makes a HubChild instead of a process."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from mcpgate.child.process import ChildProcess, OnMessage
from mcpgate.core.views import View
from mcpgate.serve.hub.child import HubChild, HubMember
from mcpgate.serve.sessions.spec import ChildSpec


@dataclass(frozen=True)
class HubSpec(ChildSpec):
    """A group's spec: `process(...)` returns a HubChild (typed as the ChildProcess whose surface it has). argv
    names the group and its members, so a remembered era (serve/modern/era_probe.py) is the group's own."""

    members: tuple[HubMember, ...] = ()
    in_flight: int = 1024
    uris: int = 10_000
    init_timeout: float = 60.0  # MCPGATE_START_TIMEOUT: a member silent on initialize so long is left out

    def process(
        self,
        *,
        on_message: OnMessage,
        on_exit: Callable[[str], None],
        label: str,
        view: View | None = None,
        **extra: Any,
    ) -> ChildProcess:
        """A HubChild for the caller whose view this is (None: views off, every member whole); `extra` (the
        principal, on_revoke) goes to each member's own `process(...)`."""
        child = HubChild(
            self.members,
            on_message=on_message,
            on_exit=on_exit,
            label=label,
            in_flight=self.in_flight,
            uris=self.uris,
            init_timeout=self.init_timeout,
            extra=extra,
            view=view,
        )
        return cast(ChildProcess, child)
