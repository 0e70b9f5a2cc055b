"""Tests for mcpgate.child.process: a real child process per test, driven with gevent APIs (no patch_all)."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import gevent
import gevent.subprocess
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # pragma: no cover - depends on how pytest was launched
    sys.path.insert(0, ROOT)

from mcpgate.child.process import ChildProcess  # noqa: E402
from mcpgate.child.spawn import ChildSpawnError, child_environment  # noqa: E402
from mcpgate.core.jsonrpc import Notification, Request, Response  # noqa: E402
from tests import support  # noqa: E402
from tests.support import pid_gone  # noqa: E402

PEER = os.path.join(ROOT, "tests", "fixtures", "child_peer.py")
GUARD = 20.0  # generous hang guard for every wait, never a speed assertion
LOGGER = "mcpgate.test_child"
# ChildProcess takes its limits explicitly (their defaults live in mcpgate.config.settings); these suit the tests.
LIMITS = {
    "max_line_bytes": 8 * 1024 * 1024,
    "max_write_queue_bytes": 16 * 1024 * 1024,
    "close_timeout": 0.5,
    "term_timeout": 0.5,
}


def wait_for(predicate: Callable[[], object], timeout: float = GUARD) -> bool:
    """support.wait_for polling with gevent.sleep: the child's pipes are served by greenlets of this process."""
    return support.wait_for(predicate, timeout, sleep=gevent.sleep)


def kill_pid(pid: int | None) -> None:
    if pid is None:
        return
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


class Harness:
    """Builds ChildProcess objects that record every callback; stops them all by PID at teardown."""

    def __init__(self) -> None:
        self.children: list[ChildProcess] = []
        self.extra_pids: list[int] = []

    def start(self, *args: str, argv: list[str] | None = None, **options) -> ChildProcess:
        events: list = []
        options.setdefault("logger", logging.getLogger(LOGGER))
        options = {**LIMITS, **options}
        child = ChildProcess(
            argv or [sys.executable, PEER, *args],
            on_message=lambda m: events.append(("msg", m)),
            on_exit=lambda r: events.append(("exit", r)),
            **options,
        )
        child.events = events  # type: ignore[attr-defined]
        self.children.append(child)
        child.start()
        return child

    def teardown(self) -> None:
        for child in self.children:
            try:
                child.stop("test teardown", timeout=GUARD)
            finally:
                kill_pid(child.pid)
        for pid in self.extra_pids:
            kill_pid(pid)


@pytest.fixture
def harness():
    h = Harness()
    try:
        yield h
    finally:
        h.teardown()


def messages(child) -> list:
    return [payload for kind, payload in child.events if kind == "msg"]


def exits(child) -> list:
    return [payload for kind, payload in child.events if kind == "exit"]


def first_message(child):
    assert wait_for(lambda: messages(child)), "child sent nothing"
    return messages(child)[0]


# -- spawning -----------------------------------------------------------------------------------------------


def test_missing_executable_raises_and_never_calls_on_exit(harness):
    with pytest.raises(ChildSpawnError, match="command not found: 'no-such-mcp-server'"):
        harness.start(argv=["no-such-mcp-server", "--stdio"], env={"PATH": "/usr/bin:/bin"})
    child = harness.children[-1]
    assert child.pid is None and not child.alive and child.events == []


def test_bad_stderr_path_raises(harness, tmp_path):
    with pytest.raises(ChildSpawnError, match="stderr log file"):
        harness.start("echo", stderr=str(tmp_path / "missing-dir" / "err.log"))


def test_unexecutable_format_raises(harness, tmp_path):
    junk = tmp_path / "junk-binary"
    junk.write_bytes(b"\x00\x01 not a program")
    junk.chmod(0o755)
    with pytest.raises(ChildSpawnError, match="cannot execute"):
        harness.start(argv=[str(junk)])


