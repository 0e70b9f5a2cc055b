"""serve/cluster/takeover.revive in process, on an instance that is stopping (a graceful stop: its servers
closing) and is forwarded a request for a session it no longer has, while the store still names it the holder: the
moment after the session ended here and before its release reached the store (a Redis round trip that yields to
other requests). It answers "held by nobody" (HeldElsewhere("")) only once the store says so, so that the
forwarding instance's claim from nobody wins; before, that claim lost to the late release, the forwarding instance
was sent back to this instance and answered the client 404 "Session not found"."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mcpgate.serve.cluster.moved import HELD_BY
from mcpgate.serve.cluster.takeover import HeldElsewhere, revive
from mcpgate.serve.front.auth import STATIC_PRINCIPAL
from mcpgate.serve.front.context import context
from mcpgate.serve.front.http import HttpRequest
from mcpgate.serve.sessions.kept import DirStore, Keeper

SESSION = "i4.0123456789abcdef"
TTL = 300.0
VERSION = {"protocolVersion": "2025-11-25"}


def keeper(tmp_path: Path, instance: str) -> Keeper:
    """One instance's keeper on a store the instances share (a directory standing in for Redis)."""
    return Keeper(DirStore(tmp_path, TTL), instance, TTL, 65536, ())


def stopping(keeper: Keeper, reviving: dict[str, Any] | None = None) -> Any:
    """The published server of a stopping instance "i4" that holds no session in this process."""
    cluster = SimpleNamespace(instance="i4", lookup=lambda name: f"http://{name}.internal")
    settings = SimpleNamespace(session_resurrect_timeout=5.0)
    return SimpleNamespace(
        keeper=keeper,
        cluster=cluster,
        settings=settings,
        closing=True,
        reviving=reviving if reviving is not None else {},
        get=lambda session_id, principal: None,
    )


def forwarded_request() -> HttpRequest:
    environ: dict[str, Any] = {"REQUEST_METHOD": "POST"}
    context(environ).forwarded = True
    return HttpRequest(environ)


def opened_then_ended_here(tmp_path: Path) -> Keeper:
    """i4's keeper after its session was kept and ended on its graceful stop, the release not yet stored."""
    i4 = keeper(tmp_path, "i4")
    i4.opened(SESSION, STATIC_PRINCIPAL, {"protocolVersion": "2025-11-25", "capabilities": {}}, VERSION, "t1")
    i4.records.pop(SESSION)  # gone from this process (Keeper.ended's first step); the store still names i4
    assert i4.load(SESSION) is not None and i4.load(SESSION)[1] == i4.me  # type: ignore[index]
    return i4


def test_a_stopping_instance_lets_go_of_the_session_before_it_says_nobody_holds_it(tmp_path: Path) -> None:
    i4 = opened_then_ended_here(tmp_path)
    with pytest.raises(HeldElsewhere) as answered:
        revive(stopping(i4), forwarded_request(), SESSION)
    assert dict(answered.value.headers)[HELD_BY] == ""
    # the forwarding instance reads the store again and claims the session from nobody: it wins
    i1 = keeper(tmp_path, "i1")
    found = i1.load(SESSION)
    assert found is not None and found[1] == ""
    assert i1.claim(SESSION, found[1])
    # i4's own release, arriving late, leaves i1's hold alone (compare-and-set from i4)
    i4.release(SESSION)
    assert i1.load(SESSION) is not None and i1.load(SESSION)[1] == i1.me  # type: ignore[index]


def test_a_session_this_stopping_instance_is_taking_over_is_not_let_go(tmp_path: Path) -> None:
    """A takeover of the session under way in this process (a request that came straight here) keeps its hold."""
    i4 = opened_then_ended_here(tmp_path)
    with pytest.raises(HeldElsewhere):
        revive(stopping(i4, reviving={SESSION: object()}), forwarded_request(), SESSION)
    found = i4.load(SESSION)
    assert found is not None and found[1] == i4.me
