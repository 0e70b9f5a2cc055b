"""CancelTracker: TTL with an injected clock, late responses dropped once, bounded size."""

from __future__ import annotations

import pytest

from mcpgate.core.cancel import CancelTracker


@pytest.mark.parametrize(
    ("cancelled_at", "checked_at", "dropped"),
    [
        pytest.param(100.0, 100.0, True, id="immediately"),
        pytest.param(100.0, 109.999, True, id="just-before-ttl"),
        pytest.param(100.0, 110.0, False, id="exactly-at-ttl-expired"),
        pytest.param(100.0, 500.0, False, id="long-after"),
    ],
)
def test_ttl_with_injected_clock(cancelled_at: float, checked_at: float, dropped: bool) -> None:
    tracker = CancelTracker(ttl=10.0)
    tracker.cancel(("n", 1), cancelled_at)
    assert tracker.drop_late(("n", 1), checked_at) is dropped


def test_drop_late_consumes_the_entry() -> None:
    tracker = CancelTracker(ttl=10.0)
    tracker.cancel("k", 0.0)
    assert "k" in tracker
    assert tracker.drop_late("k", 1.0) is True
    assert "k" not in tracker
    assert tracker.drop_late("k", 1.0) is False
    assert len(tracker) == 0


def test_unknown_key_is_not_dropped() -> None:
    tracker = CancelTracker()
    tracker.cancel(("n", 1), 0.0)
    assert tracker.drop_late(("s", "1"), 0.0) is False
    assert ("n", 1) in tracker


def test_expire_forgets_entries_whose_time_is_up() -> None:
    tracker = CancelTracker(ttl=10.0)
    for i, t in enumerate([0.0, 1.0, 2.0, 3.0]):
        tracker.cancel(i, t)
    tracker.expire(11.5)
    assert [k for k in range(4) if k in tracker] == [2, 3]
    tracker.expire(13.0)
    assert len(tracker) == 0


def test_cancel_expires_old_entries_as_it_goes() -> None:
    tracker = CancelTracker(ttl=5.0)
    tracker.cancel("old", 0.0)
    tracker.cancel("new", 100.0)
    assert "old" not in tracker
    assert len(tracker) == 1


def test_recancel_refreshes_deadline_and_order() -> None:
    tracker = CancelTracker(ttl=10.0)
    tracker.cancel("a", 0.0)
    tracker.cancel("b", 1.0)
    tracker.cancel("a", 5.0)  # a now expires at 15, after b (11)
    tracker.expire(12.0)
    assert "a" in tracker and "b" not in tracker
    assert tracker.drop_late("a", 14.0) is True


@pytest.mark.parametrize(
    ("max_entries", "keys", "kept"),
    [
        (1, ["a", "b", "c"], ["c"]),
        (2, ["a", "b", "c"], ["b", "c"]),
        (3, ["a", "b", "c"], ["a", "b", "c"]),
        (2, ["a", "b", "a", "c"], ["a", "c"]),  # re-cancelled "a" is newest, so "b" goes
    ],
)
def test_max_entries_evicts_oldest(max_entries: int, keys: list[str], kept: list[str]) -> None:
    tracker = CancelTracker(ttl=1000.0, max_entries=max_entries)
    for i, key in enumerate(keys):
        tracker.cancel(key, float(i))
    assert len(tracker) == len(kept)
    assert [k for k in "abc" if k in tracker] == kept


def test_forget() -> None:
    tracker = CancelTracker()
    tracker.cancel("a", 0.0)
    tracker.forget("a")
    tracker.forget("never")
    assert tracker.drop_late("a", 0.0) is False


@pytest.mark.parametrize(("ttl", "max_entries"), [(0.0, 1), (-1.0, 1), (1.0, 0), (1.0, -5)])
def test_limits_must_be_positive(ttl: float, max_entries: int) -> None:
    with pytest.raises(ValueError):
        CancelTracker(ttl=ttl, max_entries=max_entries)
