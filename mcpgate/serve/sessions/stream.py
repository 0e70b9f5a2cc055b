"""The reply channel of one HTTP request: a POST's reply or a GET stream, bounded in messages and bytes,
resumable once its reply turned SSE (what its readers took is kept in a bounded replay log)."""

from __future__ import annotations

import enum
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, NamedTuple

import gevent.event
from gevent.hub import Waiter, get_hub

from mcpgate.child.waits import wait_set
from mcpgate.core.replay import ReplayLog

log = logging.getLogger("mcpgate.session")


class Delivery(NamedTuple):
    """One message for a stream's reader (a tuple: made once per message, at half a frozen dataclass's cost; as
    immutable)."""

    data: bytes
    done: bool = False  # a response: one of the stream's requests is answered


class End(enum.Enum):
    """The stream's reader is asked to finish (a sentinel, so it can never be taken for a message)."""

    END = "end"


END: Final = End.END
# Streams a reply is done with, kept as new ones would be made (Stream.recycle) for the next POST to take
# (Session.open_stream): a Stream made costs ~5,950 instructions (its Event ~2,200, its deque ~1,000), a spare one
# taken a few stores. The worker's, for every session; never more than SPARE_STREAMS.
SPARE_STREAMS: Final = 16
SPARES: list[Stream] = []
_new_tuple = tuple.__new__  # makes a Delivery as its NamedTuple __new__ does, without that Python frame

# reads a stream's source in the calling greenlet while it waits for the stream's event, at most `timeout` seconds:
# True when it read or the event was set, False when the timeout passed, None when it could not (nothing waited)
Pump = Callable[[gevent.event.Event, float | None], bool | None]


@dataclass(frozen=True, slots=True)
class StreamLimits:
    """How much one stream may hold: unread messages and bytes, how long a full stream waits for its
    reader, and what a resumable stream keeps of what it sent."""

    messages: int
    bytes: int
    stall_timeout: float
    replay_events: int
    replay_bytes: int
    on_drop: Callable[[], None] | None = None  # told when a stream is ended for not being read (metrics)


def wait(event: gevent.event.Event, timeout: float | None) -> bool:
    """event.wait(timeout), without the Timeout (a Python object, and an exception when it fires) gevent makes for
    each wait: a timer wakes the waiter instead (a stream's reader waits once per message). True when it is set.
    A set event is answered without gevent's wait (child/waits.py: a waiter queued behind a cancelled wakeup is
    never resumed)."""
    if timeout is None or event.is_set():
        return wait_set(event, timeout)
    hub = get_hub()
    waiter = Waiter(hub)
    switch = waiter.switch
    timer = hub.loop.timer(max(0.0, timeout))
    event.rawlink(switch)
    timer.start(switch, None)
    try:
        waiter.get()
    finally:
        timer.close()
        event.unlink(switch)
    return bool(event.is_set())


