"""Who may take a kept session over on one machine (serve/sessions/kept.runs_here): a holder that still runs under
its master goes on holding it (another worker, another gateway sharing the state directory: never stolen), an
orphaned one is dying (waited for), a gone one hands it over. Real processes stand in for the holders."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from mcpgate.serve.sessions.kept import DYING, HELD, holder_here, process_start, runs_here


@pytest.fixture
def other() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(10)


def as_holder(pid: int, started: str, parent: str) -> str:
    return f"i1/{pid}.{started}.{parent}.0123456789ab"


def test_the_holders_of_one_machine(other: subprocess.Popen[bytes]) -> None:
    started, parent = process_start(other.pid)
    assert parent == str(os.getpid())
    rows = [
        (as_holder(other.pid, started, parent), HELD),  # runs, under the master it started under
        (as_holder(other.pid, started, "1"), DYING),  # runs, but its master is gone: orphaned
        (as_holder(other.pid, str(int(started) + 1), parent), None),  # the pid is another process's now
        (f"i1/{holder_here()}.0123456789ab", None),  # this process: never "another"
        ("i1/", None),
        ("", None),
        ("i1/notapid.1.2.x", None),
    ]
    for holder, expected in rows:
        assert runs_here(holder) == expected, holder


def test_a_holder_that_exited_hands_over(other: subprocess.Popen[bytes]) -> None:
    started, parent = process_start(other.pid)
    holder = as_holder(other.pid, started, parent)
    assert runs_here(holder) == HELD
    other.kill()
    other.wait(10)
    assert runs_here(holder) is None
