"""2025 sessions taken over after their process is gone (issue 27; serve/cluster/takeover.py, serve/sessions/kept.py):
real gunicorn instances, Redis and HAProxy (deploy/haproxy.cfg), the official SDK client, and a child that tells
what it was told (tests/fixtures/kept_server.py: its pid, log level and subscriptions).

- An instance SIGKILLed: its session's next call is served by another instance under the same session id, by a
  new child that was given the log level and the subscription again.
- One instance SIGKILLed and started again on the same state directory, or sent HUP: the session goes on.
- A call in flight on the instance that died, forwarded there by another: a JSON-RPC error saying the server
  restarted (not a 404), and the session goes on.
- MCPGATE_SESSION_RESURRECT=false: 404 as before; a changed protocol version: 404; one claimant of an orphan wins.
  (Another principal cannot take a session over: tests/security/test_takeover_principal.py.)
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support import ROOT, Gateway, crash, direct_children, wait_for
from tests.support.fleet import recipe_front, redis_server
from tests.support.http import HEADERS, init_body

SECRET = "takeover-test-secret-0123456789abcdef"
COMMAND = f"{sys.executable} {ROOT / 'tests' / 'fixtures' / 'kept_server.py'}"
HANG_GUARD = 90


def instance_env(redis_url: str, name: str, **more: str) -> dict[str, str]:
    return {
        "REDIS_URL": redis_url,
        "MCPGATE_INSTANCE_ID": name,
        "MCPGATE_CLUSTER_SECRET": SECRET,
        "MCPGATE_INTERNAL_URL": "http://127.0.0.1:{port}",
        "MCPGATE_POOL_SPARES": "0",
        "MCPGATE_COMMAND": COMMAND,
        **more,
    }


class Seen:
    """The session ids a client's requests carried and its responses named."""

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.statuses: list[int] = []

    async def request(self, request: httpx2.Request) -> None:
        if "mcp-session-id" in request.headers:
            self.ids.add(request.headers["mcp-session-id"])

    async def response(self, response: httpx2.Response) -> None:
        self.statuses.append(response.status_code)
        if "mcp-session-id" in response.headers:
            self.ids.add(response.headers["mcp-session-id"])

    def one(self) -> str:
        assert len(self.ids) == 1, self.ids
        return next(iter(self.ids))


def sdk(url: str, seen: Seen) -> Client:
    hooks: dict[str, list[Any]] = {"request": [seen.request], "response": [seen.response]}
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=HANG_GUARD), event_hooks=hooks)
    return Client(streamable_http_client(url, http_client=http), mode="legacy")


async def state(client: Client) -> dict[str, Any]:
    result = await client.call_tool("state", {})
    return dict(json.loads(result.content[0].text))  # type: ignore[union-attr]


async def echo(client: Client, message: str) -> None:
    result = await client.call_tool("echo", {"message": message})
    assert result.content[0].text == message, result  # type: ignore[union-attr]


def session_goes_on(url: str, between: Callable[[str], None]) -> tuple[dict[str, Any], dict[str, Any], Seen]:
    """An SDK session at `url` sets the log level and a subscription, `between(session_id)` happens, and it calls
    again: the child's state before and after, and what the client saw."""
    seen = Seen()

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        with anyio.fail_after(HANG_GUARD):
            async with sdk(url, seen) as client:
                await client.set_logging_level("debug")
                await client.subscribe_resource("kept://a")
                before = await state(client)
                await anyio.to_thread.run_sync(between, seen.one())
                await echo(client, "after")
                return before, await state(client)

    before, after = anyio.run(run)
    return before, after, seen


def assert_replayed(before: dict[str, Any], after: dict[str, Any]) -> None:
    assert before["pid"] != after["pid"], (before, after)  # a new child
    assert after["level"] == "debug" and after["subscriptions"] == ["kept://a"], after
    assert after["initialized"] == 1, after


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


