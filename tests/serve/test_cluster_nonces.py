"""serve/cluster/nonces.py against a real redis-server, in process: a forwarded value's nonce is accepted once
(by any instance on the same Redis, for NONCE_TTL seconds), also when checks made together go in one write, and
a dropped Redis connection is made again (a check never answers from a stale reply)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gevent
import gevent.socket
import pytest
import redis

from mcpgate.serve.cluster.nonces import NONCE_PREFIX, NONCE_TTL, Nonces
from mcpgate.serve.cluster.redis_client import connect
from tests.support.fleet import redis_server


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


@pytest.fixture
def cooperative(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Redis client's sockets are gevent's for this test: checks in greenlets wait for Redis together."""
    monkeypatch.setattr(redis.connection, "socket", gevent.socket)


def test_a_nonce_is_accepted_once_by_any_instance(redis_url: str) -> None:
    client = connect(redis_url)
    here, there = Nonces(client), Nonces(connect(redis_url))
    try:
        assert here.first_use("n-once") is True
        assert here.first_use("n-once") is False
        assert there.first_use("n-once") is False, "another instance (or this one restarted) refuses it too"
        assert there.first_use("n-other") is True
        assert 0 < client.ttl(NONCE_PREFIX + "n-once") <= NONCE_TTL
    finally:
        here.close()
        there.close()


def test_checks_made_together_share_a_write_and_each_nonce_wins_once(redis_url: str, cooperative: None) -> None:
    nonces = Nonces(connect(redis_url))
    writes: list[int] = []
    send = nonces._send

    def counted(keys: list[bytes]) -> list[Any]:
        writes.append(len(keys))
        return send(keys)

    nonces._send = counted  # type: ignore[method-assign]
    try:
        checks = [gevent.spawn(nonces.first_use, f"together-{i % 8}") for i in range(40)]
        gevent.joinall(checks, raise_error=True)
        won = [f"together-{i % 8}" for i, check in enumerate(checks) if check.value]
        assert sorted(won) == sorted(f"together-{i}" for i in range(8)), "each nonce accepted exactly once"
        assert sum(writes) == 40 and max(writes) > 1, writes
    finally:
        nonces.close()


def test_a_dropped_connection_is_made_again(redis_url: str) -> None:
    admin = connect(redis_url)
    nonces = Nonces(connect(redis_url))
    try:
        assert nonces.first_use("before-drop") is True
        assert admin.client_kill_filter(_type="normal", skip_me=True) >= 1
        assert nonces.first_use("after-drop") is True
        assert nonces.first_use("before-drop") is False
        assert nonces.first_use("after-drop") is False
    finally:
        nonces.close()


def test_redis_away_is_an_error_not_an_answer() -> None:
    with redis_server() as url:
        nonces = Nonces(connect(url))
        assert nonces.first_use("while-up") is True
    with pytest.raises((redis.RedisError, OSError)):
        nonces.first_use("while-down")
    nonces.close()
