"""Instances of a fleet on one Redis (REDIS_URL), through gunicorn: a session opened on one instance and driven
entirely through another (Streamable HTTP's POST, GET stream and DELETE; HTTP+SSE's messages), named servers'
paths kept, the principal carried in a signed Mcpgate-Forwarded header (the token never travels; an invalid
or expired one refused 403; a forged session id 404), the owner gone (404, the client starts again on a live
instance). Without REDIS_URL the header means nothing."""

from __future__ import annotations

import http.client
import io
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
import redis
from mcp import Client, types
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from mcpgate.config.settings import Settings
from mcpgate.core import jsonrpc, session_ids
from mcpgate.core.wire import FORWARDED, SESSION_ID
from mcpgate.serve.cluster.directory import Directory
from mcpgate.serve.cluster.forward import Forwarder
from mcpgate.serve.cluster.instances import Cluster, Forward
from mcpgate.serve.front.context import context
from mcpgate.serve.front.http import HttpRequest, HttpResponse
from tests.support import (
    DEMO_ENTRY,
    NAMED_ENTRY,
    Gateway,
    call,
    crash,
    demo_round_trips,
    free_port,
    init_body,
    named,
    on_elicit,
    on_sample,
    open_session,
    reply_message,
    wait_dead,
    write_config,
)
from tests.support.fleet import redis_server
from tests.support.gateway import serving_together
from tests.support.oauth import mint_token, oidc_issuer, resource_server_env

HANG_GUARD = 60
SECRET = "test-cluster-secret-0123456789abcdef"
TOKEN = "static-token-for-the-cluster-tests"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


def cluster_env(redis_url: str, **extra: str) -> dict[str, str]:
    return {
        "REDIS_URL": redis_url,
        "MCPGATE_CLUSTER_SECRET": SECRET,
        "MCPGATE_INTERNAL_URL": "http://127.0.0.1:{port}",
        "MCPGATE_KEEPALIVE": "0.5",
        "MCPGATE_SSE_AFTER": "0.2",
        **extra,
    }


@pytest.fixture(scope="module")
def pair(redis_url: str) -> Iterator[tuple[Gateway, Gateway]]:
    """Two instances with a static token; A closes idle keep-alive connections soon (B's pooled ones go stale)."""
    envs = (
        cluster_env(redis_url, MCPGATE_AUTH_TOKEN=TOKEN, MCPGATE_KEEPALIVE_TIMEOUT="0.5"),
        cluster_env(redis_url, MCPGATE_AUTH_TOKEN=TOKEN),
    )
    with serving_together(*envs) as (a, b):
        yield a, b


def session_on(gw: Gateway, headers: dict[str, str] | None = None, path: str | None = None) -> dict[str, str]:
    return open_session(gw, headers=headers, path=path)


def instance(headers: dict[str, str]) -> str:
    return headers[SESSION_ID].split(".", 1)[0]


def test_session_ids_name_their_instance(pair: tuple[Gateway, Gateway]) -> None:
    a, b = pair
    on_a, on_b = session_on(a, BEARER), session_on(b, BEARER)
    assert session_ids.owner(on_a[SESSION_ID], SECRET.encode()) == instance(on_a)
    assert instance(on_a) != instance(on_b)
    for gw, session in ((a, on_a), (b, on_b)):
        assert gw.request("DELETE", headers=session).status == 204


def test_a_session_of_a_is_driven_entirely_through_b(pair: tuple[Gateway, Gateway]) -> None:
    a, b = pair
    session = session_on(a, BEARER)
    echoed = reply_message(b.request("POST", body=call("echo", {"message": "via b"}), headers=session))
    assert echoed["result"]["content"][0]["text"] == "via b", echoed
    slow = b.request("POST", body=call("slow", {"seconds": 0.6, "steps": 2}, msg_id=3), headers=session)
    assert slow.content_type.startswith("text/event-stream"), slow  # switched to SSE on A, streamed by B
    assert reply_message(slow)["result"]["content"][0]["text"].startswith("done"), slow
    stream = EventStream(b, session)  # the session's GET stream, through B
    assert stream.status == 200 and stream.content_type.startswith("text/event-stream")
    assert b.request("POST", body=call("notify_change", {}, msg_id=4), headers=session).status == 200
    assert stream.message()["method"] == "notifications/tools/list_changed"
    stream.close()
    time.sleep(1.0)  # longer than A's keep-alive timeout: B's pooled connection to A is closed by now
    again = reply_message(b.request("POST", body=call("add", {"a": 2, "b": 3}, msg_id=5), headers=session))
    assert again["result"]["structuredContent"] == {"result": 5}, again
    assert b.request("DELETE", headers=session).status == 204
    gone = b.request("POST", body=call("echo", {"message": "x"}, msg_id=6), headers=session)
    assert gone.status == 404 and a.request("POST", body=call("echo", {"message": "x"}), headers=session).status == 404


