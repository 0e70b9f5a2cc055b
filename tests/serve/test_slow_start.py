"""Pooled children that are slow to start are never taken for the wrong era (issue 22), through gunicorn
mcpgate.wsgi and real children wrapped in tests/fixtures/slow_start.py (it sleeps, then runs the server and names
on stderr each message it is sent):

- a dual-era SDK server (modern_server.py), a legacy-only one (the bundled demo server) and a modern-only SDK one
  (modern_only_server.py), starting after 0, 2 and 5 s, all at once on one gateway while other processes keep
  every CPU busy, then a dual-era one starting after 20 s: each is served in its own era, and none is ever sent
  the other era's handshake after an unanswered server/discover;
- the verdict is remembered per server command: a legacy server's next child is sent initialize alone, and a
  child that contradicts the remembered verdict (the same command now modern-only, then legacy-only again)
  corrects it on the connection that answered;
- a child that answers ping but not server/discover is restarted and sent initialize alone (not a crash); one
  that answers nothing is a failed start after MCPGATE_START_TIMEOUT (tests/serve/test_pool.py)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import (
    FIXTURES,
    Gateway,
    Reply,
    modern_body,
    named,
    post_modern,
    reply_message,
    serving,
    stop_process,
    wait_for,
    write_config,
)

SLOW = str(FIXTURES / "slow_start.py")
SERVERS = {
    "dual": [sys.executable, str(FIXTURES / "modern_server.py")],
    "legacy": [sys.executable, "-m", "mcpgate.demo_server"],
    "modern": [sys.executable, str(FIXTURES / "modern_only_server.py")],
}
DELAYS = (0, 2, 5)  # seconds before the server starts (the probe's default timeout is 3 s)
MATRIX = [f"{kind}-{delay}" for kind in SERVERS for delay in DELAYS]
MODERN_ERA = re.compile(r"pooled child (\S+) speaks 2026-07-28")
LEGACY_ERA = re.compile(r"pooled child (\S+) speaks \S+ \(bridged\)")


def slow(delay: float, server: list[str], *drops: str) -> dict[str, Any]:
    """The config entry of `server` started after `delay` s, ignoring the requests named in `drops`."""
    options = [arg for method in drops for arg in ("--drop", method)]
    return {"command": sys.executable, "args": [SLOW, str(delay), *options, "--", *server]}


def asked(gw: Gateway, label: str) -> list[str]:
    """What the child `label` (e.g. "dual-5/pool-1") was sent, in order (its slow_start.py stderr lines)."""
    found = re.findall(rf"child\[{re.escape(label)}\] stderr: slow-start (?:got|dropped) (\S+)", gw.log())
    return list(found)


def echo(gw: Gateway, name: str, msg_id: str, timeout: float = 120.0) -> Reply:
    body = modern_body(msg_id, "tools/call", {"name": "echo", "arguments": {"message": f"hi {name}"}})
    return post_modern(named(gw, name), body, timeout=timeout)


def echoed(reply: Reply) -> str:
    message = reply_message(reply)
    assert reply.status == 200 and "result" in message, reply
    return str(message["result"]["content"][0]["text"])


def era_of(gw: Gateway, label: str) -> str | None:
    log = gw.log()
    if label in MODERN_ERA.findall(log):
        return "modern"
    return "legacy" if label in LEGACY_ERA.findall(log) else None


class Burners:
    """One busy-looping process per CPU, started and stopped by PID: the machine saturated."""

    def __init__(self) -> None:
        self.procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]

    def stop(self) -> None:
        for proc in self.procs:
            stop_process(proc)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, dict[str, Reply]]]:
    """One gateway serving every (server, delay) pair; each one's first request sent at once, the CPU saturated
    by other processes until all are answered."""
    entries = {f"{kind}-{delay}": slow(delay, server) for kind, server in SERVERS.items() for delay in DELAYS}
    config = write_config(tmp_path_factory.mktemp("slow") / "servers.json", entries)
    with serving({"MCPGATE_CONFIG": config, "MCPGATE_POOL_SPARES": "1"}) as gw:
        replies: dict[str, Reply] = {}

        def first(name: str) -> None:
            replies[name] = echo(gw, name, f"{name}-1")

        burners = Burners()
        try:
            threads = [threading.Thread(target=first, args=(name,)) for name in MATRIX]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            burners.stop()
        yield gw, replies


@pytest.mark.parametrize("name", MATRIX)
def test_a_slow_child_is_served_in_its_own_era(matrix: tuple[Gateway, dict[str, Reply]], name: str) -> None:
    gw, replies = matrix
    kind = name.split("-")[0]
    assert echoed(replies[name]).endswith(f"hi {name}"), gw.log_tail()
    label = f"{name}/pool-1"
    if kind == "legacy":
        assert era_of(gw, label) == "legacy", gw.log_tail()
        sent = asked(gw, label)
        assert sent[0] == "server/discover" and "initialize" in sent, sent
        # its spare, started once the first child was known to be legacy, is sent initialize alone
        spare = f"{name}/pool-2"
        assert wait_for(lambda: "initialize" in asked(gw, spare), timeout=60), gw.log_tail()
        assert asked(gw, spare)[0] == "initialize" and "server/discover" not in asked(gw, spare), asked(gw, spare)
    else:
        assert era_of(gw, label) == "modern", gw.log_tail()
        sent = asked(gw, label)
        assert sent[0] == "server/discover" and "initialize" not in sent, sent
    assert echoed(echo(gw, name, f"{name}-2")).endswith(f"hi {name}"), gw.log_tail()


def test_a_dual_era_child_starting_in_20_s_is_served_as_modern(gateway_factory: Any, tmp_path: Path) -> None:
    config = write_config(tmp_path / "servers.json", {"dual-20": slow(20, SERVERS["dual"])})
    gw = gateway_factory({"MCPGATE_CONFIG": config})
    assert echoed(echo(gw, "dual-20", "late-1")).endswith("hi dual-20"), gw.log_tail()
    assert era_of(gw, "dual-20/pool-1") == "modern", gw.log_tail()
    sent = asked(gw, "dual-20/pool-1")
    assert sent[:2] == ["server/discover", "ping"] and "initialize" not in sent, sent


def test_a_child_ignoring_server_discover_is_restarted_and_initialized(gateway_factory: Any, tmp_path: Path) -> None:
    """It answers ping (it is up) but never server/discover: restarted, not counted as a crash, and the next child
    is sent initialize alone."""
    entry = slow(0, SERVERS["legacy"], "server/discover")
    config = write_config(tmp_path / "servers.json", {"mute": entry})
    gw = gateway_factory({"MCPGATE_CONFIG": config, "MCPGATE_PROBE_TIMEOUT": "0.5", "MCPGATE_POOL_SPARES": "0"})
    assert echoed(echo(gw, "mute", "m-1")).endswith("hi mute"), gw.log_tail()
    assert asked(gw, "mute/pool-1")[:2] == ["server/discover", "ping"], gw.log_tail()
    assert "initialize" not in asked(gw, "mute/pool-1"), gw.log_tail()
    assert asked(gw, "mute/pool-2")[0] == "initialize", gw.log_tail()
    assert era_of(gw, "mute/pool-2") == "legacy" and "ended:" not in gw.log(), gw.log_tail()


def test_a_remembered_era_is_corrected_by_a_child_that_contradicts_it(gateway_factory: Any, tmp_path: Path) -> None:
    """One command whose server changes era between children (an upgrade, then a downgrade): legacy, remembered;
    then modern-only, which refuses the initialize sent alone and is asked server/discover on the same connection;
    then legacy-only again, which refuses server/discover and is initialized on the same connection."""
    mode = tmp_path / "mode"
    mode.write_text("legacy")
    legacy, modern = shlex.join(SERVERS["legacy"]), shlex.join(SERVERS["modern"])
    script = f'if [ "$(cat {shlex.quote(str(mode))})" = legacy ]; then exec {legacy}; else exec {modern}; fi'
    entry = {
        "command": sys.executable,
        "args": [SLOW, "0", "--", "sh", "-c", script],
        "mcpgate": {"pool_idle_ttl": 0.5},
    }
    config = write_config(tmp_path / "servers.json", {"switch": entry})
    gw = gateway_factory({"MCPGATE_CONFIG": config, "MCPGATE_POOL_SPARES": "0"})

    def served(number: int, era: str) -> list[str]:
        label = f"switch/pool-{number}"
        assert echoed(echo(gw, "switch", f"s-{number}")).endswith("hi switch"), gw.log_tail()
        assert era_of(gw, label) == era, gw.log_tail()
        # idle for longer than its pool_idle_ttl: stopped, so the next request starts a new child
        assert wait_for(lambda: f"pooled child {label} idle for longer" in gw.log()), gw.log_tail()
        return asked(gw, label)

    assert served(1, "legacy")[:2] == ["server/discover", "initialize"], gw.log_tail()
    mode.write_text("modern")
    assert served(2, "modern")[:2] == ["initialize", "server/discover"], gw.log_tail()
    mode.write_text("legacy")
    assert served(3, "legacy")[:2] == ["server/discover", "initialize"], gw.log_tail()
    assert "ended:" not in gw.log(), gw.log_tail()
