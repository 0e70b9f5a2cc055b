"""The bench: SIGTERM to a running bench ends every process it started (it runs the bench itself, a few seconds);
its 2026-07-28 client against a real gateway in front of the bench child (legacy-only and --modern); the
serve table's 2026-07-28 rows and issue 9's ratios; the relay row of a 2026-07-28 stdio host (the bench's row
against a real gateway) and issue 11's ratios."""

from __future__ import annotations

import http.client
import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import Gateway, wait_for
from tests.support.raw_server import RawServer

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))  # the bench's own modules (mcpclient, report), as bench/run.py imports them

import gateways  # noqa: E402
import mcpclient  # noqa: E402
import measure  # noqa: E402
import report  # noqa: E402

CHILD = [sys.executable, "-S", str(BENCH / "child_server.py")]


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


def logged(text: str, log: Path, proc: subprocess.Popen[bytes]) -> Callable[[], bool]:
    """Whether the bench has written `text` to its log (it must still be running meanwhile)."""

    def seen() -> bool:
        assert proc.poll() is None, f"the bench exited {proc.returncode}: {log.read_text()[-2000:]}"
        return text in log.read_text(errors="replace")

    return seen


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
        wait_for(logged("seq mcpgate:", log, bench), 120.0, "the bench's mcpgate sequence")

        def all_started() -> bool:  # the gateway, the child on direct pipes, and a child of a load client's session
            nonlocal started
            assert bench.poll() is None, log.read_text()[-2000:]
            started = descendants(bench.pid)
            names = [cmdline(pid) for pid in started]
            return any("gunicorn" in n for n in names) and sum("child_server.py" in n for n in names) >= 2

        wait_for(all_started, 60.0, "the gateway and two children of the bench")
        os.kill(bench.pid, signal.SIGTERM)
        assert bench.wait(60) == 128 + signal.SIGTERM, log.read_text()[-2000:]
        # the last ones may still be on their way out of the kernel
        wait_for(lambda: not any(alive(pid, start) for pid, start in started.items()), 10.0)
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


@pytest.mark.parametrize("child_args", [[], ["--modern"]], ids=["legacy-child", "modern-child"])
def test_the_benchs_2026_client_is_served_without_a_session(gateway_factory, child_args: list[str]) -> None:
    gw: Gateway = gateway_factory({"MCPGATE_COMMAND": shlex.join([*CHILD, *child_args])})
    client = mcpclient.StatelessSession(gw.port).initialize()
    try:
        for _ in range(3):
            client.echo("hello")
        client.blob(65536)
        assert client.session_id is None  # no initialize, and no reply named a session
    finally:
        client.close()
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    try:
        conn.request("GET", "/healthz")
        assert json.loads(conn.getresponse().read())["sessions"] == 0
    finally:
        conn.close()


@pytest.mark.parametrize(("child_args", "modern"), [([], False), (["--modern"], True)])
def test_the_bench_child_answers_server_discover_only_with_modern(child_args: list[str], modern: bool) -> None:
    discover = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {}}
    done = subprocess.run(
        [*CHILD, *child_args], input=json.dumps(discover) + "\n", capture_output=True, text=True, timeout=30
    )
    reply = json.loads(done.stdout)
    if modern:
        assert reply["result"]["supportedVersions"] == ["2026-07-28"]
        assert reply["result"]["resultType"] == "complete"
    else:
        assert reply["error"]["code"] == -32601


def test_the_serve_table_has_the_2026_rows_and_issue_9s_ratios() -> None:
    def row(p50: float, rate: float) -> dict:
        return {"seq": {"p50_ms": p50, "p99_ms": 2 * p50}, "c16": {"calls_per_s": rate, "p50_ms": 1.0, "p99_ms": 2.0}}

    labels = {
        "mcpgate": "mcpgate serve (gunicorn, gevent)",
        "mcpgate-modern": "mcpgate serve, 2026-07-28 (pooled child)",
        "mcpgate-modern-child": "mcpgate serve, 2026-07-28 (pooled child answering server/discover)",
    }
    results = {
        "config": {"levels": [1, 16], "memory_counts": [1, 20, 100]},
        "gateways": {name: {"label": text} for name, text in labels.items()},
        "speed": {"mcpgate": row(0.4, 3000), "mcpgate-modern": row(0.5, 3300), "mcpgate-modern-child": row(0.3, 2700)},
    }
    table = report.serve_table(results)
    assert [line.split(" | ")[0].lstrip("| ") for line in table[2:]] == list(labels.values())
    assert table[3].endswith("| 1.25x |")
    targets = "\n".join(report.targets(results))
    assert "0.500 vs 0.400 ms = 1.25x | no |" in targets
    assert "3,300 vs 3,000 calls/s = 1.10x | yes |" in targets
    assert "0.300 vs 0.400 ms = 0.75x | yes |" in targets
    assert "2,700 vs 3,000 calls/s = 0.90x | no |" in targets


