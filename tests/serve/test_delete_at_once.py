"""Many 2025 sessions calling tools at once, each client ending its session (DELETE) among the others' calls, tracing on
(every request sampled, spans exported to a loopback receiver): every DELETE is answered, and on SIGTERM the
worker stops gracefully (gunicorn neither times it out nor kills it).

A bench round of this shape once left a DELETE unanswered and the worker stuck past its graceful stop: each
session's end polled the children still stopping with join(0), gevent's wait on an event just set, while a
waiter that left cancelled the event's notifier (mcpgate/child/waits.py; tests/test_child_join.py makes that
order deterministic, and fails on the old code every time). Here the whole path runs for real, as a guard: the
old code failed this shape only in some rounds (bench/tracing.py: 2 rounds of about 65).
"""

from __future__ import annotations

import http.client
import json
import signal
import threading

from tests.support import HEADERS, Gateway, init_body, pid_gone, worker_children
from tests.support.otlp import receiver

SESSIONS = 32
CALLS = 20
ROUNDS = 2
GUARD = 60.0  # a hang guard for each reply and for the stop, never a speed assertion


def client(port: int, barrier: threading.Barrier, answers: list[object], index: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=GUARD)
    try:
        conn.request("POST", "/mcp", json.dumps(init_body()), HEADERS)
        reply = conn.getresponse()
        reply.read()
        session = {
            **HEADERS,
            "Mcp-Session-Id": reply.getheader("Mcp-Session-Id") or "",
            "MCP-Protocol-Version": "2025-11-25",
        }
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        conn.request("POST", "/mcp", json.dumps(initialized), session)
        conn.getresponse().read()
        barrier.wait(GUARD)  # every session open: they call at once
        for n in range(CALLS + index):  # the ends spread among the other sessions' last calls
            params = {"name": "echo", "arguments": {"message": "x"}}
            conn.request(
                "POST",
                "/mcp",
                json.dumps({"jsonrpc": "2.0", "id": n + 1, "method": "tools/call", "params": params}),
                session,
            )
            conn.getresponse().read()
        conn.request("DELETE", "/mcp", headers=session)
        deleted = conn.getresponse()
        deleted.read()
        answers[index] = deleted.status
    except Exception as exc:  # noqa: BLE001 - the test reports what each client met
        answers[index] = repr(exc)
    finally:
        conn.close()


def test_sessions_deleted_at_once_are_answered_and_the_worker_stops_gracefully() -> None:
    with receiver() as spans:
        env = {
            "MCPGATE_TRACING": "true",
            "OTEL_TRACES_SAMPLER": "always_on",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": spans.url,
            "MCPGATE_MAX_SESSIONS": str(SESSIONS * 2),
        }
        gw = Gateway(env)
        try:
            gw.wait_ready()
            for _ in range(ROUNDS):
                barrier = threading.Barrier(SESSIONS)
                answers: list[object] = [None] * SESSIONS
                threads = [
                    threading.Thread(target=client, args=(gw.port, barrier, answers, i), daemon=True)
                    for i in range(SESSIONS)
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(3 * GUARD)
                assert answers == [204] * SESSIONS, f"DELETE answers: {answers}\n{gw.log_tail(40)}"
            children = worker_children(gw)
            gw.proc.send_signal(signal.SIGTERM)
            assert gw.proc.wait(GUARD) == 0, gw.log_tail(40)
            log = gw.log()
            assert "graceful timeout" not in log and "SIGKILL" not in log, gw.log_tail(40)
            assert all(pid_gone(pid) for pid in children), children
        finally:
            gw.stop()
