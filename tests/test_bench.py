"""SIGTERM to a running bench ends every process it started (it runs the bench itself, a few seconds)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _stat(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None


def descendants(root: int) -> dict[int, bytes]:
    """pid -> start time of every live descendant of root."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found: dict[int, bytes] = {}
    todo = list(children.get(root, []))
    while todo:
        pid = todo.pop()
        fields = _stat(pid)
        if fields is not None and fields[0] != b"Z":
            found[pid] = fields[19]
            todo.extend(children.get(pid, []))
    return found


def alive(pid: int, start: bytes) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[19] == start and fields[0] != b"Z"


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def wait_for(text: str, log: Path, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        assert proc.poll() is None, f"the bench exited {proc.returncode}: {log.read_text()[-2000:]}"
        assert time.monotonic() < deadline, f"no {text!r} within {timeout} s: {log.read_text()[-2000:]}"
        time.sleep(0.1)


def test_sigterm_ends_every_gateway_and_child_the_bench_started(tmp_path: Path) -> None:
    log = tmp_path / "bench.log"
    with open(log, "wb") as out:
        bench = subprocess.Popen(
            [
                sys.executable,
                str(BENCH / "run.py"),
                "--quick",
                "--only",
                "mcpgate",
                "--phases",
                "speed",
                "--out",
                str(tmp_path),
            ],
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    started: dict[int, bytes] = {}
    try:
        wait_for("seq mcpgate:", log, bench, 120.0)
        deadline = time.monotonic() + 60
        while True:  # the gateway, the child on direct pipes, and a child of a load client's session
            started = descendants(bench.pid)
            names = [cmdline(pid) for pid in started]
            if any("gunicorn" in n for n in names) and sum("child_server.py" in n for n in names) >= 2:
                break
            assert bench.poll() is None and time.monotonic() < deadline, (names, log.read_text()[-2000:])
            time.sleep(0.05)
        os.kill(bench.pid, signal.SIGTERM)
        assert bench.wait(60) == 128 + signal.SIGTERM, log.read_text()[-2000:]
        deadline = time.monotonic() + 10
        while any(alive(pid, start) for pid, start in started.items()) and time.monotonic() < deadline:
            time.sleep(0.1)  # the last ones may still be on their way out of the kernel
        left = [f"{pid} {cmdline(pid)}" for pid, start in started.items() if alive(pid, start)]
        assert left == [], left
        assert "ending" in log.read_text()
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait(10)
        for pid, start in started.items():
            if alive(pid, start):
                os.kill(pid, signal.SIGKILL)
