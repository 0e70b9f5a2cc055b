"""Waiting on what another process makes true: one `wait_for` (a predicate polled, a hang guard), a port that
starts listening, processes that end. Never a sleep standing in for an event: each loop stops as soon as its
condition holds."""

from __future__ import annotations

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
