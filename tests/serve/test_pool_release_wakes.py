"""A call's release on a pooled child wakes whoever waits for a slot, the request waiting in its principal's group
or for room in the whole pool, and runs no callback when no one waits: the child reads the pool's two lists of
waiters, which the pool clears in place (a list replaced would leave the child reading an old one, and a later
waiter would sleep until its deadline)."""

from __future__ import annotations

from typing import Any

import gevent.event
import pytest

from mcpgate.serve.modern.calls import new_call
from mcpgate.serve.modern.pool import Pool
from mcpgate.serve.modern.pool_group import Group
from mcpgate.serve.modern.pooled_child import Era
from mcpgate.serve.sessions.stream import Stream
from tests.serve.test_modern_call_shortcuts import LIMITS, pooled, request


def wired() -> tuple[Any, Group, Pool, list[int]]:
    """A child wired to a group and a pool as Pool._spawn wires it, and the count of its on_release runs."""
    pool: Any = object.__new__(Pool)
    pool._waiters = []
    group = Group("p")
    child, _pipe = pooled(Era.MODERN)
    runs: list[int] = []

    def on_release() -> None:
        runs.append(1)
        Pool._wake(pool, group)

    child.on_release = on_release
    child.waiters = (group.waiters, pool._waiters)
    return child, group, pool, runs


def one_call(child: Any) -> None:
    message = request("tools/call", {"name": "echo"})
    call = new_call(message, "p", {}, Stream(LIMITS, 1))
    assert child.start_call(message, call)
    child.release(call)


@pytest.mark.parametrize("where", ["group", "pool", "none"])
def test_a_release_wakes_the_waiters_twice_over(where: str) -> None:
    child, group, pool, runs = wired()
    lists = {"group": group.waiters, "pool": pool._waiters}
    for round_ in range(2):  # the second round finds the lists the first one cleared
        event = gevent.event.Event()
        if where != "none":
            lists[where].append(event)
        one_call(child)
        assert event.is_set() is (where != "none")
        assert runs == [1] * (round_ + 1 if where != "none" else 0)
        assert not group.waiters and not pool._waiters
    assert child.waiters == (group.waiters, pool._waiters)
    assert child.waiters[0] is group.waiters and child.waiters[1] is pool._waiters


def test_a_child_not_of_a_pool_runs_no_callback() -> None:
    child, _pipe = pooled(Era.MODERN)

    def boom() -> None:
        raise AssertionError("on_release ran with no one waiting")

    child.on_release = boom
    one_call(child)
    assert not child.calls
