"""The reply machine of the MCP endpoints: one request's reply, JSON or SSE, on all three transports.

Streamable HTTP (serve/sessions/streamable.py), the HTTP+SSE transport (serve/sessions/legacy_sse.py) and the
2026-07-28 stateless requests (serve/modern/stateless.py) reply through here. It owns:

- the wait before switching: a reply is JSON when every response its stream is owed comes first, each within
  MCPGATE_SSE_AFTER; anything else first (a progress notification, a request of the child's, the wait running
  out) turns it into SSE, and what was taken goes back in front (`answer_or_switch`);
- the count of responses still owed (`Stream.expected`): taken down as responses are answered, given back when
  they are put back, and the SSE reply of a POST ends when it reaches zero;
- the SSE reply itself (`opening`, `events`): a priming event or a first comment, then the stream's events,
  keepalive comments when it has been quiet for MCPGATE_KEEPALIVE;
- one way to notice a departed client (`Client`): a read-readiness watcher on its socket (PeerWatch) that wakes
  the reply as soon as the connection reads as ended, and the worker's probe, once a second, for what the
  watcher cannot see (a TLS socket, a pipelined request waiting).
"""

from __future__ import annotations

import enum
import logging
import ssl
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from gevent.hub import get_hub

from mcpgate.core.sse import encode_comment, encode_event, encode_priming
from mcpgate.serve.front.context import context
from mcpgate.serve.front.peer_probe import ended
from mcpgate.serve.sessions.stream import END, Delivery, End, Stream

log = logging.getLogger("mcpgate.http")

SSE_HEADERS: Final = {"Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"}
TICK: Final = 1.0  # seconds between probes that the client is still there while a reply waits
SOCKET: Final = "gunicorn.sock"  # the environ key of the client's connection (gunicorn's gevent handler sets it)
KEEPALIVE: Final = encode_comment("keepalive")


class Turn(enum.Enum):
    """How a reply that is not JSON goes on."""

    SSE = "sse"  # something else came first, or the wait ran out: the reply is an SSE stream
    GONE = "gone"  # the client went away, or the stream ended, before its responses came


class PeerWatch:
    """Runs a callback as soon as the client's connection reads as ended (its FIN or a reset): an I/O watcher on
    the socket, not a periodic probe, and the callback runs in the watcher's (it must not block), so a client
    that closes its stream and at once sends another request has its call cancelled before that request is
    read. Data waiting instead (a pipelined request) ends the watch: the probe covers that rare case. A TLS
    socket is not watched (its bytes cannot be peeked).

    One per connection (`of`), made on its first watched request and started and stopped for each: a watcher
    made per request cost an fcntl and an epoll_ctl each time (libev registers a new watcher's fd afresh); a
    stopped one started again on the same fd costs neither. It goes with its socket."""

    __slots__ = ("_fd", "_on_gone", "_watcher")

    def __init__(self, sock: Any) -> None:  # the socket itself is not kept (the table holds it weakly)
        self._on_gone: Callable[[], None] | None = None
        self._fd = sock.fileno() if not isinstance(sock, ssl.SSLSocket) else -1
        self._watcher: Any = get_hub().loop.io(self._fd, 1) if self._fd >= 0 else None

    @classmethod
    def of(cls, sock: Any) -> PeerWatch | None:
        """The connection's watch (None: nothing to watch, such as a test client's request with no socket)."""
        fileno = getattr(sock, "fileno", None)
        if fileno is None:
            return None
        fd = fileno()
        kept = _WATCHES.get(fd)
        if kept is not None and kept[0]() is sock:
            return kept[1]
        made = cls(sock)
        if fd >= 0:  # the fd's last connection's watch is dropped with it (a new socket needs a new watcher)
            _WATCHES[fd] = (weakref.ref(sock), made)
        return made

    def start(self, on_gone: Callable[[], None]) -> None:
        """Run `on_gone` (in the hub) as soon as the connection reads as ended, until `stop` (`of` gave this watch
        for an open socket: a closed one gets a watch of its own that watches nothing)."""
        if self._watcher is not None:
            self._on_gone = on_gone
            self._watcher.start(self._readable)

    def _readable(self) -> None:  # in the hub: a peek and `on_gone`, neither of which blocks
        on_gone = self._on_gone
        self.stop()
        if on_gone is None or not ended(self._fd):
            return
        try:
            on_gone()
        except Exception:
            log.exception("acting on a client that has gone failed")

    def stop(self, on_gone: Callable[[], None] | None = None) -> None:
        """Stop watching (only when the watch runs `on_gone`, if given: another request's is left alone; equal
        is enough, so a bound method made afresh counts as the one given to `start`)."""
        if on_gone is not None and on_gone != self._on_gone:
            return
        self._on_gone = None
        if self._watcher is not None:
            self._watcher.stop()


# By fd: the socket it was made for (weakly: a closed connection's entry stays until its fd is used again, at most
# one per fd the worker has open at once) and the watch.
_WATCHES: dict[int, tuple[weakref.ref[Any], PeerWatch]] = {}


