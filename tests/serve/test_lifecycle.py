"""Child exits, worker deaths and shutdowns: nothing hangs and nothing is orphaned."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support import (
    FIXTURES,
    HEADERS,
    ROOT,
    alive,
    call,
    call_in_flight,
    children,
    direct_children,
    init_body,
    open_session,
    wait_dead,
    wait_for,
)

CRASHY = f"{sys.executable} {FIXTURES / 'crashy_server.py'}"


def test_child_crash_answers_waiting_requests_and_later_ones_get_404(gateway_factory: Any) -> None:
    gw = gateway_factory({"MCPGATE_COMMAND": CRASHY, "MCPGATE_SSE_AFTER": "0.1"})
    headers = open_session(gw)
    # the head of the hanging call's reply (its SSE stream) comes once the call went to the child: the crash after it
    with call_in_flight(gw.host, gw.port, call("hang", {}, "w"), headers, timeout=15) as waited:
        gw.request("POST", body=call("crash", {}, "c"), headers=headers)
        text = waited.read().decode()
    assert '"w"' in text and "-32000" in text and "code 3" in text, text
    assert gw.request("POST", body=call("hang", {}, "x"), headers=headers).status == 404
    assert children(gw) == 0
    assert "exited" in gw.log() and "code 3" in gw.log()


def test_junk_output_and_oversized_messages_end_the_session_with_a_reason(gateway_factory: Any) -> None:
    gw = gateway_factory({"MCPGATE_COMMAND": CRASHY, "MCPGATE_MAX_MESSAGE_BYTES": "10000"})
    for tool, reason in (("junk", "junk output"), ("huge", "message too large")):
        headers = open_session(gw)
        reply = gw.request("POST", body=call(tool, {}, "j"), headers=headers)
        assert reply.status == 200, reply
        error = reply.json()["error"]
        assert error["code"] == -32000 and reason in error["message"], reply
        assert gw.request("POST", body=call("hang", {}, "x"), headers=headers).status == 404


def test_a_vanished_get_client_no_longer_keeps_its_session_alive(gateway_factory: Any) -> None:
    import socket

    gw = gateway_factory({"MCPGATE_KEEPALIVE": "0.2", "MCPGATE_SESSION_IDLE_TTL": "1.5"})
    headers = open_session(gw)
    sock = socket.create_connection(("127.0.0.1", gw.port))
    lines = "".join(f"{k}: {v}\r\n" for k, v in {**headers, "Accept": "text/event-stream"}.items())
    sock.sendall(f"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n{lines}\r\n".encode())
    assert b"200 OK" in sock.recv(4096)
    seen = b""
    while seen.count(b": keepalive") < 10:  # 2 s of keepalives, longer than the idle TTL: they keep the session
        chunk = sock.recv(4096)
        assert chunk, "the stream ended"
        seen += chunk
    assert children(gw) == 1
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()  # vanish with a reset, no goodbye
    assert wait_for(lambda: children(gw) == 0)


def session_with_grandchild(gateway_factory: Any) -> tuple[Any, int, int, int]:
    """A gateway whose one session's child started a grandchild: (gateway, worker, child, grandchild)."""
    gw = gateway_factory({"MCPGATE_COMMAND": CRASHY})
    headers = open_session(gw)
    reply = gw.request("POST", body=call("grandchild", {}), headers=headers)
    assert reply.status == 200 and "result" in reply.json(), reply
    grandchild = int(reply.json()["result"]["content"][0]["text"])
    [worker] = direct_children(gw.proc.pid)
    [child] = direct_children(worker)
    assert alive(child) and alive(grandchild)
    return gw, worker, child, grandchild


def test_worker_sigkill_leaves_no_orphans(gateway_factory: Any) -> None:
    _, worker, child, grandchild = session_with_grandchild(gateway_factory)
    os.kill(worker, signal.SIGKILL)
    assert wait_dead([worker, child, grandchild]) == []


