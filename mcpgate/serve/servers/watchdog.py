"""The watchdog: one greenlet in the worker that sweeps the children with limits (MCPGATE_CHILD_*,
MCPGATE_REQUEST_TIMEOUT) about once a second, and ends through the stop ladder (cause "limit") a child whose
process group holds more processes than MCPGATE_CHILD_PROCESSES, has used more CPU than MCPGATE_CHILD_CPU_SECONDS
(the group's, forks included: RLIMIT_CPU counts each process apart), or has had one request in flight for longer
than MCPGATE_REQUEST_TIMEOUT. Each sweep also notes the CPU time and address space it saw (ChildProcess.usage),
which put an exit by SIGKILL or a failed allocation down to its limit.

No child with such a limit, no greenlet: a server without limits costs nothing here. A sweep reads /proc/*/stat
once (one pass over the machine's processes) only when a watched child counts processes or CPU; a request timeout
alone reads nothing but the owners' clocks.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic

import gevent

from mcpgate.child.limits import ChildLimits, cpu_limit, limit_reason, processes_limit, timeout_limit
from mcpgate.child.process import ChildProcess
from mcpgate.core.cancel import CancelTracker
from mcpgate.core.jsonrpc import Id, IdKey, Notification, Request, Response, id_key
from mcpgate.core.routing import Route, Router, S

log = logging.getLogger("mcpgate.watchdog")

SWEEP = 1.0  # seconds between sweeps (shorter when a request timeout is shorter than two sweeps)
_TICK = os.sysconf("SC_CLK_TCK")
Oldest = Callable[[], "float | None"]  # when the oldest request in flight on a child was sent (time.monotonic)


@dataclass(slots=True)
class Group:
    """A process group's members and CPU seconds, as one sweep read them."""

    processes: int = 0
    cpu: float = 0.0


@dataclass(eq=False, slots=True)
class Watched:
    child: ChildProcess
    limits: ChildLimits
    oldest: Oldest | None


def read_groups(pgids: set[int], proc: str = "/proc") -> tuple[dict[int, Group], dict[int, int]]:
    """The live (not zombie) processes and CPU seconds of these process groups, and each leader's address space
    in bytes. A leader's CPU includes its children it has waited for."""
    groups = {pgid: Group() for pgid in pgids}
    vsizes: dict[int, int] = {}
    try:
        entries = os.listdir(proc)
    except OSError:
        return groups, vsizes
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        group = groups.get(int(fields[2]))  # fields: state, ppid, pgrp, ... utime (11), stime (12), ...
        if group is None or fields[0] == b"Z":
            continue
        group.processes += 1
        ticks = int(fields[11]) + int(fields[12])
        if int(entry) in groups:  # the leader (the child itself: its pid is its group's id)
            ticks += int(fields[13]) + int(fields[14])
            vsizes[int(entry)] = int(fields[20])
        group.cpu += ticks / _TICK
    return groups, vsizes


def read_vsize(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[20])
    except (OSError, IndexError, ValueError):
        return None


class Watchdog:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.watched: dict[ChildProcess, Watched] = {}
        self.interval = SWEEP
        self._greenlet: gevent.Greenlet | None = None

    def watch(self, child: ChildProcess, oldest: Oldest | None = None) -> None:
        """Sweep this started child until it ends (nothing when its limits need no watching)."""
        limits = child.limits
        if limits is None or not limits.watched or child.pid is None:
            return
        self.watched[child] = Watched(child, limits, oldest if limits.request_timeout else None)
        if limits.request_timeout:
            self.interval = min(self.interval, max(0.1, limits.request_timeout / 2))
        if self._greenlet is None or self._greenlet.dead:
            self._greenlet = gevent.spawn(self._run)

    def _run(self) -> None:
        while self.watched:
            gevent.sleep(self.interval)
            try:
                self.sweep()
            except Exception:
                log.exception("watchdog sweep failed")
        self.interval = SWEEP

    def sweep(self) -> None:
        """Forget the children that are gone or going, check the others' limits."""
        for child in [child for child in self.watched if not child.alive]:
            del self.watched[child]
        counted = {w.child.pid for w in self.watched.values() if w.limits.processes or w.limits.cpu_seconds}
        groups, vsizes = read_groups({pid for pid in counted if pid is not None}) if counted else ({}, {})
        now = self.clock()
        for watched in list(self.watched.values()):
            passed = self._check(watched, groups, vsizes, now)
            if passed is not None:
                child = watched.child
                log.warning("child[%s] pid=%s passed %s; ending it", child.label, child.pid, passed)
                del self.watched[child]
                child.close(limit_reason(passed), cause="limit")

    @staticmethod
    def _check(watched: Watched, groups: dict[int, Group], vsizes: dict[int, int], now: float) -> str | None:
        """The limit the child has passed, or None (noting what was seen of it)."""
        child, limits = watched.child, watched.limits
        pid = child.pid if child.pid is not None else -1
        group = groups.get(pid)
        vsize = vsizes.get(pid) if pid in vsizes else (read_vsize(pid) if limits.memory_bytes else None)
        if vsize is not None:
            child.usage.vsize = max(child.usage.vsize, vsize)
        if group is not None:
            child.usage.cpu = group.cpu
            if limits.processes and group.processes > limits.processes:
                return processes_limit(limits)
            if limits.cpu_seconds and group.cpu > limits.cpu_seconds:
                return cpu_limit(limits)
        if watched.oldest is not None:
            since = watched.oldest()
            if since is not None and now - since > limits.request_timeout:
                return timeout_limit(limits)
        return None


_shared: Watchdog | None = None


def shared() -> Watchdog:
    """The worker's watchdog (one sweep for every server's children)."""
    global _shared
    if _shared is None:
        _shared = Watchdog()
    return _shared


def register(child: ChildProcess, oldest: Oldest | None = None) -> None:
    """Watch a started child when its limits need it; `oldest` tells the request timeout what is in flight."""
    if child.limits is not None and child.limits.watched:
        shared().watch(child, oldest)


class TimedRouter(Router[S], Generic[S]):
    """A Router that also knows when each request in flight was sent (a session's MCPGATE_REQUEST_TIMEOUT)."""

    def __init__(self, cancelled: CancelTracker, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(cancelled)
        self._sent: dict[IdKey, float] = {}  # oldest first
        self._clock = clock

    def oldest(self) -> float | None:
        return next(iter(self._sent.values()), None)

    def open_request(self, request: Request, stream: S) -> None:
        super().open_request(request, stream)
        self._sent[id_key(request.id)] = self._clock()

    def route(self, message: Request | Notification | Response, now: float) -> Route[S]:
        if isinstance(message, Response) and message.id is not None:
            self._sent.pop(id_key(message.id), None)
        return super().route(message, now)

    def cancel(self, request_id: Id, now: float) -> S | None:
        self._sent.pop(id_key(request_id), None)
        return super().cancel(request_id, now)

    def abandon_all(self) -> list[tuple[Id, S]]:
        self._sent.clear()
        return super().abandon_all()


def router(limits: ChildLimits | None, cancelled: CancelTracker) -> Router[S]:
    """A session's router: a TimedRouter when MCPGATE_REQUEST_TIMEOUT is set, else the plain one."""
    return TimedRouter(cancelled) if limits is not None and limits.request_timeout else Router(cancelled)


def watch_session(child: ChildProcess, session_router: Router[S]) -> None:
    """Watch a session's started child; its router (a TimedRouter when timed) tells what is in flight."""
    register(child, session_router.oldest if isinstance(session_router, TimedRouter) else None)
