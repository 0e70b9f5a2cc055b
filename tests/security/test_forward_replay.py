"""Issue 20, finding 5: a Mcpgate-Forwarded header is worth one request, from one of the fleet's instances.

Two instances on one Redis (real gunicorns, a real redis-server). Instance B forwards a request for A's session
to A through a tap that records the bytes on the wire between them, as anyone who can watch that link (or a
process on the machine) could. The captured header is then sent again straight to A: as it was, a second time,
with another body and with another query string. Each is refused (the MAC covers the body and the query; its
nonce was used). Through the recipe's HAProxy a client's Mcpgate-Forwarded header never reaches an instance,
and a correctly signed one sent from another machine (a network namespace) is refused: that machine is not an
instance of the fleet.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from mcpgate.core import session_ids
from mcpgate.core.wire import FORWARDED, PROTOCOL_VERSION, SESSION_ID
from tests.support import HEADERS, ROOT, Gateway, call, free_port, init_body, open_session, reply_message, wait_for
from tests.support.fleet import haproxy, redis_server
from tests.support.recipe import PeerRequest, from_peer, remote_peer

SECRET = "replay-test-cluster-secret-0123456789"
TOKEN = "replay-test-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
HOST = "mcp.test"  # the name every request uses (MCPGATE_ALLOWED_HOSTS), so forwards keep a listed Host
RECIPE = (ROOT / "deploy" / "haproxy.cfg").read_text()


class Tap:
    """A TCP relay on a free loopback port to `target` (set once known) that records what its clients send."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target = 0
        self.sent = bytearray()
        self.answered = bytearray()  # what the target sent back, all connections in turn
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, record: bool) -> None:
        try:
            while chunk := source.recv(65536):
                with self.lock:
                    (self.sent if record else self.answered).extend(chunk)
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def forwarded_requests(self) -> list[tuple[str, dict[str, str], bytes]]:
        """Each recorded request that carried Mcpgate-Forwarded: (request line, headers, body)."""
        with self.lock:
            data = bytes(self.sent)
        found = []
        while data:
            head, sep, rest = data.partition(b"\r\n\r\n")
            if not sep:
                break
            lines = head.decode("latin-1").split("\r\n")
            headers = dict(line.split(": ", 1) for line in lines[1:])
            length = int(headers.get("Content-Length", "0"))
            body, data = rest[:length], rest[length:]
            if FORWARDED in headers:
                found.append((lines[0], headers, body))
        return found

    def close(self) -> None:
        self.listener.close()


def instance_env(redis_url: str, internal_url: str = "http://127.0.0.1:{port}", **extra: str) -> dict[str, str]:
    return {
        "REDIS_URL": redis_url,
        "MCPGATE_CLUSTER_SECRET": SECRET,
        "MCPGATE_AUTH_TOKEN": TOKEN,
        "MCPGATE_ALLOWED_HOSTS": HOST,
        "MCPGATE_INTERNAL_URL": internal_url,
        **extra,
    }


@dataclass
class Fleet:
    a: Gateway  # reached by the others through the tap
    b: Gateway
    tap: Tap
    redis_url: str


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    with tapped_fleet() as made:
        yield made


@contextlib.contextmanager
def tapped_fleet() -> Iterator[Fleet]:
    """Instances A and B sharing a Redis; A's internal URL is the tap's."""
    with redis_server() as url:
        tap = Tap()
        a = Gateway(instance_env(url, f"http://127.0.0.1:{tap.port}", MCPGATE_INSTANCE_ID="a"))
        tap.target = a.port
        b = Gateway(instance_env(url, MCPGATE_INSTANCE_ID="b"))
        try:
            a.wait_ready()
            b.wait_ready()
            yield Fleet(a, b, tap, url)
        finally:
            a.stop()
            b.stop()
            tap.close()


def session_on(gw: Gateway) -> dict[str, str]:
    return open_session(gw, headers={**BEARER, "Host": HOST})


def echo(message: str, msg_id: int = 2) -> bytes:
    return json.dumps(call("echo", {"message": message}, msg_id=msg_id)).encode()


