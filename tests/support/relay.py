"""Helpers shared by the relay tests: upstream servers (the SDK fixture in its own process), relay runners, the
SDK's stdio host in front of a relay (or of the relay's ModernHostBridge), and MCP messages; the scripted upstream
is tests/support/scripted.py's (its names are importable from here too).

Test modules import from here, never from each other or from tests/relay/conftest.py (which holds the fixtures).
Every process a helper starts is stopped by its PID.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from mcpgate.config.settings import RelaySettings
from mcpgate.relay.http_client import HttpOptions
from tests.support.gateway import FIXTURES as ROOT_FIXTURES
from tests.support.gateway import free_port, stop_process
from tests.support.http import MODERN
from tests.support.scripted import (  # noqa: F401 - the relay tests import them from here
    DROP,
    HOLD,
    Route,
    Scripted,
    ScriptedServer,
    Seen,
    Step,
    json_reply,
    mcp_default,
    result,
    sse_event,
    sse_reply,
)
from tests.support.waiting import HANG_GUARD, await_for, wait_for, wait_listening  # noqa: F401 - likewise

FIXTURES = Path(__file__).resolve().parent.parent / "relay" / "fixtures"  # the relay tests' own


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
            [
                sys.executable,
                str(FIXTURES / "upstream.py"),
                "--transport",
                self.transport,
                "--port",
                str(self.port),
                "--state-dir",
                str(self.state_dir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_listening(self.port, self.proc)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None:
            stop_process(self.proc, sig)
            self.proc = None

    def marked(self, name: str) -> bool:
        return (self.state_dir / name).exists()


class EraServer:
    """tests/fixtures/era_http_server.py (the SDK's Streamable HTTP server) in its own process, as one era:
    "dual" (the SDK as is), "modern" (2026-07-28 only) or "legacy" (2025 sessions only); stderr to a file."""

    def __init__(self, era: str, state_dir: Path) -> None:
        self.era = era
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.stderr_path = state_dir / f"era-{era}-{self.port}.stderr"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> EraServer:
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT_FIXTURES / "era_http_server.py"),
                    "--port",
                    str(self.port),
                    "--era",
                    self.era,
                ],
                stdout=subprocess.DEVNULL,
                stderr=err,
            )
        wait_listening(self.port, self.proc)
        return self

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None


# Run the relay with its stderr sent to a file (argv: the file, then the relay's arguments).
RELAY_STDERR_TO_FILE = (
    "import os, sys\n"
    "os.dup2(os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)\n"
    "from mcpgate.relay.cli import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def relay_params(
    url: str, *args: str, env: dict[str, str] | None = None, stderr: Path | None = None
) -> StdioServerParameters:
    """The host's view: launch `python -m mcpgate.relay URL ...` as a stdio server (its stderr to a file)."""
    command = ["-m", "mcpgate.relay"] if stderr is None else ["-c", RELAY_STDERR_TO_FILE, str(stderr)]
    return StdioServerParameters(
        command=sys.executable, args=[*command, url, *args], env={"PYTHONUNBUFFERED": "1", **(env or {})}
    )


def run_host(
    url: str,
    scenario: Callable[[Client], Awaitable[Any]],
    *relay_args: str,
    env: dict[str, str] | None = None,
    stderr: Path | None = None,
    **client_kwargs: Any,
) -> Any:
    """Run `scenario(client)` in an SDK stdio client connected through the relay (in the SDK's legacy
    mode unless `mode` is given); a failure quotes the relay's stderr when it went to a file."""

    async def main() -> Any:
        with anyio.fail_after(HANG_GUARD):
            async with Client(relay_params(url, *relay_args, env=env, stderr=stderr), **client_kwargs) as client:
                return await scenario(client)

    client_kwargs.setdefault("mode", "legacy")
    try:
        return anyio.run(main)
    except Exception as exc:
        if stderr is None or not stderr.exists():
            raise
        raise AssertionError(f"{exc!r}\n{explain_stderr(stderr.read_text(errors='replace'))}") from exc


class RawRelay:
    """The relay driven with raw NDJSON over its pipes (no SDK in between)."""

    def __init__(
        self, url: str, *args: str, env: dict[str, str] | None = None, launch: tuple[str, ...] = ("-m", "mcpgate.relay")
    ) -> None:
        full_env = {k: v for k, v in os.environ.items() if k != "MCPGATE_BEARER_TOKEN"}
        full_env.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, *launch, url, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=full_env,
        )
        self.stderr: str | None = None  # once the relay has ended and its stderr was read

    def send(self, *messages: dict[str, Any] | bytes) -> None:
        assert self.proc.stdin is not None
        for message in messages:
            line = message if isinstance(message, bytes) else json.dumps(message).encode()
            self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def read(self) -> dict[str, Any]:
        """The next stdout line (a hang guard bounds the wait); a failure quotes the relay's stderr."""
        assert self.proc.stdout is not None
        try:
            with _alarm(HANG_GUARD):
                line = self.proc.stdout.readline()
        except TimeoutError:
            raise AssertionError(
                f"the relay did not answer within {HANG_GUARD:g}s\n{self.stop_and_explain()}"
            ) from None
        if not line.endswith(b"\n"):
            raise AssertionError(f"relay stdout ended: {line!r}\n{self.stop_and_explain()}")
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
        except subprocess.TimeoutExpired:
            stop_process(self.proc, signal.SIGKILL)
            _, err = self.proc.communicate()  # what the timed-out call had read, and the rest
            self.stderr = err.decode(errors="replace")
            raise AssertionError(
                f"the relay did not exit within {timeout:g}s of stdin's end\n{explain_stderr(self.stderr)}"
            ) from None
        finally:
            stop_process(self.proc, signal.SIGKILL)
        self.stderr = err.decode(errors="replace")
        return self.proc.returncode, out.splitlines(), self.stderr

    def stop_and_explain(self) -> str:
        """Stop the relay; what it wrote on stderr, for a failing test's message."""
        stop_process(self.proc, signal.SIGKILL)
        if self.stderr is None:
            try:
                err = self.proc.stderr.read() if self.proc.stderr is not None else b""
            except (OSError, ValueError):
                err = b""
            self.stderr = err.decode(errors="replace")
        return explain_stderr(self.stderr)

    def stop(self) -> None:
        stop_process(self.proc, signal.SIGKILL)
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


