"""A real gunicorn (the gevent worker) on a free loopback port, and the processes around it: starting and
stopping by PID, its workers' children, what the start check decides, a start that must fail."""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.support.http import HEADERS, Served, init_body

ROOT = Path(__file__).resolve().parent.parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


GIVEN_KEPT = 512  # ports free_port handed out lately, never handed out again while remembered
PICKS = 50  # the kernel's offers free_port looks at before it gives up
_given: collections.deque[int] = collections.deque(maxlen=GIVEN_KEPT)


def free_port() -> int:
    """A loopback port free now and not handed out lately by this process: a test that starts three gateways
    picks their ports before any of them binds, and the kernel may offer a port again once its probe closed
    (seen: two instances of one fleet given the same port, the second one refused)."""
    for _ in range(PICKS):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _given:
            _given.append(port)
            return port
    raise RuntimeError(f"the kernel offered only loopback ports handed out lately ({PICKS} offers)")


def pid_gone(pid: int) -> bool:
    """True when pid no longer exists or is a zombie (PID 1 in a container may not reap) with every thread of it
    ended: a killed process's first thread turns zombie while its others may still be exiting, holding its
    files (a listening socket, connections) open."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/stat") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):  # X: being released
                    return False
        except OSError:  # that thread ended meanwhile
            continue
    return True


def stop_process(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    """`sig` (SIGTERM) by PID, then SIGKILL if it does not go."""
    if signal_running(proc, sig):
        wait_gone(proc, timeout)


def signal_running(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM) -> bool:
    """`sig` by PID to a process still running; whether it was."""
    if proc.poll() is not None:
        return False
    proc.send_signal(sig)
    return True


def wait_gone(proc: subprocess.Popen[Any], timeout: float) -> None:
    """Wait for a process already signalled to exit; SIGKILL by PID past `timeout`."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


STOP_TIMEOUT = 30.0  # seconds a gateway's graceful stop may take before SIGKILL
STOPPING_KEPT = 8  # gateways stopped behind and not yet waited for, at most
_stopping: collections.deque[subprocess.Popen[bytes]] = collections.deque()


def finish_stops(keep: int = 0) -> None:
    """Forget the gateways stopped behind that have exited; wait for the oldest others until at most `keep` are
    left (the session's end waits for all: tests/conftest.py)."""
    for proc in list(_stopping):
        if proc.poll() is not None:
            _stopping.remove(proc)
    while len(_stopping) > keep:
        wait_gone(_stopping.popleft(), STOP_TIMEOUT)


LOG_TAIL_LINES = 200
READY_POLL = 0.02  # seconds between a starting gateway's refused connections


_LIVES = itertools.count(1)  # numbers the log files of gateways started at a given port
GATEWAYS: list[Gateway] = []  # every gateway started and not yet reported on: see tests/conftest.py


class Gateway(Served):
    """A running `gunicorn mcpgate.wsgi`; its log goes to a file whose tail a failing test's report shows. It binds
    on `host` (loopback unless a test's own address, e.g. a veth pair's), on a free port."""

    def __init__(
        self,
        env: dict[str, str] | None = None,
        cwd: Path = ROOT,
        config: str | None = None,
        python: str = sys.executable,
        ready_host: str | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
    ) -> None:
        self.host, self.port = host, port or free_port()  # a port given: e.g. a restart at the same address
        self.ready_headers = {"Host": ready_host} if ready_host else {}  # when 127.0.0.1 is not a trusted peer
        self.url = f"http://{host}:{self.port}/mcp"
        self.base = f"http://{host}:{self.port}"
        # "{port}" in a value is this gateway's port (MCPGATE_PUBLIC_URL names it before it is known)
        given = {name: value.replace("{port}", str(self.port)) for name, value in (env or {}).items()}
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **given}
        full_env.pop("PORT", None)
        args = [python, "-m", "gunicorn", "-b", f"{host}:{self.port}"]
        if config:
            args += ["-c", config]
        # a gateway started again at a given port logs to a file of its own: the log of the one it replaced is kept
        # (a failing test's report shows both)
        life = f"-{next(_LIVES)}" if port else ""
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"mcpgate-test-{self.port}{life}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - open while gunicorn runs
        self.proc = subprocess.Popen(
            [*args, "mcpgate.wsgi"], cwd=cwd, env=full_env, stdout=self._log, stderr=subprocess.STDOUT
        )
        GATEWAYS.append(self)

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                status, _, _ = self.request("GET", "/healthz", headers=self.ready_headers)
                if status in (200, 503):
                    return
            except OSError:
                time.sleep(READY_POLL)
        raise RuntimeError(f"gunicorn did not become ready:\n{self.log_tail()}")

    def log(self) -> str:
        """Everything gunicorn wrote so far (it writes to the file directly; nothing is buffered here)."""
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            return "\n".join(self.log().splitlines()[-lines:])
        except OSError as exc:
            return f"(log {self.log_path} unreadable: {exc})"

    @property
    def stopped(self) -> bool:
        return self._log.closed

    def address(self) -> tuple[str, int]:
        return self.host, self.port

    def stop(self, behind: bool = False) -> None:
        """SIGTERM by PID and wait until it exits (SIGKILL past STOP_TIMEOUT). `behind`: a teardown's stop, when
        nothing the test checks follows: its wait goes to finish_stops and the next test starts meanwhile (an idle
        gateway's graceful stop takes ~0.2 s: bench/stop_time.py)."""
        try:
            if not behind:
                stop_process(self.proc, timeout=STOP_TIMEOUT)
            elif signal_running(self.proc):
                _stopping.append(self.proc)
                finish_stops(STOPPING_KEPT)
        finally:
            self._log.close()