class Client:
    """The client's connection as a reply sees it: `gone()` says whether it has left (never blocks), `watch`
    runs a callback as soon as it leaves (see PeerWatch).

    No reference cycle is left behind: the watch holds the Client (its bound `_left`) only while it runs, and
    `stop` drops it and the callback, so a finished reply's Client, stream and call go with their last
    reference, not with a run of the cyclic garbage collector."""

    __slots__ = ("_on_gone", "_probe", "_sock", "_watch", "departed")

    def __init__(self, sock: Any = None, probe: Callable[[], bool] | None = None) -> None:
        self._sock, self._probe = sock, probe
        self._watch: PeerWatch | None = None
        self._on_gone: Callable[[], None] | None = None  # what `_left` runs
        self.departed = False

    @classmethod
    def of(cls, environ: dict[str, Any]) -> Client:
        """The connection of the request `environ` describes (the worker's socket and probe, when there)."""
        return cls(environ.get(SOCKET), context(environ).peer_gone)

    def gone(self) -> bool:
        if not self.departed and self._probe is not None and self._probe():
            self.departed = True
        return self.departed

    def watch(self, on_gone: Callable[[], None]) -> None:
        """Run `on_gone` (in the hub: it must not block) as soon as the connection reads as ended."""
        if self._watch is not None:  # watched already (a fresh Client, as every request makes, is not: no call)
            self.stop()
        watch = PeerWatch.of(self._sock)
        if watch is not None:
            self._watch, self._on_gone = watch, on_gone
            watch.start(self._left)

    def _left(self) -> None:  # the watch's callback, in the hub
        self.departed = True
        on_gone = self._on_gone
        if on_gone is not None:
            on_gone()

    def stop(self) -> None:
        watch, self._watch, self._on_gone = self._watch, None, None
        if watch is not None:
            watch.stop(self._left)


def answer_or_switch(
    stream: Stream, within: float, client: Client | None = None, early: Iterable[Delivery] = ()
) -> list[Delivery] | Turn:
    """The responses the stream is owed, when each comes first and within `within` seconds (the reply is JSON,
    `early` first: answers the gateway gave itself); otherwise what was taken goes back in front of the stream,
    the owed count with it, and the Turn says how the reply goes on."""
    collected = list(early) if early else []
    item: Delivery | End | Turn | None
    while stream.expected > 0:
        # the next message, END, Turn.GONE when the client leaves, Turn.SSE when `within` passes first
        deadline = time.monotonic() + within
        left = within  # the first wait's: all of it (the clock was just read)
        while True:
            if client is None:
                item = stream.next(left if left > 0.0 else 0.0)
            else:
                item = stream.next(max(0.0, min(TICK, left)))
            if item is not None:
                break
            if client is not None and client.gone():
                item = Turn.GONE
                break
            if left <= 0:
                item = Turn.SSE
                break
            left = deadline - time.monotonic()
        if isinstance(item, Delivery) and item.done:
            collected.append(item)
            stream.expected -= 1
            continue
        if isinstance(item, Delivery):
            collected.append(item)
        stream.expected += sum(1 for taken in collected if taken.done)
        stream.requeue(collected)  # the SSE reply sends them first, with their event ids
        return Turn.SSE if isinstance(item, Delivery) else Turn.GONE if item is END else item
    return collected


def opening(
    stream: Stream,
    *,
    priming: bool,
    retry: float = 0.0,
    answers: bool = True,
    after: str | None = None,
    missed: Iterable[tuple[str, bytes]] = (),
) -> list[bytes]:
    """What an SSE reply sends before the stream's messages: the priming event when `priming` (2025-11-25's: its
    id is `after`, the event a resume named, or the stream's seq 0; the client waits `retry` seconds before it
    reconnects), else a first comment (a GET stream's; a POST's only when nothing is there to send, so proxies
    keep the request and the headers go now), then what a resume `missed`, with their event ids."""
    missed = list(missed)
    first: list[bytes] = []
    if priming:
        first.append(encode_priming(after or stream.id_prefix + "0", round(retry * 1000)))
    elif not answers:
        first.append(encode_comment("stream open"))
    elif not (stream.unread[0] or missed):
        first.append(encode_comment("waiting"))
    return first + [encode_event(data, event_id=event_id) for event_id, data in missed]


def events(
    stream: Stream,
    *,
    keepalive: float,
    client: Client | None,
    reader: int | None = None,
    opening: Iterable[bytes] = (),
    answers: bool = True,
    on_keepalive: Callable[[], None] | None = None,
    on_gone: Callable[[], None] | None = None,
    on_end: Callable[[], None] | None = None,
) -> Iterator[bytes]:
    """An SSE reply: `opening` (a priming event, a first comment, what a resume missed), then the stream's
    messages as events until END, the client's leaving or (`answers`) the last response it is owed, keepalive
    comments when it was quiet for `keepalive` seconds (`on_keepalive` runs once one is written). The client's
    leaving wakes the reply at once, `on_gone` first (in the hub: it must not block); `on_end` runs however the
    reply ends. `reader`: the stream's reader token (None: the stream has one reader)."""
    if client is not None:
        client.watch(stream.wake if on_gone is None else _both(on_gone, stream.wake))
    try:
        yield from opening
        quiet_since = time.monotonic()
        wait = keepalive if client is None else min(TICK, keepalive)
        while not answers or stream.expected > 0:
            item = stream.next(wait, reader)
            if item is END:
                return
            if item is None:
                if client is not None and client.gone():
                    return
                if time.monotonic() - quiet_since >= keepalive:
                    yield KEEPALIVE
                    quiet_since = time.monotonic()
                    if on_keepalive is not None:
                        on_keepalive()  # the write above succeeded: the client is still there
                continue
            yield encode_event(item.data, event_id=stream.record(item))
            quiet_since = time.monotonic()
            if answers and item.done:
                stream.expected -= 1
    finally:
        if client is not None:
            client.stop()
        if on_end is not None:
            on_end()


def _both(first: Callable[[], None], then: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        try:
            first()
        finally:
            then()

    return run
