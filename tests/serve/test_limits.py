"""Per-child limits (MCPGATE_CHILD_*, MCPGATE_REQUEST_TIMEOUT) through gunicorn with tests/fixtures/hog_server.py:
set in the child and never on the gateway, a child past one ended with its waiting requests told which, its
session gone (404) while a bystander session goes on, a pooled child replaced; and the units behind them."""

from __future__ import annotations

import json
import os
import resource
import shlex
import shutil
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mcpgate.child import limits
from mcpgate.child.process import ChildProcess
from mcpgate.core.cancel import CancelTracker
from mcpgate.core.jsonrpc import Request, Response
from mcpgate.serve.servers import watchdog
from tests.support import (
    FIXTURES,
    Gateway,
    call,
    direct_children,
    modern_body,
    named,
    open_session,
    post_modern,
    reply_message,
    wait_dead,
    wait_for,
    write_config,
)

HOG = f"{sys.executable} {FIXTURES / 'hog_server.py'}"
FAST_LADDER = {"MCPGATE_CLOSE_TIMEOUT": "0.5", "MCPGATE_TERM_TIMEOUT": "0.5"}
Factory = Callable[..., Gateway]


def hog(gateway_factory: Factory, **env: str) -> Gateway:
    return gateway_factory({"MCPGATE_COMMAND": HOG, **FAST_LADDER, **env})


def tool(gw: Gateway, headers: dict[str, str], name: str, args: dict[str, Any], msg_id: int = 2) -> dict[str, Any]:
    """A tools/call on a session: the response (its result or error)."""
    return reply_message(gw.request("POST", body=call(name, args, msg_id), headers=headers, timeout=60))


def tool_json(gw: Gateway, headers: dict[str, str], name: str, args: dict[str, Any]) -> Any:
    answer = tool(gw, headers, name, args)
    assert "result" in answer, answer
    return json.loads(answer["result"]["content"][0]["text"])


def proc_limits(pid: int) -> dict[str, str]:
    """/proc/<pid>/limits by name: {"Max cpu time": "unlimited unlimited", ...} (soft and hard)."""
    rows = {}
    with open(f"/proc/{pid}/limits") as table:
        for line in list(table)[1:]:
            name, soft, hard = line[:26].strip(), line[26:47].strip(), line[47:68].strip()
            rows[name] = f"{soft} {hard}"
    return rows


def no_new_privs(pid: int) -> str:
    with open(f"/proc/{pid}/status") as status:
        return next(line.split()[1] for line in status if line.startswith("NoNewPrivs:"))


def worker_of(gw: Gateway) -> int:
    (worker,) = direct_children(gw.proc.pid)
    return worker


def ended_by(answer: dict[str, Any], limit: str) -> None:
    """The answer is the error of a request whose child was ended for passing `limit`."""
    assert "error" in answer, answer
    assert f"The MCP server was ended: it passed {limit}" in answer["error"]["message"], answer


def session_gone(gw: Gateway, headers: dict[str, str]) -> bool:
    return gw.request("POST", body=call("echo", {"text": "x"}, 9), headers=headers).status == 404


def bystander_works(gw: Gateway, headers: dict[str, str]) -> None:
    assert tool_json(gw, headers, "echo", {"text": "still here"}) == "still here"


# -- through gunicorn ---------------------------------------------------------------------------------------


def test_limits_are_set_in_the_child_and_never_on_the_gateway(gateway_factory: Factory) -> None:
    plain = hog(gateway_factory)
    before = proc_limits(worker_of(plain))
    seen = tool_json(plain, open_session(plain), "limits", {})
    assert seen["no_new_privs"] == "1"  # every child, limits or not
    assert seen["netns"] == os.readlink("/proc/self/ns/net")

    gw = hog(
        gateway_factory,
        MCPGATE_CHILD_CPU_SECONDS="30",
        MCPGATE_CHILD_MEMORY_BYTES=str(2**30),
        MCPGATE_CHILD_OPEN_FILES="64",
        MCPGATE_CHILD_NO_NETWORK="true",
    )
    headers = open_session(gw)
    seen = tool_json(gw, headers, "limits", {})
    assert seen["cpu"] == [30, 31] and seen["as"] == [2**30, 2**30] and seen["nofile"] == [64, 64]
    assert seen["no_new_privs"] == "1" and seen["uid"] == os.getuid()
    assert seen["netns"] != os.readlink("/proc/self/ns/net")
    network = tool_json(gw, headers, "network", {"port": gw.port})
    assert network["interfaces"] == ["lo"] and network["connect"] == "Connection refused", network
    assert network["loopback"] == "connected"  # its own loopback, up, reaching only itself
    files = tool_json(gw, headers, "open_files", {"n": 100})
    assert files["opened"] < 64 and files["error"], files

    worker = worker_of(gw)
    assert proc_limits(worker) == before  # the gateway's own limits, as without any
    assert proc_limits(worker)["Max cpu time"] == "unlimited unlimited"
    assert proc_limits(worker)["Max address space"] == "unlimited unlimited"
    assert no_new_privs(worker) == "0" and no_new_privs(gw.proc.pid) == "0"
    assert os.readlink(f"/proc/{worker}/ns/net") == os.readlink("/proc/self/ns/net")
    bystander_works(gw, headers)  # the network-less child serves on


