"""A child's stdout: its lines, read by one greenlet, or by the greenlet of a request waiting for its answer.

The reader greenlet (`run`) waits for the pipe, reads what it holds and hands each complete line to the owner
(`on_line`), until the child closes it. While the reader waits, a request waiting for its answer may read the
pipe itself (`pump`): it waits for the pipe, for its own stream's event and for its timeout at once, and when
the pipe is readable it reads what the pipe holds (a full chunk is read again at once) and hands its lines
over in its own greenlet. The child's answer so reaches its request with one greenlet switch (hub to request)
instead of three (hub to reader, reader back to the hub, hub to request) and no event notification in between.
One reads at a time: the reader's wait is paused while a pump reads, and resumed after it, so lines are handed
over in the order the child wrote them, whoever reads them. A pump interrupted between lines (its greenlet
killed) leaves the lines it had not handed over to the reader, which hands them over first.

A read that fills its chunk means the child writes more than the pipe holds (a long line, most often): the pipe
is then grown to pipes.GROWN, so a result of megabytes costs a few waits instead of one per 64 KiB (each a wake
of the child and of the reader, across cores). It is still read a chunk at a time, all it holds at once: a
chunk's buffer is reused memory, where a larger one would be fresh pages, faulted in on every read. Once the
pipe is drained with no line left unfinished it is shrunk back, so an idle child's pipe counts its usual size
towards the user's pipe limit.
Each line goes with the splitter's word that it holds no CR (LineDecoder.bare), so it is not searched again.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from typing import Any

from gevent.hub import Waiter, get_hub, getcurrent

from mcpgate.child.pipes import CHUNK, grow_pipe, shrink_pipe
from mcpgate.core.framing import LineDecoder, LineTooLong

_READABLE = 1  # libev's EV_READ


class StdoutReader:
    """One child's stdout pipe (a non-blocking fd): see the module docstring. `on_line` gets each complete line
    and whether it is bare (holds no CR; never while `discard` is set); `on_too_long` is told of a line past
    `max_line_bytes` (after the complete lines read with it), and `discard` is then set: what follows is read and
    dropped."""

    def __init__(
        self, fd: int, max_line_bytes: int, on_line: Callable[[bytes, bool], None], on_too_long: Callable[[], None]
    ) -> None:
        self.fd = fd
        self.on_line, self.on_too_long = on_line, on_too_long
        self.discard = False
        self._decoder = LineDecoder(max_line_bytes)
        self._watcher: Any = None  # the pipe's io watcher while the reader runs
        self._hub: Any = None  # the reader's hub (a pump reads in the same thread)
        self._parked: Waiter[Any] | None = None  # the reader's waiter while it waits for the pipe
        self._pumping = False  # a request's greenlet reads the pipe now
        self._ended = False  # a pump read the end of the pipe (the reader reads it again and ends)
        self._leftover: deque[tuple[bytes, bool]] = deque()  # lines an interrupted pump did not hand over
        self._usual_size = 0  # the pipe's capacity before it was grown (0: not grown)

    def run(self) -> None:
        """The reader greenlet: every line until the end of the pipe (and a last line without its newline)."""
        hub = self._hub = get_hub()
        watcher = self._watcher = hub.loop.io(self.fd, _READABLE)
        try:
            while True:
                self._park(watcher)
                while self._leftover:
                    self.on_line(*self._leftover.popleft())
                if not self._read_held(False):
                    break
            tail = None if self.discard else self._decoder.finish()
            if tail is not None:
                self.on_line(tail, self._decoder.bare)
        finally:
            self._watcher = None
            watcher.close()

    def _park(self, watcher: Any) -> None:
        """Wait until the pipe is readable (or a pump wakes the reader)."""
        waiter: Waiter[Any] = Waiter()
        self._parked = waiter
        try:
            if not self._pumping:
                watcher.start(waiter.switch, None)
            waiter.get()
        finally:
            self._parked = None
            watcher.stop()

    def _feed(self, chunk: bytes) -> None:
        if self.discard:
            return  # still drained, so the child is never stuck writing while it is shut down
        decoder, on_line = self._decoder, self.on_line
        too_long = False
        try:
            lines = decoder.feed(chunk)
        except LineTooLong as exc:
            lines, too_long = exc.lines, True  # the complete lines read with it still count
        bare = decoder.bare
        if len(lines) == 1:  # the usual read: one line (nothing would be left for the reader to hand over)
            on_line(lines[0], bare)
            lines = []
        handed = 0
        try:
            for line in lines:
                on_line(line, bare)
                handed += 1
        except BaseException:  # the pump's greenlet killed: the reader hands the rest over
            self._leftover.extend((line, bare) for line in lines[handed + 1 :])
            raise
        if too_long:
            self.discard = True
            self.on_too_long()

    def pump(self, ready: Any, timeout: float | None) -> bool | None:
        """In a request's greenlet waiting for `ready` (its stream's event): wait up to `timeout` for the pipe or
        `ready`; a readable pipe is read once here, its lines handed over. True: the pipe was read or `ready`
        set; False: `timeout` passed; None: the pipe cannot be read here now (another reads it, it ended, or
        this is the hub), and nothing was waited for."""
        watcher, parked, hub = self._watcher, self._parked, self._hub
        if parked is None or watcher is None or self._pumping or self._ended or self.discard or getcurrent() is hub:
            return None
        waiter: Waiter[Any] = Waiter(hub)
        switch = waiter.switch
        self._pumping = True
        timer = None
        try:
            watcher.stop()  # the reader's wait, paused
            watcher.start(switch, True)
            ready.rawlink(switch)
            if timeout is not None:
                timer = hub.loop.timer(timeout if timeout > 0.0 else 0.0)
                timer.start(switch, False)
            try:
                woke = waiter.get()
            finally:
                ready.unlink(switch)
                if timer is not None:
                    timer.close()
                if self._watcher is watcher:
                    watcher.stop()
            if woke is True and self._watcher is watcher:
                self._read_held(True)
                return True
            return woke is not False
        finally:
            self._pumping = False
            parked = self._parked  # the reader waits for the pipe again (_resume, inlined for the usual case)
            if parked is not None and self._watcher is watcher and not self._leftover:
                watcher.start(parked.switch, None)
            else:
                self._resume(watcher, hub)

    def _read_held(self, pumping: bool) -> bool:
        """Read what the pipe holds: a full read is read again at once (a long line's next piece is often there
        already) and grows the pipe, so a line of many chunks costs fewer waits for the pipe. False at the end of
        the pipe (a pump leaves it to the reader, which reads the end again); a pump stops at `discard`."""
        fd = self.fd
        while True:
            try:
                chunk = os.read(fd, CHUNK)
            except BlockingIOError:
                break
            if not chunk:
                self._ended = self._ended or pumping
                return False
            self._feed(chunk)
            if len(chunk) < CHUNK:
                break
            if pumping and self.discard:
                return True
            if not self._usual_size:
                self._grow()
        if self._usual_size and not self._decoder.pending:
            self._shrink()
        return True

    def _grow(self) -> None:
        """The pipe filled a read: let it hold more (once per long write; it stays as it is if it cannot)."""
        before = grow_pipe(self.fd)
        self._usual_size = before if before is not None else -1

    def _shrink(self) -> None:
        """Drained, no line unfinished: the pipe back to its usual size (tried again later if it holds more)."""
        if self._usual_size > 0 and not shrink_pipe(self.fd, self._usual_size):
            return
        self._usual_size = 0

    def _resume(self, watcher: Any, hub: Any) -> None:
        """After a pump: the reader waits for the pipe again (at once when it has lines to hand over)."""
        parked = self._parked
        if parked is None or self._watcher is not watcher:
            return
        if self._leftover:
            hub.loop.run_callback(parked.switch, None)
        else:
            watcher.start(parked.switch, None)