def stop_all(gateways: list[Gateway]) -> None:
    """Stop gateways together and wait until each has exited: SIGTERM to all of them by PID first, so their
    graceful stops overlap instead of adding up."""
    try:
        for gw in gateways:
            signal_running(gw.proc)
        for gw in gateways:
            wait_gone(gw.proc, STOP_TIMEOUT)
    finally:
        for gw in gateways:
            gw.stop()  # closes its log (and ends one a failure above left running)


@contextlib.contextmanager
def serving_together(*envs: dict[str, str]) -> Iterator[list[Gateway]]:
    """Gateways started at once (their starts overlap), each ready, for a `with` block (a fleet's instances), and
    stopped at its end."""
    gateways: list[Gateway] = []
    try:
        gateways.extend(Gateway(env) for env in envs)
        for gw in gateways:
            gw.wait_ready()
        yield gateways
    finally:
        for gw in gateways:
            gw.stop()


@contextlib.contextmanager
def serving(env: dict[str, str] | None = None, behind: bool = False, **kwargs: Any) -> Iterator[Gateway]:
    """A ready gateway for a `with` block (e.g. one per test module), stopped at its end (`behind`: Gateway.stop's,
    for a fixture's teardown); `kwargs`: Gateway's."""
    gw = Gateway(env, **kwargs)
    try:
        gw.wait_ready()
        yield gw
    finally:
        gw.stop(behind)


@contextlib.contextmanager
def lazy_gateways(envs: dict[str, dict[str, str]]) -> Iterator[Callable[[str], Gateway]]:
    """`get(kind)`: the gateway started with `envs[kind]`, started on first use and shared until the block ends
    (a module's gateways, one per kind of child or settings; stopped behind, see Gateway.stop)."""
    started: dict[str, Gateway] = {}
    with contextlib.ExitStack() as stack:

        def get(kind: str) -> Gateway:
            if kind not in started:
                started[kind] = stack.enter_context(serving(envs[kind], behind=True))
            return started[kind]

        yield get


def assert_serves_the_demo(python: str, cwd: Path, config: str | None = None) -> None:
    """gunicorn run by this Python (another virtual environment's) starts and answers an initialize."""
    gw = Gateway(cwd=cwd, python=python, config=config)
    try:
        gw.wait_ready()
        reply = gw.request("POST", body=init_body(), headers=HEADERS)
        assert reply.status == 200 and b"mcpgate-demo" in reply.body, (reply, gw.log_tail())
    finally:
        gw.stop()


def children(gw: Gateway) -> int:
    reply = gw.request("GET", "/healthz")
    assert reply.content_type.startswith("application/json"), reply
    return int(reply.json()["children"])


def alive(pid: int) -> bool:
    return not pid_gone(pid)


def wait_dead(pids: list[int], timeout: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [pid for pid in pids if alive(pid)]
        if not left:
            return []
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


def direct_children(pid: int) -> list[int]:
    from mcpgate.child.orphans import children_of

    return children_of(pid)


def crash(gw: Gateway, timeout: float = 15.0) -> list[int]:
    """SIGKILL the gateway's master and its workers at once (a crash, the OOM killer: nothing withdraws, drains
    or answers), and wait until each of them is gone or a zombie: only then has the kernel closed the listening
    socket and every connection they held, so what a test sends next cannot still reach them half-alive (a
    connection taken, then reset). The PIDs of the children the workers had (the MCP servers they started:
    they end by themselves, their stdin closed; `wait_dead` them)."""
    workers = direct_children(gw.proc.pid)
    kids = [pid for worker in workers for pid in direct_children(worker)]
    os.kill(gw.proc.pid, signal.SIGKILL)
    for worker in workers:
        os.kill(worker, signal.SIGKILL)
    gw.proc.wait(timeout)
    left = wait_dead(workers, timeout)
    if left:
        raise RuntimeError(f"workers {left} of gunicorn {gw.proc.pid} still there {timeout} s after SIGKILL")
    return kids


def worker_children(gw: Gateway) -> list[int]:
    """The child processes of the gateway's one worker (the MCP servers it started)."""
    [worker] = direct_children(gw.proc.pid)
    return direct_children(worker)


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


def preflight_decision(environ: dict[str, str], binds: list[str]) -> tuple[str | None, list[str]]:
    """What the start check (serve/front/preflight.py) decides for these settings and binds: its refusal (None: the
    gateway starts), and what it logged, a "LEVEL message" line each."""
    from mcpgate.config.settings import Settings
    from mcpgate.serve.front import preflight

    log, capture = logging.getLogger("tests.preflight"), _Lines()
    log.addHandler(capture)
    try:
        return preflight.run(Settings.from_env(environ=environ), binds, log), capture.lines
    finally:
        log.removeHandler(capture)


def gunicorn_refusal(env: dict[str, str], *args: str) -> str:
    """What gunicorn started as a user would (from the project root; `args` before the app, e.g. "-b", "HOST:PORT";
    `env` over this environment less any MCPGATE_* or PORT of the developer's) printed: it must stop by itself
    with a non-zero status (a gateway that started is a failure, ended by its PID)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("MCPGATE_") and k != "PORT"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", *args, "mcpgate.wsgi"],
        cwd=ROOT,
        env={**full_env, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=60)
    finally:
        stop_process(proc)  # only if it did not exit
    assert proc.returncode not in (0, None), out
    return out
