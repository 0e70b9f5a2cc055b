"""The nonces of a connection's series (serve/cluster/nonces.py, Channels): a forwarder signs the values it sends on
one kept-alive connection `<channel>~0`, `<channel>~1`, ...; the owner checks the first in Redis and each later one
against that connection's last count. Unit tables, then a real instance: every way of sending a captured value
again (on its connection, on another, its series' first) is refused 403; the series itself is served."""

from __future__ import annotations

import gc
import http.client
import json
import time
from collections.abc import Iterator

import pytest

from mcpgate.core import session_ids
from mcpgate.core.wire import FORWARDED, PROTOCOL_VERSION, SESSION_ID
from mcpgate.serve.cluster.nonces import Channels, series
from tests.support import HEADERS, Gateway, call, init_body, reply_message
from tests.support.fleet import redis_server
from tests.support.http import Reply

SECRET = "test-cluster-secret-0123456789abcdef"
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


@pytest.mark.parametrize(
    ("nonce", "found"),
    [
        ("abc~0", ("abc", 0)),
        ("abc~12", ("abc", 12)),
        ("a~b~2", ("a~b", 2)),  # the count is after the last mark
        ("abc", None),  # a random nonce (an instance that signs no series)
        ("~3", None),  # no channel
        ("abc~", None),  # no count
        ("abc~1x", None),
        ("abc~-1", None),
        ("abc~\u0663", None),  # a digit, but not an ASCII one
        ("abc~" + "9" * 19, None),  # longer than any count
    ],
)
def test_a_series_nonce_is_read(nonce: str, found: tuple[str, int] | None) -> None:
    assert series(nonce) == found


class Connection:  # stands for the worker's object of one client connection (weakly referenced)
    pass


def test_a_count_is_accepted_once_on_its_own_connection_after_its_channel_opened() -> None:
    channels, first, other = Channels(), Connection(), Connection()
    assert not channels.follows(first, "c", 1), "no channel opened on this connection yet"
    channels.open(first, "c")
    assert channels.follows(first, "c", 1)
    assert not channels.follows(first, "c", 1), "the same count again"
    assert not channels.follows(first, "c", 0), "a lower count"
    assert channels.follows(first, "c", 5), "a count skipped (a request not sent) is no reason to refuse"
    assert not channels.follows(first, "d", 6), "another channel on this connection"
    assert not channels.follows(other, "c", 6), "this channel on another connection"
    del first
    gc.collect()
    assert len(channels._open) == 0, "a connection's entry goes with it"


@pytest.fixture(scope="module")
def owner() -> Iterator[Gateway]:
    with redis_server() as url:
        env = {"REDIS_URL": url, "MCPGATE_CLUSTER_SECRET": SECRET, "MCPGATE_INTERNAL_URL": "http://127.0.0.1:{port}"}
        gw = Gateway({**env, "MCPGATE_AUTH_TOKEN": "static-token-for-the-channel-tests"})
        try:
            gw.wait_ready()
            yield gw
        finally:
            gw.stop()


def open_session(gw: Gateway) -> dict[str, str]:
    bearer = {"Authorization": "Bearer static-token-for-the-channel-tests"}
    reply = gw.request("POST", body=init_body(), headers={**HEADERS, **bearer})
    assert reply.status == 200, reply
    session = {**HEADERS, SESSION_ID: reply.headers[SESSION_ID.lower()], PROTOCOL_VERSION: "2025-11-25"}
    assert gw.request("POST", body=INITIALIZED, headers={**session, **bearer}).status == 202
    return session


def send(conn: http.client.HTTPConnection, session: dict[str, str], nonce: str, msg_id: int) -> int:
    """A tools/call signed as the session's own instance forwards it, with `nonce`: its status."""
    body = json.dumps(call("echo", {"message": nonce}, msg_id=msg_id)).encode()
    request = session_ids.ForwardedRequest("POST", "/mcp", "", session[SESSION_ID], body)
    sender = session[SESSION_ID].split(".", 1)[0]
    value = session_ids.forwarded("static", sender, time.time(), request, SECRET.encode(), nonce=nonce)
    conn.request("POST", "/mcp", body=body, headers={**session, FORWARDED: value})
    answer = conn.getresponse()
    reply = Reply(answer.status, {name.lower(): value for name, value in answer.getheaders()}, answer.read())
    if reply.status == 200:
        assert reply_message(reply)["result"]["content"][0]["text"] == nonce, reply
    return reply.status


def test_a_series_is_served_and_no_value_of_it_twice(owner: Gateway) -> None:
    session = open_session(owner)
    first = http.client.HTTPConnection("127.0.0.1", owner.port, timeout=30)
    second = http.client.HTTPConnection("127.0.0.1", owner.port, timeout=30)
    try:
        assert send(first, session, "chan-one~0", 1) == 200  # checked in Redis: the channel opens on `first`
        assert send(first, session, "chan-one~1", 2) == 200
        assert send(first, session, "chan-one~1", 3) == 403, "a count again, on its own connection"
        assert send(second, session, "chan-one~2", 4) == 403, "a later count on another connection"
        assert send(second, session, "chan-one~0", 5) == 403, "the series' first again (in Redis)"
        assert send(first, session, "chan-one~4", 6) == 200, "its connection still carries the series"
        assert send(second, session, "chan-two~0", 7) == 200  # another channel opens on `second`
        assert send(second, session, "chan-one~5", 8) == 403, "a channel belongs to the connection it opened on"
        assert send(second, session, "chan-two~1", 9) == 200
        assert send(first, session, "plain-random-nonce", 10) == 200  # an unnumbered nonce: Redis, as before
        assert send(second, session, "plain-random-nonce", 11) == 403
    finally:
        first.close()
        second.close()
    assert "was used before (a replay)" in owner.log()
