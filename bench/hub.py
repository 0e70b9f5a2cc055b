"""The hub's cost: a tools/call through the aggregate (MCPGATE_PATH, the name namespaced) against the same server's
own path (/servers/<name>/mcp), and a merged tools/list of 10 servers x 30 tools.

    python bench/hub.py [--calls 1000] [--rounds 3] [--lists 200]

One gunicorn (the gevent worker) serves an MCPGATE_CONFIG of two bench children (bench/child_server.py): every
round makes `calls` sequential calls of `echo` on a 2025 session of the server's own path, then as many of
`bench__echo` on a session of the aggregate, each on one kept-alive http.client connection (bench/mcpclient.py);
the p50 of each and the difference (the added microseconds) are printed, the rounds interleaved so both see the
same machine. The merged list is timed twice: in process (core/hub.py answering one tools/list from ten members'
pre-encoded answers, as a HubChild does, decoding and encoding included), and end to end through a second
gunicorn whose aggregate is ten tests/fixtures/many_tools_server.py children of 30 tools each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import procs  # noqa: E402 - bench/ is the import path of the bench's own modules
from gateways import CHILD, ROOT, free_port  # noqa: E402
from mcpclient import HttpSession, stop_group  # noqa: E402

MANY = ROOT / "tests" / "fixtures" / "many_tools_server.py"


def call_body(msg_id: int, name: str) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":{"message":"hi"}}}' % (
        msg_id,
        name.encode(),
    )


def list_body(msg_id: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"tools/list","params":{}}' % msg_id


def gunicorn(config: dict[str, object], log: Path) -> tuple[subprocess.Popen[bytes], int]:
    path = Path(tempfile.mkdtemp()) / "mcp.json"
    path.write_text(json.dumps(config))
    port = free_port()
    env = {**os.environ, "MCPGATE_CONFIG": str(path), "MCPGATE_LOG_LEVEL": "warning"}
    with open(log, "ab") as out:
        proc = procs.register(
            subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "-b", f"127.0.0.1:{port}", "mcpgate.wsgi"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            session = HttpSession(port, "/healthz")
            session.conn.request("GET", "/healthz")
            if session.conn.getresponse().status in (200, 503):
                return proc, port
        except OSError:
            time.sleep(0.1)
    stop_group(proc)
    raise RuntimeError(f"gunicorn did not start: {log.read_text(errors='replace')[-600:]}")


def timed_calls(port: int, path: str, name: str, calls: int) -> list[float]:
    session = HttpSession(port, path).initialize()
    try:
        for msg_id in range(1, 51):  # warm: the children started, the paths' code loaded
            session.post(call_body(msg_id, name), msg_id)
        took = []
        for msg_id in range(100, 100 + calls):
            began = time.perf_counter()
            reply = session.post(call_body(msg_id, name), msg_id)
            took.append(time.perf_counter() - began)
            if reply is None or "result" not in reply:
                raise RuntimeError(f"{path} {name}: {reply}")
        return took
    finally:
        session.delete()
        session.close()


def timed_lists(port: int, lists: int) -> tuple[list[float], int]:
    session = HttpSession(port, "/mcp").initialize()
    try:
        count = 0
        took = []
        for msg_id in range(1, lists + 1):
            began = time.perf_counter()
            reply = session.post(list_body(msg_id), msg_id)
            took.append(time.perf_counter() - began)
            count = len(reply["result"]["tools"]) if reply else 0
        return took[5:], count
    finally:
        session.delete()
        session.close()


def in_process_merge(servers: int, tools: int, runs: int) -> list[float]:
    from mcpgate.core import jsonrpc
    from mcpgate.core.hub import Hub
    from mcpgate.core.hub_messages import Member, ToClient, ToMember

    names = [f"s{i}" for i in range(servers)]
    hub = Hub([Member(n, n) for n in names], in_flight=4096, uris=100)
    init = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}}
    for out in hub.from_client(jsonrpc.Request(0, "initialize", {}, {}), 0.0):
        if isinstance(out, ToMember):
            asked = json.loads(out.data)
            hub.from_member(out.member, jsonrpc.Response(asked["id"], {"id": asked["id"], "result": init}), 0.0)
    listing = {
        "tools": [
            {"name": f"t{i}", "description": f"tool {i}", "inputSchema": {"type": "object"}} for i in range(tools)
        ]
    }
    template = b'{"jsonrpc":"2.0","id":%d,"result":' + jsonrpc.encode(listing) + b"}"  # each member's answer
    took = []
    for run in range(runs):
        began = time.perf_counter()
        request = jsonrpc.parse(list_body(run + 1))
        assert isinstance(request, jsonrpc.Request)
        for out in hub.from_client(request, 0.0):
            if isinstance(out, ToMember):
                hub_id = json.loads(out.data)["id"]
                answer = jsonrpc.parse_line(template % hub_id)
                assert isinstance(answer, jsonrpc.Response)
                for final in hub.from_member(out.member, answer, 0.0):
                    if isinstance(final, ToClient):
                        jsonrpc.raw_bytes(final.message)
        took.append(time.perf_counter() - began)
    return took


def us(values: list[float]) -> float:
    return statistics.median(values) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lists", type=int, default=200)
    args = parser.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="mcpgate-bench-hub-"))
    child = {"command": CHILD[0], "args": CHILD[1:]}
    proc, port = gunicorn({"mcpServers": {"bench": child, "other": child}}, logs / "calls.log")
    try:
        own: list[float] = []
        hub: list[float] = []
        for _ in range(args.rounds):
            own += timed_calls(port, "/servers/bench/mcp", "echo", args.calls)
            hub += timed_calls(port, "/mcp", "bench__echo", args.calls)
    finally:
        stop_group(proc)
    print(f"tools/call p50, the server's own path: {us(own):8.1f} us ({len(own)} calls)")
    print(f"tools/call p50, through the aggregate:  {us(hub):8.1f} us ({len(hub)} calls)")
    print(f"added by the hub (p50):               {us(hub) - us(own):8.1f} us")
    merged = in_process_merge(10, 30, 500)
    print(f"merged tools/list, 10 servers x 30 tools, in process (core/hub.py): p50 {us(merged):.1f} us")
    many = {"command": sys.executable, "args": [str(MANY), "--tools", "30"]}
    proc, port = gunicorn({"mcpServers": {f"s{i}": many for i in range(10)}}, logs / "lists.log")
    try:
        lists, count = timed_lists(port, args.lists)
    finally:
        stop_group(proc)
    print(f"merged tools/list, 10 servers x 30 tools, through gunicorn: p50 {us(lists):.1f} us ({count} tools)")
    print(f"(gunicorn logs in {logs})")


if __name__ == "__main__":
    main()
