"""The hub's members that come back: a member that is gone (it refused or never answered initialize, it could
not start, its child ended) is tried again, sans-IO as the rest of the hub (core/hub.py drives it).

Each departure (`Hub._gone`) asks for a `Retry` of that member after a backoff: RETRY_FIRST seconds, doubled at
each failed attempt up to RETRY_MAX (a member failing for good costs one attempt per period, never more); a
member that had stayed up RETRY_MAX seconds or longer starts again from RETRY_FIRST. When its Retry comes
(`retry`; or sooner, when another hub of the worker saw the same server come back: `Back`), the driver is told
to start a new child (`StartMember`) and says how that went: `unavailable` (it
could not start: the next Retry) or `started`. A started child is asked initialize with the client's own params
(before the client's initialize it simply is part of the endpoint again, asked with the others); answered, the
member is back: told notifications/initialized when the client was, its resources listed for the URI map, and
the client gets one list_changed per list it has (COALESCE seconds later, as for any member's list_changed). A
refusal, its silence past `init_timeout` or its child ending is one more failed attempt.

While gone, a request routed to it is answered -32000 naming the server, that it is unreachable and when it is
tried next (`unreachable`), never "Unknown tool": the client may call again later.
"""

from __future__ import annotations

from typing import Any

from mcpgate.core.hub_fan import SERVER_GONE, Lists
from mcpgate.core.hub_lists import CHANGED
from mcpgate.core.hub_messages import (
    Back,
    CloseMember,
    Fan,
    Note,
    Out,
    Pending,
    Retry,
    StartMember,
    ToClient,
    ToMember,
    Wake,
    encode_note,
    encode_request,
    error,
    why,
)
from mcpgate.core.jsonrpc import Id

RETRY_FIRST = 0.5  # seconds before a departed member is first tried again
RETRY_MAX = 30.0  # the longest wait between two attempts (and how long a member stays up to start over)
WAITING, STARTING, JOINING = "waiting", "starting", "joining"


def backoff(failures: int) -> float:
    """Seconds before the next attempt after `failures` failed ones in a row."""
    return min(RETRY_MAX, RETRY_FIRST * 2.0 ** min(failures, 32))


class Retries(Lists):
    """The hub's state with its departed members' retries (see the module docstring)."""

    # -- provided by core/hub.py's Hub ---------------------------------------------------------------------
    def _gone(self, member: str, reason: str, now: float) -> list[Out]:
        raise NotImplementedError

    def _changed_list(self, method: str) -> list[Out]:
        raise NotImplementedError

    # -- the driver's side ----------------------------------------------------------------------------------
    def retry(self, member: str, now: float) -> list[Out]:
        """The member's Retry came, or another hub saw its server come back (`Back`): start a new child for it
        (nothing when it is not waiting for one)."""
        state = self.members[member]
        if state.gone is None or state.phase != WAITING:
            return []
        state.phase, state.retry_at = STARTING, None
        return [StartMember(member)]

    def started(self, member: str, now: float) -> list[Out]:
        """The member's new child started: asked initialize with the client's params (see the module docstring)."""
        state = self.members[member]
        if state.gone is None or state.phase != STARTING:
            return []
        if self.init_params is None:  # the client's initialize is still to come: asked with the others
            state.gone, state.phase, state.joined = None, "", now
            return [Note(f"server {member!r} is part of this endpoint again"), Back(member)]
        state.phase = JOINING
        hub_id = self._mint()
        self._pending[hub_id] = Pending(member, now, fan=Fan("initialize", None, {}, {member}))
        return [ToMember(member, encode_request(hub_id, "initialize", self.init_params)), Wake(self.init_timeout)]

    def unreachable(self, client_id: Id, member: str, now: float) -> ToClient:
        """The answer to a request for a member that is gone: naming it, why, and when it is tried next."""
        state = self.members[member]
        if state.phase == WAITING and state.retry_at is not None:
            when = f"tried again in {max(0.0, state.retry_at - now):.1f} s"
        else:
            when = "being reconnected now"
        text = f"Server {member!r} of this endpoint is not available: {state.gone}; it is unreachable for now ({when})"
        return error(client_id, SERVER_GONE, text, {"server": member})

    # -- the hub's side ----------------------------------------------------------------------------------------
    def _schedule(self, member: str, now: float) -> Retry:
        """The member just went: its next attempt."""
        state = self.members[member]
        if state.joined is not None and now - state.joined >= RETRY_MAX:
            state.failures = 0  # it had stayed up: this outage starts from the first delay
        state.joined = None
        delay = backoff(state.failures)
        state.failures += 1
        state.phase, state.retry_at = WAITING, now + delay
        return Retry(member, delay)

    def _rejoin_answered(self, member: str, full: dict[str, Any], now: float) -> list[Out]:
        """The new child's answer to the hub's initialize: the member is back, or this attempt failed."""
        result = full.get("result")
        if not isinstance(result, dict):
            refusal = why(full.get("error"))
            return [
                *self._gone(member, f"it refused initialize ({refusal})", now),
                CloseMember(member, f"refused initialize ({refusal})"),
            ]
        state = self.members[member]
        caps = result.get("capabilities")
        state.gone, state.phase, state.joined = None, "", now
        state.capabilities = caps if isinstance(caps, dict) else {}
        out: list[Out] = [Note(f"server {member!r} is part of this endpoint again"), Back(member)]
        if self.initialized:
            out.append(ToMember(member, encode_note("notifications/initialized", {})))
            if "resources" in state.capabilities:
                out += self._prime(member, now)
        for method, capability in CHANGED.items():
            if capability in state.capabilities:
                out += self._changed_list(method)
        return out