def test_graceful_shutdown_stops_children_that_ignore_eof_and_sigterm(gateway_factory: Any) -> None:
    gw = gateway_factory(
        {
            "MCPGATE_COMMAND": CRASHY + " --ignore-signals --ignore-eof",
            "MCPGATE_CLOSE_TIMEOUT": "0.5",
            "MCPGATE_TERM_TIMEOUT": "0.5",
        }
    )
    headers = open_session(gw)
    [worker] = direct_children(gw.proc.pid)
    [child] = direct_children(worker)
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    conn.request("GET", "/mcp", headers={**headers, "Accept": "text/event-stream"})
    assert conn.getresponse().status == 200  # an open GET stream must not hold the shutdown
    gw.proc.send_signal(signal.SIGTERM)
    gw.proc.wait(30)
    conn.close()
    assert "graceful timeout" not in gw.log()  # the stream ended with the session, not when time ran out
    assert wait_dead([worker, child], timeout=5) == []
    assert "killed by signal SIGKILL" in gw.log() or "SIGKILL" in gw.log()


def test_delete_runs_the_ladder_for_a_child_that_ignores_eof(gateway_factory: Any) -> None:
    gw = gateway_factory({"MCPGATE_COMMAND": CRASHY + " --ignore-eof", "MCPGATE_CLOSE_TIMEOUT": "0.3"})
    headers = open_session(gw)
    [worker] = direct_children(gw.proc.pid)
    [child] = direct_children(worker)
    assert gw.request("DELETE", headers=headers).status == 204
    assert wait_dead([child], timeout=10) == []


def test_idle_sessions_are_reaped(gateway_factory: Any) -> None:
    gw = gateway_factory({"MCPGATE_SESSION_IDLE_TTL": "1"})
    headers = open_session(gw)
    assert wait_for(lambda: children(gw) == 0)
    assert gw.request("POST", body=call("echo", {"message": "x"}), headers=headers).status == 404


def test_initialize_error_ends_the_session(gateway_factory: Any) -> None:
    gw = gateway_factory(
        {
            "MCPGATE_COMMAND": f'{sys.executable} -c "import sys; sys.stdin.readline(); '
            'print(\'{\\"jsonrpc\\":\\"2.0\\",\\"id\\":1,\\"error\\":{\\"code\\":-32602,'
            '\\"message\\":\\"no\\"}}\', flush=True); sys.stdin.read()"'
        }
    )
    reply = gw.request("POST", body=init_body(), headers=HEADERS)
    assert "error" in reply.json() and reply.json()["error"]["message"] == "no", reply
    assert wait_for(lambda: children(gw) == 0)


def test_master_sigkill_leaves_no_orphans(gateway_factory: Any) -> None:
    gw, worker, child, grandchild = session_with_grandchild(gateway_factory)
    os.kill(gw.proc.pid, signal.SIGKILL)  # the worker notices its parent is gone and shuts down
    gw.proc.wait(10)
    assert wait_dead([worker, child, grandchild], timeout=20) == []


FAILING_TESTS = """
from tests.support import Gateway


def test_direct_gateway_fails():
    gw = Gateway()
    try:
        gw.wait_ready()
        assert gw.request("GET", "/no-such-path").status == 200
    finally:
        gw.stop()


def test_module_gateway_fails(demo_gateway):
    reply = demo_gateway.request("GET", "/healthz")
    assert reply.status == 599, reply
"""


def test_a_failing_test_report_shows_its_gateways_log_tail(tmp_path: Path) -> None:
    """tests/conftest.py adds each gateway's log tail to a failed test's report; the Reply explains itself."""
    test_file = tmp_path / "test_fails_on_purpose.py"
    test_file.write_text(FAILING_TESTS)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-q", str(test_file)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = result.stdout
    assert result.returncode == 1 and "2 failed" in out, out + result.stderr
    assert out.count("gunicorn log, port") == 2, out
    assert out.count("Booting worker") >= 2, out  # gunicorn's own lines, one section per failing test
    assert "<Reply 404 " in out and "<Reply 200 application/json body='{" in out, out
