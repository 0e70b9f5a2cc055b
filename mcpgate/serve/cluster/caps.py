"""Per-principal session caps (MCPGATE_PRINCIPAL_SESSIONS): how many 2025 sessions one principal may hold on a
server, across every instance of a fleet.

One instance (no REDIS_URL): counted in memory. A fleet: counted in Redis, one hash per server and principal
(`mcpgate:sessions:<server>:<digest of the principal>`) whose fields are instance ids and values that
instance's sessions. A field counts only while its instance's directory entry (`mcpgate:instance:<id>`, kept by
the instance's heartbeat) exists, so a dead instance's sessions stop counting when its heartbeat expires; the
check and the increment are one Lua script (atomic). Each instance rewrites its own fields from its in-memory
counts every few seconds (a lost decrement heals) and keeps the hashes alive while it holds sessions; a hash
nobody refreshes expires. An instance started again under the same MCPGATE_INSTANCE_ID first clears the
fields its previous process left. Redis away: the cap is checked against this instance's own sessions only.

Past the cap: PrincipalLimitReached (a SessionLimitReached), which the endpoints answer 503 with Retry-After.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gevent

from mcpgate.config.settings import Settings
from mcpgate.core.sessions import SessionLimitReached

if TYPE_CHECKING:  # the fleet's modules only in a fleet's worker (REDIS_URL)
    from redis import Redis

    from mcpgate.serve.cluster.instances import Cluster

log = logging.getLogger("mcpgate.caps")

PREFIX = "mcpgate:sessions:"  # + server name + ":" + principal digest -> {instance id: sessions}
REFRESH_EVERY = 5.0  # seconds between rewrites of this instance's counts
HASH_TTL = 60  # seconds a hash outlives its last refresh

# KEYS[1] the hash; ARGV: this instance's field, the cap, the directory's key prefix, the hash's TTL.
ACQUIRE = """
local total = 0
local entries = redis.call('HGETALL', KEYS[1])
for i = 1, #entries, 2 do
  local field = entries[i]
  if field == ARGV[1] or redis.call('EXISTS', ARGV[3] .. field) == 1 then
    total = total + tonumber(entries[i + 1])
  else
    redis.call('HDEL', KEYS[1], field)
  end
end
if total >= tonumber(ARGV[2]) then
  return -total
end
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
redis.call('EXPIRE', KEYS[1], ARGV[4])
return total + 1
"""
RELEASE = """
local left = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if left <= 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
end
return left
"""


class PrincipalLimitReached(SessionLimitReached):
    def __init__(self, limit: int) -> None:
        RuntimeError.__init__(
            self, f"this principal already holds {limit} sessions, the most allowed (MCPGATE_PRINCIPAL_SESSIONS)"
        )
        self.limit = limit


class NoCaps:
    """MCPGATE_PRINCIPAL_SESSIONS=0: no cap (nothing counted)."""

    def acquire(self, principal: str) -> None:
        pass

    def release(self, principal: str) -> None:
        pass

    def held(self, principal: str) -> int:
        return 0


class LocalCaps(NoCaps):
    """The sessions of each principal on this instance, in memory."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.counts: dict[str, int] = {}

    def acquire(self, principal: str) -> None:
        if self.counts.get(principal, 0) >= self.limit:
            raise PrincipalLimitReached(self.limit)
        self.counts[principal] = self.counts.get(principal, 0) + 1

    def release(self, principal: str) -> None:
        left = self.counts.get(principal, 0) - 1
        if left > 0:
            self.counts[principal] = left
        else:
            self.counts.pop(principal, None)

    def held(self, principal: str) -> int:
        return self.counts.get(principal, 0)


class RedisCaps(LocalCaps):
    """The sessions of each principal across the fleet, in Redis (this instance's own also in memory)."""

    def __init__(
        self, limit: int, redis: Redis, instance: str, server: str, errors: Sequence[type[BaseException]]
    ) -> None:
        from mcpgate.serve.cluster.directory import INSTANCE_PREFIX  # a fleet's worker: imported already

        super().__init__(limit)
        self.redis, self.instance, self.directory = redis, instance, INSTANCE_PREFIX
        self.prefix = f"{PREFIX}{server}:"
        self.errors = tuple(errors)
        self._acquire: Any = redis.register_script(ACQUIRE)
        self._release: Any = redis.register_script(RELEASE)
        self._refresher: gevent.Greenlet | None = None
        self._known: set[str] = set()  # principals whose field this instance wrote (cleared when they hold none)

    def key(self, principal: str) -> str:
        return self.prefix + hashlib.sha256(principal.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    def acquire(self, principal: str) -> None:
        try:
            total = int(
                self._acquire(keys=[self.key(principal)], args=[self.instance, self.limit, self.directory, HASH_TTL])
            )
        except self.errors as exc:
            log.warning("session caps: Redis unreachable (%s); counting this instance's sessions only", exc)
            super().acquire(principal)
        else:
            if total <= 0:
                raise PrincipalLimitReached(self.limit)
            self.counts[principal] = self.counts.get(principal, 0) + 1
        self._known.add(principal)
        if self._refresher is None or self._refresher.dead:
            self._refresher = gevent.spawn(self._refresh_forever)

    def release(self, principal: str) -> None:
        super().release(principal)
        try:
            self._release(keys=[self.key(principal)], args=[self.instance])
        except self.errors as exc:  # the next refresh writes the count again
            log.warning("session caps: Redis unreachable (%s) releasing a session", exc)

    def refresh(self) -> None:
        """Write this instance's count of every principal it holds sessions of (and drop the fields of those it
        no longer does), keeping their hashes alive."""
        pipe = self.redis.pipeline(transaction=False)
        for principal in list(self._known):
            key = self.key(principal)
            count = self.counts.get(principal, 0)
            if count:
                pipe.hset(key, self.instance, count)
                pipe.expire(key, HASH_TTL)
            else:
                pipe.hdel(key, self.instance)
                self._known.discard(principal)
        pipe.execute()

    def _refresh_forever(self) -> None:
        while self._known:
            gevent.sleep(REFRESH_EVERY)
            try:
                self.refresh()
            except self.errors as exc:
                log.warning("session caps: could not refresh the counts in Redis: %s", exc)

    def clear_stale(self) -> None:
        """Remove the fields a previous process under this instance id left (a fixed MCPGATE_INSTANCE_ID)."""
        for key in self.redis.scan_iter(match=self.prefix + "*", count=500):
            self.redis.hdel(key, self.instance)


def for_server(settings: Settings, server: str, fleet: Cluster | None = None) -> NoCaps:
    """The caps of one published server: none, in memory, or in Redis when this worker is in a `fleet`."""
    if settings.principal_sessions <= 0:
        return NoCaps()
    if fleet is None:
        return LocalCaps(settings.principal_sessions)
    caps = RedisCaps(settings.principal_sessions, fleet.redis, fleet.instance, server, fleet.directory.errors)
    if settings.instance_id:
        try:
            caps.clear_stale()
        except caps.errors as exc:
            log.warning("session caps: could not clear this instance's old counts: %s", exc)
    return caps
