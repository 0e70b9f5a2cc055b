"""How a child's process group is brought down: the stop ladder, and the signals aimed at the whole group.

Contract: `stop_ladder` closes the child's stdin (its writer greenlet stopped first, so nothing more is written),
then waits for `exited` up to `close_timeout`; still running, the group gets SIGTERM and another `term_timeout`;
still running, SIGKILL and KILL_GRACE. It returns once `exited` is set or the last wait ran out (logged: a
process that outlives SIGKILL is the kernel's to explain). It never reaps: the supervisor (child/process.py)
waits for the exit and sets `exited`. `signal_group` signals the group the child leads (it runs in its own
session), ignoring a group already gone.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable

import gevent
import gevent.event

from mcpgate.child.waits import wait_set

KILL_GRACE = 5.0  # wait after SIGKILL; the kernel needs no longer


def signal_group(pid: int | None, sig: signal.Signals) -> None:
    """`sig` to the process group `pid` leads; nothing when it is gone (or was never started)."""
    if pid is None:
        return
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_ladder(
    pid: int | None,
    exited: gevent.event.Event,
    writer: gevent.Greenlet | None,
    close_stdin: Callable[[], None],
    timeouts: tuple[float, float],
    log: logging.Logger,
    label: str,
) -> None:
    """Close stdin, wait, SIGTERM the group, wait, SIGKILL the group (`timeouts`: close_timeout, term_timeout)."""
    close_timeout, term_timeout = timeouts
    if writer is not None:
        writer.kill(block=True, timeout=1.0)
    close_stdin()
    if wait_set(exited, close_timeout):
        return
    log.info("child[%s] pid=%s still running after stdin closed; SIGTERM", label, pid)
    signal_group(pid, signal.SIGTERM)
    if wait_set(exited, term_timeout):
        return
    log.warning("child[%s] pid=%s ignored SIGTERM; SIGKILL", label, pid)
    signal_group(pid, signal.SIGKILL)
    if not wait_set(exited, KILL_GRACE):
        log.error("child[%s] pid=%s did not exit after SIGKILL", label, pid)