def test_a_killed_owners_session_is_taken_over_by_another_instance(redis_url: str) -> None:
    gws = {name: Gateway(instance_env(redis_url, name)) for name in ("i1", "i2")}
    try:
        for gw in gws.values():
            gw.wait_ready()
        with recipe_front(gws, "roundrobin") as lb:

            def kill_owner(session_id: str) -> None:
                crash(gws[session_id.split(".", 1)[0]])

            before, after, seen = session_goes_on(lb.url, kill_owner)
        assert_replayed(before, after)
        survivor = next(gw for gw in gws.values() if gw.proc.returncode is None)
        assert "taken over" in survivor.log(), survivor.log_tail()
        assert 404 not in seen.statuses, seen.statuses
        seen.one()  # the same session id throughout
    finally:
        for gw in gws.values():
            gw.stop()


def restart_at(env: dict[str, str], gw: Gateway, started: list[Gateway]) -> None:
    crash(gw)  # its port free again: the worker holding it is gone too
    again = Gateway(env, port=gw.port)
    started.append(again)
    again.wait_ready()


def test_a_single_instance_killed_and_started_again_keeps_its_sessions(tmp_path: Path) -> None:
    env = {"MCPGATE_COMMAND": COMMAND, "MCPGATE_STATE_DIR": str(tmp_path)}
    started = [Gateway(env)]
    try:
        started[0].wait_ready()
        before, after, seen = session_goes_on(started[0].url, lambda _id: restart_at(env, started[0], started))
        assert_replayed(before, after)
        assert 404 not in seen.statuses, seen.statuses
        seen.one()
    finally:
        for gw in started:
            gw.stop()


def test_a_hup_keeps_the_sessions(tmp_path: Path) -> None:
    env = {"MCPGATE_COMMAND": COMMAND, "MCPGATE_STATE_DIR": str(tmp_path)}
    gw = Gateway(env)
    try:
        gw.wait_ready()

        def hup(_session_id: str) -> None:
            [worker] = direct_children(gw.proc.pid)
            os.kill(gw.proc.pid, signal.SIGHUP)
            assert wait_for(lambda: direct_children(gw.proc.pid) not in ([worker], []), 30), gw.log_tail()
            gw.wait_ready()

        before, after, seen = session_goes_on(gw.url, hup)
        assert_replayed(before, after)
        assert 404 not in seen.statuses, seen.statuses
    finally:
        gw.stop()


def test_an_opted_out_server_still_answers_404(tmp_path: Path) -> None:
    env = {"MCPGATE_COMMAND": COMMAND, "MCPGATE_STATE_DIR": str(tmp_path), "MCPGATE_SESSION_RESURRECT": "false"}
    started = [Gateway(env)]
    try:
        started[0].wait_ready()
        reply = started[0].request("POST", body=init_body(), headers=HEADERS)
        session_id = reply.headers["mcp-session-id"]
        restart_at(env, started[0], started)
        again = started[-1].request(
            "POST", body=call_body(2, "echo"), headers={**HEADERS, "Mcp-Session-Id": session_id}
        )
        assert again.status == 404, again
        assert not list(tmp_path.glob("sessions/*/*.json")), list(tmp_path.rglob("*"))
    finally:
        for gw in started:
            gw.stop()