def test_a_captured_forwarded_header_is_refused_when_replayed(fleet: Fleet) -> None:
    a, b, tap = fleet.a, fleet.b, fleet.tap
    session = session_on(a)
    served = b.request("POST", body=echo("through b"), headers=session)  # B forwards it to A, through the tap
    assert reply_message(served)["result"]["content"][0]["text"] == "through b", served
    assert wait_for(lambda: tap.forwarded_requests(), 10), "the forward was not seen on the wire"
    line, captured, body = tap.forwarded_requests()[-1]
    assert line.startswith("POST /mcp ") and "Authorization" not in captured  # the token never travels
    replay = {name: value for name, value in captured.items() if name.lower() not in ("content-length", "host")}
    replay["Host"] = HOST

    again = a.request("POST", body=body, headers=replay)
    assert again.status == 403, ("the same request once more", again)
    assert a.request("POST", body=body, headers=replay).status == 403, "and once more"
    other = a.request("POST", body=echo("not what B sent"), headers=replay)
    assert other.status == 403, ("another body", other)
    query = a.request("POST", "/mcp?session_id=x", body=body, headers=replay)
    assert query.status == 403, ("another query string", query)
    assert "was used before (a replay)" in a.log()
    assert reply_message(b.request("POST", body=echo("still", 3), headers=session))["result"], "B forwards on"
    assert a.request("DELETE", headers=session).status == 204


def signed_by(sender: str, session: dict[str, str], body: bytes, method: str = "POST", path: str = "/mcp") -> str:
    """A Mcpgate-Forwarded value made as an instance makes one, with the cluster key the test set."""
    request = session_ids.ForwardedRequest(method, path, "", session[SESSION_ID], body)
    return session_ids.forwarded("static", sender, time.time(), request, SECRET.encode())


def test_the_balancer_drops_a_clients_forwarded_header(fleet: Fleet) -> None:
    """Even a correctly signed value (the key leaked) never reaches an instance through deploy/haproxy.cfg."""
    a, b = fleet.a, fleet.b
    env = {"HAPROXY_BIND": "127.0.0.1:{port}", "HAPROXY_ADMIN": "{admin}", "MCPGATE_ROUTING": "by_prefix"}
    env |= {"MCPGATE_I1": f"127.0.0.1:{a.port}", "MCPGATE_I2": f"127.0.0.1:{b.port}"}
    env |= {"MCPGATE_I3": f"127.0.0.1:{free_port()}", "MCPGATE_I4": f"127.0.0.1:{free_port()}"}
    with haproxy(RECIPE, env) as lb:
        session = session_on(a)
        tokenless = {name: value for name, value in session.items() if name != "Authorization"}
        body = echo("via the balancer")
        reply = lb.request("POST", body=body, headers={**tokenless, FORWARDED: signed_by("b", session, body)})
        assert reply.status == 401, reply  # the header was dropped: the request had no credential
        assert a.request("DELETE", headers=session).status == 204


def test_forwarded_requests_only_from_the_listed_peers(fleet: Fleet) -> None:
    """MCPGATE_CLUSTER_PEERS: a forward from any other address is refused, even correctly signed."""
    guarded = Gateway(instance_env(fleet.redis_url, MCPGATE_INSTANCE_ID="c", MCPGATE_CLUSTER_PEERS="192.0.2.10"))
    try:
        guarded.wait_ready()
        session = session_on(guarded)
        tokenless = {name: value for name, value in session.items() if name != "Authorization"}
        body = echo("from loopback")
        reply = guarded.request("POST", body=body, headers={**tokenless, FORWARDED: signed_by("b", session, body)})
        assert reply.status == 403, reply
        assert "does not come from the address of the instance it names (b)" in guarded.log()
    finally:
        guarded.stop()


# -- another machine: a network namespace ---------------------------------------------------------------------


def test_a_forward_from_another_machine_is_refused(fleet: Fleet) -> None:
    """Instance C listens on a veth address (so the namespace reaches it); B (loopback) forwards to it fine, from
    an address of this machine. The namespace sends C a request signed as B's, with the key: refused (403),
    since it does not come from B's address."""
    b = fleet.b
    with remote_peer() as remote:
        env = instance_env(fleet.redis_url, f"http://{remote.local}:{{port}}", MCPGATE_INSTANCE_ID="c")
        c = Gateway(env, ready_host=HOST, host=remote.local)
        try:
            c.wait_ready(60)
            headers = {**HEADERS, **BEARER, "Host": HOST}
            opened = c.request("POST", "/mcp", init_body(), headers)
            assert opened.status == 200, opened
            session = {**headers, SESSION_ID: opened.headers[SESSION_ID.lower()], PROTOCOL_VERSION: "2025-11-25"}
            initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert c.request("POST", "/mcp", initialized, session).status == 202
            via_b = b.request("POST", body=echo("b to c"), headers=session)  # B forwards from 10.x (this machine)
            assert reply_message(via_b)["result"]["content"][0]["text"] == "b to c", (via_b, c.log_tail())

            tokenless = {name: value for name, value in session.items() if name != "Authorization"}
            body = echo("from the namespace")
            forged = PeerRequest(c.port, "POST", "/mcp", {**tokenless, FORWARDED: signed_by("b", session, body)}, body)
            (reply,) = from_peer(remote, remote.local, forged)
            assert reply.status == 403, reply
            assert f"from {remote.peer}" in c.log()
        finally:
            c.stop()
