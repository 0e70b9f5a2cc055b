"""fastmcp (a third-party server framework, 4.0.10) behind the hub: tests/fixtures/fastmcp_server.py run by the
python of the virtual environment tests/peers/install.sh makes for it (tests/.peers/fastmcp-venv; fastmcp is no
dependency of the project and its own may differ from the pinned `mcp`), over stdio (an mcpServers entry) or
Streamable HTTP in a process of its own (a `url` entry)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import FIXTURES, ROOT, free_port, stop_process
from tests.support.waiting import HANG_GUARD, wait_listening

VENV = ROOT / "tests" / ".peers" / "fastmcp-venv"
SERVER = FIXTURES / "fastmcp_server.py"


def fastmcp_python() -> str:
    """The fastmcp venv's python. Missing: the test is skipped naming the install step (a developer may not have
    run it), or fails under CI (.ci/run runs tests/peers/install.sh: a skip there would hide these tests)."""
    python = VENV / "bin" / "python"
    if not os.access(python, os.X_OK):
        why = f"fastmcp is not installed ({python} is missing)"
        if os.environ.get("CI"):
            pytest.fail(f"{why}, and .ci/run runs tests/peers/install.sh, which makes it")
        pytest.skip(f"{why}: run tests/peers/install.sh")
    return str(python)


def fastmcp_entry(*args: str) -> dict[str, Any]:
    """The mcpServers entry running the fixture over stdio (`args`: its options, e.g. --page 3)."""
    return {"command": fastmcp_python(), "args": [str(SERVER), *args]}


class FastmcpUpstream:
    """The fixture over Streamable HTTP (HTTP+SSE with --sse) on a free loopback port (or `port`, for a restart at
    the same address; its `url`), started and stopped by PID; `args`: the fixture's options."""

    def __init__(self, state_dir: Path, *args: str, port: int | None = None) -> None:
        self.args = args
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/{'sse' if '--sse' in args else 'mcp'}"
        self.log = state_dir / f"fastmcp-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> FastmcpUpstream:
        return self.launch().ready()

    def launch(self) -> FastmcpUpstream:
        """Started, not waited for (several start side by side: fastmcp takes a second or two to import)."""
        argv = [fastmcp_python(), str(SERVER), "--port", str(self.port), *self.args]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        return self

    def ready(self) -> FastmcpUpstream:
        """Once it listens (it exiting first raises, with its log). Given HANG_GUARD: fastmcp's imports take a
        second or two of CPU each, and four started side by side on a loaded machine were still importing
        (nothing logged yet) after wait_listening's usual 30 s."""
        wait_listening(self.port, self.proc, "the fastmcp server", self.log, timeout=HANG_GUARD)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None:
            stop_process(self.proc, sig)
            self.proc = None
