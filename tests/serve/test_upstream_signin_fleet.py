"""Per-user OAuth to a remote upstream in a fleet (issue 26): two gateway instances on one Redis refresh one user's
rotating upstream token at the same moment, and the sign-in survives.

The upstream is a real mcpgate in embedded OAuth mode (the demo server behind its own sign-in pages and DCR): its
refresh tokens rotate, and one presented a second time is refused (`invalid_grant`) and revokes the whole grant,
the tokens just issued for it too (reuse detection, as OAuth 2.1 advises). It is reached through GateProxy, a
plain HTTP forwarder that is its public URL, so every request of the gateways, the browser and the sign-in passes
through it; while the test holds it closed, a refresh request to the token endpoint waits there. That is how both
instances are made to refresh at once: instance one's refresh is held at the proxy while instance two's call
needs a refresh too. With the lease (serve/vault/upstream_refresh.py) instance two waits for it (seen as its
SET NX on the lease key, through Redis MONITOR) and then uses the tokens instance one saved: one refresh reaches
the authorization server and both calls succeed. Without it, both refreshes reach the authorization server, the
second revokes the grant, and the sign-in ends.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import redis

from mcpgate.serve.vault.crypto import Cipher, key_bytes
from mcpgate.serve.vault.redis_store import RedisVaultStore
from mcpgate.serve.vault.store import SqliteVaultStore
from tests.serve.test_upstream_signin import SERVER, USERS, Site, _users, gateway_token, vault_session
from tests.support import Gateway, modern_body, modern_headers, reply_message, serving, wait_for
from tests.support.fleet import redis_server
from tests.support.http import write_config
from tests.support.oauth import embedded_env
from tests.support.vault import audited_principals, vault_key

TOKEN_TTL = 68  # the upstream's access tokens: the gateway refreshes them from 8 s after they are issued
HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "te", "upgrade", "proxy-connection"})


class GateProxy:
    """A forwarder to the upstream on its own loopback port (see the module docstring): every request goes on as
    it came (its Host too: the upstream's public URL is this proxy's), the answer streamed back and the connection
    closed after it. While closed, a refresh request to /token waits (at most HOLD_LIMIT); `refreshes` counts them."""

    HOLD_LIMIT = 120.0

    def __init__(self) -> None:
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                refresh = b"grant_type=refresh_token" in (body or b"")
                if self.command == "POST" and self.path.split("?")[0] == "/token" and refresh:
                    gate.hold()
                conn = http.client.HTTPConnection("127.0.0.1", gate.target, timeout=120)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    reply = conn.getresponse()
                    self.send_response_only(reply.status, reply.reason)
                    for name, value in reply.getheaders():
                        if name.lower() not in HOP:
                            self.send_header(name, value)
                    self.send_header("Connection", "close")
                    self.end_headers()
                    while self.command != "HEAD" and (chunk := reply.read1(65536)):
                        self.wfile.write(chunk)
                        self.wfile.flush()
                except OSError:
                    pass  # a client or the upstream went away: this exchange is over
                finally:
                    conn.close()

            do_GET = do_POST = do_DELETE = do_OPTIONS = do_HEAD = forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.target = 0  # the upstream's port, once it runs
        self.refreshes = 0
        self.closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def hold(self) -> None:
        with self._cond:
            self.refreshes += 1
            self._cond.notify_all()
            self._cond.wait_for(lambda: not self.closed, timeout=self.HOLD_LIMIT)

    def close(self) -> None:
        with self._cond:
            self.closed = True

    def open(self) -> None:
        with self._cond:
            self.closed = False
            self._cond.notify_all()

    @contextlib.contextmanager
    def running(self) -> Iterator[GateProxy]:
        self._thread.start()
        try:
            yield self
        finally:
            self.open()
            self.server.shutdown()
            self.server.server_close()
            self._thread.join(10)


class LeaseWatch:
    """Redis MONITOR in a thread of its own: counts the commands that touch a refresh lease (SET NX of a
    `lease:` key) and the refused reuse it cannot see; ends when its connection closes."""

    def __init__(self, url: str) -> None:
        self.attempts = 0
        self._client = redis.Redis.from_url(url)
        self._monitor = self._client.monitor()
        self._monitor.__enter__()  # MONITOR sent now: what follows is seen
        self._thread = threading.Thread(target=self._listen, daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        with contextlib.suppress(redis.RedisError, OSError, ValueError, AttributeError):
            for command in self._monitor.listen():
                text = str(command.get("command", ""))
                if text.upper().startswith("SET ") and ":lease:" in text and " NX" in text.upper():
                    self.attempts += 1

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self._monitor.connection.disconnect()
        self._thread.join(10)
        self._client.close()


@dataclass
class Fleet:
    gate: GateProxy
    upstream: Gateway
    one: Gateway
    two: Gateway
    redis_url: str
    key: str
    audit: Path

    def principal(self, user: str) -> str:
        return f"{self.one.base}#user:{user}"

    def stored(self, user: str) -> dict[str, Any] | None:
        """The upstream tokens the fleet keeps for `user` in Redis (opened with the vault key)."""
        client = redis.Redis.from_url(self.redis_url)
        try:
            sealed = RedisVaultStore(client).get(self.principal(user), f"oauth:{SERVER}")
        finally:
            client.close()
        if sealed is None:
            return None
        record = json.loads(Cipher(key_bytes(self.key)).open(self.principal(user), f"oauth:{SERVER}", sealed))
        return dict(record["tokens"])

    def call(self, gw: Gateway, token: str, message: str) -> dict[str, Any]:
        """One 2026-07-28 tools/call of the upstream's echo tool at instance `gw` (the fleet's public Host)."""
        body = modern_body(1, "tools/call", {"name": "echo", "arguments": {"message": message}})
        headers = {**modern_headers("tools/call", "echo"), "Authorization": f"Bearer {token}"}
        headers["Host"] = f"127.0.0.1:{self.one.port}"
        return reply_message(gw.request("POST", f"/servers/{SERVER}/mcp", body=body, headers=headers, timeout=150))

    def upstream_principals(self) -> list[str]:
        return audited_principals(self.audit)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    tmp = tmp_path_factory.mktemp("upstream-signin-fleet")
    audit = tmp / "upstream-audit.jsonl"
    with GateProxy().running() as gate:
        upstream_env = embedded_env(
            tmp / "upstream-state",
            _users(list(USERS.values())),
            MCPGATE_AUDIT_LOG=str(audit),
            MCPGATE_PUBLIC_URL=gate.base,  # its pages, endpoints and resource are the proxy's
            MCPGATE_OAUTH_ACCESS_TTL=str(TOKEN_TTL),
        )
        with serving(upstream_env) as upstream, redis_server() as redis_url:
            gate.target = upstream.port
            entry = {"url": f"{gate.base}/mcp", "auth": {"type": "user_oauth", "label": "the test upstream"}}
            config = write_config(tmp / "servers.json", {SERVER: entry})
            key = vault_key()
            common = {"MCPGATE_CONFIG": config, "MCPGATE_VAULT_KEY": key, "REDIS_URL": redis_url}
            common["MCPGATE_POOL_SPARES"] = "0"
            users = _users(list(USERS))
            with serving(embedded_env(tmp / "one", users, **common)) as one:
                second = embedded_env(tmp / "two", users, **common, MCPGATE_PUBLIC_URL=one.base)
                with serving(second) as two:  # the fleet's public URL is the first's
                    yield Fleet(gate, upstream, one, two, redis_url, key, audit)


def test_two_instances_refreshing_one_users_rotating_token_at_once_keep_the_signin(fleet: Fleet) -> None:
    token = gateway_token(fleet.one, "alice")
    site = Site(fleet.upstream, fleet.one, fleet.audit, {"alice": token}, {}, fleet.audit.parent, fleet.key)
    site.browsers["alice"] = vault_session(fleet.one, "alice")
    site.sign_in_upstream("alice")
    # a pooled child on each instance, holding the same tokens (the first call may refresh: one at a time)
    for n, gw in enumerate((fleet.one, fleet.two, fleet.one, fleet.two)):
        answer = fleet.call(gw, token, f"warm-{n}")
        assert answer.get("result", {}).get("content", [{}])[0].get("text") == f"warm-{n}", answer
    before = fleet.stored("alice")
    assert before is not None and before.get("refresh_token"), before
    wait_for(lambda: before["expires_at"] - 60 <= time.time(), timeout=TOKEN_TTL, what="the tokens to be due")
    watch = LeaseWatch(fleet.redis_url)
    answers: dict[str, dict[str, Any]] = {}

    def call(name: str, gw: Gateway) -> None:
        answers[name] = fleet.call(gw, token, name)

    refreshes = fleet.gate.refreshes
    fleet.gate.close()
    threads = [threading.Thread(target=call, args=(name, gw), daemon=True) for name, gw in (("one", fleet.one),)]
    try:
        threads[0].start()
        wait_for(lambda: fleet.gate.refreshes == refreshes + 1, timeout=60, what="instance one's refresh held")
        threads.append(threading.Thread(target=call, args=("two", fleet.two), daemon=True))
        threads[1].start()
        # instance two refreshes too (no lease: its refresh reaches the proxy) or waits for the lease it lost
        wait_for(
            lambda: fleet.gate.refreshes >= refreshes + 2 or watch.attempts >= 2,
            timeout=60,
            what="instance two to refresh, or to wait for instance one's lease",
        )
        two_refreshed = fleet.gate.refreshes - refreshes
    finally:
        fleet.gate.open()
        for thread in threads:
            thread.join(150)
        watch.stop()
    for name in ("one", "two"):
        answer = answers.get(name, {})
        assert answer.get("result", {}).get("content", [{}])[0].get("text") == name, (name, answer)
    assert two_refreshed == 1 and fleet.gate.refreshes == refreshes + 1, "a second refresh reached the server"
    after = fleet.stored("alice")
    assert after is not None and after["refresh_token"] != before["refresh_token"], "not rotated and kept"
    # the sign-in goes on: both instances' next calls carry the new tokens, accepted at the upstream
    for gw, name in ((fleet.one, "again-one"), (fleet.two, "again-two")):
        answer = fleet.call(gw, token, name)
        assert answer.get("result", {}).get("content", [{}])[0].get("text") == name, answer
    assert "sign-in of a user to server" not in fleet.one.log() + fleet.two.log()  # never ended
    principals = set(fleet.upstream_principals())
    assert len(principals) == 1 and USERS["alice"] in principals.pop()


def test_the_refresh_lease_is_one_holders_at_a_time_and_lapses(tmp_path: Path) -> None:
    with redis_server() as url:
        client = redis.Redis.from_url(url)
        stores: list[Any] = [SqliteVaultStore(str(tmp_path)), RedisVaultStore(client)]
        try:
            for store in stores:
                assert store.lease("p#alice", "refresh:up", "a", 30.0)
                assert not store.lease("p#alice", "refresh:up", "b", 30.0)  # held by a: b waits
                assert store.lease("p#bob", "refresh:up", "b", 30.0)  # another principal's: its own
                assert store.lease("p#alice", "refresh:other", "b", 30.0)  # another server's: its own
                store.release("p#alice", "refresh:up", "b")  # not b's: nothing
                assert not store.lease("p#alice", "refresh:up", "b", 30.0)
                store.release("p#alice", "refresh:up", "a")
                assert store.lease("p#alice", "refresh:up", "b", 0.2)  # free again
                wait_for(lambda s=store: s.lease("p#alice", "refresh:up", "c", 30.0), 10, "b's lease to lapse")
        finally:
            stores[0].close()
            client.close()