def test_relative_command_runs_in_cwd(harness, tmp_path):
    script = tmp_path / "server.sh"
    script.write_text("#!/bin/sh\nexec cat\n")
    script.chmod(0o755)
    child = harness.start(argv=["./server.sh"], cwd=str(tmp_path))
    child.send(b'{"jsonrpc":"2.0","method":"hi"}')
    assert first_message(child).method == "hi"


def test_environment_allowlist_end_to_end(harness, monkeypatch):
    monkeypatch.setenv("FOO", "bar")
    monkeypatch.setenv("SHELL", "() { :; }; echo pwned")
    env = child_environment({"MCP_TOKEN": "secret", "HOME": "/tmp/configured-home"})
    child = harness.start("env", env=env)
    seen = first_message(child).params
    assert "FOO" not in seen and "SHELL" not in seen
    assert seen["MCP_TOKEN"] == "secret" and seen["HOME"] == "/tmp/configured-home"
    assert seen["PATH"] == os.environ["PATH"]


def test_own_process_group(harness):
    child = harness.start("noread")
    first_message(child)
    assert os.getpgid(child.pid) == child.pid != os.getpgid(0)


# -- message flow -------------------------------------------------------------------------------------------


def test_echo_round_trip_in_order(harness):
    child = harness.start("echo", label="s1")
    for i in range(200):
        assert child.send(json.dumps({"jsonrpc": "2.0", "id": i, "method": "ping"}).encode())
    assert child.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    assert child.send(b'{"jsonrpc":"2.0","id":"r","result":{}}')
    assert wait_for(lambda: len(messages(child)) == 202)
    got = messages(child)
    assert [m.id for m in got[:200]] == list(range(200)) and all(type(m) is Request for m in got[:200])
    assert type(got[200]) is Notification and type(got[201]) is Response and got[201].id == "r"
    assert got[0].raw == b'{"jsonrpc": "2.0", "id": 0, "method": "ping"}'
    assert child.alive
    assert child.stop("session deleted")
    assert exits(child) == ["session deleted"] and child.returncode == 0
    assert child.exit_reason == "session deleted" and not child.alive
    assert not child.send(b'{"jsonrpc":"2.0","method":"late"}')


def test_callback_errors_do_not_stop_delivery(harness):
    seen, ended = [], []

    def on_message(msg):
        seen.append(msg.method)
        raise RuntimeError("handler bug")

    child = ChildProcess(
        [sys.executable, PEER, "burst", "3", "0"],
        on_message=on_message,
        **LIMITS,
        on_exit=lambda r: (ended.append(r), 1 / 0),
        logger=logging.getLogger(LOGGER),
    )
    harness.children.append(child)
    child.start()
    assert child.join(GUARD)
    assert seen == ["n", "n", "n"] and ended == ["exited with code 0"]


def test_batch_members_delivered_in_order(harness):
    child = harness.start("lines", '[{"jsonrpc":"2.0","method":"a"},5,{"jsonrpc":"2.0","id":1,"result":{}}]')
    assert wait_for(lambda: len(messages(child)) == 2)
    a, b = messages(child)
    assert a.method == "a" and b.id == 1


def test_unterminated_last_line_is_delivered(harness):
    child = harness.start("tail")
    assert child.join(GUARD)
    assert [m.method for m in messages(child)] == ["tail"]
    assert child.events[-1] == ("exit", "exited with code 0")


def test_on_exit_once_and_after_last_message(harness):
    child = harness.start("burst", "5000", "3")
    assert child.join(GUARD)
    child.close("late close")
    assert child.stop("late stop")
    assert len(child.events) == 5001
    assert [m.params["i"] for m in messages(child)] == list(range(5000))
    assert child.events[-1] == ("exit", "exited with code 3")
    assert child.returncode == 3 and child.exit_reason == "exited with code 3"


def test_killed_by_signal_reported(harness):
    child = harness.start("suicide", "SIGKILL")
    assert child.join(GUARD)
    assert exits(child) == ["killed by signal SIGKILL"] and child.returncode == -signal.SIGKILL


