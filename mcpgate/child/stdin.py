"""A child's stdin: the queue between ChildProcess.send() and the pipe, and the greenlet that drains it.

Contract: `put` never blocks. With nothing pending, a message is written at once (one writev of it and its
newline) and only what the pipe did not take is queued; otherwise it is queued behind the rest, and one writer
greenlet (never more than one at a time) drains the queue, waiting whenever the pipe is full. `queued` counts
the bytes accepted and not yet written: the owner bounds it (ChildProcess refuses a message past its
MCPGATE_WRITE_QUEUE_BYTES). A write that fails calls `on_failure` with the close reason ("stdin closed by
child", or "stdin write failed: ...") and the writer ends; it also ends once the owner sets `stopping`.
The owner gives `on_failure` when the pipe opens (`open`) and takes it back when the child is gone (`release`):
the writer holds its owner only while the pipe is open, so the two make no reference cycle once it is closed.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from typing import Any

import gevent
from gevent.hub import get_hub

_MAX_IOV = 512  # messages per writev (two iovecs each; IOV_MAX is 1024 on Linux)
_NEWLINE = b"\n"
_WRITABLE = 2  # libev's EV_WRITE
# every writer's queue until its pipe first refuses a write: most children never need one (a deque is ~0.7 KB)
_NO_QUEUE: deque[bytes | memoryview] = deque(maxlen=0)


class StdinWriter:
    """The write side of one child's stdin pipe (its fd set once the child is spawned); see the module docstring."""

    def __init__(self) -> None:
        self.fd = -1
        self.queued = 0  # bytes accepted by put() and not yet written
        self.stopping = False  # set by the owner as it shuts the child down: a writer ends
        self.greenlet: gevent.Greenlet | None = None  # the latest writer (dead once the queue was drained)
        self._queue = _NO_QUEUE  # made on first need (_more)
        self._writing = False  # a writer greenlet is draining the queue
        self._on_failure: Callable[[str], None] | None = None  # the owner's, while the pipe is open

    def open(self, fd: int, on_failure: Callable[[str], None]) -> None:
        """The pipe's fd (non-blocking), and what to call when a write to it fails."""
        self.fd, self._on_failure = fd, on_failure

    def put(self, data: bytes) -> bool:
        """Write one encoded message (no trailing newline) or queue it; False when the pipe failed. With nothing
        pending it is written straight away, and only what the pipe did not take is queued."""
        size = len(data) + 1
        if self._queue or self._writing:  # behind what is pending
            self._more().append(data)
            self.queued += size
            self._ensure_writer()
            return True
        try:
            written = os.writev(self.fd, (data, _NEWLINE))
        except BlockingIOError:
            written = 0
        except OSError as exc:
            why = "stdin closed by child" if isinstance(exc, BrokenPipeError) else f"stdin write failed: {exc}"
            self._failed(why)
            return False
        if written < size:
            rest = memoryview(data)[written:] if written < len(data) else b""
            self._more().append(rest)
            self.queued += size - written
            self._ensure_writer()
        return True

    def release(self) -> None:
        """The child is gone: forget what is queued and the owner's callback."""
        self._queue.clear()
        self.queued = 0
        self.stopping, self._on_failure = True, None

    def _failed(self, why: str) -> None:
        on_failure = self._on_failure
        if on_failure is not None:
            on_failure(why)

    def _more(self) -> deque[bytes | memoryview]:
        """The queue, made the first time the pipe does not take a message at once."""
        if self._queue is _NO_QUEUE:
            self._queue = deque()
        return self._queue

    def _ensure_writer(self) -> None:
        """Start a writer greenlet for what the pipe could not take at once (at most one at a time)."""
        if not self._writing:
            self._writing = True
            self.greenlet = gevent.spawn(self._drain)

    def _drain(self) -> None:
        """Write the queue out, waiting whenever the pipe is full; end when it is empty."""
        fd, queue, hub = self.fd, self._queue, get_hub()
        watcher = hub.loop.io(fd, _WRITABLE)
        try:
            while queue and not self.stopping:
                buffers: list[Any] = []
                for _ in range(min(len(queue), _MAX_IOV)):
                    buffers.append(queue.popleft())
                    buffers.append(_NEWLINE)
                self._write_all(fd, buffers, hub, watcher)
        except BrokenPipeError:
            self._failed("stdin closed by child")
        except OSError as exc:
            self._failed(f"stdin write failed: {exc}")
        finally:
            watcher.close()
            self._writing = False

    def _write_all(self, fd: int, buffers: list[Any], hub: Any, watcher: Any) -> None:
        """writev until everything is written, waiting for the pipe to drain when it is full."""
        while buffers:
            try:
                written = os.writev(fd, buffers)
            except BlockingIOError:
                hub.wait(watcher)
                continue
            self.queued -= written
            done = 0
            while done < len(buffers) and written >= len(buffers[done]):
                written -= len(buffers[done])
                done += 1
            del buffers[:done]
            if written:
                buffers[0] = memoryview(buffers[0])[written:]