def http_options(**overrides: Any) -> HttpOptions:
    """The HTTP options the relay builds from its default settings, with some replaced."""
    return dataclasses.replace(HttpOptions.from_settings(RelaySettings()), **overrides)


def explain_stderr(stderr: str, limit: int = 4000) -> str:
    """The relay's stderr (its tail) as an assertion message explains a failure with it."""
    tail = stderr if len(stderr) <= limit else "...\n" + stderr[-limit:]
    return f"--- relay stderr ---\n{tail}"


def initialize(msg_id: Any = 1, version: str = "2025-11-25") -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": msg_id,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw-test", "version": "1"}},
    }


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


# The relay's pump over ModernHostBridge over the real legacy Streamable HTTP transport (argv: URL, input TTL).
BRIDGE_LAUNCH = """
import logging, os, sys
from gevent import monkey
monkey.patch_all(select=False, subprocess=False)
logging.basicConfig(stream=sys.stderr, level="INFO", format="%(asctime)s %(name)s %(levelname)s %(message)s")
from mcpgate.relay.cli import build_parser
from mcpgate.relay.http_client import HttpClient, HttpOptions
from mcpgate.relay.pump import PumpOptions, Relay
from mcpgate.relay.server_bridge import ModernHostBridge
from mcpgate.relay.streamable import StreamableTransport
from mcpgate.config.settings import RelaySettings
args = RelaySettings.from_args(build_parser().parse_args(sys.argv[1:2]))
http = HttpClient(HttpOptions.from_settings(args), args.url)
ttl = float(sys.argv[2])
def transport(sink):
    return ModernHostBridge(lambda s: StreamableTransport(args.url, http, s), sink, input_ttl=ttl)
out = os.dup(1)
os.dup2(2, 1)
sys.exit(Relay(transport, PumpOptions.from_settings(args), in_fd=0, out_fd=out).run())
"""


def run_bridged_host(url: str, scenario: Callable[[Client], Awaitable[Any]], tmp_path: Path, **client: Any) -> None:
    """The SDK's stdio client in mode 2026-07-28 (`client`: its callbacks) in front of BRIDGE_LAUNCH's relay to
    `url`; a failure quotes the relay's stderr."""
    stderr = tmp_path / "relay.stderr"
    code = f"import os,sys; os.dup2(os.open({str(stderr)!r}, os.O_WRONLY | os.O_CREAT), 2); exec({BRIDGE_LAUNCH!r})"
    params = StdioServerParameters(command=sys.executable, args=["-c", code, url, "60"], env={"PYTHONUNBUFFERED": "1"})

    async def main() -> None:
        with anyio.fail_after(HANG_GUARD):
            async with Client(params, mode=MODERN, **client) as session:
                await scenario(session)

    try:
        anyio.run(main)
    except Exception as exc:
        log = stderr.read_text(errors="replace") if stderr.exists() else ""
        raise AssertionError(f"{exc!r}\nrelay stderr:\n{log[-4000:]}") from exc