def test_cpu_limit_ends_the_child_and_only_its_session(gateway_factory: Factory) -> None:
    gw = hog(gateway_factory, MCPGATE_CHILD_CPU_SECONDS="1", MCPGATE_METRICS="true")
    bystander, spinner = open_session(gw), open_session(gw)
    ended_by(tool(gw, spinner, "spin", {}), "MCPGATE_CHILD_CPU_SECONDS (1 s)")
    assert wait_for(lambda: session_gone(gw, spinner))
    bystander_works(gw, bystander)
    assert "killed by signal SIGXCPU (reason: limit: MCPGATE_CHILD_CPU_SECONDS (1 s))" in gw.log()
    assert exits(gw) == {"limit": 1.0}  # counted once, as a limit


def exits(gw: Gateway) -> dict[str, float]:
    """mcpgate_child_exits_total by cause, from /metrics."""
    found = {}
    for line in gw.request("GET", "/metrics").body.decode().splitlines():
        if line.startswith("mcpgate_child_exits_total{"):
            labels, value = line.rsplit(" ", 1)
            if float(value):
                found[labels.split('cause="')[1].split('"')[0]] = float(value)
    return found


def test_cpu_spread_over_forks_is_counted_for_the_group(gateway_factory: Factory) -> None:
    gw = hog(gateway_factory, MCPGATE_CHILD_CPU_SECONDS="2")
    bystander, forker = open_session(gw), open_session(gw)
    child = tool_json(gw, forker, "limits", {})["pid"]
    ended_by(tool(gw, forker, "spin_fork", {"n": 2}), "MCPGATE_CHILD_CPU_SECONDS (2 s)")
    assert wait_dead([child]) == []
    assert "passed MCPGATE_CHILD_CPU_SECONDS (2 s); ending it" in gw.log()  # the watchdog's sum, not a SIGXCPU
    bystander_works(gw, bystander)


@pytest.mark.parametrize("catch", [False, True], ids=["crashes", "survives"])
def test_memory_limit(gateway_factory: Factory, catch: bool) -> None:
    gw = hog(gateway_factory, MCPGATE_CHILD_MEMORY_BYTES=str(400 * 2**20))
    bystander, hungry = open_session(gw), open_session(gw)
    assert tool_json(gw, hungry, "allocate", {"mb": 16}) == 16 * 2**20  # under the limit: fine
    answer = tool(gw, hungry, "allocate", {"mb": 1024, "catch": catch})
    if not catch:  # the child died of its MemoryError: its waiting request is told why
        ended_by(answer, "MCPGATE_CHILD_MEMORY_BYTES (419430400 bytes)")
    # a child that survives its failed allocation answered itself, and is ended all the same
    assert wait_for(lambda: session_gone(gw, hungry))
    assert "(reason: limit: MCPGATE_CHILD_MEMORY_BYTES (419430400 bytes))" in gw.log()
    bystander_works(gw, bystander)


def test_process_limit_ends_the_group(gateway_factory: Factory) -> None:
    gw = hog(gateway_factory, MCPGATE_CHILD_PROCESSES="3")
    bystander, forker = open_session(gw), open_session(gw)
    assert len(tool_json(gw, forker, "fork", {"n": 2})) == 2  # three in the group: at the limit, not past it
    child = tool_json(gw, forker, "limits", {})["pid"]
    ended_by(tool(gw, forker, "fork", {"n": 3, "hold": True}), "MCPGATE_CHILD_PROCESSES (3)")
    group = [int(p) for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == child]
    assert wait_dead([child, *group]) == []  # the ladder took the whole group down
    assert wait_for(lambda: session_gone(gw, forker))
    bystander_works(gw, bystander)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def test_request_timeout_on_a_session(gateway_factory: Factory) -> None:
    gw = hog(gateway_factory, MCPGATE_REQUEST_TIMEOUT="1")
    bystander, sleeper = open_session(gw), open_session(gw)
    assert tool_json(gw, sleeper, "sleep", {"seconds": 0.2}) == "slept"  # within the limit
    ended_by(tool(gw, sleeper, "sleep", {"seconds": 120}), "MCPGATE_REQUEST_TIMEOUT (1 s)")
    assert session_gone(gw, sleeper) or wait_for(lambda: session_gone(gw, sleeper))
    bystander_works(gw, bystander)


