"""No orphans, even when a worker dies abruptly.

The gunicorn master makes itself a child subreaper, so processes whose parent
(a worker, or a launcher such as npx) dies are re-parented to the master
instead of init. After a worker exits, the master finds such processes (its
own children that are not workers) and ends their process groups: SIGTERM,
then SIGKILL for what is left after a short wait. Linux only; elsewhere these
functions do nothing.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import signal
import time
from collections.abc import Callable

log = logging.getLogger("mcpgate.child.orphans")

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


@functools.lru_cache(maxsize=1)
def _libc_prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up once in the parent (never between fork and exec); None when unavailable."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def become_subreaper() -> bool:
    """Make this process adopt orphaned descendants (called in the gunicorn master)."""
    prctl = _libc_prctl()
    return prctl is not None and int(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0


def preexec_die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A preexec_fn: the child gets SIGKILL when its parent (the worker) dies, even by SIGKILL."""
    prctl = _libc_prctl()

    def preexec() -> None:  # runs in the forked child before exec
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def children_of(pid: int) -> list[int]:
    """Direct children of `pid`, read from /proc."""
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:  # fields: state, ppid, pgrp, ...
            found.append(int(entry))
    return found


def reap_orphans(worker_pids: set[int], grace: float = 1.0) -> list[int]:
    """End the process groups of this process's non-worker children; return the pids found."""
    orphans = [pid for pid in children_of(os.getpid()) if pid not in worker_pids]
    groups = set()
    for pid in orphans:
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            continue
    groups.discard(os.getpgrp())
    for group in groups:
        _signal_group(group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while groups and time.monotonic() < deadline:
        _collect(orphans)
        groups = {g for g in groups if _group_alive(g)}
        time.sleep(0.05)
    for group in groups:
        _signal_group(group, signal.SIGKILL)
    _collect(orphans)
    if orphans:
        log.warning("ended %d orphaned child process(es) of a dead worker: %s", len(orphans), orphans)
    return orphans


def _signal_group(group: int, sig: int) -> None:
    try:
        os.killpg(group, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _collect(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
