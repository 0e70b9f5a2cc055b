"""Every process the bench starts, so that SIGTERM or SIGINT to the bench ends them before it exits.

Gateways and relays are started in their own sessions (process groups, `start_new_session=True`) and
registered here; the load clients are multiprocessing children. On SIGTERM/SIGINT the bench's main process
snapshots each registered group's descendants, SIGTERMs the groups, gives them `GRACE_S` to stop, then
SIGKILLs the groups, every snapshotted descendant still running and every multiprocessing child, and
exits with 128 + the signal number.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from types import FrameType

GRACE_S = 5.0
_started: dict[int, subprocess.Popen[bytes]] = {}  # pid (= process group id) -> the Popen
_owner = os.getpid()


def register(proc: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
    """Remember a process started with start_new_session=True (its pid is its process group id)."""
    _started[proc.pid] = proc
    return proc


def forget(proc: subprocess.Popen[bytes]) -> None:
    _started.pop(proc.pid, None)


def live() -> list[int]:
    """Pids of the registered processes that have not been reaped."""
    return [pid for pid, proc in _started.items() if proc.poll() is None]


def _descendants(roots: list[int]) -> dict[int, bytes]:
    """Every descendant of `roots` (roots included): pid -> its /proc stat start time, to check it later."""
    children: dict[int, list[int]] = {}
    starts: dict[int, bytes] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        starts[int(entry)] = fields[19]
    found: dict[int, bytes] = {}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in starts and pid not in found:
            found[pid] = starts[pid]
            todo.extend(children.get(pid, []))
    return found


def adopt_orphans() -> None:
    """Make this process the reaper of its orphaned descendants (Linux PR_SET_CHILD_SUBREAPER): a child server
    whose gateway died stays our descendant, so `mine` finds it and no other run's processes are touched."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def mine() -> set[int]:
    """Every live descendant of this process (with `adopt_orphans`, orphans included)."""
    return set(_descendants([os.getpid()])) - {os.getpid()}


def _same_process(pid: int, start: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19] == start
    except (OSError, IndexError):
        return False


def _signal_groups(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.killpg(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def end_all(grace_s: float = GRACE_S) -> None:
    """SIGTERM every registered group, wait up to grace_s, then SIGKILL what is left (descendants included)."""
    clients = multiprocessing.active_children()
    for client in clients:
        client.terminate()
    groups = list(_started)
    tree = _descendants(groups)
    _signal_groups(groups, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(proc.poll() is None for proc in _started.values()):
        time.sleep(0.05)
    _signal_groups(groups, signal.SIGKILL)
    for pid, start in tree.items():  # descendants that left the group (own sessions, daemons)
        if _same_process(pid, start):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for proc in list(_started.values()):
        try:
            proc.wait(5.0)
        except subprocess.TimeoutExpired:
            pass
        forget(proc)
    for client in clients:
        client.join(2.0)
        if client.is_alive():
            client.kill()
            client.join(2.0)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    if os.getpid() != _owner:  # a forked load client inherited the handler: die as the signal says
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)  # cleanup is not interrupted by a second signal
    print(
        f"\nbench: {signal.Signals(signum).name}: ending {len(_started)} started process group(s)",
        file=sys.stderr,
        flush=True,
    )
    end_all()
    raise SystemExit(128 + signum)


def install_handlers() -> None:
    """SIGTERM and SIGINT end every started process, then the bench (call once, from the main process)."""
    global _owner
    _owner = os.getpid()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