def test_request_timeout_on_a_pooled_child_replaces_it(gateway_factory: Factory) -> None:
    gw = hog(gateway_factory, MCPGATE_REQUEST_TIMEOUT="1")
    bystander = open_session(gw)
    slow = modern_body(1, "tools/call", {"name": "sleep", "arguments": {"seconds": 120}})
    ended_by(reply_message(post_modern(gw, slow, timeout=60)), "MCPGATE_REQUEST_TIMEOUT (1 s)")
    quick = modern_body(2, "tools/call", {"name": "echo", "arguments": {"text": "next"}})
    answer = reply_message(post_modern(gw, quick))
    assert json.loads(answer["result"]["content"][0]["text"]) == "next", answer  # a new child took over
    bystander_works(gw, bystander)


def test_the_watchdog_sweeps_only_children_with_limits_to_watch() -> None:
    dog = watchdog.Watchdog()
    quiet = sleeper(limits.ChildLimits(0, 0, 64, 0, True, 0))  # set at spawn: nothing to sweep for
    timed = sleeper(limits.ChildLimits(0, 0, 0, 0, False, 0.2))
    try:
        dog.watch(quiet, lambda: 0.0)
        assert not dog.watched and dog._greenlet is None  # no greenlet at all
        dog.watch(timed, lambda: 0.0)  # a request in flight since long ago
        assert timed.join(20) and timed.end_cause == "limit"
        assert timed.exit_reason == "limit: MCPGATE_REQUEST_TIMEOUT (0.2 s)"
        assert dog._greenlet is not None and dog._greenlet.join(5) is None and dog._greenlet.dead
        assert quiet.alive  # never touched
    finally:
        for child in (quiet, timed):
            child.stop("test over")


def sleeper(child_limits: limits.ChildLimits) -> ChildProcess:
    child = ChildProcess(
        ["sleep", "60"], on_message=lambda m: None, on_exit=lambda r: None, max_line_bytes=1000,
        max_write_queue_bytes=1000, close_timeout=0.2, term_timeout=0.2, limits=child_limits,
    )  # fmt: skip
    child.start()
    return child


def test_limits_per_named_server(gateway_factory: Factory, tmp_path: Path) -> None:
    """A server's own limits (MCPGATE_CONFIG's "mcpgate" block) bind its children only."""
    entry = {"command": sys.executable, "args": [str(FIXTURES / "hog_server.py")]}
    config = write_config(
        tmp_path / "mcp.json",
        {"timed": {**entry, "mcpgate": {"request_timeout": 1, "child_cpu_seconds": 7}}, "free": entry},
    )
    gw = gateway_factory({"MCPGATE_CONFIG": config, **FAST_LADDER})
    timed, free = named(gw, "timed"), named(gw, "free")
    timed_headers, free_headers = open_session(timed), open_session(free)
    assert tool_json(timed, timed_headers, "limits", {})["cpu"] == [7, 8]
    assert tool_json(free, free_headers, "limits", {})["cpu"] == list(resource.getrlimit(resource.RLIMIT_CPU))
    ended_by(tool(timed, timed_headers, "sleep", {"seconds": 120}), "MCPGATE_REQUEST_TIMEOUT (1 s)")
    assert tool_json(free, free_headers, "sleep", {"seconds": 2}) == "slept"  # no timeout of its own


def wrapper(tmp_path: Path, name: str, body: str) -> str:
    """A script Gateway runs instead of Python: `body` then Python with gunicorn's arguments ($PY "$@")."""
    path = tmp_path / name
    path.write_text(f"#!/bin/sh\nPY={shlex.quote(sys.executable)}\n{body}\n")
    path.chmod(0o755)
    return str(path)


