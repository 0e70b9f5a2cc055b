"""Waiting on what another process makes true: one `wait_for` (a predicate polled, a hang guard), a port that
starts listening, processes that end. Never a sleep standing in for an event: each loop stops as soon as its
condition holds."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

HANG_GUARD = 60.0  # seconds: a wait that takes this long is hung, not slow


def wait_for(
    predicate: Callable[[], object],
    timeout: float = 15.0,
    what: str | None = None,
    sleep: Callable[[float], object] = time.sleep,
) -> bool:
    """Poll `predicate` until it holds (True). Past `timeout`: False, or with `what` an AssertionError naming it.
    `sleep`: how to wait between polls (gevent.sleep under a gevent hub the test itself runs)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            if what is not None:
                raise AssertionError(f"gave up waiting for {what} after {timeout} s")
            return False
        sleep(0.02)
    return True


async def await_for(predicate: Callable[[], bool], what: str, timeout: float = HANG_GUARD) -> None:
    """wait_for in an async test (the SDK's event loop keeps running meanwhile)."""
    with anyio.fail_after(timeout):
        while not predicate():
            await anyio.sleep(0.02)


def wait_listening(
    port: int,
    proc: subprocess.Popen[Any] | None = None,
    what: str = "the server",
    log: Path | None = None,
    timeout: float = 30.0,
) -> None:
    """Until 127.0.0.1:port accepts a connection; `proc` exiting first raises (with its `log`, when given)."""

    def explain() -> str:
        return f":\n{log.read_text(errors='replace')}" if log is not None else ""

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}{explain()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on port {port} within {timeout} s{explain()}")


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` itself holds a socket listening on TCP `port` (IPv4): a connection accepted on the
    port proves only that someone listens there, maybe another test's server that took a port picked too early."""
    inodes = set()
    try:
        with open(f"/proc/{pid}/net/tcp") as table:
            for row in table.read().splitlines()[1:]:
                fields = row.split()  # sl local_address rem_address st ... uid timeout inode
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    inodes.add(f"socket:[{fields[9]}]")
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # it ended
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                return True
        except OSError:  # closed meanwhile
            continue
    return False


def wait_own_listener(port: int, proc: subprocess.Popen[Any], log: Path, timeout: float = 30.0) -> bool:
    """Until `proc` itself listens on `port`: True; False when it exits first (its `log` says why, e.g. the port
    was taken); RuntimeError past `timeout`."""
    deadline = time.monotonic() + timeout
    while not listens(proc.pid, port):
        if proc.poll() is not None:
            return False
        if time.monotonic() > deadline:
            said = log.read_text(errors="replace") if log.exists() else ""
            raise RuntimeError(f"{proc.args!r} did not listen on port {port} within {timeout} s:\n{said}")
        time.sleep(0.02)
    return True
