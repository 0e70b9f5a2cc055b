"""The one way the gateway makes a Redis client (REDIS_URL): a bounded pool, short timeouts and few retries, so a
failing Redis gives a prompt error, never a request hanging for seconds or connections without end."""

from __future__ import annotations

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

POOL_SIZE = 32  # connections per process at most; a caller waits up to POOL_WAIT_S for one
POOL_WAIT_S = 5.0
CONNECT_TIMEOUT_S = 2.0
COMMAND_TIMEOUT_S = 3.0
RETRIES = 2  # a dropped connection is tried again this many times (quickly) before the caller gets the error


def connect(url: str) -> redis.Redis:
    pool = redis.BlockingConnectionPool.from_url(
        url,
        max_connections=POOL_SIZE,
        timeout=POOL_WAIT_S,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=COMMAND_TIMEOUT_S,
        retry=Retry(ExponentialWithJitterBackoff(cap=0.2, base=0.02), RETRIES),
        health_check_interval=30,
    )
    return redis.Redis(connection_pool=pool)
