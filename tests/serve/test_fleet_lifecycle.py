"""Instances of a fleet that stop and start while others relay for them (issue 27), on one Redis, by raw HTTP:

- an instance restarted under the same MCPGATE_INSTANCE_ID (as the recipe restarts one) is served again by the
  others at once: its new sessions' requests sent to another instance are forwarded, never "Session not found";
- a draining instance that relays another instance's GET streams ends them cleanly and exits as soon as its own
  work is done, not at the end of its graceful timeout;
- an owner that dies while another instance relays its streams: one log line per stream, naming the owner."""

from __future__ import annotations

import contextlib
import http.client
import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import Gateway, call, crash, open_session, reply_message, wait_for
from tests.support.fleet import redis_server

SECRET = "fleet-lifecycle-secret-0123456789abcdef"
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
GRACEFUL = 30  # seconds: the drained instance's graceful timeout, far beyond the prompt exit expected
PROMPT = 10  # seconds a drain with no work of its own may take, stated generously (the graceful timeout is 30)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@contextlib.contextmanager
def instance(redis_url: str, name: str, **extra: str) -> Iterator[Gateway]:
    env = {
        "REDIS_URL": redis_url,
        "MCPGATE_INSTANCE_ID": name,
        "MCPGATE_CLUSTER_SECRET": SECRET,
        "MCPGATE_INTERNAL_URL": "http://127.0.0.1:{port}",
        "MCPGATE_KEEPALIVE": "0.5",
        "MCPGATE_POOL_SPARES": "0",
        **extra,
    }
    gw = Gateway(env)
    try:
        gw.wait_ready()
        yield gw
    finally:
        gw.stop()


def echo_through(gw: Gateway, session: dict[str, str], message: str) -> tuple[int, str]:
    """An echo call on `session` sent to `gw`: its status and the echoed text (or the error's message)."""
    reply = gw.request("POST", body=call("echo", {"message": message}), headers=session)
    answer = reply_message(reply)
    if "error" in answer:
        return reply.status, str(answer["error"].get("message"))
    return reply.status, str(answer["result"]["content"][0]["text"])


@contextlib.contextmanager
def get_stream(gw: Gateway, session: dict[str, str]) -> Iterator[http.client.HTTPResponse]:
    """A session's GET stream opened at `gw` (its first bytes received); closed at the end."""
    conn = http.client.HTTPConnection(gw.host, gw.port, timeout=60)
    try:
        headers = {key: value for key, value in session.items() if key != "Content-Type"}
        conn.request("GET", "/mcp", headers={**headers, "Accept": "text/event-stream"})
        stream = conn.getresponse()
        assert stream.status == 200, (stream.status, stream.read())
        assert stream.read1(65536), "the stream sent nothing"  # its priming event or a keepalive
        yield stream
    finally:
        conn.close()


def test_an_instance_restarted_under_its_id_is_served_again_at_once(redis_url: str) -> None:
    """i1 finds i9 dead (a request for one of its sessions: taken over, i9 taken for gone), then i9 starts again
    under the same id: requests for its new sessions sent to i1 are forwarded to it from the first on."""
    with instance(redis_url, "i1") as here:
        with instance(redis_url, "i9") as first:
            old = open_session(first)
            assert echo_through(here, old, "before") == (200, "before")
            crash(first)
        assert echo_through(here, old, "after") == (200, "after")  # the owner is gone: its session taken over here
        with instance(redis_url, "i9") as again:
            outcomes = [echo_through(here, open_session(again), f"new {n}") for n in range(5)]
    assert outcomes == [(200, f"new {n}") for n in range(5)], outcomes
    assert "i9 is in the directory again" in here.log(), here.log_tail()


def test_a_drain_ends_the_streams_it_relays_and_exits_promptly(redis_url: str) -> None:
    """i2 relays a GET stream of a session of i1 (and holds an idle session of its own); SIGTERM to i2: the
    relayed stream ends as a finished reply (its last chunk received), i2 exits well within its graceful
    timeout with status 0, and the session's owner takes a new GET stream (the old one was let go)."""
    with instance(redis_url, "i1") as owner, instance(redis_url, "i2", MCPGATE_GRACEFUL_TIMEOUT=str(GRACEFUL)) as relay:
        open_session(relay)  # its own work: none in flight
        session = open_session(owner)
        with get_stream(relay, session) as stream:
            relay.proc.send_signal(signal.SIGTERM)
            rest = stream.read()  # to the last chunk; a cut stream raises IncompleteRead
            assert isinstance(rest, bytes)
            try:
                code = relay.proc.wait(PROMPT)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the draining instance did not exit within {PROMPT} s:\n{relay.log_tail()}")
        assert code == 0, relay.log_tail()
        assert "streams relayed for other instances' sessions ended: 1 " in relay.log(), relay.log_tail()
        assert wait_for(lambda: reopened(owner, session)), owner.log_tail()


def reopened(gw: Gateway, session: dict[str, str]) -> bool:
    try:
        with get_stream(gw, session):
            return True
    except AssertionError:
        return False


def test_an_owner_dying_under_a_relayed_stream_is_one_line(redis_url: str) -> None:
    """i2 relays two GET streams of i1's sessions; i1 is SIGKILLed: i2 logs one line per stream naming i1, and
    no traceback."""
    with instance(redis_url, "i2") as relay:
        with instance(redis_url, "i1") as owner, contextlib.ExitStack() as streams:
            opened: list[Any] = [streams.enter_context(get_stream(relay, open_session(owner))) for _ in range(2)]
            crash(owner)
            for stream in opened:
                with contextlib.suppress(http.client.HTTPException, OSError):
                    stream.read()
        cut = "a stream relayed from instance i1 was cut"
        assert wait_for(lambda: relay.log().count(cut) == 2), relay.log_tail()
        assert "Traceback" not in relay.log(), relay.log_tail()
