"""The pool's choice of a child (Pool._pick) reads the children in place and, when it stops one, reads them again
from the start: a table of groups of one to three children in every state that matters (starting, ended, stopping,
exited, to be asked again, unable to serve, full, a candidate's, with bridged calls, legacy or modern) gives the
same child, the same refusal and the same children stopped as the copy-and-read-on choice it replaced."""

from __future__ import annotations

import itertools
from collections import deque
from types import SimpleNamespace
from typing import Any

import pytest

from mcpgate.serve.front.http import Refusal
from mcpgate.serve.modern.pool import Pool
from mcpgate.serve.modern.pooled_child import Era

LIMIT = 2


class Kid(SimpleNamespace):
    """A pooled child as _pick and _stop read it (hashable by identity, as PooledChild is)."""

    __hash__ = object.__hash__


class Flag:
    def __init__(self, value: bool) -> None:
        self.value = value

    def is_set(self) -> bool:
        return self.value


def child(
    name: str,
    *,
    ready: bool = True,
    ended: str | None = None,
    stopping: bool = False,
    alive: bool = True,
    redo: bool = False,
    problem: str | None = None,
    load: int = 0,
    candidate: bool = False,
    bridged_calls: int = 0,
    era: Era = Era.LEGACY,
) -> Kid:
    kid = Kid(
        label=name,
        ready=Flag(ready),
        ended=ended,
        stopping=stopping,
        child=SimpleNamespace(alive=alive),
        redo=redo,
        problem=problem,
        calls={f"m{n}": None for n in range(load)},
        candidate=object() if candidate else None,
        bridged_calls=bridged_calls,
        era=era,
        closed=[],
    )
    kid.close = kid.closed.append
    return kid


STATES: dict[str, dict[str, Any]] = {
    "idle": {},
    "idle modern": {"era": Era.MODERN},
    "one call": {"load": 1},
    "one call modern": {"load": 1, "era": Era.MODERN},
    "full": {"load": LIMIT},
    "starting": {"ready": False},
    "ended": {"ended": "exit 1"},
    "stopping": {"stopping": True},
    "exited": {"alive": False},
    "exited, to be asked again": {"alive": False, "redo": True},
    "to be asked again": {"redo": True},
    "to be asked again, loaded": {"redo": True, "load": 1},
    "cannot serve": {"problem": "no tools"},
    "stopping, cannot serve": {"stopping": True, "problem": "no tools"},
    "a candidate's": {"candidate": True},
    "a candidate's, modern": {"candidate": True, "era": Era.MODERN},
    "bridged calls": {"bridged_calls": 1, "load": 1},
    "bridged calls, modern": {"bridged_calls": 1, "load": 1, "era": Era.MODERN},
}


def reference_pick(pool: Any, group: Any, bridged: bool, candidate: bool) -> Any:
    """Pool._pick as it was: a copy of the children read on past a child it stops."""
    best = None
    best_load = limit = pool.settings.pool_child_requests
    for kid in list(group.children):
        if not kid.ready.is_set() or kid.ended or kid.stopping or not kid.child.alive:
            continue
        if kid.redo:
            pool._stop(group, kid, "restarted to ask its era again")
            continue
        if kid.problem:
            group.crashes.append((pool.clock(), kid.problem))
            pool._stop(group, kid, kid.problem)
            raise Refusal(502, -32603, f"Bad Gateway: {kid.problem}")
        load = len(kid.calls)
        if load >= limit:
            continue
        busy = kid.candidate is not None or (candidate and kid.bridged_calls > 0)
        if bridged and busy and kid.era is Era.LEGACY:
            continue
        if best is None or load < best_load:
            best, best_load = kid, load
    return best


def run(pick: Any, states: tuple[str, ...], bridged: bool, candidate: bool) -> tuple[Any, ...]:
    kids = [child(f"c{n}", **STATES[state]) for n, state in enumerate(states)]
    group = SimpleNamespace(children=list(kids), crashes=deque())
    pool = SimpleNamespace(settings=SimpleNamespace(pool_child_requests=LIMIT), clock=lambda: 5.0, _stopping=set())
    pool._stop = lambda group_, kid, reason: Pool._stop(pool, group_, kid, reason)  # type: ignore[arg-type]
    pool._pick = lambda group_, bridged_, candidate_: pick(pool, group_, bridged_, candidate_)
    try:
        picked = pick(pool, group, bridged, candidate)
        outcome = picked.label if picked is not None else None
    except Refusal as refusal:
        outcome = ("refused", refusal.status, refusal.message)
    return (
        outcome,
        [kid.label for kid in group.children],
        sorted(kid.label for kid in pool._stopping),
        list(group.crashes),
        [kid.closed for kid in kids],
    )


GROUPS = [(state,) for state in STATES] + list(itertools.product(STATES, repeat=2))
THREES = [
    ("to be asked again", "idle", "to be asked again"),
    ("one call", "to be asked again", "idle"),
    ("idle", "to be asked again", "cannot serve"),
    ("to be asked again", "to be asked again", "one call"),
    ("one call", "one call", "idle modern"),
    ("a candidate's", "bridged calls", "idle"),
    ("full", "exited, to be asked again", "to be asked again, loaded"),
    ("starting", "ended", "stopping"),
]


@pytest.mark.parametrize("bridged", [False, True])
@pytest.mark.parametrize("candidate", [False, True])
@pytest.mark.parametrize("states", GROUPS + THREES, ids=" / ".join)
def test_pick_as_before(states: tuple[str, ...], bridged: bool, candidate: bool) -> None:
    assert run(Pool._pick, states, bridged, candidate) == run(reference_pick, states, bridged, candidate)
