"""The embedded authorization server's state in Redis (REDIS_URL set): every instance of a fleet sees the same
clients, grants, refresh tokens, revocations, consents, signing key and sign-in cookie key, so a client that
registered and signed in on one instance goes on working on any other.

The same `Storage` interface (records.py) and the same rules as SqliteStorage:

- client secrets, authorization codes and refresh tokens are kept as SHA-256 fingerprints, never in the clear;
- codes and refresh tokens are single use, claimed by one Lua script each (redis_scripts.py; atomic in Redis:
  of two instances racing for the same code or refresh token, one wins); a second use revokes the token family,
  which revokes its refresh tokens and, through their jti, its access tokens;
- everything that can pile up expires by itself: a code when it would, a refresh token when it would, an access
  token's jti a little after its exp (the verifier's leeway), a token family once its last token has, a
  registration that never got a code after MCPGATE_OAUTH_UNUSED_CLIENT_TTL; registrations are counted against the
  limit in one sorted set, and a full one forgets its oldest never used;
- named secrets and the signing key are made once (SET NX: the first instance to store one wins, the others
  read it back) and never expire; consents are kept (a union of scopes per subject and client), as in SQLite.

Keys (prefix mcpgate:oauth:):
    client:<client_id>          JSON {"secret_hash", "metadata"}; EX the unused TTL until its first code, then kept
    clients                     sorted set client_id -> issued at (+inf once used): the registration count
    code:<sha256>               hash record (JSON), family, used; EX until the code expires
    refresh:<sha256>            hash record (JSON), family, expires_at, used; EX until it expires
    family:<family>             "0" live, "1" revoked; EX at least as long as any of its tokens
    access:<jti>                hash family, revoked, binding (records.access_binding); EX until exp plus leeway
    consent:<sha256 of [subject, client_id]>   set of scopes ("" marks a consent to none)
    secret:<name>               base64 of the value (sealed with MCPGATE_STATE_KEY when it is set: sealing.py)

Redis 6.0 or later, standalone (or a primary with replicas, as Heroku's), not Redis Cluster: the scripts name
the family key they touch from what they read. Use a maxmemory-policy that never evicts keys without a TTL
(noeviction or a volatile-* one): the keys and secrets have none.

Every Redis failure (unreachable, timed out, refused) surfaces as StorageUnavailable, an IssuerUnavailable: the
MCP endpoint's guard answers 503 for it and the OAuth endpoints 503 temporarily_unavailable (embedded.py); its
message names the kind of failure only, never the Redis URL (it may hold a password).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any, ParamSpec, TypeVar

import redis
from redis.exceptions import RedisError

from mcpgate.serve.cluster.redis_client import connect
from mcpgate.serve.oauth.jwt_verifier import LEEWAY, IssuerUnavailable
from mcpgate.serve.oauth.records import (
    REVOKED_FAMILY_TTL_S as REVOKED_FAMILY_TTL_S,  # re-exported: shared with SqliteStorage
)
from mcpgate.serve.oauth.records import (
    UNUSED_CLIENT_TTL_S,
    ClientRecord,
    CodeRecord,
    NamedSecrets,
    RefreshRecord,
    fingerprint,
)
from mcpgate.serve.oauth.redis_scripts import SCRIPTS
from mcpgate.serve.oauth.sealing import Sealer

PREFIX = "mcpgate:oauth:"
ACCESS_MARGIN_S = LEEWAY + 60  # an access token's jti outlives its exp by the verifier's leeway, and some
STARTUP_WAIT_S = 10.0  # how long an instance starting waits for Redis before it gives up

P = ParamSpec("P")
R = TypeVar("R")


class StorageUnavailable(IssuerUnavailable):
    """Redis cannot be reached or refused the command: not the caller's fault (503). Safe to show and log."""


def guarded(method: Callable[P, R]) -> Callable[P, R]:
    """`method` with every Redis error turned into StorageUnavailable (the kind of error only)."""

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except RedisError as exc:
            raise StorageUnavailable(
                f"the authorization server's state store (Redis) is unavailable ({type(exc).__name__})"
            ) from None

    return call


