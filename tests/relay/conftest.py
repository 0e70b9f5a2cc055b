"""Fixtures for the relay tests: real upstream servers (SDK, or scripted in-process) and relay runners.

Every process a test starts is stopped by its PID in a finally block.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mcp import Client, StdioServerParameters

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
HANG_GUARD = 60.0  # seconds: a test that takes this long is hung, not slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_pid(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    """Signal by PID, then SIGKILL if it does not exit."""
    if proc.poll() is None:
        os.kill(proc.pid, sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)


def wait_port(port: int, proc: subprocess.Popen[Any] | None = None, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listening on port {port}")


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = HANG_GUARD) -> None:
    """A hang guard for conditions that another process makes true."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


async def await_for(predicate: Callable[[], bool], what: str) -> None:
    with anyio.fail_after(HANG_GUARD):
        while not predicate():
            await anyio.sleep(0.02)


class Upstream:
    """The SDK fixture server (tests/relay/fixtures/upstream.py) in its own process."""

    def __init__(self, transport: str, state_dir: Path, port: int | None = None) -> None:
        self.transport = transport
        self.state_dir = state_dir
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        path = "/mcp" if transport == "streamable-http" else "/sse"
        self.url = f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> Upstream:
        self.proc = subprocess.Popen(
            [sys.executable, str(FIXTURES / "upstream.py"), "--transport", self.transport,
             "--port", str(self.port), "--state-dir", str(self.state_dir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, self.proc)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None:
            stop_pid(self.proc, sig)
            self.proc = None

    def marked(self, name: str) -> bool:
        return (self.state_dir / name).exists()


@pytest.fixture
def upstream_factory(tmp_path: Path) -> Iterator[Callable[..., Upstream]]:
    started: list[Upstream] = []

    def start(transport: str = "streamable-http") -> Upstream:
        upstream = Upstream(transport, tmp_path)
        started.append(upstream)
        return upstream.start()

    try:
        yield start
    finally:
        for upstream in started:
            upstream.stop()


@pytest.fixture(scope="module")
def streamable_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    upstream = Upstream("streamable-http", tmp_path_factory.mktemp("streamable"))
    try:
        yield upstream.start()
    finally:
        upstream.stop()


@pytest.fixture(scope="module")
def sse_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Upstream]:
    upstream = Upstream("sse", tmp_path_factory.mktemp("sse"))
    try:
        yield upstream.start()
    finally:
        upstream.stop()


def relay_params(url: str, *args: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    """The host's view: launch `python -m mcpgate.relay URL ...` as a stdio server."""
    return StdioServerParameters(command=sys.executable, args=["-m", "mcpgate.relay", url, *args],
                                 env={"PYTHONUNBUFFERED": "1", **(env or {})})


def run_host(url: str, scenario: Callable[[Client], Awaitable[Any]], *relay_args: str,
             env: dict[str, str] | None = None, **client_kwargs: Any) -> Any:
    """Run `scenario(client)` in an SDK stdio client connected through the relay."""
    async def main() -> Any:
        with anyio.fail_after(HANG_GUARD):
            async with Client(relay_params(url, *relay_args, env=env), mode="legacy", **client_kwargs) as client:
                return await scenario(client)
    return anyio.run(main)


class RawRelay:
    """The relay driven with raw NDJSON over its pipes (no SDK in between)."""

    def __init__(self, url: str, *args: str, env: dict[str, str] | None = None) -> None:
        full_env = {k: v for k, v in os.environ.items() if k != "MCPGATE_BEARER_TOKEN"}
        full_env.update(env or {})
        self.proc = subprocess.Popen([sys.executable, "-m", "mcpgate.relay", url, *args],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=full_env)

    def send(self, *messages: dict[str, Any] | bytes) -> None:
        assert self.proc.stdin is not None
        for message in messages:
            line = message if isinstance(message, bytes) else json.dumps(message).encode()
            self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def read(self) -> dict[str, Any]:
        """The next stdout line (a hang guard bounds the wait)."""
        assert self.proc.stdout is not None
        with _alarm(HANG_GUARD):
            line = self.proc.stdout.readline()
        assert line.endswith(b"\n"), f"relay stdout ended: {line!r}"
        message: dict[str, Any] = json.loads(line)
        return message

    def read_reply(self, msg_id: Any) -> dict[str, Any]:
        """Skip notifications and other ids until the reply to msg_id."""
        while True:
            message = self.read()
            if message.get("id") == msg_id and "method" not in message:
                return message

    def finish(self, timeout: float = 30.0) -> tuple[int, list[bytes], str]:
        """Close stdin; return (exit code, remaining stdout lines, stderr)."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        finally:
            stop_pid(self.proc, signal.SIGKILL)
        return self.proc.returncode, out.splitlines(), err.decode(errors="replace")

    def stop(self) -> None:
        stop_pid(self.proc, signal.SIGKILL)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


class _alarm:
    """SIGALRM-based guard around a blocking read in the test process."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __enter__(self) -> None:
        def fire(signum: int, frame: Any) -> None:
            raise TimeoutError("relay did not answer (hang guard)")
        self._old = signal.signal(signal.SIGALRM, fire)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc: Any) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._old)


@pytest.fixture
def raw_relay() -> Iterator[Callable[..., RawRelay]]:
    started: list[RawRelay] = []

    def start(url: str, *args: str, env: dict[str, str] | None = None) -> RawRelay:
        relay = RawRelay(url, *args, env=env)
        started.append(relay)
        return relay

    try:
        yield start
    finally:
        for relay in started:
            relay.stop()


def initialize(msg_id: Any = 1, version: str = "2025-11-25") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg_id, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {},
                       "clientInfo": {"name": "raw-test", "version": "1"}}}


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
