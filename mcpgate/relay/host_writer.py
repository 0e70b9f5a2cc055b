"""What the relay writes to its host (stdout), in whole lines and in order, through one lock.

A message is written by the greenlet that has it (the request itself) when it is the only one in flight, nothing
is queued and the lock is free; otherwise it goes through a bounded queue to the writer greenlet (`start`), which
writes the messages ready together in one write. A host that stops reading makes the queue fill: after
`put_timeout` a message is dropped and logged, never waited on forever. When stdout fails the host is gone:
nothing more is written and `on_closed` is called (the relay stops). The pump (relay/pump.py) decides what is
written (its cancel filter first); relay/in_process.py's MessageWriter hands the messages themselves to a host in
the same process instead of framing them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import gevent
from gevent.greenlet import Greenlet
from gevent.lock import Semaphore
from gevent.queue import Full, Queue

from mcpgate.core import jsonrpc
from mcpgate.core.framing import frame
from mcpgate.relay.stdio import StdPipes
from mcpgate.relay.transport import Upstream

log = logging.getLogger("mcpgate.relay")

WRITE_BATCH = 256
Out = bytes | Upstream  # what goes to the host: an upstream message, or a line the relay made itself


class HostWriter:
    """The relay's one way to its host (see the module docstring). `alone()`: whether a message ready now has
    nothing in flight to be batched with."""

    def __init__(
        self, queue_size: int, put_timeout: float, alone: Callable[[], bool], on_closed: Callable[[], None]
    ) -> None:
        self._out: Queue = Queue(maxsize=queue_size)
        self._put_timeout = put_timeout
        self._alone, self._on_closed = alone, on_closed
        self._gone = False
        # stdout: the writer greenlet's, or the one request in flight's when nothing is queued (see write).
        self._direct: StdPipes | None = None
        self._writing = Semaphore()

    def write(self, item: Out) -> None:
        """One message for the host: an upstream message (encoded only for stdout) or a line the relay made."""
        if self._gone:
            return
        # The only request in flight writes its own answer (no hand-off to the writer greenlet); under
        # load answers go through the queue, so that those ready together leave in one write.
        direct = self._direct
        if direct and self._alone() and self._out.empty() and self._writing.acquire(False):
            try:
                self.emit(direct, [item])
            except OSError as exc:
                self._closed(exc)
            finally:
                self._writing.release()
            return
        try:
            self._out.put(item, timeout=self._put_timeout)
        except Full:
            log.error("the host has not read stdout for %gs; dropped a message", self._put_timeout)

    def emit(self, pipes: StdPipes, items: list[Out]) -> None:
        """Whole lines to stdout in one write."""
        pipes.write_all(b"".join(frame(item if isinstance(item, bytes) else jsonrpc.raw_bytes(item)) for item in items))

    def start(self, pipes: StdPipes) -> Greenlet:
        """The writer greenlet, spawned; direct writes to `pipes` allowed from now on."""
        writer = gevent.spawn(self._loop, pipes)
        self._direct = pipes
        return writer

    def finish(self, writer: Greenlet) -> None:
        """Write what is queued, then stop the writer greenlet (bounded waits)."""
        self._direct = None  # what is written from now on is queued behind what already is
        try:
            self._out.put(None, timeout=1.0)
        except Full:
            pass
        writer.join(timeout=2.0)
        writer.kill(block=True, timeout=1.0)
        # Not asked any more (no direct write, no writer greenlet): the relay's callbacks dropped, no cycle left.
        self._alone, self._on_closed = _never, _nothing

    def _loop(self, pipes: StdPipes) -> None:
        while True:
            batch = [self._out.get()]
            while len(batch) < WRITE_BATCH and not self._out.empty():
                batch.append(self._out.get_nowait())
            done = None in batch
            items = [item for item in batch if item is not None]
            try:
                if items:
                    with self._writing:  # after a direct write still under way: whole lines, in order
                        self.emit(pipes, items)
            except OSError as exc:
                self._closed(exc)
                return
            if done:
                return

    def _closed(self, exc: OSError) -> None:
        log.info("stdout closed (%s)", exc.strerror or exc)
        self._gone = True
        self._direct = None
        self._on_closed()


def _never() -> bool:
    return False


def _nothing() -> None:
    return None