def test_the_token_is_checked_before_forwarding_and_never_travels(pair: tuple[Gateway, Gateway]) -> None:
    a, b = pair
    session = session_on(a, BEARER)
    anonymous = {k: v for k, v in session.items() if k != "Authorization"}
    assert b.request("POST", body=call("echo", {"message": "x"}), headers=anonymous).status == 401
    wrong = {**session, "Authorization": "Bearer not-the-token"}
    assert b.request("POST", body=call("echo", {"message": "x"}), headers=wrong).status == 401
    assert TOKEN not in a.log() + b.log()
    assert b.request("DELETE", headers=session).status == 204


def signed(
    principal: str,
    session: dict[str, str],
    when: float,
    body: bytes = b"",
    method: str = "POST",
    path: str = "/mcp",
    sender: str = "",
) -> str:
    """A Mcpgate-Forwarded value as an instance would sign it (`sender`: default the session's own instance)."""
    request = session_ids.ForwardedRequest(method, path, "", session[SESSION_ID], body)
    return session_ids.forwarded(principal, sender or instance(session), when, request, SECRET.encode())


def test_the_owner_takes_a_valid_forwarded_principal_instead_of_the_token(pair: tuple[Gateway, Gateway]) -> None:
    a, _ = pair
    session = session_on(a, BEARER)
    tokenless = {k: v for k, v in session.items() if k != "Authorization"}
    now = time.time()
    body = json.dumps(call("echo", {"message": "fwd"})).encode()
    ok = a.request("POST", body=body, headers={**tokenless, FORWARDED: signed("static", session, now, body)})
    assert reply_message(ok)["result"]["content"][0]["text"] == "fwd", ok
    x = json.dumps(call("echo", {"message": "x"})).encode()
    other_key = session_ids.forwarded(
        "static", instance(session), now, session_ids.ForwardedRequest("POST", "/mcp", "", session[SESSION_ID], x), b"k"
    )
    refused = {
        "expired": signed("static", session, now - 60, x),
        "from the future": signed("static", session, now + 60, x),
        "another method": signed("static", session, now, x, method="DELETE"),
        "another path": signed("static", session, now, x, path="/sse"),
        "another body": signed("static", session, now, body),
        "an instance not in the directory": signed("static", session, now, x, sender="nowhere"),
        "another key": other_key,
        "malformed": "not-a-signature",
    }
    for case, value in refused.items():
        reply = a.request("POST", body=x, headers={**tokenless, FORWARDED: value})
        assert reply.status == 403, (case, reply)
    # the token is not a way around an invalid forwarded header either
    reply = a.request("POST", body=x, headers={**session, FORWARDED: "bad"})
    assert reply.status == 403, reply
    # a valid header for another principal finds no session (the session is the principal's)
    other = a.request("POST", body=x, headers={**tokenless, FORWARDED: signed("mallory", session, now, x)})
    assert other.status == 404, other
    assert a.request("DELETE", headers=session).status == 204


def test_a_forged_session_id_is_unknown(pair: tuple[Gateway, Gateway]) -> None:
    a, b = pair
    session = session_on(a, BEARER)
    owner, random, mac = session[SESSION_ID].split(".")
    flipped = "A" if mac[0] != "A" else "B"
    for forged in (f"{owner}.{random}.{flipped}{mac[1:]}", f"{owner}.{random[::-1]}.{mac}"):
        reply = b.request("POST", body=call("echo", {"message": "x"}), headers={**session, SESSION_ID: forged})
        assert reply.status == 404, reply
    assert reply_message(b.request("POST", body=call("echo", {"message": "real"}), headers=session))["result"]
    assert b.request("DELETE", headers=session).status == 204