def test_debug_log_directions(harness, caplog):
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    child = harness.start("echo", label="dbg")
    child.send(b'{"jsonrpc":"2.0","id":7,"method":"tools/list"}')
    assert wait_for(lambda: messages(child))
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "child[dbg] ->child method=tools/list id=7" in text
    assert "child[dbg] <-child method=tools/list id=7" in text


# -- invalid output -----------------------------------------------------------------------------------------


def test_eleven_junk_lines_close(harness):
    child = harness.start("lines", *[f"junk {i}" for i in range(11)], '{"jsonrpc":"2.0","method":"after"}')
    assert child.join(GUARD)
    assert exits(child) == ["junk output"] and messages(child) == []


def test_junk_count_resets_on_valid_message(harness):
    junk = ["not json", '{"id":1}', "[]", "null", '{"jsonrpc":"2.0"}']
    child = harness.start("lines", *junk, '{"jsonrpc":"2.0","method":"ok"}', *junk, *junk)
    assert wait_for(lambda: messages(child))
    gevent.sleep(0.2)
    assert [m.method for m in messages(child)] == ["ok"]
    assert child.alive and exits(child) == []


def test_oversized_line_closes(harness):
    child = harness.start("big", "10000", max_line_bytes=4096)
    assert child.join(GUARD)
    assert exits(child) == ["message too large"]


# -- writing ------------------------------------------------------------------------------------------------

MIB = 1024 * 1024
BIG = b'{"jsonrpc":"2.0","method":"x","params":{"pad":"' + b"p" * (MIB - 50) + b'"}}'


def test_write_queue_full_send_never_yields(harness):
    child = harness.start("noread", max_write_queue_bytes=4 * MIB)
    first_message(child)
    ran = []
    gevent.spawn(ran.append, True)  # runs only if send() ever yields to the hub
    results = [child.send(BIG) for _ in range(20)]
    assert ran == []
    accepted = sum(results)
    assert 0 < accepted < 20 and results == [True] * accepted + [False] * (20 - accepted)
    assert child.join(GUARD)
    assert exits(child) == ["write queue full"] and child.returncode == -signal.SIGTERM


def test_write_queue_full_while_writer_blocked(harness):
    child = harness.start("noread", max_write_queue_bytes=4 * MIB)
    first_message(child)
    results = []
    for _ in range(20):
        results.append(child.send(BIG))
        gevent.sleep(0)  # let the writer fill the pipe and block on it
    assert False in results and results.index(False) >= 3
    assert child.join(GUARD)
    assert exits(child) == ["write queue full"]


def test_broken_pipe_closes(harness):
    child = harness.start("closestdin")
    first_message(child)
    child.send(b'{"jsonrpc":"2.0","method":"x"}')
    assert child.join(GUARD)
    assert exits(child) == ["stdin closed by child"]


def test_stdout_closed_closes(harness):
    child = harness.start("closestdout", close_timeout=0.3)
    first_message(child)
    assert child.join(GUARD)
    assert exits(child) == ["stdout closed by child"]


# -- shutdown ladder ----------------------------------------------------------------------------------------


def test_eof_shutdown_is_graceful(harness):
    child = harness.start("echo", close_timeout=GUARD)  # a busy machine may take longer than 0.5 s to end Python
    assert child.stop("bye", timeout=GUARD)
    assert child.returncode == 0


