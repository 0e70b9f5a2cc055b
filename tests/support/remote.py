"""Remote upstreams for the remote-server tests: the SDK's MCPServer over HTTP (tests/fixtures/remote_upstream.py)
in a process of its own, each request's headers in a log the test reads; a gateway config naming remote servers."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.gateway import FIXTURES, free_port, stop_process
from tests.support.waiting import wait_listening


class SdkUpstream:
    """remote_upstream.py in `mode` (stateful, stateless, json, sse) on a free port (or `port`, for a restart at
    the same address); `token`: the bearer token it requires."""

    def __init__(self, state_dir: Path, mode: str = "stateful", token: str | None = None, port: int | None = None):
        self.mode, self.token = mode, token
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}{'/sse' if mode == 'sse' else '/mcp'}"
        self.log = state_dir / f"upstream-{self.port}.jsonl"
        self.stderr = state_dir / f"upstream-{self.port}.stderr"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> SdkUpstream:
        args = [sys.executable, str(FIXTURES / "remote_upstream.py"), "--port", str(self.port), "--mode", self.mode]
        args += ["--headers-log", str(self.log)] + (["--token", self.token] if self.token else [])
        with open(self.stderr, "ab") as err:
            self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err)
        wait_listening(self.port, self.proc, "the SDK upstream", self.stderr)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None:
            stop_process(self.proc, sig)
            self.proc = None

    def requests(self) -> list[dict[str, Any]]:
        """Every HTTP request the upstream was sent so far: method, path, headers (lower-case names)."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


def remote_config(path: Path, entries: dict[str, Any]) -> str:
    """An MCPGATE_CONFIG file of these mcpServers entries; its path."""
    path.write_text(json.dumps({"mcpServers": entries}))
    return str(path)