def test_http_sse_messages_reach_the_owner_through_b(pair: tuple[Gateway, Gateway]) -> None:
    a, b = pair
    stream = EventStream(a, None, path="/sse", headers=BEARER)
    assert stream.status == 200
    name, endpoint = stream.event()
    assert name == "endpoint" and "session_id=" in endpoint
    posted = b.request("POST", endpoint, body=init_body(), headers={"Content-Type": "application/json", **BEARER})
    assert posted.status == 202, posted
    assert stream.message()["result"]["serverInfo"], "the initialize reply comes on A's stream"
    assert (
        b.request("POST", endpoint, body=INITIALIZED, headers={"Content-Type": "application/json", **BEARER}).status
        == 202
    )
    b.request(
        "POST",
        endpoint,
        body=call("echo", {"message": "sse via b"}),
        headers={"Content-Type": "application/json", **BEARER},
    )
    assert stream.message()["result"]["content"][0]["text"] == "sse via b"
    stream.close()


# -- the official SDK client, its session opened on A, every later request sent to B -------------------------


class Steer(httpx2.AsyncHTTPTransport):
    """Sends the first request as asked (to A), every later one to `port` (B)."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self.port, self.seen = port, 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.seen += 1
        if self.seen > 1:
            request.url = request.url.copy_with(port=self.port)
        return await super().handle_async_request(request)


def run_sdk(transport: Any, body: Callable[[Client, list[Any]], Any]) -> None:
    notifications: list[Any] = []

    async def on_message(message: Any) -> None:
        notifications.append(message)

    async def main() -> None:
        with anyio.fail_after(HANG_GUARD):
            async with Client(
                transport(),
                mode="legacy",
                elicitation_callback=on_elicit,
                sampling_callback=on_sample,
                message_handler=on_message,
            ) as client:
                await body(client, notifications)

    anyio.run(main)


async def list_changed_arrives(client: Client, notifications: list[Any]) -> None:
    await client.call_tool("notify_change", {})
    with anyio.fail_after(10):
        while not any(isinstance(n, types.ToolListChangedNotification) for n in notifications):
            await anyio.sleep(0.05)


def test_the_sdk_client_through_b(pair: tuple[Gateway, Gateway]) -> None:
    a, b = pair
    steer = Steer(b.port)

    def transport() -> Any:
        http = httpx2.AsyncClient(transport=steer, headers=BEARER, timeout=httpx2.Timeout(30, read=HANG_GUARD))
        return streamable_http_client(a.url, http_client=http)

    async def body(client: Client, notifications: list[Any]) -> None:
        await demo_round_trips(client)
        await list_changed_arrives(client, notifications)

    run_sdk(transport, body)
    assert steer.seen > 5  # initialize on A, the rest (the GET stream too) through B


def test_the_sdk_sse_client_through_b(pair: tuple[Gateway, Gateway]) -> None:
    a, b = pair
    steer = Steer(b.port)

    def factory(headers: Any = None, timeout: Any = None, auth: Any = None) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(transport=steer, headers=headers, timeout=timeout, auth=auth)

    def transport() -> Any:
        return sse_client(f"{a.base}/sse", headers=BEARER, httpx_client_factory=factory)

    async def body(client: Client, _: list[Any]) -> None:
        await demo_round_trips(client)

    run_sdk(transport, body)
    assert steer.seen > 3  # the stream on A, every message POSTed through B


# -- named servers ------------------------------------------------------------------------------------------------


def test_named_servers_keep_their_paths(redis_url: str, tmp_path: Path, gateway_factory: Any) -> None:
    config = write_config(tmp_path / "servers.json", {"demo": DEMO_ENTRY, "other": NAMED_ENTRY})
    a = gateway_factory(cluster_env(redis_url, MCPGATE_CONFIG=config))
    b = gateway_factory(cluster_env(redis_url, MCPGATE_CONFIG=config))
    session = open_session(named(a, "demo"))
    echoed = reply_message(named(b, "demo").request("POST", body=call("echo", {"message": "named"}), headers=session))
    assert echoed["result"]["content"][0]["text"] == "named", echoed
    elsewhere = named(b, "other").request("POST", body=call("echo", {"message": "x"}), headers=session)
    assert elsewhere.status == 404, elsewhere  # forwarded to /servers/other/mcp on A: not that server's session
    assert named(b, "demo").request("DELETE", headers=session).status == 204


# -- OAuth principals ---------------------------------------------------------------------------------------------

PUBLIC = "http://127.0.0.1:9"  # one public URL for the fleet (the balancer's): one resource for every instance


def test_an_oauth_principal_travels_with_the_forward(redis_url: str, gateway_factory: Any) -> None:
    with oidc_issuer(user="alice") as issuer:
        env = cluster_env(redis_url, **resource_server_env(issuer, MCPGATE_PUBLIC_URL=PUBLIC))
        a, b = gateway_factory(env), gateway_factory(env)

        def bearer(sub: str, **claims: Any) -> dict[str, str]:
            token = mint_token(issuer, {"aud": PUBLIC + "/mcp", "scope": "mcp", "sub": sub, **claims})
            return {"Authorization": "Bearer " + token}

        session = session_on(a, bearer("alice"))
        echoed = reply_message(b.request("POST", body=call("echo", {"message": "alice"}), headers=session))
        assert echoed["result"]["content"][0]["text"] == "alice", echoed
        as_bob = {**session, **bearer("bob")}
        assert b.request("POST", body=call("echo", {"message": "x"}), headers=as_bob).status == 404
        expired = {**session, **bearer("alice", exp=int(time.time()) - 120, iat=int(time.time()) - 600)}
        assert b.request("POST", body=call("echo", {"message": "x"}), headers=expired).status == 401
        assert b.request("DELETE", headers=session).status == 204


# -- the owner gone -----------------------------------------------------------------------------------------------


NOT_KEPT = {"MCPGATE_SESSION_RESURRECT": "false"}  # the opt-out: an owner gone ends its sessions (else taken over)


def test_the_owner_gone_is_404_and_the_client_starts_again(redis_url: str, gateway_factory: Any) -> None:
    a = Gateway({**cluster_env(redis_url), **NOT_KEPT})
    try:
        a.wait_ready()
        b = gateway_factory({**cluster_env(redis_url), **NOT_KEPT})
        session = session_on(a)
        assert reply_message(b.request("POST", body=call("echo", {"message": "x"}), headers=session))["result"]
        sessions_children = crash(a)
        gone = b.request("POST", body=call("echo", {"message": "x"}, msg_id=3), headers=session)
        assert gone.status == 404 and "Session not found" in gone.json()["error"]["message"], gone
        assert "is gone" in b.log()
        again = session_on(b)
        assert reply_message(b.request("POST", body=call("echo", {"message": "y"}), headers=again))["result"]
        assert wait_dead(sessions_children) == [], "the dead instance's children end (their stdin closed)"
    finally:
        a.stop()


def test_a_made_key_a_fixed_id_and_a_graceful_stop(redis_url: str, gateway_factory: Any) -> None:
    """No MCPGATE_CLUSTER_SECRET: the instances share the key the first one kept in Redis; MCPGATE_INSTANCE_ID
    names the ids; a graceful stop withdraws the instance from the directory (sessions not kept: with them,
    tests/serve/test_takeover.py)."""
    made = {k: v for k, v in cluster_env(redis_url).items() if k != "MCPGATE_CLUSTER_SECRET"} | NOT_KEPT
    a = Gateway({**made, "MCPGATE_INSTANCE_ID": "alpha"})
    try:
        a.wait_ready()
        b = gateway_factory(made)
        session = session_on(a)
        assert instance(session) == "alpha"
        assert reply_message(b.request("POST", body=call("echo", {"message": "x"}), headers=session))["result"]
        directory = redis.Redis.from_url(redis_url)
        assert directory.get("mcpgate:instance:alpha") == f"http://127.0.0.1:{a.port}".encode()
        assert directory.get("mcpgate:cluster-key") not in (None, SECRET.encode())
    finally:
        a.stop()
    assert directory.get("mcpgate:instance:alpha") is None
    assert b.request("POST", body=call("echo", {"message": "x"}), headers=session).status == 404


class FakeRedis:
    """The Redis commands a lookup sends (and the TTL read when an owner is found unreachable), from a dict."""

    def __init__(self, entries: dict[str, bytes]) -> None:
        self.entries = entries

    def get(self, key: str) -> bytes | None:
        return self.entries.get(key)

    def pttl(self, key: str) -> int:
        return 15_000 if key in self.entries else -2


def test_a_handler_forwarding_to_an_unreachable_owner_runs_again_with_its_body() -> None:
    """In process: Forward raised for an owner whose directory entry outlives it (SIGKILL); the connection is
    refused, the owner is taken for gone, and the handler runs once more on the same body, seeing it gone."""
    dead = free_port()
    directory = Directory(FakeRedis({"mcpgate:instance:b": f"http://127.0.0.1:{dead}".encode()}), "a", "http://x")
    settings = Settings.from_env({})
    forwarder = Forwarder(SECRET.encode(), settings, "a")
    fleet_member = Cluster("a", SECRET.encode(), FakeRedis({}), directory, forwarder)  # type: ignore[arg-type]
    seen: list[tuple[str | None, bytes]] = []

    def handler(request: HttpRequest) -> HttpResponse:
        body = request.read_body(1000) or b""
        context(request.environ).message = jsonrpc.parse(body)  # as the handlers do (Forward sends its raw bytes)
        seen.append((fleet_member.lookup("b"), body))
        if fleet_member.lookup("b") is not None:
            raise Forward("b")
        return HttpResponse(200, b"served here")

    body = json.dumps(call("echo", {"message": "x"})).encode()
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/mcp", "CONTENT_LENGTH": str(len(body))}
    environ["wsgi.input"] = io.BytesIO(body)
    response = fleet_member.serve(environ, "mcp", handler)
    assert (response.status, response.body) == (200, b"served here")
    assert seen == [(f"http://127.0.0.1:{dead}", body), (None, body)]


# -- without REDIS_URL --------------------------------------------------------------------------------------------


def test_without_redis_the_header_means_nothing(gateway_factory: Any) -> None:
    gw = gateway_factory({"MCPGATE_AUTH_TOKEN": TOKEN})
    session = session_on(gw, BEARER)
    assert "." not in session[SESSION_ID]  # plain ids
    tokenless = {k: v for k, v in session.items() if k != "Authorization"}
    body = json.dumps(call("echo", {"message": "x"})).encode()
    header = signed("static", session, time.time(), body, sender="i1")
    assert gw.request("POST", body=body, headers={**tokenless, FORWARDED: header}).status == 401


def test_without_redis_nothing_imports_redis() -> None:
    code = (
        "import sys; from mcpgate.config.settings import Settings; from mcpgate.serve.front.app import create_app; "
        "create_app(Settings.from_env({})); assert 'redis' not in sys.modules, 'redis imported'"
    )
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


# -- raw event streams --------------------------------------------------------------------------------------------


class EventStream:
    """A raw GET of an SSE stream (a session's GET stream, or the HTTP+SSE path), read event by event."""

    def __init__(
        self, gw: Gateway, session: dict[str, str] | None, path: str = "/mcp", headers: dict[str, str] | None = None
    ) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=15)
        sent = {**(session or {}), **(headers or {}), "Accept": "text/event-stream"}
        sent.pop("Content-Type", None)
        self.conn.request("GET", path, headers=sent)
        self.response = self.conn.getresponse()
        self.status = self.response.status
        self.content_type = self.response.getheader("Content-Type", "")

    def event(self) -> tuple[str, str]:
        name, data = "message", []
        while True:
            line = self.response.readline()
            if not line:
                raise EOFError("the stream ended")
            text = line.decode().rstrip("\r\n")
            if not text:
                if data and "".join(data):
                    return name, "\n".join(data)
                name, data = "message", []
                continue
            field, _, value = text.partition(":")
            if field == "event":
                name = value.strip()
            elif field == "data":
                data.append(value.removeprefix(" "))

    def message(self) -> Any:
        while True:
            name, data = self.event()
            if name == "message":
                return json.loads(data)

    def close(self) -> None:
        self.conn.close()
