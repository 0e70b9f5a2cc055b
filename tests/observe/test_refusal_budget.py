"""Issue 28: a connection closed for the waiting-connections budget (MCPGATE_IDLE_CONNECTIONS: past it the
longest-waiting connection is closed) is a refusal like the others in /metrics' mcpgate_refusals_total, of kind
connection_budget; it is not counted as a slow client too (the evicted connection's read fails as a timeout
does). Provoked for real: sockets that connect and send nothing to `gunicorn mcpgate.wsgi`."""

from __future__ import annotations

import re
import select
import socket
from collections.abc import Iterator

import pytest

from tests.support import Gateway, serving
from tests.support.security import WAIT, answer_and_close

SERIES = re.compile(r'^mcpgate_refusals_total\{kind="([a-z_]+)"\} ([0-9.e+]+)$', re.MULTILINE)
BUDGET = 2


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with serving({"MCPGATE_METRICS": "true", "MCPGATE_IDLE_CONNECTIONS": str(BUDGET)}) as served:
        yield served


def refused(gw: Gateway) -> dict[str, int]:
    reply = gw.request("GET", "/metrics")
    assert reply.status == 200, reply
    return {kind: int(float(count)) for kind, count in SERIES.findall(reply.body.decode())}


def test_the_budget_kind_is_a_series_from_the_start(gw: Gateway) -> None:
    assert "connection_budget" in refused(gw)


def test_a_connection_closed_for_the_budget_is_counted(gw: Gateway) -> None:
    before = refused(gw)
    waiting = [socket.create_connection(gw.address(), timeout=WAIT) for _ in range(BUDGET + 1)]
    try:
        ready, _, _ = select.select(waiting, [], [], WAIT)  # one more than the budget: the longest-waiting closed
        assert ready, "no connection was closed for the budget"
        _, closed = answer_and_close(ready[0])
        assert closed
        after = refused(gw)
    finally:
        for sock in waiting:
            sock.close()
    assert after["connection_budget"] - before["connection_budget"] >= 1
    assert after["slow_client"] == before["slow_client"]
