"""A child's join never waits past its timeout, whatever else waits for the same child (mcpgate/child/waits.py).

gevent's Event.wait on an event set while its linked waiters are still to be told joins the queued notifier and
switches to the hub without a timeout; when the last linked waiter then leaves (its timeout, or its greenlet
killed) gevent cancels the notifier and that wait never returns. Sessions ended at once met it in a bench (a
DELETE's poll of the children still stopping, join(0), never came back). Here the same order is made
deterministic with a real child: as it is gone, a poller is started and the one linked waiter is killed, both
queued before the notifier that set() queues.
"""

from __future__ import annotations

import logging
import sys

import gevent
import gevent.event
import pytest

from mcpgate.child.process import ChildProcess
from mcpgate.child.waits import wait_set

GUARD = 20.0  # a hang guard, never a speed assertion
LIMITS = {"max_line_bytes": 1 << 20, "max_write_queue_bytes": 1 << 20, "close_timeout": 5.0, "term_timeout": 5.0}
READS_STDIN = [sys.executable, "-c", "import sys; sys.stdin.buffer.read()"]  # exits at stdin's EOF


def test_join_of_a_child_just_gone_returns_while_its_waiter_leaves() -> None:
    polls: list[gevent.Greenlet] = []
    holder: list[ChildProcess] = []
    waiter: list[gevent.Greenlet] = []
    gone = gevent.event.Event()  # what this test waits on: not the child's own event, which it would link to

    def on_exit(reason: str) -> None:
        # runs just before the child's done event is set: these two are queued before set() queues its notifier
        polls.append(gevent.spawn(holder[0].join, 0))  # another session's end polling the stopping children
        waiter[0].kill(block=False)  # the one linked waiter leaves (as a wait of zero seconds whose timer fired)
        gone.set()

    child = ChildProcess(
        READS_STDIN, on_message=lambda m: None, on_exit=on_exit, logger=logging.getLogger("t"), **LIMITS
    )
    holder.append(child)
    child.start()
    try:
        waiter.append(gevent.spawn(child.join, GUARD))
        gevent.idle()  # it runs and links itself to the child's done event
        child.close("the client ended the session")
        assert gone.wait(GUARD), "the child did not go"
        gevent.joinall(polls, timeout=GUARD)
        assert polls[0].dead, "a poll of a child that is gone never returned"
        assert polls[0].value is True
    finally:
        child.stop("test end", timeout=GUARD)


def test_join_of_no_time_looks_without_switching() -> None:
    """join(0) of a child still running answers False at once: no link, no timer, no trip to the hub (a session's
    end polls every stopping child so, and must not be interleaved with other ends)."""
    child = ChildProcess(
        READS_STDIN, on_message=lambda m: None, on_exit=lambda r: None, logger=logging.getLogger("t"), **LIMITS
    )
    child.start()
    try:
        ran: list[bool] = []
        other = gevent.spawn(ran.append, True)
        assert child.join(0) is False
        assert not ran, "join(0) switched to the hub"
        other.join(GUARD)
    finally:
        assert child.stop("test end", timeout=GUARD)


@pytest.mark.parametrize("timeout", [None, 0.0, -1.0, GUARD])
def test_wait_set_answers_a_set_event_at_once(timeout: float | None) -> None:
    event = gevent.event.Event()
    event.set()
    assert wait_set(event, timeout) is True


def test_wait_set_of_an_event_not_set() -> None:
    event = gevent.event.Event()
    assert wait_set(event, 0) is False
    gevent.spawn(event.set)
    assert wait_set(event, GUARD) is True
