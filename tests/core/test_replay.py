"""Event ids, the per-stream replay log and what a Last-Event-ID resumes (mcpgate.core.replay), as tables."""

from __future__ import annotations

import pytest

from mcpgate.core.replay import CannotResume, EventId, ReplayLog, Resume, parse_event_id, resolve


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("ab12cd34-1-0", EventId("ab12cd34", 1, 0)),
        ("ab12cd34-17-250", EventId("ab12cd34", 17, 250)),
        (" ab12cd34-1-2 ", EventId("ab12cd34", 1, 2)),  # header whitespace
        ("ab12cd34-1", None),
        ("ab12cd34-1-2-3", None),
        ("ab12cd34-+1-2", None),  # int() would take these three
        ("ab12cd34-1_0-2", None),
        ("ab12cd34- 1-2", None),
        ("ab12cd34-1-x", None),
        ("ab12cd34-١-2", None),  # a non-ASCII digit
        ("ab/cd-1-2", None),
        ("-1-2", None),
        ("", None),
        ("a-1-" + "9" * 19, None),  # no seq that long
        ("a" * 62 + "-1-2", None),  # longer than any id we make
    ],
)
def test_parse_event_id(text: str, parsed: EventId | None) -> None:
    assert parse_event_id(text) == parsed


def test_an_event_id_round_trips() -> None:
    event = EventId("ab12cd34", 3, 9)
    assert parse_event_id(str(event)) == event


def log_of(sizes: list[int], max_events: int = 100, max_bytes: int = 1000) -> ReplayLog:
    log = ReplayLog(max_events, max_bytes)
    for size in sizes:
        log.record(b"x" * size)
    return log


@pytest.mark.parametrize(
    ("sizes", "max_events", "max_bytes", "kept", "first"),
    [
        ([], 3, 100, (0, 0), 1),
        ([10, 10], 3, 100, (2, 20), 1),
        ([10, 10, 10, 10], 3, 100, (3, 30), 2),  # past the count: oldest forgotten
        ([40, 40, 40], 10, 100, (2, 80), 2),  # past the bytes: oldest forgotten
        ([40, 500], 10, 100, (1, 500), 2),  # the newest is kept even when larger than the bound
        ([500, 10], 10, 100, (1, 10), 2),
    ],
)
def test_the_log_is_bounded_in_events_and_bytes(
    sizes: list[int], max_events: int, max_bytes: int, kept: tuple[int, int], first: int
) -> None:
    log = log_of(sizes, max_events, max_bytes)
    assert log.size == kept
    assert log.first_seq == first
    assert log.last_seq == len(sizes)


def test_after_replays_what_followed_a_seq() -> None:
    log = ReplayLog(3, 1000)
    for data in (b"a", b"b", b"c", b"d"):
        log.record(data)
    assert [seq for seq, _ in log.after(1)] == [2, 3, 4]
    assert log.after(3) == [(4, b"d")]
    assert log.after(4) == []
    assert [log.covers(seq) for seq in range(6)] == [False, True, True, True, True, False]


TAG = "ab12cd34"


def logs() -> dict[int, ReplayLog]:
    return {1: log_of([10, 10, 10, 10, 10], max_events=3), 2: log_of([])}


@pytest.mark.parametrize(
    ("last_event_id", "outcome"),
    [
        (f"{TAG}-1-5", Resume(1, 5)),  # nothing missed
        (f"{TAG}-1-2", Resume(1, 2)),  # the oldest still kept follow
        (f"{TAG}-2-0", Resume(2, 0)),  # a primed stream that has sent nothing yet
        (f"{TAG}-1-1", CannotResume("fell out", expired=True)),
        (f"{TAG}-1-0", CannotResume("fell out", expired=True)),
        (f"{TAG}-1-6", CannotResume("not sent")),
        (f"{TAG}-3-0", CannotResume("no longer keeps")),
        ("ffffffff-1-5", CannotResume("another session")),
        ("nonsense", CannotResume("not an event id")),
    ],
)
def test_resolve(last_event_id: str, outcome: Resume | CannotResume) -> None:
    got = resolve(last_event_id, TAG, logs())
    if isinstance(outcome, Resume):
        assert got == outcome
    else:
        assert isinstance(got, CannotResume) and outcome.reason in got.reason and got.expired == outcome.expired