class Stream:
    """The reply channel of one HTTP request (a POST's reply or the GET stream).

    Unread messages wait in `pending`, bounded in messages and bytes. A resumable stream (one whose reply
    turned SSE on the Streamable HTTP endpoint) also has a `log` of what its readers took, so a reader
    that resumes (a new HTTP request: `attach`) is replayed what came after its Last-Event-ID; a reader
    that is no longer current is told END.
    """

    __slots__ = (
        "_bytes",
        "_pending",
        "_readers",
        "_ready",
        "_room",
        "_woken",
        "closed",
        "ending",
        "expected",
        "get",
        "id_prefix",
        "limits",
        "log",
        "number",
        "pump",
        "reader",
    )

    def __init__(self, limits: StreamLimits, expected: int = 0, get: bool = False) -> None:
        self.limits = limits
        self.expected = expected  # responses still owed to this stream
        self.get = get  # the session's GET stream (else a POST's reply)
        self.number = 0  # the session's number for it once it is resumable
        self.closed = False  # ended for good: nothing more is taken or given
        self.ending = False  # END once what is pending is read
        self.reader = 1  # the current reader's token; 0 while no connection reads the stream
        self.log: ReplayLog | None = None  # set by Session.make_resumable
        self.id_prefix = ""  # "<tag>-<stream>-": the event ids' common part
        self._readers = 1
        self._pending: deque[Delivery] = deque()
        self._bytes = 0
        self._ready = gevent.event.Event()
        self._room: gevent.event.Event | None = None  # made when a writer first waits for room (rare)
        self._woken = False
        # reads its messages' source in its reader's greenlet while it waits (a child's stdout: ChildProcess.pump)
        self.pump: Pump | None = None

    @property
    def unread(self) -> tuple[int, int]:
        """(messages, bytes) waiting for a reader."""
        return len(self._pending), self._bytes

    def deliver(self, data: bytes, done: bool = False, *, force: bool = False) -> bool:
        """Queue one message. While the stream is full, waits (stall_timeout) for its reader; a stream no
        one reads, or still full after the wait, is ended (False). `force` (a flushed, bounded session
        buffer) never waits."""
        if self.closed:
            return False
        if not force and self._pending and not self._fits(len(data)) and not self._wait_for_room(len(data)):
            count, size = self.unread
            log.warning("a client stopped reading its stream (%d messages, %d bytes unread); ending it", count, size)
            self.close()
            if self.limits.on_drop is not None:
                self.limits.on_drop()
            return False
        self._pending.append(_new_tuple(Delivery, (data, done)))  # Delivery(data, done) without its __new__'s frame
        self._bytes += len(data)
        self._ready.set()
        return True

    def _fits(self, size: int) -> bool:
        return len(self._pending) < self.limits.messages and self._bytes + size <= self.limits.bytes

    def _wait_for_room(self, size: int) -> bool:
        deadline = time.monotonic() + self.limits.stall_timeout
        while self._pending and not self._fits(size):
            left = deadline - time.monotonic()
            if self.closed or not self.reader or left <= 0:
                return False
            if self._room is None:
                self._room = gevent.event.Event()
            self._room.clear()
            self._room.wait(left)
        return not self.closed

    def requeue(self, items: list[Delivery]) -> None:
        """Put messages a reader took back in front of the pending ones (never waits)."""
        for item in reversed(items):
            self._pending.appendleft(item)
            self._bytes += len(item.data)
        if items:
            self._ready.set()

    def take_pending(self) -> list[Delivery]:
        """Remove and return every unread message."""
        items = list(self._pending)
        self._pending.clear()
        self._bytes = 0
        self._make_room()
        return items

    def next(self, timeout: float | None, reader: int | None = None) -> Delivery | End | None:
        """The next message, END when the stream is ended (or `reader` is no longer its reader), or None
        when `timeout` passes first or the reader is woken (`wake`). With a `pump`, the wait reads the stream's
        source itself (its messages for other streams go there), within the same `timeout` all told."""
        deadline: float | None = None
        while True:
            if self.closed or (reader is not None and reader != self.reader):
                return END
            if self._pending:
                item = self._pending.popleft()
                self._bytes -= len(item.data)
                if self._room is not None:  # a writer waits for room (_make_room)
                    self._room.set()
                return item
            if self.ending:
                return END
            if self._woken:
                self._woken = False
                return None
            self._ready.clear()
            if self.pump is not None:
                if deadline is None:  # the first wait: all of `timeout`
                    left = timeout
                    if timeout is not None:
                        deadline = time.monotonic() + timeout
                else:
                    left = deadline - time.monotonic()
                woke = self.pump(self._ready, left)
                if woke is not None:
                    if not woke and not self._woken:
                        return None
                    continue
            if not wait(self._ready, timeout) and not self._woken:
                return None

    def record(self, item: Delivery) -> str | None:
        """The event id of a message a reader is sending (kept in the log for replay), or None when the
        stream is not resumable."""
        if self.log is None:
            return None
        return self.id_prefix + str(self.log.record(item.data))

    def attach(self) -> int:
        """A new reader takes the stream over (its token); the previous one, if any, is told END."""
        self._readers += 1
        self.reader = self._readers
        self._ready.set()
        return self.reader

    def wake(self) -> None:
        """Have a reader waiting in `next` return None now, as if its wait ran out (never blocks): its reply
        looks at its client (serve/front/reply.py)."""
        self._woken = True
        self._ready.set()

    def end(self) -> None:
        """Ask the stream's reader to finish once it has read what is pending (never blocks)."""
        self.ending = True
        self._ready.set()

    def close(self) -> None:
        """End the stream now, dropping what is unread."""
        self.closed = True
        self._pending.clear()
        self._bytes = 0
        self._ready.set()
        if self._room is not None:  # a writer waits for room (_make_room)
            self._room.set()

    def recycle(self) -> None:
        """Done with for good, its reply sent whole (the caller forgot it in its router): kept among the worker's
        SPARES when it is as a new stream (nothing pending, owed, logged or waited for; never resumed nor woken; its
        Event bound to no hub, so any thread's POST may take it: a reply's pump links it, which binds none), to be
        taken by the next POST; else (or when SPARE_STREAMS are kept) closed."""
        if (
            not self.expected
            and not self._pending
            and self.log is None
            and self._room is None
            and self._readers == 1
            and not (self.closed or self.ending or self._woken or self.get)
            and len(SPARES) < SPARE_STREAMS
            and self._ready.hub is None
        ):
            self.pump = None  # its session's child is not kept alive by a spare (the next POST sets its own)
            SPARES.append(self)
        else:
            self.close()

    def _make_room(self) -> None:
        """Wake a writer waiting for room, if one is."""
        if self._room is not None:
            self._room.set()