@pytest.mark.skipif(not shutil.which("setpriv") or os.geteuid() != 0, reason="needs root and setpriv")
def test_no_network_for_an_unprivileged_gateway(gateway_factory: Factory, tmp_path: Path) -> None:
    """Not root: the child gets a user namespace too (CLONE_NEWUSER|CLONE_NEWNET), its ids mapped to its own."""
    unprivileged = wrapper(tmp_path, "unprivileged", 'exec setpriv --reuid=4242 --regid=4242 --clear-groups "$PY" "$@"')
    system_python = shutil.which("python3", path="/usr/bin:/bin")  # one uid 4242 may run (the venv's may be root's)
    if system_python is None:
        pytest.skip("no python3 in /usr/bin or /bin")
    command = f"{system_python} {FIXTURES / 'hog_server.py'}"
    gw = gateway_factory({"MCPGATE_COMMAND": command, "MCPGATE_CHILD_NO_NETWORK": "true"}, python=unprivileged)
    headers = open_session(gw)
    seen = tool_json(gw, headers, "limits", {})
    assert seen["uid"] == 4242 and seen["no_new_privs"] == "1"
    assert seen["netns"] != os.readlink("/proc/self/ns/net")
    network = tool_json(gw, headers, "network", {"port": gw.port})
    assert network["interfaces"] == ["lo"] and network["connect"] == "Connection refused", network
    assert network["loopback"] == "connected"  # its own loopback, up, reaching only itself


@pytest.mark.skipif(not shutil.which("unshare") or os.geteuid() != 0, reason="needs root and unshare")
def test_no_network_is_refused_at_start_where_the_kernel_forbids_it(tmp_path: Path) -> None:
    """In a user namespace allowed no new network or user namespace, gunicorn refuses to start, saying why."""
    zeroed = "echo 0 > /proc/sys/user/max_net_namespaces && echo 0 > /proc/sys/user/max_user_namespaces"
    run = 'exec "$0" "$@"'
    forbidding = wrapper(tmp_path, "forbid", f'exec unshare -U -r sh -c \'{zeroed} && {run}\' "$PY" "$@"')
    gw = Gateway({"MCPGATE_COMMAND": HOG, "MCPGATE_CHILD_NO_NETWORK": "true"}, python=forbidding)
    try:
        assert gw.proc.wait(60) != 0
        assert "mcpgate: MCPGATE_CHILD_NO_NETWORK=true, but this kernel does not let mcpgate give a child" in gw.log()
        assert "No space left on device" in gw.log()  # the kernel's own reason, passed on
    finally:
        gw.stop()
    allowed = Gateway({"MCPGATE_COMMAND": HOG}, python=forbidding)  # the same place without the setting
    try:
        allowed.wait_ready()
    finally:
        allowed.stop()


# -- units --------------------------------------------------------------------------------------------------

LIMITS = limits.ChildLimits(
    cpu_seconds=2, memory_bytes=1000, open_files=0, processes=0, no_network=False, request_timeout=0
)


@pytest.mark.parametrize(
    ("returncode", "usage", "passed"),
    [
        (-signal.SIGXCPU, limits.Usage(), "MCPGATE_CHILD_CPU_SECONDS (2 s)"),
        (-signal.SIGKILL, limits.Usage(cpu=1.2), "MCPGATE_CHILD_CPU_SECONDS (2 s)"),
        (-signal.SIGKILL, limits.Usage(cpu=0.5), None),  # killed by someone else, far from the limit
        (1, limits.Usage(memory_failure=True), "MCPGATE_CHILD_MEMORY_BYTES (1000 bytes)"),
        (-signal.SIGSEGV, limits.Usage(vsize=950), "MCPGATE_CHILD_MEMORY_BYTES (1000 bytes)"),
        (1, limits.Usage(vsize=500), None),
        (0, limits.Usage(memory_failure=True), None),  # a clean exit is nobody's limit
    ],
)
def test_exit_limit(returncode: int, usage: limits.Usage, passed: str | None) -> None:
    assert limits.exit_limit(LIMITS, returncode, usage) == passed


