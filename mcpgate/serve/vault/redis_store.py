"""The vault in Redis (REDIS_URL set): the same interface and rules as SqliteVaultStore (store.py), shared by every
instance of a fleet.

Keys (prefix mcpgate:vault:):
    p:<sha256 of the principal>   hash: v:<slot> the sealed value, m:<slot> "<version> <updated_at>"
    generation                    raised by every put and delete (INCR); a version is the generation it took
    check                         the key check record (SET NX: the first instance's)
    lease:<sha256 of the principal>:<name>   a short lease's holder (SET NX PX: it lapses by itself; released by a
                                  script that deletes it only for its holder)

A put that would give a principal more than its limit of slots, and the version it takes, are one Lua script
(atomic). Keys never expire (but a lease): use a maxmemory-policy that does not evict them (noeviction or
volatile-*).
Every Redis failure surfaces as VaultUnavailable: its message names the kind of failure, never the URL.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

import redis
from redis.exceptions import RedisError

from mcpgate.serve.vault.errors import VaultUnavailable
from mcpgate.serve.vault.store import Entry, SlotSummary

PREFIX = "mcpgate:vault:"
SCAN_BATCH = 500  # principals' hashes read per round trip by `summary`

PUT = """
local field = 'v:' .. ARGV[1]
if redis.call('HEXISTS', KEYS[1], field) == 0 and redis.call('HLEN', KEYS[1]) / 2 >= tonumber(ARGV[3]) then
  return 0
end
local version = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], field, ARGV[2], 'm:' .. ARGV[1], version .. ' ' .. ARGV[4])
return 1
"""

DELETE = """
if redis.call('HDEL', KEYS[1], 'v:' .. ARGV[1], 'm:' .. ARGV[1]) == 0 then
  return 0
end
redis.call('INCR', KEYS[2])
return 1
"""


RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class RedisVaultStore:
    def __init__(self, client: redis.Redis, prefix: str = PREFIX) -> None:
        self.redis, self.prefix = client, prefix
        self._put = client.register_script(PUT)
        self._delete = client.register_script(DELETE)
        self._release = client.register_script(RELEASE)

    def _key(self, principal: str) -> str:
        return self.prefix + "p:" + hashlib.sha256(principal.encode()).hexdigest()

    def _guard(self, exc: RedisError) -> VaultUnavailable:
        return VaultUnavailable(f"the vault's store (Redis) is unavailable ({type(exc).__name__})")

    def check_once(self, make: Callable[[], bytes]) -> bytes:
        try:
            self.redis.set(self.prefix + "check", make(), nx=True)
            value = self.redis.get(self.prefix + "check")
        except RedisError as exc:
            raise self._guard(exc) from None
        return bytes(value) if isinstance(value, bytes) else _text(value).encode("latin-1")

    def get(self, principal: str, slot: str) -> bytes | None:
        try:
            value = self.redis.hget(self._key(principal), "v:" + slot)
        except RedisError as exc:
            raise self._guard(exc) from None
        return None if value is None else value if isinstance(value, bytes) else value.encode("latin-1")

    def put(self, principal: str, slot: str, sealed: bytes, limit: int) -> bool:
        keys = [self._key(principal), self.prefix + "generation"]
        try:
            return bool(self._put(keys=keys, args=[slot, sealed, limit, repr(time.time())]))
        except RedisError as exc:
            raise self._guard(exc) from None

    def delete(self, principal: str, slot: str) -> bool:
        try:
            return bool(self._delete(keys=[self._key(principal), self.prefix + "generation"], args=[slot]))
        except RedisError as exc:
            raise self._guard(exc) from None

    def listing(self, principal: str) -> dict[str, Entry]:
        try:
            fields = self.redis.hgetall(self._key(principal))
        except RedisError as exc:
            raise self._guard(exc) from None
        out = {}
        for name, value in fields.items():
            field = _text(name)
            if field.startswith("m:"):
                version, updated_at = _text(value).split(" ", 1)
                out[field[2:]] = Entry(float(updated_at), int(version))
        return out

    def generation(self) -> int:
        try:
            value = self.redis.get(self.prefix + "generation")
        except RedisError as exc:
            raise self._guard(exc) from None
        return int(_text(value)) if value is not None else 0

    def _lease_key(self, principal: str, name: str) -> str:
        return self.prefix + "lease:" + hashlib.sha256(principal.encode()).hexdigest() + ":" + name

    def lease(self, principal: str, name: str, holder: str, ttl: float) -> bool:
        """Take the lease `name` of `principal` for `holder` unless someone holds it (SET NX PX)."""
        try:
            return bool(self.redis.set(self._lease_key(principal, name), holder, nx=True, px=max(1, int(ttl * 1000))))
        except RedisError as exc:
            raise self._guard(exc) from None

    def release(self, principal: str, name: str, holder: str) -> None:
        try:
            self._release(keys=[self._lease_key(principal, name)], args=[holder])
        except RedisError as exc:
            raise self._guard(exc) from None

    def summary(self, limit: int) -> tuple[dict[str, SlotSummary], bool]:
        """Per slot: its principals, first and last set, from at most `limit` principals' hashes (their slots'
        times only: HSCAN m:*, never a value); complete or not."""
        found: dict[str, SlotSummary] = {}
        seen = 0
        try:
            batch: list[str] = []
            for key in self.redis.scan_iter(match=self.prefix + "p:*", count=SCAN_BATCH):
                if seen >= limit:
                    return found, False
                seen += 1
                batch.append(_text(key))
                if len(batch) == SCAN_BATCH:
                    self._summarize(batch, found)
                    batch = []
            self._summarize(batch, found)
        except RedisError as exc:
            raise self._guard(exc) from None
        return found, True

    def _summarize(self, keys: list[str], found: dict[str, SlotSummary]) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for key in keys:
            pipe.hscan(key, 0, match="m:*", count=1000)
        for _cursor, fields in pipe.execute():
            for name, value in fields.items():
                updated_at = float(_text(value).split(" ", 1)[1])
                slot = _text(name)[2:]
                known = found.get(slot)
                found[slot] = known.add(updated_at) if known else SlotSummary(1, updated_at, updated_at)
