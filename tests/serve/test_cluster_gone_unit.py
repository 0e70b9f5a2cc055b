"""serve/cluster/gone.py in process, on a clock of its own: a "gone" mark holds while the instance's directory entry
is as it was when it was found unreachable, ends when that entry would have expired, and gives way at once to
an entry written again (a heartbeat, or an instance restarted under the same id)."""

from __future__ import annotations

from mcpgate.serve.cluster.gone import RECHECK, GoneMarks


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_mark_holds_until_the_entry_would_have_expired() -> None:
    clock = Clock()
    marks = GoneMarks(clock)
    marks.mark("i4", 12.0, fallback=15.0)  # the dead instance's entry had 12 s left
    reads: list[float] = []

    def ttl() -> float:  # nobody writes it: it runs down with the clock
        reads.append(clock.now)
        return 112.0 - clock.now

    assert marks.holds("i4", ttl) and reads == []  # not read again before RECHECK
    clock.now += RECHECK
    assert marks.holds("i4", ttl) and reads == [clock.now]
    clock.now = 112.0
    assert not marks.holds("i4", ttl)
    assert not marks.holds("i1", ttl)  # never marked


def test_an_entry_written_again_wins_over_the_mark() -> None:
    clock = Clock()
    marks = GoneMarks(clock)
    marks.mark("i4", 3.0, fallback=15.0)
    clock.now += 2 * RECHECK
    assert not marks.holds("i4", lambda: 15.0)  # restarted: its first heartbeat set a fresh 15 s
    assert not marks.holds("i4", lambda: 0.0)  # the mark is gone, whatever is read next


def test_a_mark_dropped_while_its_entry_is_read_is_dropped_once() -> None:
    """Reading the entry is a Redis round trip: another request looking at the same instance meanwhile (a gevent
    switch) may read the entry written again and drop the mark first."""
    clock = Clock()
    marks = GoneMarks(clock)
    marks.mark("i4", 3.0, fallback=15.0)
    clock.now += 2 * RECHECK
    other: list[bool] = []

    def ttl() -> float:
        if not other:
            other.append(marks.holds("i4", lambda: 15.0))  # the other request, during this one's read
        return 15.0

    assert not marks.holds("i4", ttl) and other == [False]
    assert not marks.holds("i4", lambda: 0.0)


def test_without_a_ttl_the_fallback_bounds_the_mark() -> None:
    clock = Clock()
    marks = GoneMarks(clock)
    marks.mark("i4", None, fallback=15.0)  # Redis did not answer
    clock.now += 14.0
    assert marks.holds("i4", lambda: None)
    clock.now += 1.0
    assert not marks.holds("i4", lambda: None)
