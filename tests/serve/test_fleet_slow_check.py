"""An instance slow to answer its health check is not taken for dead (deploy/haproxy.cfg, "timeout check").

The recipe checks `/healthz` every second and takes a server down after two failed checks. Before, a check
waited one second for its answer: an instance whose worker was busy for two seconds (fifty sessions starting
their children at once on a loaded two-core machine) was taken down, every instance of the fleet at once under
such a burst, and HAProxy answered each session's request itself (its 503, sent as 404: the client lost its
session). The CI run of 2026-12-03 18:19 UTC failed so (tests/interop/test_cluster.py, HAProxy's log: "Layer7
timeout, check duration: 1001ms. 0 active ... servers left").

Here one real instance behind the recipe's HAProxy has its worker stopped (SIGSTOP) for longer than two of the
old check timeouts, a session's call sent meanwhile; once the worker goes on, the check that waited on it passes,
the server never went down, and the call is answered by the session's child, not with HAProxy's 404.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support import Gateway, call, direct_children, open_session, wait_for
from tests.support.fleet import Balancer, recipe_front, redis_server
from tests.support.http import Reply, reply_message

STOPPED = 4.0  # seconds the worker answers nothing: the old recipe took it down after two 1 s timeouts
OLD_TIMEOUT_MS = 1000


@pytest.fixture
def front() -> Iterator[tuple[Gateway, Balancer]]:
    with redis_server() as url:
        env = {
            "REDIS_URL": url,
            "MCPGATE_INSTANCE_ID": "i1",
            "MCPGATE_CLUSTER_SECRET": "slow-check-test-secret-0123456789abcdef",
            "MCPGATE_INTERNAL_URL": "http://127.0.0.1:{port}",
        }
        gw = Gateway(env)
        try:
            gw.wait_ready()
            with recipe_front({"i1": gw}, "sticky") as lb:
                yield gw, lb
        finally:
            gw.stop()


def server_stat(lb: Balancer, backend: str, server: str) -> dict[str, str]:
    """One server's row of HAProxy's `show stat` (its fields by name)."""
    lines = [line.split(",") for line in lb.admin("show stat").splitlines()]
    header = [name.lstrip("# ") for name in lines[0]]
    for row in lines[1:]:
        if len(row) == len(header) and row[0] == backend and row[1] == server:
            return dict(zip(header, row, strict=True))
    raise AssertionError(f"no {backend}/{server} in show stat")


def test_a_worker_stopped_for_seconds_stays_up_and_its_session_call_is_answered(
    front: tuple[Gateway, Balancer],
) -> None:
    gw, lb = front
    headers = open_session(lb)
    before = server_stat(lb, "sticky", "i1")
    [worker] = direct_children(gw.proc.pid)
    replies: list[Reply] = []
    sender = threading.Thread(
        target=lambda: replies.append(lb.request("POST", body=call("echo", {"message": "late"}), headers=headers))
    )
    os.kill(worker, signal.SIGSTOP)
    try:
        # the stimulus itself is a span of time: the worker answers nothing for STOPPED seconds, during which
        # HAProxy's checks of it run as they are scheduled (the old recipe failed two and took it down)
        time.sleep(STOPPED)
        sender.start()  # sent while the worker is still stopped: queued to it, or answered by HAProxy (404)
        assert wait_for(lambda: replies or int(server_stat(lb, "sticky", "i1")["scur"] or 0) > 0, 15), replies
    finally:
        os.kill(worker, signal.SIGCONT)
    sender.join(60)
    [reply] = replies
    assert reply.status == 200, reply
    assert reply_message(reply)["result"]["content"][0]["text"] == "late", reply
    # the check that waited on the stopped worker passed once it went on, and took longer than the old timeout
    assert wait_for(
        lambda: (
            (stat := server_stat(lb, "sticky", "i1"))["check_status"] == "L7OK"
            and int(stat["check_duration"] or 0) > OLD_TIMEOUT_MS
        ),
        15,
    ), server_stat(lb, "sticky", "i1")
    after = server_stat(lb, "sticky", "i1")
    assert after["status"] == "UP" and after["chkdown"] == before["chkdown"], (before, after)
    assert int(after["chkfail"] or 0) == int(before["chkfail"] or 0), (before, after)