def text(value: Any) -> str:
    """A reply as text, whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else str(value)


def seconds_until(when: float, now: float) -> int:
    """A TTL for something that expires at `when` (at least 1 s: EXPIRE 0 would delete it at once)."""
    return max(1, math.ceil(when - now))


class RedisStorage(NamedSecrets):
    """Storage (records.py) in Redis. `client` may be shared (the cluster's); `prefix` namespaces the keys."""

    def __init__(
        self, client: redis.Redis, prefix: str = PREFIX, owned: bool = False, sealer: Sealer | None = None
    ) -> None:
        self.redis, self.prefix, self._owned = client, prefix, owned
        self.sealer = sealer  # MCPGATE_STATE_KEY's: the secret:<name> values are sealed with it (sealing.py)
        self._scripts = {name: client.register_script(source) for name, source in SCRIPTS.items()}

    @classmethod
    def from_url(cls, url: str, prefix: str = PREFIX, sealer: Sealer | None = None) -> RedisStorage:
        return cls(connect(url), prefix, owned=True, sealer=sealer)

    def _run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        return self._scripts[script](keys=keys, args=args)

    def _key(self, kind: str, name: str) -> str:
        return f"{self.prefix}{kind}:{name}"

    def wait_ready(self, timeout: float = STARTUP_WAIT_S) -> None:
        """Return once Redis answers a PING; StorageUnavailable after `timeout` seconds of failures."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.redis.ping()
                return
            except RedisError as exc:
                if time.monotonic() >= deadline:
                    raise StorageUnavailable(f"Redis (REDIS_URL) cannot be reached ({type(exc).__name__})") from None
                time.sleep(0.5)

    def close(self) -> None:
        if self._owned:
            self.redis.close()
            self.redis.connection_pool.disconnect()

    # -- named secrets and keys -------------------------------------------------------------------------------

    @guarded
    def _stored_once(self, name: str, make: Callable[[], bytes]) -> bytes:
        key = self._key("secret", name)
        value = self.redis.get(key)
        if value is None:
            self.redis.set(key, base64.b64encode(make()), nx=True)
            value = self.redis.get(key)
        return base64.b64decode(text(value))

    @guarded
    def _replace_stored(self, name: str, seen: bytes, value: bytes) -> None:
        self._run("replace_secret", [self._key("secret", name)], [base64.b64encode(seen), base64.b64encode(value)])

    # -- consents ---------------------------------------------------------------------------------------------

    def _consent_key(self, subject: str, client_id: str) -> str:
        return self._key("consent", hashlib.sha256(json.dumps([subject, client_id]).encode()).hexdigest())

    @guarded
    def consented(self, subject: str, client_id: str, scopes: Iterable[str]) -> bool:
        approved = {text(scope) for scope in self.redis.smembers(self._consent_key(subject, client_id))}
        return bool(approved) and set(scopes) <= approved

    @guarded
    def record_consent(self, subject: str, client_id: str, scopes: Iterable[str]) -> None:
        self.redis.sadd(self._consent_key(subject, client_id), "", *scopes)  # "": consented, to none maybe

    # -- clients ----------------------------------------------------------------------------------------------

    @guarded
    def add_client(
        self,
        client_id: str,
        secret: str | None,
        metadata: dict[str, Any],
        limit: int,
        unused_ttl: float = UNUSED_CLIENT_TTL_S,
    ) -> bool:
        """Store a registration (SqliteStorage.add_client's rules): unused ones forgotten after `unused_ttl`
        seconds, the oldest unused evicted when `limit` are kept; False only when every client kept was used."""
        value = json.dumps({"secret_hash": fingerprint(secret) if secret else None, "metadata": metadata})
        keys = [self.prefix + "clients", self._key("client", client_id)]
        args = [repr(time.time()), max(1, math.ceil(unused_ttl)), limit, client_id, value, self._key("client", "")]
        return bool(self._run("add_client", keys, args))

    @guarded
    def client(self, client_id: str) -> ClientRecord | None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.get(self._key("client", client_id))
        pipe.zscore(self.prefix + "clients", client_id)
        value, score = pipe.execute()
        if value is None:
            return None
        stored = json.loads(text(value))
        used = score is not None and math.isinf(float(score))
        return ClientRecord(client_id, stored["secret_hash"], stored["metadata"], used)

    # -- authorization codes ----------------------------------------------------------------------------------

    @guarded
    def add_code(self, code: str, record: CodeRecord) -> None:
        keys = [
            self._key("code", fingerprint(code)),
            self.prefix + "clients",
            self._key("client", record.client_id),
        ]
        ttl = seconds_until(record.expires_at, time.time())
        self._run("add_code", keys, [json.dumps(asdict(record)), record.family, ttl, record.client_id])

    @guarded
    def claim_code(self, code: str) -> CodeRecord | None:
        """The code's grant, marked used; None when unknown, expired or used before. A second use revokes
        the tokens the first one produced (RFC 6749 4.1.2)."""
        found = self._run(
            "claim_code", [self._key("code", fingerprint(code))], [self._key("family", ""), REVOKED_FAMILY_TTL_S]
        )
        if found is None:
            return None
        record = CodeRecord(**json.loads(text(found)))
        return record if record.expires_at > time.time() else None

    # -- refresh tokens (rotated; a reused one revokes its family) --------------------------------------------

    @guarded
    def add_refresh(self, token: str, record: RefreshRecord) -> None:
        keys = [self._key("refresh", fingerprint(token)), self._key("family", record.family)]
        ttl = seconds_until(record.expires_at, time.time())
        self._run("add_refresh", keys, [json.dumps(asdict(record)), record.family, repr(record.expires_at), ttl])

    @guarded
    def refresh_record(self, token: str) -> RefreshRecord | None:
        """The live (unused, unrevoked, unexpired) refresh token's record, left unspent."""
        found = self._run("read_refresh", [self._key("refresh", fingerprint(token))], [self._key("family", "")])
        if found is None:
            return None
        record, used, family = RefreshRecord(**json.loads(text(found[0]))), text(found[1]), text(found[2])
        if used == "1" or family != "0" or record.expires_at <= time.time():
            return None
        return record

    @guarded
    def claim_refresh(self, token: str) -> RefreshRecord | None:
        """The refresh token's record, spent (rotation); None when unknown, expired or revoked. Spending one a
        second time revokes its whole family and the family's access tokens."""
        found = self._run(
            "claim_refresh",
            [self._key("refresh", fingerprint(token))],
            [self._key("family", ""), repr(time.time()), REVOKED_FAMILY_TTL_S],
        )
        return None if found is None else RefreshRecord(**json.loads(text(found)))

    # -- access tokens (JWTs: only their jti, to revoke them) -------------------------------------------------

    @guarded
    def add_access(self, jti: str, family: str | None, expires_at: float, binding: str = "") -> None:
        access = self._key("access", jti)
        keys = [access, self._key("family", family) if family else access]
        ttl = seconds_until(expires_at, time.time()) + ACCESS_MARGIN_S
        self._run("add_access", keys, [family or "", ttl, binding])

    @guarded
    def access_revoked(self, jti: str, binding: str = "") -> bool:
        """True unless `jti` names an access token issued here with this `binding` (records.access_binding) and
        neither it nor its family was revoked."""
        args = [self._key("family", ""), binding]
        return bool(self._run("access_revoked", [self._key("access", jti)], args))

    @guarded
    def revoke_access(self, jti: str) -> None:
        self._run("revoke_access", [self._key("access", jti)], [])

    @guarded
    def revoke_family(self, family: str) -> None:
        self._run("revoke_family", [self._key("family", family)], [REVOKED_FAMILY_TTL_S])
