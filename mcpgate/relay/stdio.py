"""The relay's two pipes and its stop signals, on every platform the relay runs on.

Where gevent can wait on a pipe (Linux, macOS, the BSDs: gevent.os has nb_read
there) stdin and stdout are made non-blocking and read and written on the hub;
their blocking mode is restored at the end. Elsewhere (Windows, where gevent's
loop cannot select on a pipe) every read and write is a plain blocking call run
in one of the hub's native threads, so the other greenlets run meanwhile.

SIGINT and SIGTERM stop the relay: through gevent's signal watchers on POSIX; on
Windows through the standard handler (only Ctrl-C / Ctrl-Break arrive there; a
host that ends the relay closes its stdin or terminates the process).
"""

from __future__ import annotations

import gc
import logging
import os
import signal
from collections.abc import Callable
from typing import Any, Protocol

import gevent
import gevent.os
from gevent.greenlet import Greenlet

log = logging.getLogger("mcpgate.relay")

READ_BYTES = 64 * 1024
IDLE_WAIT_SECONDS = 60.0
# How often the relay's main wait wakes on its own where a signal cannot wake the hub (Windows).
SIGNAL_POLL_SECONDS = 1.0
POSIX_SIGNALS = os.name == "posix"


class StdPipes(Protocol):
    def read(self) -> bytes: ...

    def write_all(self, data: bytes) -> None: ...

    def restore(self) -> None: ...


class HubPipes:
    """Non-blocking fds read and written on the hub (gevent.os.nb_read / nb_write)."""

    def __init__(self, in_fd: int, out_fd: int) -> None:
        self.in_fd, self.out_fd = in_fd, out_fd
        self._saved = {fd: os.get_blocking(fd) for fd in (in_fd, out_fd)}
        for fd in self._saved:
            gevent.os.make_nonblocking(fd)

    def read(self) -> bytes:
        data: bytes = gevent.os.nb_read(self.in_fd, READ_BYTES)
        return data

    def write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[gevent.os.nb_write(self.out_fd, view) :]

    def restore(self) -> None:
        for fd, blocking in self._saved.items():
            try:
                os.set_blocking(fd, blocking)
            except OSError:
                pass


class ThreadedPipes:
    """Blocking reads and writes, each run in a native thread of the hub's threadpool."""

    def __init__(self, in_fd: int, out_fd: int) -> None:
        self.in_fd, self.out_fd = in_fd, out_fd
        self._threads = gevent.get_hub().threadpool

    def read(self) -> bytes:
        data: bytes = self._threads.apply(os.read, (self.in_fd, READ_BYTES))
        return data

    def write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written: int = self._threads.apply(os.write, (self.out_fd, view))
            view = view[written:]

    def restore(self) -> None:
        pass


def open_pipes(in_fd: int, out_fd: int) -> StdPipes:
    """The cooperative pipes this platform allows."""
    if hasattr(gevent.os, "nb_read"):
        return HubPipes(in_fd, out_fd)
    log.debug("stdin and stdout are read and written in native threads (gevent cannot wait on pipes here)")
    return ThreadedPipes(in_fd, out_fd)


class StopSignals:
    """Call `on_signal(signum)` on the hub when SIGINT or SIGTERM arrives, until cancel()."""

    def __init__(self, on_signal: Callable[[int], None]) -> None:
        wanted = (signal.SIGINT, signal.SIGTERM)
        self._watchers: list[Any] = []
        self._previous: dict[int, Any] = {}
        if POSIX_SIGNALS:
            self._watchers = [gevent.signal_handler(sig, on_signal, sig) for sig in wanted]
            return
        loop = gevent.get_hub().loop

        def handler(signum: int, frame: object) -> None:
            loop.run_callback_threadsafe(on_signal, signum)

        self._previous = {sig: signal.signal(sig, handler) for sig in wanted}

    @property
    def wait_seconds(self) -> float:
        """How long the relay's main wait sleeps before looking again: a signal wakes the hub on POSIX
        only, so elsewhere the wait wakes often to let the standard handler run."""
        return IDLE_WAIT_SECONDS if POSIX_SIGNALS else SIGNAL_POLL_SECONDS

    def cancel(self) -> None:
        for watcher in self._watchers:
            watcher.cancel()
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._watchers, self._previous = [], {}


def leftovers() -> tuple[int, int]:
    """(live greenlets, open sockets) of this process: both should be 0 after shutdown."""
    gc.collect()
    greenlets = sum(1 for obj in gc.get_objects() if isinstance(obj, Greenlet) and not obj.dead)
    try:
        fds = os.listdir("/proc/self/fd")
        sockets = sum(1 for fd in fds if _readlink(f"/proc/self/fd/{fd}").startswith("socket:"))
    except OSError:
        sockets = -1  # not Linux: unknown
    return greenlets, sockets


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""
