"""The directory of a fleet's live instances, in Redis: `mcpgate:instance:<id>` -> that instance's internal URL,
with a TTL.

This instance's entry is written when it starts and refreshed by one greenlet (HEARTBEAT_EVERY, outliving its last
beat by HEARTBEAT_TTL), and withdrawn when the process exits (when it is still ours). Another instance's entry is
looked up and cached briefly (FOUND_CACHE, MISSING_CACHE; bounded); an instance found unreachable is marked gone
until its entry expires or is written again (serve/cluster/gone.py). Built by serve/cluster/instances.py's
`create`; the Cluster reads it for every forward.

An instance that begins a graceful stop (its drain) says so: `mcpgate:stopping:<id>` -> its internal URL, until
its stop is surely over (the drain's budget and STOPPING_AFTER), and removed by a later life of the instance at
that address when it starts. It keeps serving meanwhile (its sessions' requests are still forwarded to it while
it drains); what the mark tells another instance is how to read a connection it reset: its listener closing at
the end of the drain resets every connection still waiting in its accept queue, requests unread
(serve/cluster/forward.py, LostInFlight.unread), and those are served elsewhere instead of answered "restarted".
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import gevent

from mcpgate.serve.cluster.gone import GoneMarks

if TYPE_CHECKING:
    from redis import Redis

log = logging.getLogger("mcpgate.cluster")

INSTANCE_PREFIX = "mcpgate:instance:"  # + instance id -> its internal URL
HEARTBEAT_TTL = 15  # seconds an entry outlives its instance's last heartbeat
HEARTBEAT_EVERY = 5.0  # seconds between heartbeats
FOUND_CACHE = 5.0  # seconds a looked-up URL is reused
MISSING_CACHE = 1.0  # seconds an instance not in the directory is not asked for again
CACHED = 1024  # instances whose looked-up entry is remembered (past it, the cache starts again)
STOPPING_PREFIX = "mcpgate:stopping:"  # + instance id -> its internal URL, while it stops gracefully
STOPPING_AFTER = 60.0  # seconds a stopping mark outlives its drain's budget (the rest of a graceful stop, and more)


class Directory:
    """The live instances in Redis: this one's entry kept fresh by one greenlet; others' looked up, cached."""

    def __init__(self, redis: Redis, instance: str, url: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.redis, self.instance, self.url, self.clock = redis, instance, url, clock
        self._cache: dict[str, tuple[str | None, float]] = {}
        self.gone = GoneMarks(clock)  # instances found unreachable (serve/cluster/gone.py)
        self._greenlet: gevent.Greenlet | None = None
        from redis.exceptions import RedisError

        self.errors = (RedisError, OSError)  # what a command may raise while Redis is away

    def start(self) -> None:
        self.unmark_stopping()
        self.publish()
        self._greenlet = gevent.spawn(self._beat_forever)

    def publish(self) -> None:
        self.redis.set(INSTANCE_PREFIX + self.instance, self.url, ex=HEARTBEAT_TTL)

    def _beat_forever(self) -> None:
        while True:
            gevent.sleep(HEARTBEAT_EVERY)
            try:
                self.publish()
            except self.errors as exc:  # Redis away for a moment: the next beat tries again
                log.warning("instance %s: heartbeat failed: %s", self.instance, exc)

    def stop(self) -> None:
        """Stop the heartbeat and withdraw this instance's entry (when it is still ours)."""
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None
        try:
            key = INSTANCE_PREFIX + self.instance
            if self.redis.get(key) == self.url.encode():
                self.redis.delete(key)
        except self.errors as exc:
            log.warning("instance %s: could not withdraw from the directory: %s", self.instance, exc)

    def mark_stopping(self, budget: float) -> None:
        """This instance begins a graceful stop (its drain, at most `budget` seconds): said in Redis until its stop
        is surely over (a Redis failure is logged: a reset connection is then answered "restarted", as before)."""
        try:
            self.redis.set(STOPPING_PREFIX + self.instance, self.url, ex=math.ceil(budget + STOPPING_AFTER))
        except self.errors as exc:
            log.warning("instance %s: could not say in the directory that it stops: %s", self.instance, exc)

    def unmark_stopping(self) -> None:
        """An earlier life's stopping mark at this address (restarted under the same id) is not this life's."""
        try:
            key = STOPPING_PREFIX + self.instance
            if self.redis.get(key) == self.url.encode():
                self.redis.delete(key)
        except self.errors as exc:
            log.warning("instance %s: could not clear an earlier life's stopping mark: %s", self.instance, exc)

    def stopping(self, instance: str, url: str) -> bool:
        """Whether `instance`, reached at `url`, said it stops gracefully (read now, no cache; False when Redis
        does not answer)."""
        try:
            value = self.redis.get(STOPPING_PREFIX + instance)
        except self.errors:
            return False
        return value == url.encode()

    def forget(self, instance: str) -> None:
        """An instance found unreachable: gone until its entry expires, or is written again (a live entry wins)."""
        self._cache.pop(instance, None)
        self.gone.mark(instance, self.entry_ttl(instance), HEARTBEAT_TTL)

    def entry_ttl(self, instance: str) -> float | None:
        """Seconds an instance's entry has left; None: no entry (or Redis did not answer)."""
        try:
            left = self.redis.pttl(INSTANCE_PREFIX + instance)
        except self.errors:
            return None
        return left / 1000 if isinstance(left, int) and left > 0 else None

    def read(self, instance: str) -> str | None:
        """An instance's entry as Redis has it now (no cache, no gone mark), None when absent or unreachable."""
        try:
            value = self.redis.get(INSTANCE_PREFIX + instance)
        except self.errors:
            return None
        return value.decode() if isinstance(value, bytes) else None

    def lookup(self, instance: str) -> str | None:
        """The internal URL of a live instance, None when the directory does not know it (or Redis fails)."""
        if instance == self.instance:
            return self.url
        gone = self.gone  # an instance marked gone is asked about (most are not: no call, no closure made)
        if instance in gone.marks and gone.holds(instance, lambda: self.entry_ttl(instance)):
            return None
        now = self.clock()
        cached = self._cache.get(instance)
        if cached is not None and cached[1] > now:
            return cached[0]
        try:
            value = self.redis.get(INSTANCE_PREFIX + instance)
        except self.errors as exc:
            log.warning("instance directory unreachable: %s", exc)
            return None
        url = value.decode() if isinstance(value, bytes) else None
        if len(self._cache) > CACHED:  # bounded: ids of instances long gone go
            self._cache.clear()
        self._cache[instance] = (url, now + (FOUND_CACHE if url else MISSING_CACHE))
        return url