def test_stubborn_child_is_sigkilled(harness, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    child = harness.start("stubborn", close_timeout=0.3, term_timeout=0.3)
    first_message(child)
    assert child.stop("shutdown", timeout=GUARD)
    assert child.returncode == -signal.SIGKILL and exits(child) == ["shutdown"]
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "SIGTERM" in text and "ignored SIGTERM; SIGKILL" in text and "signal SIGKILL" in text


def test_sigterm_reported_with_close_reason(harness):
    child = harness.start("noread", close_timeout=0.2)
    first_message(child)
    assert child.stop("idle timeout", timeout=GUARD)
    assert child.returncode == -signal.SIGTERM and child.exit_reason == "idle timeout"


def test_grandchild_dies_with_group(harness, tmp_path):
    pidfile = str(tmp_path / "grandchild.pid")
    child = harness.start("grandchild", pidfile, close_timeout=GUARD)  # it leaves on EOF, however busy the machine
    first_message(child)
    grandchild = int(Path(pidfile).read_text())
    harness.extra_pids.append(grandchild)
    assert not pid_gone(grandchild)
    assert child.stop("bye", timeout=GUARD)
    assert child.returncode == 0  # the child itself left on stdin EOF; the group kill got the grandchild
    assert wait_for(lambda: pid_gone(grandchild))


def test_child_dies_with_its_supervisor():
    """PR_SET_PDEATHSIG: a worker killed with SIGKILL takes its direct child along."""
    worker = gevent.subprocess.Popen(
        [sys.executable, PEER, "supervisor", sys.executable, PEER, "noread"],
        stdout=gevent.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    child_pid = None
    try:
        with gevent.Timeout(GUARD):
            child_pid = int(worker.stdout.readline())
        assert not pid_gone(child_pid)
        worker.kill()
        worker.wait(GUARD)
        assert wait_for(lambda: pid_gone(child_pid))
    finally:
        kill_pid(child_pid)
        kill_pid(worker.pid)
        worker.stdout.close()


# -- stderr -------------------------------------------------------------------------------------------------


def test_stderr_inherit_logs_lines(harness, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    child = harness.start("stderr", "hello there", "x" * 5000, label="s9")
    first_message(child)
    assert child.stop("bye")
    lines = [r.getMessage() for r in caplog.records if "stderr:" in r.getMessage()]
    assert lines[0] == "child[s9] stderr: hello there"
    assert lines[1].startswith("child[s9] stderr: xxx") and len(lines[1]) < 1100


def test_stderr_discard(harness, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    child = harness.start("stderr", "secret noise", stderr="discard")
    first_message(child)
    assert child.stop("bye")
    assert not any("secret noise" in r.getMessage() for r in caplog.records)


def test_stderr_file_appends_with_label(harness, tmp_path):
    log = tmp_path / "child.log"
    log.write_bytes(b"earlier\n")
    child = harness.start("stderr", "one", "two", stderr=str(log), label="s3")
    first_message(child)
    assert child.stop("bye")
    assert log.read_bytes() == b"earlier\n[s3] one\n[s3] two\n"
    assert messages(child)[0].method == "ready"  # stderr never reaches stdout


def _alive_as_defined(child: ChildProcess) -> bool:
    """What `alive` means: started, not exited, and not shutting down."""
    return child._proc is not None and not child._closing


@pytest.mark.parametrize("ending", ["close", "exit", "stop"])
def test_alive_follows_the_child_s_life(harness, ending):
    """`alive` is a plain attribute (read on every pooled call): at each step of a child's life it says what its
    definition says, and it is never True again once the child is ending."""
    args = ["burst", "0", "0"] if ending == "exit" else ["echo"]  # exits at once with code 0; echoes until EOF
    child = ChildProcess([sys.executable, PEER, *args], on_message=lambda m: None, on_exit=lambda r: None, **LIMITS)
    assert child.alive is False and _alive_as_defined(child) is False  # not started
    harness.children.append(child)
    child.start()
    assert child.alive is _alive_as_defined(child)
    assert child.alive is True or ending == "exit"  # the exiting child may be gone already
    if ending == "close":
        child.close("asked")
        assert child.alive is False and _alive_as_defined(child) is False  # shutting down, not exited yet
    elif ending == "stop":
        assert child.stop("asked", timeout=GUARD)
    assert child.join(GUARD)
    assert child.alive is False and _alive_as_defined(child) is False


def test_alive_is_false_for_a_child_closed_before_it_started(harness):
    child = ChildProcess([sys.executable, PEER], on_message=lambda m: None, on_exit=lambda r: None, **LIMITS)
    child.close("never started")
    assert child.alive is False and _alive_as_defined(child) is False
