"""A client that never reads its GET stream while the child floods it: the stream queue and the session buffer
are bounded in bytes (MCPGATE_STREAM_QUEUE_BYTES, MCPGATE_BUFFER_BYTES), so the worker's memory stays far
below the flood, the stream that is not read is ended, and the worker goes on serving every session."""

from __future__ import annotations

import http.client
import json
import sys
import time
from typing import Any

from mcpgate.core.wire import SESSION_ID
from tests.support import FIXTURES, Gateway, call, direct_children, open_session

MiB = 1024 * 1024
FLOOD_COUNT = 400  # notifications of 1 MiB: 400 MiB in all
RSS_BOUND = 64 * MiB  # what the worker may grow by (the bound the rest of the gateway is held to)


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def open_get(gw: Gateway, headers: dict[str, str]) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
    get_headers = {k: v for k, v in headers.items() if k != "Content-Type"}
    conn.request("GET", "/mcp", headers={**get_headers, "Accept": "text/event-stream"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.status
    return conn, resp


def read_all_events(resp: http.client.HTTPResponse) -> list[dict[str, Any]]:
    """Every message event until the stream ends."""
    messages = []
    for block in resp.read().decode().split("\n\n"):
        data = [line[6:] for line in block.split("\n") if line.startswith("data: ")]
        if data and data[0]:
            messages.append(json.loads("\n".join(data)))
    return messages


def test_a_flooded_get_stream_nobody_reads_is_bounded_in_bytes(gateway_factory: Any) -> None:
    gw = gateway_factory(
        {
            "MCPGATE_COMMAND": f"{sys.executable} {FIXTURES / 'flood_server.py'}",
            "MCPGATE_STREAM_STALL_TIMEOUT": "2",
        }
    )
    (worker,) = direct_children(gw.proc.pid)
    headers = open_session(gw)
    conn, resp = open_get(gw, headers)  # and never read it until the flood is over
    try:
        before = rss(worker)
        reply = gw.request("POST", body=call("flood", {"count": FLOOD_COUNT, "size": MiB}), headers=headers)
        assert reply.status == 200, reply
        peak = before
        deadline = time.monotonic() + 120
        while f"flood done: {FLOOD_COUNT}" not in gw.log():
            assert time.monotonic() < deadline, "the flood did not finish"
            peak = max(peak, rss(worker))
            time.sleep(0.05)
        peak = max(peak, rss(worker))
        print(f"worker RSS before {before / MiB:.1f} MiB, peak {peak / MiB:.1f} MiB, flood {FLOOD_COUNT} MiB")
        assert peak - before < RSS_BOUND, (before, peak)
        assert "a client stopped reading its stream" in gw.log()

        # Another session is served meanwhile.
        other = open_session(gw)
        answer = gw.request("POST", body=call("echo", {"n": 1}), headers=other)
        assert answer.status == 200 and answer.json()["result"]["content"][0]["text"] == '{"n": 1}', answer

        # The stream nobody read was ended: what was already on its way, then the end of the body.
        got = read_all_events(resp)
        assert len(got) < FLOOD_COUNT / 4, len(got)
    finally:
        conn.close()

    # What came after went to the session buffer, whose bytes bound kept only the newest few.
    conn, resp = open_get(gw, headers)
    try:
        gw.request("DELETE", headers={SESSION_ID: headers[SESSION_ID]})
        buffered = [m["params"]["data"][0] for m in read_all_events(resp)]
    finally:
        conn.close()
    assert 0 < len(buffered) <= 16, buffered
    assert buffered == sorted(buffered) and buffered[-1] == FLOOD_COUNT, buffered
