"""A graceful stop ends within gunicorn's graceful timeout even when a connection is still being served: the
worker ends the connections left a moment before that time (serve/front/worker.py end_requests), so it exits by
itself (its exit hooks run) instead of being killed by the master. gunicorn alone waits for them a whole
graceful timeout from the drain's end, past the master's SIGKILL.

Nor is a connection kept busy past the stop: once the stop releases the connections (worker.release_connections),
each ends after its reply, which says Connection: close, also one accepted after that moment and before gunicorn
closes the listener (up to a second later). A client that keeps its connections busy (a balancer; another
instance of a fleet forwarding the released sessions' requests) does not hold the worker until end_requests ends
a connection in the middle of a request (which pywsgi then answers with a bare 500)."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import threading

from tests.support import HEADERS, Gateway, open_session, wait_for

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


class BusyClient:
    """Requests on every connection it has, without a pause, and a new connection each round until one is refused
    (the listener closed); a connection is dropped when a reply says Connection: close or the worker closed it."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.conns: list[http.client.HTTPConnection] = []
        self.closing_replies = 0  # replies that said Connection: close
        self.refused = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.done.is_set() and (self.conns or not self.refused.is_set()):
            if not self.refused.is_set():
                conn = http.client.HTTPConnection(*self.gw.address(), timeout=GUARD)
                try:
                    conn.connect()
                    self.conns.append(conn)
                except OSError:
                    self.refused.set()
            for conn in list(self.conns):
                try:
                    conn.request("GET", "/healthz")
                    reply = conn.getresponse()
                    reply.read()
                except (OSError, http.client.HTTPException):  # closed by the worker (released, or gone)
                    self.drop(conn)
                    continue
                if reply.will_close:
                    self.closing_replies += 1
                    self.drop(conn)

    def drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        self.conns.remove(conn)


def test_connections_kept_busy_through_the_stop_end_after_one_reply() -> None:
    gw = Gateway({"MCPGATE_GRACEFUL_TIMEOUT": "20"})  # nothing in flight: the drain ends at once
    client = BusyClient(gw)
    try:
        gw.wait_ready()
        client.thread.start()
        assert wait_for(lambda: len(client.conns) >= 3, GUARD)
        gw.proc.send_signal(signal.SIGTERM)
        assert gw.proc.wait(GUARD) == 0, gw.log_tail(40)
        assert client.refused.wait(GUARD), "the listener never refused a connection"
        log = gw.log()
        assert "Worker exiting" in log and "was sent SIGKILL" not in log, gw.log_tail(40)
        said_close = f"{client.closing_replies} replies said Connection: close"
        assert "connections still busy" not in log, f"{said_close}\n{gw.log_tail(40)}"  # none left for end_requests
    finally:
        client.done.set()
        client.thread.join(GUARD)
        gw.stop()
