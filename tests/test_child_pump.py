"""child/stdout.py's pump: a request waiting on its stream reads the child's stdout in its own greenlet. Its lines
are handed over in the order the child wrote them, whoever reads them; a second waiter, or a stdout that ended,
leaves the reading to the reader greenlet; a pump killed between lines leaves the rest to the reader; a stream
without a pump waits as before. A real child (`cat`, which writes back each line it is given) per test."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import gevent
import gevent.event
import pytest

from mcpgate.child.process import ChildProcess
from mcpgate.core import jsonrpc
from mcpgate.core.jsonrpc import Notification, Request, Response
from mcpgate.serve.sessions.stream import Delivery, Stream, StreamLimits

GUARD = 20.0  # a hang guard for every wait, never a speed assertion
LIMITS = StreamLimits(messages=100, bytes=1 << 20, stall_timeout=GUARD, replay_events=10, replay_bytes=1 << 20)


def number_of(message: Response) -> int:
    assert isinstance(message.id, int)
    return message.id


def line(number: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": number, "result": {"n": number}}).encode()


class Cat:
    """A `cat` child whose messages go to `target` (a stream's deliver, or a test's own callback), each with the
    greenlet that handed it over."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, object]] = []
        self.target: Callable[[Response], object] = lambda message: None
        self.exited = gevent.event.Event()
        self.child = ChildProcess(
            ["cat"],
            on_message=self.on_message,
            on_exit=lambda reason: self.exited.set(),
            max_line_bytes=1 << 20,
            max_write_queue_bytes=1 << 20,
            close_timeout=0.5,
            term_timeout=0.5,
        )

    def on_message(self, message: Request | Notification | Response) -> None:
        assert isinstance(message, Response)
        self.seen.append((number_of(message), gevent.getcurrent()))
        self.target(message)


@pytest.fixture
def cat() -> Iterator[Cat]:
    made = Cat()
    made.child.start()
    try:
        yield made
    finally:
        assert made.child.stop("test over", timeout=GUARD)


def stream_of(cat: Cat, pump: bool = True) -> Stream:
    stream = Stream(LIMITS, expected=1)
    stream.pump = cat.child.pump if pump else None
    cat.target = lambda message: stream.deliver(jsonrpc.raw_bytes(message), True)
    return stream


def test_the_waiting_greenlet_reads_its_answer(cat: Cat) -> None:
    for number in range(1, 20):
        stream = stream_of(cat)
        assert cat.child.send(line(number))
        item = stream.next(GUARD)
        assert isinstance(item, Delivery) and json.loads(item.data)["id"] == number
    assert [number for number, _ in cat.seen] == list(range(1, 20))
    assert any(greenlet is gevent.getcurrent() for _, greenlet in cat.seen)  # read here, not only by the reader


def test_without_a_pump_the_reader_hands_answers_over(cat: Cat) -> None:
    stream = stream_of(cat, pump=False)
    assert cat.child.send(line(1))
    item = stream.next(GUARD)
    assert isinstance(item, Delivery) and cat.seen[0][1] is not gevent.getcurrent()


def test_a_timeout_with_nothing_read_is_none(cat: Cat) -> None:
    assert stream_of(cat).next(0.05) is None


def test_one_reads_at_a_time_in_the_order_written(cat: Cat) -> None:
    streams = {number: Stream(LIMITS, expected=1) for number in range(1, 6)}
    for stream in streams.values():
        stream.pump = cat.child.pump
    cat.target = lambda message: streams[number_of(message)].deliver(jsonrpc.raw_bytes(message), True)
    waiters = [gevent.spawn(stream.next, GUARD) for stream in streams.values()]
    gevent.sleep(0)
    assert cat.child.send(b"\n".join(line(number) for number in streams))
    gevent.joinall(waiters, timeout=GUARD, raise_error=True)
    assert all(isinstance(waiter.value, Delivery) for waiter in waiters)
    assert [number for number, _ in cat.seen] == list(streams)


def test_a_pump_killed_between_lines_leaves_the_rest_to_the_reader(cat: Cat) -> None:
    stream = Stream(LIMITS, expected=1)
    stream.pump = cat.child.pump
    got: list[int] = []
    first = gevent.event.Event()

    def target(message: Response) -> None:
        got.append(number_of(message))
        if message.id == 1 and gevent.getcurrent() is waiter:
            first.set()
            gevent.sleep(GUARD)  # killed here, lines 2 and 3 not yet handed over

    cat.target = target
    waiter = gevent.spawn(stream.next, GUARD)
    gevent.sleep(0)
    assert cat.child.send(b"\n".join(line(number) for number in (1, 2, 3)))
    assert first.wait(GUARD)
    waiter.kill(timeout=GUARD)
    with gevent.Timeout(GUARD):
        while got != [1, 2, 3]:
            gevent.sleep(0.01)
    assert cat.child.send(line(4))  # the reader reads on
    with gevent.Timeout(GUARD):
        while got[-1:] != [4]:
            gevent.sleep(0.01)


def test_the_end_of_stdout_is_the_reader_s(cat: Cat) -> None:
    stream = stream_of(cat)
    waiter = gevent.spawn(stream.next, 0.5)  # pumping when stdout ends; nothing comes for it
    gevent.sleep(0)
    cat.child.close("test closes stdin")  # cat ends: its stdout reads as ended
    assert cat.exited.wait(GUARD)  # the reader read the end (on_exit runs once it has)
    waiter.join(GUARD)
    assert waiter.dead and waiter.value is None and cat.child.pump(gevent.event.Event(), 0.01) is None