def call_body(msg_id: int, tool: str, **arguments: Any) -> bytes:
    message = {"jsonrpc": "2.0", "id": msg_id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    return json.dumps(message).encode()


def opened_on(gw: Gateway) -> str:
    """A session opened (initialize, initialized) on the instance itself: its id."""
    reply = gw.request("POST", body=init_body(), headers=HEADERS)
    assert reply.status == 200, reply
    session_id = str(reply.headers["mcp-session-id"])
    note = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    assert gw.request("POST", body=note, headers={**HEADERS, "Mcp-Session-Id": session_id}).status == 202
    return session_id


def test_a_call_in_flight_at_the_kill_is_told_the_server_restarted(redis_url: str, tmp_path: Path) -> None:
    mark = tmp_path / "arrived"
    owner = Gateway(instance_env(redis_url, "i1", KEPT_MARK=str(mark), MCPGATE_PASS_ENV="KEPT_MARK"))
    other = Gateway(instance_env(redis_url, "i2"))
    try:
        owner.wait_ready()
        other.wait_ready()
        session_id = opened_on(owner)
        headers = {**HEADERS, "Mcp-Session-Id": session_id}
        replies: list[Any] = []
        slow = threading.Thread(
            target=lambda: replies.append(other.request("POST", body=call_body(7, "slow", seconds=60), headers=headers))
        )
        slow.start()
        assert wait_for(mark.exists, 30), owner.log_tail()
        crash(owner)
        slow.join(HANG_GUARD)
        [reply] = replies
        assert reply.status == 200, reply
        error = reply.json()["error"]
        assert "restarted" in error["message"] and reply.json()["id"] == 7, reply.json()
        again = other.request("POST", body=call_body(8, "echo", message="on"), headers=headers)
        assert again.status == 200 and again.json()["result"]["content"][0]["text"] == "on", again
    finally:
        owner.stop()
        other.stop()


def test_a_last_event_id_from_before_the_restart_gets_a_clear_answer(tmp_path: Path) -> None:
    env = {"MCPGATE_COMMAND": COMMAND, "MCPGATE_STATE_DIR": str(tmp_path)}
    started = [Gateway(env)]
    try:
        started[0].wait_ready()
        session_id = opened_on(started[0])
        [record] = tmp_path.glob("sessions/default/*.json")
        before = f"{json.loads(record.read_text())['tag']}-1-0"  # an event id of the first life's first stream
        restart_at(env, started[0], started)
        headers = {"Accept": "text/event-stream", "Mcp-Session-Id": session_id, "Last-Event-ID": before}
        reply = started[-1].request("GET", headers=headers)
        assert reply.status == 400, reply
        error = reply.json()["error"]
        assert "restarted" in error["message"] and error["data"]["expired"] is True, error
        again = started[-1].request("POST", body=call_body(5, "echo", message="z"), headers=with_session(session_id))
        assert again.status == 200 and "z" in again.body.decode(), again
    finally:
        for gw in started:
            gw.stop()


def with_session(session_id: str) -> dict[str, str]:
    return {**HEADERS, "Mcp-Session-Id": session_id}


def test_a_child_that_now_answers_another_version_ends_the_session(tmp_path: Path) -> None:
    env = {"MCPGATE_COMMAND": COMMAND, "MCPGATE_STATE_DIR": str(tmp_path)}
    changed = {**env, "KEPT_VERSION": "2025-03-26", "MCPGATE_PASS_ENV": "KEPT_VERSION"}
    started = [Gateway(env)]
    try:
        started[0].wait_ready()
        session_id = opened_on(started[0])
        restart_at(changed, started[0], started)
        reply = started[-1].request("POST", body=call_body(2, "echo", message="x"), headers=with_session(session_id))
        assert reply.status == 404, reply
        assert "could not be taken over" in started[-1].log(), started[-1].log_tail()
        assert not list(tmp_path.glob("sessions/*/*.json")), list(tmp_path.rglob("*"))
    finally:
        for gw in started:
            gw.stop()


def race(keepers: list[Any], session_id: str, seen: str) -> list[bool]:
    """Every keeper claims the session from `seen` at the same moment: who won."""
    wins: list[bool] = []
    barrier = threading.Barrier(len(keepers))

    def claim(keeper: Any) -> None:
        barrier.wait()
        wins.append(keeper.claim(session_id, seen))

    threads = [threading.Thread(target=claim, args=(keeper,)) for keeper in keepers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return wins


def test_two_claimants_of_one_orphan_one_wins(redis_url: str, tmp_path: Path) -> None:
    """The claim is atomic: of processes that read the same gone holder and claim at once, exactly one wins
    (Redis's script; on one instance the file lock)."""
    import redis

    from mcpgate.serve.sessions.kept import DirStore, Keeper, RedisStore, Store

    client = redis.Redis.from_url(redis_url)
    stores: dict[str, Callable[[], Store]] = {
        "redis": lambda: RedisStore(client, "race"),
        "dir": lambda: DirStore(tmp_path / "race", 600.0),
    }
    for kind, store in stores.items():
        keepers = [Keeper(store(), f"i{n}", 600.0, 65536, ()) for n in range(8)]
        session_id = "sid-" + kind
        keepers[0].opened(session_id, "static", {"protocolVersion": "2025-11-25"}, {"protocolVersion": "x"}, "t")
        wins = race(keepers[1:], session_id, keepers[0].me)  # its holder, found gone by every claimant
        assert sorted(wins) == [False] * (len(keepers) - 2) + [True], (kind, wins)
        found = keepers[1].load(session_id)
        assert found is not None and found[1] in {keeper.me for keeper in keepers[1:]}, (kind, found)