@pytest.mark.parametrize(
    ("child_limits", "asked", "returncode", "usage", "settled"),
    [
        (None, None, 0, limits.Usage(), ("clean", None)),
        (None, None, 1, limits.Usage(), ("crash", None)),
        (None, None, -signal.SIGXCPU, limits.Usage(), ("crash", None)),  # no limit set: nobody's limit
        (None, "stopped", -signal.SIGTERM, limits.Usage(), ("stopped", None)),
        (LIMITS, "stopped", -signal.SIGXCPU, limits.Usage(), ("stopped", None)),  # asked to go: on purpose
        (LIMITS, "crash", -signal.SIGXCPU, limits.Usage(), ("limit", "MCPGATE_CHILD_CPU_SECONDS (2 s)")),
        (LIMITS, "limit", 0, limits.Usage(), ("limit", None)),  # the watchdog's, told by its close reason
        (LIMITS, None, 0, limits.Usage(memory_failure=True), ("clean", None)),
    ],
)
def test_settle(
    child_limits: limits.ChildLimits | None,
    asked: str | None,
    returncode: int,
    usage: limits.Usage,
    settled: tuple[str, str | None],
) -> None:
    assert limits.settle(child_limits, asked, returncode, usage) == settled


def test_an_exit_by_sigxcpu_without_a_cpu_limit_is_a_crash() -> None:
    none = limits.ChildLimits(0, 1000, 0, 0, False, 0)
    assert limits.exit_limit(none, -signal.SIGXCPU, limits.Usage(cpu=99)) is None


def test_of_settings_is_none_without_limits() -> None:
    from mcpgate.config.settings import Settings

    assert limits.ChildLimits.of(Settings.from_env({})) is None
    timed = limits.ChildLimits.of(Settings.from_env({"MCPGATE_REQUEST_TIMEOUT": "5"}))
    assert timed is not None and timed.watched and limits.timeout_limit(timed) == "MCPGATE_REQUEST_TIMEOUT (5 s)"
    files = limits.ChildLimits.of(Settings.from_env({"MCPGATE_CHILD_OPEN_FILES": "9"}))
    assert files is not None and not files.watched  # set at spawn; nothing to sweep for


def test_ended_message() -> None:
    reason = limits.limit_reason("MCPGATE_REQUEST_TIMEOUT (5 s)")
    assert limits.ended_message(reason, "x: ") == "The MCP server was ended: it passed MCPGATE_REQUEST_TIMEOUT (5 s)"
    assert limits.ended_message("exited with code 1", "MCP server ended: ") == "MCP server ended: exited with code 1"


@pytest.mark.parametrize(
    "line",
    [
        b"MemoryError",
        b"FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory",
        b"fatal error: runtime: out of memory",
        b"terminate called after throwing an instance of 'std::bad_alloc'",
        b"memory allocation of 1048576 bytes failed",
    ],
)
def test_memory_failures_are_recognised(line: bytes) -> None:
    assert limits.mentions_memory_failure(line)
    assert not limits.mentions_memory_failure(b"allocated 3 buffers")


def test_a_network_namespace_the_kernel_refuses_is_a_clear_refusal() -> None:
    found = limits.probe_network_namespace(lambda flags: -1, [limits.CLONE_NEWUSER | limits.CLONE_NEWNET])
    assert found.flags == 0 and "unshare(CLONE_NEWUSER|CLONE_NEWNET): Operation not permitted" in found.problem
    assert limits.probe_network_namespace(None, [limits.CLONE_NEWNET]).problem
    assert limits.network_namespace().problem == ""  # this machine allows one (the integration test needs it)


def test_timed_router_knows_the_oldest_request_in_flight() -> None:
    now = [10.0]
    router: watchdog.TimedRouter[str] = watchdog.TimedRouter(CancelTracker(ttl=60.0), clock=lambda: now[0])
    assert router.oldest() is None
    router.open_request(Request(1, "tools/call", {}, {}), "a")
    now[0] = 11.0
    router.open_request(Request(2, "tools/call", {}, {}), "b")
    assert router.oldest() == 10.0
    assert router.route(Response(1, {"jsonrpc": "2.0", "id": 1, "result": {}}), now[0]).target == "a"
    assert router.oldest() == 11.0
    router.cancel(2, now[0])
    assert router.oldest() is None


def test_read_groups_counts_this_process_group() -> None:
    pgid = os.getpgrp()
    groups, _ = watchdog.read_groups({pgid})
    assert groups[pgid].processes >= 1 and groups[pgid].cpu > 0


def test_a_child_stopped_on_purpose_is_not_a_limit() -> None:
    child = ChildProcess(
        ["true"], on_message=lambda m: None, on_exit=lambda r: None, max_line_bytes=1, max_write_queue_bytes=1,
        close_timeout=1, term_timeout=1, limits=LIMITS,
    )  # fmt: skip
    child.close("the gateway is shutting down")  # never started: it ends at once
    assert child.end_cause == "stopped"
