"""Per-principal session caps (MCPGATE_PRINCIPAL_SESSIONS, issue 15): in memory on one instance, in Redis across
a fleet, where a dead instance's sessions stop counting once its directory entry (its heartbeat) is gone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from mcpgate.serve.cluster.caps import LocalCaps, NoCaps, PrincipalLimitReached, RedisCaps
from tests.support import HEADERS, Gateway, Reply, crash, init_body, open_session, wait_dead
from tests.support.fleet import redis_server

SECRET = "test-cluster-secret-0123456789abcdef"
ERRORS = (redis.RedisError, OSError)


# -- the counters --


def test_no_cap_counts_nothing() -> None:
    caps = NoCaps()
    for _ in range(1000):
        caps.acquire("p")
    assert caps.held("p") == 0


def test_in_memory_cap_per_principal() -> None:
    caps = LocalCaps(2)
    caps.acquire("alice")
    caps.acquire("alice")
    with pytest.raises(PrincipalLimitReached, match="MCPGATE_PRINCIPAL_SESSIONS"):
        caps.acquire("alice")
    caps.acquire("bob")  # another principal has its own count
    caps.release("alice")
    caps.acquire("alice")
    assert (caps.held("alice"), caps.held("bob")) == (2, 1)
    for _ in range(5):  # more releases than sessions never count below zero
        caps.release("bob")
    assert caps.held("bob") == 0


@pytest.fixture
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


def test_redis_counts_across_instances_and_forgets_a_dead_one(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.set("mcpgate:instance:a", "http://a", ex=15)
    client.set("mcpgate:instance:b", "http://b", ex=15)
    a = RedisCaps(2, client, "a", "default", ERRORS)
    b = RedisCaps(2, client, "b", "default", ERRORS)
    a.acquire("alice")
    b.acquire("alice")
    for caps in (a, b):
        with pytest.raises(PrincipalLimitReached):
            caps.acquire("alice")
    a.acquire("bob")
    client.delete("mcpgate:instance:b")  # b's heartbeat expired: its sessions stop counting
    a.acquire("alice")
    assert client.hget(a.key("alice"), "b") is None  # the dead instance's field is gone
    assert int(client.hget(a.key("alice"), "a") or 0) == 2
    a.release("alice")
    a.release("alice")
    assert client.hget(a.key("alice"), "a") is None
    assert client.ttl(a.key("bob")) > 0  # a hash nobody refreshes expires


def test_redis_refresh_heals_a_lost_count_and_clears_released_principals(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    a = RedisCaps(3, client, "a", "default", ERRORS)
    a.acquire("alice")
    a.acquire("alice")
    client.hset(a.key("alice"), "a", 7)  # drift (a lost decrement, say)
    a.refresh()
    assert int(client.hget(a.key("alice"), "a") or 0) == 2
    a.release("alice")
    a.release("alice")
    client.hset(a.key("alice"), "a", 1)
    a.refresh()
    assert client.hget(a.key("alice"), "a") is None


def test_a_restarted_instance_clears_what_its_previous_process_left(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    old = RedisCaps(1, client, "a", "default", ERRORS)
    old.acquire("alice")
    new = RedisCaps(1, client, "a", "default", ERRORS)  # the same instance id, a new process
    with pytest.raises(PrincipalLimitReached):
        new.acquire("alice")
    new.clear_stale()
    new.acquire("alice")


def test_redis_away_falls_back_to_this_instances_count() -> None:
    client = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5, socket_timeout=0.5)
    caps = RedisCaps(1, client, "a", "default", ERRORS)
    caps.acquire("alice")
    with pytest.raises(PrincipalLimitReached):
        caps.acquire("alice")
    caps.release("alice")


# -- through gunicorn --


def initialize(gw: Gateway) -> Reply:
    return gw.request("POST", body=init_body(), headers=HEADERS)


def refused(reply: Reply) -> None:
    assert reply.status == 503, reply
    assert reply.headers.get("retry-after"), reply
    error = reply.json()["error"]
    assert error["code"] == -32603 and "MCPGATE_PRINCIPAL_SESSIONS" in error["message"], reply


def test_one_instance_caps_a_principals_sessions_in_memory(gateway_factory: Any) -> None:
    gw = gateway_factory({"MCPGATE_PRINCIPAL_SESSIONS": "2"})
    first = open_session(gw)
    open_session(gw)
    refused(initialize(gw))
    assert gw.request("DELETE", headers={**HEADERS, **first}).status in (200, 204)
    assert initialize(gw).status == 200  # a session ended frees its place


def test_a_fleet_caps_a_principal_across_instances(redis_url: str) -> None:
    env = {
        "REDIS_URL": redis_url,
        "MCPGATE_CLUSTER_SECRET": SECRET,
        "MCPGATE_PRINCIPAL_SESSIONS": "2",
        "MCPGATE_INTERNAL_URL": "http://127.0.0.1:{port}",
    }
    a = Gateway({**env, "MCPGATE_INSTANCE_ID": "cap-a"})
    b = Gateway({**env, "MCPGATE_INSTANCE_ID": "cap-b"})
    try:
        a.wait_ready()
        b.wait_ready()
        open_session(a)
        open_session(b)
        refused(initialize(a))
        refused(initialize(b))
        assert wait_dead(crash(b)) == []  # b dies without withdrawing: its entry expires with its heartbeat
        redis.Redis.from_url(redis_url).delete("mcpgate:instance:cap-b")  # the expiry, without waiting 15 s
        assert initialize(a).status == 200  # b's session no longer counts
        refused(initialize(a))
    finally:
        a.stop()
        b.stop()
