"""A graceful stop ends within gunicorn's graceful timeout even when a connection is still being served: the
worker ends the connections left a moment before that time (serve/front/worker.py end_requests), so it exits by
itself (its exit hooks run) instead of being killed by the master. gunicorn alone waits for them a whole
graceful timeout from the drain's end, past the master's SIGKILL."""

from __future__ import annotations

import json
import signal
import socket

from tests.support import HEADERS, Gateway, open_session

GUARD = 60.0  # a hang guard, never a speed assertion
SIZE = 7 * 1024 * 1024  # a reply larger than the kernel's buffers on both ends (within the 8 MiB line limit)


def test_a_reply_its_client_no_longer_reads_is_ended_before_the_master_kills_the_worker() -> None:
    gw = Gateway({"MCPGATE_GRACEFUL_TIMEOUT": "6"})  # no drain: the children's stop ladder takes it all
    try:
        gw.wait_ready()
        session = open_session(gw)
        body = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "bytes", "arguments": {"size": SIZE}},
            }
        ).encode()
        head = "".join(f"{name}: {value}\r\n" for name, value in {**HEADERS, **session}.items())
        reader = socket.socket()
        reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        reader.settimeout(GUARD)
        reader.connect(gw.address())
        try:
            reader.sendall(
                f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{gw.port}\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert reader.recv(64).startswith(b"HTTP/1.1 200"), "the reply did not begin"
            # read no more: the reply's writer waits for room that never comes
            gw.proc.send_signal(signal.SIGTERM)
            assert gw.proc.wait(GUARD) == 0, gw.log_tail(40)
        finally:
            reader.close()
        log = gw.log()
        assert "Worker exiting" in log and "was sent SIGKILL" not in log, gw.log_tail(40)  # it exited by itself
        assert "connections still busy as the graceful stop's time is up" in log, gw.log_tail(40)
    finally:
        gw.stop()
