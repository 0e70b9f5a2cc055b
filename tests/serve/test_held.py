"""A session's buffer (serve/sessions/held.py): what it holds after a table of appends, against its contract read
plainly (at most `count` messages and `limit` bytes, oldest dropped first, one past `limit` never held), and a
flush that hands a stream every held message in order."""

from __future__ import annotations

import logging

import pytest

from mcpgate.serve.sessions.held import Held
from mcpgate.serve.sessions.stream import Stream, StreamLimits

LIMITS = StreamLimits(100, 1 << 20, 0.1, 10, 1 << 16)


def contract(count: int, limit: int, sizes: list[int]) -> list[bytes]:
    """What the contract says is held after these appends, read as plainly as it is written."""
    held: list[bytes] = []
    for n, size in enumerate(sizes):
        data = bytes([65 + n % 26]) * size
        if size > limit:
            continue
        while held and (len(held) == count or sum(map(len, held)) + size > limit):
            held.pop(0)
        held.append(data)
    return held


CASES = [
    (3, 100, []),
    (3, 100, [10]),
    (3, 100, [10, 20, 30]),
    (3, 100, [10, 20, 30, 40]),  # past the count: the oldest goes
    (3, 100, [60, 50]),  # past the bytes: the oldest goes
    (3, 100, [30, 30, 30, 90]),  # one message needs all three gone
    (3, 100, [101]),  # larger than the buffer: never held
    (3, 100, [10, 101, 20]),  # ... and it drops nothing held
    (3, 100, [100, 0, 0, 1]),
    (1, 100, [5, 6, 7]),
    (5, 10, [3, 3, 3, 3, 3, 3]),
    (5, 10, [10, 10, 0, 10]),
]


def appended(count: int, limit: int, sizes: list[int]) -> Held:
    held = Held(count, limit, "s-test")
    for n, size in enumerate(sizes):
        held.append(bytes([65 + n % 26]) * size)
    return held


@pytest.mark.parametrize(("count", "limit", "sizes"), CASES)
def test_what_is_held_is_what_the_contract_says(count: int, limit: int, sizes: list[int]) -> None:
    held = appended(count, limit, sizes)
    expected = contract(count, limit, sizes)
    assert list(held.messages) == expected
    assert held.bytes == sum(map(len, expected))
    assert len(held.messages) <= count and held.bytes <= limit


@pytest.mark.parametrize(("count", "limit", "sizes"), CASES)
@pytest.mark.parametrize("older", [[], [4], [4, 5, 6, 7], [200, 1]])
def test_older_messages_go_first_within_the_bounds(count: int, limit: int, sizes: list[int], older: list[int]) -> None:
    """put_first is the contract's appends of the older messages, then of those held."""
    held = appended(count, limit, sizes)
    first = [b"o" * size for size in older]
    again = [*first, *held.messages]
    held.put_first(first)
    reference = Held(count, limit, "s-test")
    for data in again:
        reference.append(data)
    assert list(held.messages) == list(reference.messages) and held.bytes == reference.bytes


def test_nothing_held_shares_one_empty_deque() -> None:
    """A session that never holds a message makes no deque of its own (and flushing it delivers nothing)."""
    one, two = Held(3, 100, "a"), Held(3, 100, "b")
    assert one.messages is two.messages and not one.messages
    stream = Stream(LIMITS, 0, get=True)
    one.flush_to(stream)
    assert stream.take_pending() == []
    one.append(b"x")
    assert one.messages is not two.messages and not two.messages


@pytest.mark.parametrize(("count", "limit", "sizes"), CASES)
def test_a_flush_delivers_every_held_message_in_order(count: int, limit: int, sizes: list[int]) -> None:
    held = appended(count, limit, sizes)
    expected = list(held.messages)
    stream = Stream(LIMITS, 0, get=True)
    held.flush_to(stream)
    assert [item.data for item in stream.take_pending()] == expected
    assert not held.messages and held.bytes == 0


def test_drops_are_logged_with_the_session(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mcpgate.session"):
        appended(2, 10, [11, 4, 4, 4])
    assert [r.getMessage() for r in caplog.records] == [
        "session s-test: no stream open; dropped a message larger than the buffer",
        "session s-test: no stream open and the buffer is full; dropped 1 oldest",
    ]
