"""A reply stream kept for another POST (Stream.recycle, Session.reply_sent, Session.open_stream): a spare one taken
again is as a new one made for the same requests, a stream that is not as new is closed and never kept, and the
worker keeps at most SPARE_STREAMS."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import gevent.event
import pytest

from mcpgate.core import jsonrpc
from mcpgate.serve.front import reply
from mcpgate.serve.sessions import stream as stream_module
from mcpgate.serve.sessions.session import Session
from mcpgate.serve.sessions.spec import ChildSpec
from mcpgate.serve.sessions.stream import SPARE_STREAMS, SPARES, Delivery, Stream, StreamLimits

LIMITS = StreamLimits(100, 1 << 20, 0.1, 10, 1 << 16)
OTHER_LIMITS = StreamLimits(7, 1 << 10, 0.2, 3, 1 << 12)


@pytest.fixture(autouse=True)
def no_spares() -> Iterator[None]:
    """The worker's spares, empty for each test and after it."""
    SPARES.clear()
    yield
    SPARES.clear()


def session(limits: StreamLimits = LIMITS) -> Session:
    spec = ChildSpec(("true",), None, None, "inherit", 1 << 20, 1 << 20, 1.0, 1.0)
    return Session(
        "s" * 32,
        "owner",
        spec,
        buffer_messages=10,
        buffer_bytes=1 << 16,
        limits=limits,
        replay_streams=2,
        on_end=lambda _session, _reason: None,
    )


def request_of(n: int, method: str = "tools/call") -> jsonrpc.Request:
    return jsonrpc.Request(n, method, {}, {"jsonrpc": "2.0", "id": n, "method": method, "params": {}})


def answer_of(n: int) -> jsonrpc.Response:
    message = jsonrpc.parse(b'{"jsonrpc":"2.0","id":%d,"result":{}}' % n)
    assert isinstance(message, jsonrpc.Response)
    return message


def seen(stream: Stream) -> tuple[object, ...]:
    """What a stream's reader and writers can tell of it (its Event and deque are its own objects)."""
    return (
        stream.limits,
        stream.expected,
        stream.get,
        stream.number,
        stream.closed,
        stream.ending,
        stream.reader,
        stream.log,
        stream.id_prefix,
        stream.unread,
        stream._readers,
        stream._room,
        stream._woken,
    )


def answered(live: Session, ids: list[int]) -> Stream:
    """A POST of these requests whose reply went as JSON (every answer taken by answer_or_switch)."""
    stream = live.open_stream([request_of(n) for n in ids])
    for n in ids:
        live.route(answer_of(n))
    answers = reply.answer_or_switch(stream, 0.0)
    assert isinstance(answers, list) and len(answers) == len(ids)
    live.reply_sent(stream)
    return stream


def cancelled(live: Session, ids: list[int]) -> Stream:
    """A POST whose request the client cancelled: the cancellation's error is its JSON reply."""
    stream = live.open_stream([request_of(n) for n in ids])
    for n in ids:
        live.cancel(n)
    assert isinstance(reply.answer_or_switch(stream, 0.0), list)
    live.reply_sent(stream)
    return stream


@pytest.mark.parametrize("limits", [LIMITS, OTHER_LIMITS])
@pytest.mark.parametrize("ended", [answered, cancelled])
@pytest.mark.parametrize("ids", [[1], [1, 2]])
def test_a_spare_stream_is_taken_as_a_new_one(
    ended: Callable[[Session, list[int]], Stream], ids: list[int], limits: StreamLimits
) -> None:
    """A stream whose reply went whole is kept, and the next POST (of any session) takes it as it would a new one."""
    first = ended(session(), ids)
    assert [first] == SPARES and first.pump is None  # a spare keeps no session's child alive
    live, fresh = session(limits), session(limits)
    taken = live.open_stream([request_of(5)])
    made = fresh.open_stream([request_of(5)])
    assert taken is first and made is not first and not SPARES
    assert seen(taken) == seen(made) and (taken.pump, made.pump) == (live._pump, fresh._pump)
    live.route(answer_of(1))  # the first POST's id, answered late: no route left to the spare
    assert taken.unread == (0, 0)
    live.route(answer_of(5))
    assert taken.next(0) == Delivery(b'{"jsonrpc":"2.0","id":5,"result":{}}', True)
    assert list(live.router.open_streams) == [taken]


def pending(stream: Stream) -> None:
    stream.deliver(b"{}")


def owed(stream: Stream) -> None:
    stream.expected = 1


def resumable(stream: Stream) -> None:
    session().make_resumable(stream)


def woken(stream: Stream) -> None:
    stream.wake()


def attached(stream: Stream) -> None:
    stream.attach()


def ending(stream: Stream) -> None:
    stream.end()


def closed(stream: Stream) -> None:
    stream.close()


def waited_for_room(stream: Stream) -> None:
    stream._room = gevent.event.Event()


def waited_in_a_hub(stream: Stream) -> None:
    stream._ready.wait(0.001)  # the Event is bound to this thread's hub from then on


SPOILERS = [pending, owed, resumable, woken, attached, ending, closed, waited_for_room, waited_in_a_hub]


@pytest.mark.parametrize("spoil", SPOILERS, ids=[spoil.__name__ for spoil in SPOILERS])
def test_a_stream_not_as_new_is_closed_not_kept(spoil: Callable[[Stream], None]) -> None:
    stream = Stream(LIMITS, 0)
    spoil(stream)
    stream.recycle()
    assert stream.closed and not SPARES


def test_a_get_stream_is_never_kept() -> None:
    stream = session().open_get_stream()
    assert stream is not None
    stream.recycle()
    assert stream.closed and not SPARES


def test_the_worker_keeps_at_most_its_spares() -> None:
    streams = [Stream(LIMITS, 0) for _ in range(SPARE_STREAMS + 2)]
    for stream in streams:
        stream.recycle()
    assert streams[:SPARE_STREAMS] == SPARES and stream_module.SPARES is SPARES
    assert [stream.closed for stream in streams] == [False] * SPARE_STREAMS + [True, True]


def test_a_refused_duplicate_leaves_the_session_as_before() -> None:
    """A POST refused for an id in flight takes a spare and registers nothing, as with a new stream."""
    live = session()
    live.open_stream([request_of(1)])
    Stream(LIMITS, 0).recycle()
    with pytest.raises(Exception, match="already in flight"):
        live.open_stream([request_of(1)])
    assert live.router.in_flight == 1 and len(live.router.open_streams) == 1
