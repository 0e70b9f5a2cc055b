"""serve/cluster/takeover.revive in process, on a live instance whose claim of a session is lost because the
holder changed between its read of the store and its claim (a compare-and-set on the holder it read): a stopping
instance releasing the session, another instance taking it over. The request reads the store again: a session now
held by nobody (or by an instance gone) is claimed again and taken over here; one another live instance won goes
there. Before, any lost claim answered the client 404 "Session not found" (seen in the rolling redeploy test).
The store is a directory standing in for Redis (the same compare-and-set: kept.DirStore)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mcpgate.serve.cluster import takeover
from mcpgate.serve.cluster.forwarding import Forward
from mcpgate.serve.cluster.takeover import CLAIMS, revive
from mcpgate.serve.front.auth import STATIC_PRINCIPAL
from mcpgate.serve.front.http import HttpRequest
from mcpgate.serve.sessions.kept import Keeper
from tests.serve.test_takeover_stopping_unit import SESSION, VERSION, keeper

LIVE = {"i1": "http://i1.internal"}  # the instances in the directory; i2 (the old holder) is gone from it
TAKEN = object()  # what the stubbed take_over returns: the session taken over here


def live_instance(mine: Keeper) -> Any:
    """The published server of the live instance "i3", holding no session in this process."""
    return SimpleNamespace(
        keeper=mine,
        cluster=SimpleNamespace(instance="i3", lookup=LIVE.get),
        settings=SimpleNamespace(session_resurrect_timeout=5.0),
        closing=False,
        reviving={},
        get=lambda session_id, principal: None,
    )


def held_by_i2(tmp_path: Path) -> Keeper:
    i2 = keeper(tmp_path, "i2")
    i2.opened(SESSION, STATIC_PRINCIPAL, {"protocolVersion": "2025-11-25", "capabilities": {}}, VERSION, "t1")
    return i2


def moves_after_each_read(mine: Keeper, moves: list[Callable[[], None]]) -> None:
    """Each of `moves` runs right after one of `mine`'s reads of the store (before its claim)."""
    read = mine.load

    def load(session_id: str) -> Any:
        found = read(session_id)
        if moves:
            moves.pop(0)()
        return found

    mine.load = load  # type: ignore[method-assign]


def other(tmp_path: Path, instance: str) -> Callable[[], None]:
    """Another instance claiming the session from nobody."""
    return lambda: keeper(tmp_path, instance).claim(SESSION, "")


CASES = [
    # (what happens after each of i3's reads, what revive does: "taken" here, or forwarded to an instance)
    pytest.param([], "taken", id="nobody-moves"),
    pytest.param(["release"], "taken", id="released-under-the-claim"),
    pytest.param(["release", "i5"], "taken", id="released-then-claimed-by-a-gone-instance"),
    pytest.param(["release", "i1"], "i1", id="released-then-won-by-a-live-instance"),
]


@pytest.mark.parametrize(("moves", "outcome"), CASES)
def test_a_lost_claim_reads_the_store_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, moves: list[str], outcome: str
) -> None:
    i2 = held_by_i2(tmp_path)
    i3 = keeper(tmp_path, "i3")
    steps = [(lambda: i2.release(SESSION)) if move == "release" else other(tmp_path, move) for move in moves]
    moves_after_each_read(i3, steps)
    monkeypatch.setattr(takeover, "take_over", lambda gw, mine, session_id, kept: TAKEN)
    request = HttpRequest({"REQUEST_METHOD": "POST"})
    if outcome == "taken":
        assert revive(live_instance(i3), request, SESSION) is TAKEN
        found = i3.load(SESSION)
        assert found is not None and found[1] == i3.me
    else:
        with pytest.raises(Forward) as forwarded:
            revive(live_instance(i3), request, SESSION)
        assert forwarded.value.owner == outcome


def test_claims_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A holder that changes under every claim (gone instances taking turns) ends in "not taken" (404), after
    CLAIMS reads, never a loop."""
    held_by_i2(tmp_path)
    i3 = keeper(tmp_path, "i3")
    turns = [f"i{5 + n}" for n in range(CLAIMS)]
    moves_after_each_read(i3, [other_gone_takes(tmp_path, instance) for instance in turns])
    monkeypatch.setattr(takeover, "take_over", lambda gw, mine, session_id, kept: TAKEN)
    assert revive(live_instance(i3), HttpRequest({"REQUEST_METHOD": "POST"}), SESSION) is None


def other_gone_takes(tmp_path: Path, instance: str) -> Callable[[], None]:
    """A gone instance's hold written over whatever holds it now (the store's holder changes under each claim)."""

    def take() -> None:
        store = keeper(tmp_path, instance)
        holder = store.load(SESSION)
        assert holder is not None
        store.claim(SESSION, holder[1])

    return take