def healthz_sessions(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/healthz")
        return int(json.loads(conn.getresponse().read())["sessions"])
    finally:
        conn.close()


def test_the_modern_relay_row_sends_2026_requests_through_the_relay_without_a_session(
    gateway_factory, tmp_path: Path
) -> None:
    gw: Gateway = gateway_factory({"MCPGATE_COMMAND": shlex.join(CHILD)})
    spec = next(r for r in gateways.relay_specs() if r.name == "mcpgate-relay-modern")
    assert spec.missing is None, spec.missing
    argv = spec.argv(gw.url)
    assert argv[-2:] == ["--protocol-era", "modern"]
    log = tmp_path / "relay.log"
    with open(log, "wb") as err:
        host = mcpclient.PIPE_CLIENTS[spec.client](
            [*argv, "--log-level", "info"], env=spec.env or None, cwd=str(spec.cwd or gateways.ROOT), stderr=err
        )
    try:
        assert isinstance(host, mcpclient.ModernPipeSession)
        host.initialize(60.0)
        for _ in range(3):
            host.echo("hello")
        host.blob(65536)
        figure = measure.pipe_in_flight(host, 4, 0.3)  # the bench's 16-in-flight loop, with the row's bodies
        assert figure["calls"] >= 4
        assert healthz_sessions(gw.port) == 0  # every request went stateless: no initialize reached the upstream
    finally:
        host.close()
    # the host itself spoke 2026-07-28 (a 2025 host would be bridged: LegacyHostBridge)
    assert "host speaks 2026-07-28; bridging: no bridge" in log.read_text(errors="replace"), log.read_text()[-1500:]
    legacy = next(r for r in gateways.relay_specs() if r.name == "mcpgate-relay")
    host = mcpclient.PIPE_CLIENTS[legacy.client](legacy.argv(gw.url), env=legacy.env or None)
    try:
        host.initialize(60.0).echo("hello")
        assert healthz_sessions(gw.port) == 1  # the legacy row's host holds a session (the check above can fail)
    finally:
        host.close()


def test_the_relay_table_has_the_2026_row_and_issue_11s_ratios() -> None:
    def row(p50: float, rate: float) -> dict:
        return {
            "seq": {"p50_ms": p50, "p99_ms": 2 * p50, "cpu_us_per_call": 300.0},
            "inflight": {"calls_per_s": rate, "p50_ms": 5.0, "p99_ms": 10.0, "cpu_us_per_call": 180.0},
            "memory": {"rss_kb": 34 * 1024, "pss_kb": 30 * 1024},
            "startup_s": 0.2,
        }

    results = {
        "config": {"relay_inflight": 16, "levels": [1, 16], "memory_counts": [1, 20, 100]},
        "relay": {
            "upstream-direct": row(0.3, 4000),
            "mcpgate-relay-baseline": row(0.64, 3000),
            "mcpgate-relay-modern": row(0.72, 3300),
            "mcpgate-relay": row(0.6, 2700),
        },
    }
    table = report.relay_table(results)
    names = [line.split(" | ")[0].lstrip("| ") for line in table[2:]]
    assert names[:3] == [
        "mcpgate-relay",
        "mcpgate-relay, 2026-07-28 host (--protocol-era modern)",
        "mcpgate-relay, baseline tree",
    ]
    assert table[3].split(" | ")[1:4] == ["0.720", "1.440", "3,300"]
    targets = "\n".join(report.targets(results))
    assert "0.600 vs 0.640 ms = 0.94x | yes |" in targets
    assert "2,700 vs 3,000 calls/s = 0.90x | no |" in targets
    assert "0.720 vs 0.600 ms = 1.20x | – |" in targets
    assert "3,300 vs 2,700 calls/s = 1.22x | – |" in targets


# The lean client's reply framing: (the server's bytes for two replies, what each read gives, whether the second
# reply came on the first connection)
LEAN_REPLIES = [
    ("length", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", [b"hi", b"hi"], True),
    (
        "chunked",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;x=1\r\nh\r\n1\r\ni\r\n0\r\nT: 1\r\n\r\n",
        [b"hi", b"hi"],
        True,
    ),
    ("interim", b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", [b"hi", b"hi"], True),
    ("close", b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi", [b"hi", b"hi"], False),
    ("to the end", b"HTTP/1.0 200 OK\r\n\r\nhi", [b"hi", b"hi"], False),
]


@pytest.mark.parametrize(("reply", "bodies", "kept"), [c[1:] for c in LEAN_REPLIES], ids=[c[0] for c in LEAN_REPLIES])
def test_the_lean_client_reads_each_framing_and_keeps_what_it_may(
    reply: bytes, bodies: list[bytes], kept: bool
) -> None:
    closes = b"Connection: close" in reply or reply.startswith(b"HTTP/1.0")
    with RawServer(lambda _: reply, 1 if closes else 1000) as server:
        conn = mcpclient.LeanConnection("127.0.0.1", server.port, timeout=10)
        try:
            got = []
            for _ in bodies:
                conn.request("POST", "/mcp", b"{}", {"Content-Type": "application/json"})
                resp = conn.getresponse()
                assert resp.status == 200
                got.append(resp.read())
        finally:
            conn.close()
    assert got == bodies
    assert server.connections == (1 if kept else 2)
