"""Password checks off the worker's event loop.

A password check is slow on purpose (werkzeug's scrypt: about 0.2-0.5 s of one core and 32 MiB). Run on the
worker's only event loop, every wrong password an attacker sends would stall every other request for that long.
Here each check runs on a small native thread pool (gevent's ThreadPool: hashlib's scrypt and pbkdf2 release the
GIL while they work, so the loop keeps serving), at a lower CPU priority on Linux (the loop's requests go first
when the cores are busy), and at most `ceiling` checks run or wait at once: past it a sign-in is refused at once
(Busy), without checking anything, so the queue, its memory and its waits stay bounded.

The pool is made on first use, in the process that uses it (a pool's threads do not survive a fork).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import TypeVar

from gevent.threadpool import ThreadPool

T = TypeVar("T")

NICENESS = 10  # how much lower than the worker's the checking threads' CPU priority is (Linux: per thread)
BUSY_RETRY_AFTER = 1  # seconds a sign-in refused as Busy is told to wait (a check frees a slot in about that)


class Busy(Exception):
    """Every check slot is taken; nothing was checked."""


def _lowered(work: Callable[[], T]) -> T:
    """Runs on a pool thread: lowers that thread's priority (on Linux the nice value is per thread and who=0 is
    the calling thread; elsewhere it would be the whole process, so nothing is changed), then does the work."""
    if sys.platform.startswith("linux") and os.getpriority(os.PRIO_PROCESS, 0) < NICENESS:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, NICENESS)
        except OSError:
            pass
    return work()


class HashPool:
    """`threads` native threads run the checks; at most `ceiling` checks run or wait at once."""

    def __init__(self, threads: int, ceiling: int) -> None:
        self.threads, self.ceiling = threads, max(ceiling, threads)
        self.in_flight = 0
        self._lock = threading.Lock()  # made after the worker's monkey patching: a gevent lock there
        self._pool: ThreadPool | None = None
        self._pid = 0

    def _threads(self) -> ThreadPool:
        if self._pool is None or self._pid != os.getpid():
            self._pool, self._pid = ThreadPool(self.threads), os.getpid()
        return self._pool

    def run(self, work: Callable[[], T]) -> T:
        """work() on a pool thread; this greenlet waits, the others run. Busy when `ceiling` are in flight."""
        with self._lock:
            if self.in_flight >= self.ceiling:
                raise Busy
            self.in_flight += 1
        try:
            result: T = self._threads().apply(_lowered, (work,))
            return result
        finally:
            with self._lock:
                self.in_flight -= 1
