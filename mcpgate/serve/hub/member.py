"""MemberChild: one member server's child as the hub holds it, always speaking 2025 to the hub.

The hub (core/hub.py) speaks 2025 to its members. A member whose server speaks only 2026-07-28 is spoken to
through the same legacy/modern bridge a 2025 session uses for such a child (serve/sessions/modern_bridge.py),
decided as a published server's session decides it (serve/sessions/session.py): bridged from the start when its
command is remembered as 2026-07-28-only, or bridged when the child refuses the hub's initialize as only a
2026-07-28 server does (it has answered, so it is asked server/discover on the same connection and the hub's
initialize is answered from its DiscoverResult). Either way the verdict is the server's own, remembered per
command (pooled_child.verdict_key), so its own path's sessions and every hub holding it agree. Through the bridge
the member's InputRequiredResults become elicitation, sampling and roots requests to the hub (which passes them
on to its client), its progress keeps the client's token, a cancelled call reaches it as notifications/cancelled,
and its list_changed arrives over one subscriptions/listen.

A member that speaks 2025 is not touched: its bytes go as they come, and only the hub's initialize and its
answer are looked at. The child itself (a stdio ChildProcess, a RemoteChild, whatever the member's spec makes)
is `child`; the hub's bytes go in through `from_hub`, never `send` (the bridge's way to the child). Once the hub
has ended it releases the member (`release`): its way back to the hub and its bridge are dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from mcpgate.child.process import ChildProcess, OnMessage
from mcpgate.core import jsonrpc, modern_rewrites
from mcpgate.core.jsonrpc import Notification, Request, Response
from mcpgate.serve.modern import era_probe
from mcpgate.serve.modern.pooled_child import verdict_key
from mcpgate.serve.sessions.modern_bridge import ModernChildBridge, modern_only, remember_modern_only

if TYPE_CHECKING:
    from mcpgate.serve.sessions.spec import ChildSpec

log = logging.getLogger("mcpgate.hub")


class MemberChild:
    """See the module docstring. It is the bridge's `Bridged` session: `send` is bytes to the child, `route` a
    message for the hub."""

    def __init__(
        self,
        spec: ChildSpec,
        *,
        on_message: OnMessage,
        on_exit: Callable[[str], None],
        label: str,
        extra: Mapping[str, Any],
    ) -> None:
        self.label = label
        self._verdict = verdict_key(spec)
        self._on_message = on_message
        self.child: ChildProcess = spec.process(on_message=self._from_child, on_exit=on_exit, label=label, **extra)
        remembered = modern_only(self._verdict)
        self.bridge: ModernChildBridge | None = ModernChildBridge(self) if remembered else None
        self._handshake = not remembered  # the hub's initialize not answered yet (by a child spoken to directly)
        self._init: Request | None = None  # that initialize, while it is unanswered

    @property
    def verdict(self) -> era_probe.Key | None:
        return self._verdict

    @property
    def modern(self) -> bool:
        """Whether the member is spoken to through the bridge (its server speaks only 2026-07-28)."""
        return self.bridge is not None

    # -- the child's lifecycle, as the hub drives it ---------------------------------------------------------
    def start(self) -> None:
        self.child.start()
        if self.bridge is not None:
            log.info("hub member %s: its server speaks only 2026-07-28 (remembered); bridged", self.label)

    def close(self, reason: str, cause: str = "stopped") -> None:
        self.child.close(reason, cause)

    def join(self, timeout: float) -> bool:
        return self.child.join(timeout)

    def release(self) -> None:
        """The hub has ended: drop its way back (`on_message`) and the bridge (it and its listens point back at
        this member), so no reference cycle is left; what the child still says goes nowhere."""
        self._on_message, self._init = _ignored, None
        bridge, self.bridge = self.bridge, None
        if bridge is not None:
            bridge.listens.detach()

    # -- the hub's messages ------------------------------------------------------------------------------------
    def from_hub(self, data: bytes) -> bool:
        """One message of the hub's for the member (False once the child takes no more input)."""
        if self.bridge is None and not self._handshake:
            return self.child.send(data)  # a 2025 member after its handshake: nothing is looked at
        message = jsonrpc.parse(data)
        if self.bridge is not None:
            if isinstance(message, (Request, Notification, Response)):
                return self.bridge.from_client(message)
            return True  # the hub sends only what it built: nothing else reaches here
        if isinstance(message, Request) and message.method == "initialize":
            self._init = message
        return self.child.send(data)

    # -- the bridge's session (Bridged) --------------------------------------------------------------------------
    def send(self, data: bytes) -> bool:
        return self.child.send(data)

    def route(self, message: Request | Notification | Response) -> None:
        self._on_message(message)

    def unbridge(self) -> None:
        """The child answered server/discover as a legacy server after all: spoken to directly from now on (the
        hub's initialize, which the bridge sends next, answered to the hub whatever it is)."""
        self.bridge = None
        self._handshake = False

    # -- the child's messages ------------------------------------------------------------------------------------
    def _from_child(self, message: Request | Notification | Response) -> None:
        if self._on_message is _ignored:
            return  # released: the bridge is gone too
        if self.bridge is not None:
            self.bridge.from_child(message)
        elif not self._handshake or not self._refused_as_modern(message):
            self._on_message(message)

    def _refused_as_modern(self, message: Request | Notification | Response) -> bool:
        """Whether this is the answer to the hub's initialize refusing it as only a 2026-07-28 server does: then
        the child is asked server/discover on the same connection and bridged from then on."""
        init = self._init
        if not isinstance(message, Response) or init is None or message.id is None:
            return False
        if jsonrpc.id_key(message.id) != jsonrpc.id_key(init.id):
            return False
        self._init, self._handshake = None, False
        if not message.is_error or not modern_rewrites.recognised_modern_error(message.full().get("error")):
            return False  # answered (or refused as any server may): the hub decides
        log.info("hub member %s: refused initialize as a 2026-07-28 server does; bridged", self.label)
        remember_modern_only(self._verdict, refused=True)
        self.bridge = ModernChildBridge(self)
        self.bridge.initialize(init, refused=True)
        return True


def _ignored(_message: Request | Notification | Response) -> None:
    """A released member's on_message: its hub has ended."""
