"""mcpgate-relay sends back the cookies its upstream sets (its requests.Session's jar, kept for the run), so a
balancer that pins clients by cookie only (Heroku's router, HAProxy's `cookie ... insert`) pins the relay's
session too: here HAProxy inserts a server cookie in front of two mcpgate instances that share nothing (no
Redis: neither could forward a request for the other's session), and every request of the relay's session
reaches the instance that holds it. Without the cookie the same balancer splits a session (the control)."""

from __future__ import annotations

import http.client
import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from mcpgate.core.wire import SESSION_ID
from tests.support import HEADERS, init_body, serving
from tests.support.fleet import Balancer, balancer_config, haproxy
from tests.support.relay import run_host


@pytest.fixture(scope="module")
def balancer() -> Iterator[Balancer]:
    with serving() as first, serving() as second:
        config = balancer_config({"a": first.port, "b": second.port}, cookie="MCPGATE_SERVER")
        with haproxy(config) as lb:
            yield lb


def served(lb: Balancer) -> Counter[str]:
    """The server of each /mcp request HAProxy logged so far."""
    return Counter(line.split("server=")[1] for line in lb.log().splitlines() if " /mcp " in line)


def test_the_relay_keeps_the_balancers_cookie_and_its_session_stays_on_one_instance(
    balancer: Balancer, tmp_path: Path
) -> None:
    lb = balancer
    before = served(lb)

    async def scenario(client: Client) -> list[Any]:
        answers = [(await client.call_tool("echo", {"message": f"m{n}"})).content[0].text for n in range(6)]  # type: ignore[union-attr]
        answers.append(len((await client.list_tools()).tools) > 0)
        return answers

    answers = run_host(lb.url, scenario, stderr=tmp_path / "relay.log")
    assert answers == [f"m{n}" for n in range(6)] + [True]
    requests = served(lb) - before
    assert len(requests) == 1 and sum(requests.values()) >= 8, requests  # initialize, initialized, 6 calls, ...
    relay_log = (tmp_path / "relay.log").read_text(errors="replace")
    assert "404" not in relay_log, relay_log


def test_without_the_cookie_the_same_balancer_splits_a_session(balancer: Balancer) -> None:
    """The control: a client that drops cookies has its requests spread over both instances; the one that
    does not hold the session answers 404."""
    lb = balancer
    conn = http.client.HTTPConnection("127.0.0.1", lb.port, timeout=15)
    try:
        conn.request("POST", "/mcp", json.dumps(init_body()), HEADERS)
        reply = conn.getresponse()
        reply.read()
        assert reply.status == 200 and reply.getheader("Set-Cookie", "").startswith("MCPGATE_SERVER="), reply.headers
        headers = {**HEADERS, SESSION_ID: reply.getheader(SESSION_ID) or "", "MCP-Protocol-Version": "2025-11-25"}
        statuses = []
        for n in range(4):
            ping = {"jsonrpc": "2.0", "id": n + 2, "method": "ping"}
            conn.request("POST", "/mcp", json.dumps(ping), headers)
            answer = conn.getresponse()
            answer.read()
            statuses.append(answer.status)
    finally:
        conn.close()
    assert 404 in statuses and 200 in statuses, statuses
