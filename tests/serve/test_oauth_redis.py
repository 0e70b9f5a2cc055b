"""The embedded authorization server's state in Redis (REDIS_URL): the storage contract run against both
backends (the same test functions over SqliteStorage and RedisStorage, each seen by two "instances": two
connections to one SQLite file, two Redis clients), what only Redis has (every key expires but what must be
kept; a failing Redis is StorageUnavailable, naming no URL), then two gunicorn instances on one Redis: a client
registered and signed in on one, its tokens used and refreshed on the other, a reused refresh token caught across
them, and the 503 of the OAuth endpoints and the MCP endpoint while Redis is down.

The two instances share one MCPGATE_PUBLIC_URL (the first one's address), as a fleet behind one balancer does:
the issuer and the resource URL are one. Requests to the second carry that public Host, as a balancer passes it
on; the stand-in browser visits each instance at its own address (a loopback Host either way)."""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
import redis
import requests

from mcpgate.serve.oauth import passwords, redis_storage, storage
from mcpgate.serve.oauth.redis_storage import RedisStorage, StorageUnavailable
from mcpgate.serve.oauth.storage import CodeRecord, RefreshRecord, SqliteStorage
from tests.browser import Browser
from tests.support import HEADERS, Gateway, call, free_port, init_body, reply_message
from tests.support.fleet import redis_server
from tests.support.oauth import authorize_query

USER, PASSWORD = "ada", "redis-password"
CALLBACK = "http://127.0.0.1:47112/callback"  # never fetched: the browser stops there
FAMILY = "fam-1 http://127.0.0.1:1/mcp"


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


# -- the contract, over both backends ----------------------------------------------------------------------------


class Backend:
    """Two views of one store (two instances, or two workers) and what the store holds, raw."""

    def __init__(self, kind: str, tmp_path: Path, redis_url: str) -> None:
        self.kind = kind
        if kind == "sqlite":
            self.path = tmp_path / "state"
            self.a: Any = SqliteStorage(str(self.path))
            self.b: Any = SqliteStorage(str(self.path))
        else:
            prefix = f"test-{uuid.uuid4().hex}:"  # every test its own keys on the module's Redis
            self.a, self.b = RedisStorage.from_url(redis_url, prefix), RedisStorage.from_url(redis_url, prefix)

    def raw(self) -> bytes:
        """Every byte the store keeps (names and values)."""
        if self.kind == "sqlite":
            return b"".join(p.read_bytes() for p in sorted(self.path.iterdir()) if p.is_file())
        client, out = self.a.redis, []
        for key in client.scan_iter(match=self.a.prefix + "*"):
            kind = client.type(key)
            value: Any = {
                b"string": client.get,
                b"hash": client.hgetall,
                b"set": client.smembers,
                b"zset": lambda k: client.zrange(k, 0, -1),
            }[kind](key)
            out.append(repr((key, value)).encode())
        return b"\n".join(out)

    def close(self) -> None:
        self.a.close()
        self.b.close()


@pytest.fixture(params=["sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path, redis_url: str) -> Iterator[Backend]:
    backend = Backend(request.param, tmp_path, redis_url)
    try:
        yield backend
    finally:
        backend.close()


def code_record(client_id: str = "c1", ttl: float = 120.0, family: str = FAMILY) -> CodeRecord:
    return CodeRecord(client_id, CALLBACK, "mcp", "user:ada", "http://r/mcp", "ch", "S256", time.time() + ttl, family)


def refresh_record(ttl: float = 3600.0, family: str = FAMILY) -> RefreshRecord:
    return RefreshRecord(family, "c1", "user:ada", "mcp", time.time() + ttl)


def race(callables: list[Any], *args: Any) -> list[Any]:
    """Call each of `callables` with `args`, all at once (a thread each, released together); their results."""
    barrier, results = threading.Barrier(len(callables)), [None] * len(callables)

    def run(i: int) -> None:
        barrier.wait(10)
        results[i] = callables[i](*args)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(callables))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_keys_and_secrets_are_made_once_and_the_same_everywhere(store: Backend) -> None:
    makers = [lambda i=i: (store.a if i % 2 else store.b).stored_once("k", lambda: b"v%d" % i) for i in range(8)]
    made = race(makers)
    assert len(set(made)) == 1 and made[0].startswith(b"v")
    assert store.b.stored_once("k", lambda: b"other") == made[0]
    key = store.a.secret("signin-session")
    assert len(key) == 32 and store.b.secret("signin-session") == key != store.b.secret("another")


def test_consents_are_the_union_of_what_was_approved(store: Backend) -> None:
    assert not store.a.consented("user:ada", "c1", [])
    store.a.record_consent("user:ada", "c1", ["mcp"])
    store.b.record_consent("user:ada", "c1", ["files"])
    assert store.b.consented("user:ada", "c1", ["mcp", "files"]) and store.a.consented("user:ada", "c1", [])
    assert not store.a.consented("user:ada", "c1", ["notes"]) and not store.a.consented("user:bob", "c1", ["mcp"])
    assert not store.a.consented("user:ada", "c2", ["mcp"])


def test_clients_keep_only_their_secrets_fingerprint(store: Backend) -> None:
    secret = secrets.token_urlsafe(32)
    assert store.a.add_client("c1", secret, {"redirect_uris": [CALLBACK]}, 10)
    assert store.a.add_client("c2", None, {"client_name": "public"}, 10)
    one = store.b.client("c1")
    assert one.secret_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert one.metadata["redirect_uris"] == [CALLBACK]
    assert store.b.client("c2").secret_hash is None and store.b.client("nope") is None
    assert secret.encode() not in store.raw()


def test_registrations_are_bounded_and_unused_ones_forgotten(store: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    assert store.a.add_client("c1", None, {}, 2) and store.b.add_client("c2", None, {}, 2)
    store.a.add_code("code", code_record("c1"))  # c1 is used now: kept
    assert store.b.add_client("c3", None, {}, 2)  # full: c2, never used, makes room
    assert store.a.client("c2") is None and store.b.client("c1").used and not store.a.client("c3").used
    store.b.add_code("code3", code_record("c3"))
    assert not store.a.add_client("c4", None, {}, 2)  # every client kept was used
    assert store.a.add_client("c5", None, {}, 10, unused_ttl=60)
    later = types.SimpleNamespace(time=lambda: time.time() + 65)
    for module in (storage, redis_storage):
        monkeypatch.setattr(module, "time", later)
    assert store.b.add_client("c6", None, {}, 10, unused_ttl=60)  # c5 never got a code in 60 s: forgotten
    if store.kind == "sqlite":
        assert store.a.client("c5") is None
    else:  # its key expires in Redis's own time; it no longer counts
        client = store.a.redis
        assert 0 < client.ttl(store.a.prefix + "client:c5") <= 60
        assert client.zscore(store.a.prefix + "clients", "c5") is None
    assert store.a.client("c1").used and store.a.client("c3").used


def test_a_code_is_claimed_once_and_a_second_claim_revokes_its_family(store: Backend) -> None:
    record = code_record()
    store.a.add_code("the-code", record)
    assert store.b.claim_code("the-code") == record
    store.b.add_access("jti-1", FAMILY, time.time() + 600)  # what the first exchange produced
    store.b.add_refresh("refresh-1", refresh_record())
    assert not store.a.access_revoked("jti-1") and store.a.refresh_record("refresh-1") is not None
    assert store.a.claim_code("the-code") is None  # the second exchange
    assert store.b.access_revoked("jti-1") and store.b.claim_refresh("refresh-1") is None
    assert store.a.claim_code("never-issued") is None
    assert b"the-code" not in store.raw()


def test_of_many_instances_racing_for_a_code_one_wins(store: Backend) -> None:
    store.a.add_code("raced", code_record())
    claims = race([store.a.claim_code if i % 2 else store.b.claim_code for i in range(8)], "raced")
    assert sum(claim is not None for claim in claims) == 1, claims


def test_an_expired_code_is_refused(store: Backend) -> None:
    store.a.add_code("stale", code_record(ttl=-1.0))
    assert store.b.claim_code("stale") is None


def test_refresh_tokens_rotate_and_a_reused_one_revokes_its_family(store: Backend) -> None:
    r1, r2, r_other = (secrets.token_urlsafe(32) for _ in range(3))
    first = refresh_record()
    store.a.add_refresh(r1, first)
    store.a.add_access("jti-1", FAMILY, time.time() + 600)
    assert store.b.refresh_record(r1) == first and store.b.refresh_record(r1) == first  # not spent by a look
    assert store.b.claim_refresh(r1) == first
    assert store.a.refresh_record(r1) is None
    store.b.add_refresh(r2, refresh_record())  # the rotation's new token, same family
    store.b.add_access("jti-2", FAMILY, time.time() + 600)
    other = refresh_record(family="fam-2 http://r/mcp")
    store.b.add_refresh(r_other, other)
    store.b.add_access("jti-other", other.family, time.time() + 600)
    assert store.a.claim_refresh(r1) is None  # reused: the family goes
    assert store.b.refresh_record(r2) is None and store.b.claim_refresh(r2) is None
    assert store.a.access_revoked("jti-1") and store.b.access_revoked("jti-2")
    assert not store.a.access_revoked("jti-other") and store.a.claim_refresh(r_other) == other
    raw = store.raw()
    assert not [token for token in (r1, r2, r_other) if token.encode() in raw]  # fingerprints only


def test_of_two_instances_refreshing_at_once_one_wins_and_the_family_is_revoked(store: Backend) -> None:
    store.a.add_refresh("raced", refresh_record())
    claims = race([store.a.claim_refresh, store.b.claim_refresh], "raced")
    assert sum(claim is not None for claim in claims) == 1, claims
    store.a.add_refresh("next", refresh_record())
    assert store.b.claim_refresh("next") is None  # the loser saw it spent: a reuse


def test_an_expired_refresh_token_is_refused(store: Backend) -> None:
    store.a.add_refresh("stale", refresh_record(ttl=-1.0))
    assert store.b.refresh_record("stale") is None and store.b.claim_refresh("stale") is None


def test_access_tokens_are_revoked_one_by_one_or_by_family(store: Backend) -> None:
    store.a.add_access("lone", None, time.time() + 600)
    store.a.add_access("kin-1", FAMILY, time.time() + 600)
    store.a.add_access("kin-2", FAMILY, time.time() + 600)
    assert not any(store.b.access_revoked(jti) for jti in ("lone", "kin-1", "kin-2"))
    assert store.b.access_revoked("never-issued")
    store.b.revoke_access("lone")
    store.b.revoke_access("never-issued")  # nothing to revoke: nothing stored
    assert store.a.access_revoked("lone") and not store.a.access_revoked("kin-1")
    store.b.revoke_family(FAMILY)
    assert store.a.access_revoked("kin-1") and store.a.access_revoked("kin-2")


def test_a_family_revoked_before_its_tokens_exist_stays_revoked(store: Backend) -> None:
    store.a.revoke_family(FAMILY)  # a code reused while its first exchange is still under way
    store.b.add_access("late", FAMILY, time.time() + 600)
    store.b.add_refresh("late", refresh_record())
    assert store.a.access_revoked("late") and store.a.claim_refresh("late") is None


# -- Redis only ----------------------------------------------------------------------------------------------------


def test_every_redis_key_expires_but_the_secrets_consents_and_used_clients(redis_url: str) -> None:
    store = RedisStorage.from_url(redis_url, f"test-{uuid.uuid4().hex}:")
    try:
        store.secret("s")
        store.record_consent("user:ada", "used", ["mcp"])
        store.add_client("used", None, {}, 10)
        store.add_client("unused", None, {}, 10)
        store.add_code("c", code_record("used"))
        store.add_refresh("r", refresh_record(ttl=7200))
        store.add_access("j", FAMILY, time.time() + 300)
        store.add_access("j-none", None, time.time() + 300)
        store.claim_code("c")
        store.claim_code("c")  # revokes FAMILY: remembered at least a day
        ttls = {
            key.decode().removeprefix(store.prefix): store.redis.ttl(key)
            for key in store.redis.scan_iter(store.prefix + "*")
        }
    finally:
        store.close()
    unbounded = sorted("consent:" if name.startswith("consent:") else name for name, ttl in ttls.items() if ttl < 0)
    assert unbounded == ["client:used", "clients", "consent:", "secret:secret:s"]
    assert 0 < ttls["client:unused"] <= storage.UNUSED_CLIENT_TTL_S
    assert 0 < ttls[f"code:{hashlib.sha256(b'c').hexdigest()}"] <= 120
    assert 7100 < ttls[f"refresh:{hashlib.sha256(b'r').hexdigest()}"] <= 7200
    assert 300 < ttls["access:j"] <= 300 + redis_storage.ACCESS_MARGIN_S and ttls["access:j-none"] > 300
    assert redis_storage.REVOKED_FAMILY_TTL_S - 10 < ttls[f"family:{FAMILY}"] <= redis_storage.REVOKED_FAMILY_TTL_S


def test_an_unreachable_redis_is_storage_unavailable_naming_no_url() -> None:
    password = "pw-" + secrets.token_hex(8)
    store = RedisStorage.from_url(f"redis://:{password}@127.0.0.1:{free_port()}/0")  # nothing listens there
    calls = [
        lambda: store.secret("s"),
        lambda: store.client("c"),
        lambda: store.add_client("c", None, {}, 10),
        lambda: store.claim_code("c"),
        lambda: store.claim_refresh("r"),
        lambda: store.access_revoked("j"),
        lambda: store.consented("user:ada", "c", []),
    ]
    try:
        for attempt in calls:
            with pytest.raises(StorageUnavailable) as caught:
                attempt()
            assert "ConnectionError" in str(caught.value) and password not in str(caught.value)
            assert "127.0.0.1" not in str(caught.value) and caught.value.__cause__ is None
        with pytest.raises(StorageUnavailable):
            store.wait_ready(timeout=0.5)
    finally:
        store.close()


# -- two gunicorn instances on one Redis ---------------------------------------------------------------------------


class Instance:
    """One gunicorn of the fleet at its own port; the API requests carry the fleet's public Host."""

    def __init__(self, gw: Gateway, public: str) -> None:
        self.gw, self.public, self.host = gw, public, urlsplit(public).netloc

    def post(self, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Host": self.host, **kwargs.pop("headers", {})}
        return requests.post(self.gw.base + path, headers=headers, allow_redirects=False, timeout=30, **kwargs)

    def register(self) -> str:
        body = {"client_name": "fleet test", "redirect_uris": [CALLBACK], "token_endpoint_auth_method": "none"}
        reply = self.post("/register", json=body)
        assert reply.status_code == 201, reply.text
        return str(reply.json()["client_id"])

    def authorize_url(self, client_id: str, verifier: str) -> str:
        query = authorize_query(client_id, CALLBACK, self.public + "/mcp", verifier, secrets.token_hex(4))
        return f"{self.gw.base}/authorize?{urlencode(query)}"

    def sign_in(self, browser: Browser, client_id: str) -> tuple[str, str, list[tuple[str, str, int]]]:
        """The browser's walk through this instance's /authorize: (code, PKCE verifier, the trail)."""
        verifier = secrets.token_urlsafe(40)
        outcome = browser.visit(self.authorize_url(client_id, verifier), stop_at=CALLBACK)
        assert outcome.url.startswith(CALLBACK + "?") and outcome.params["iss"] == self.public, outcome.describe()
        return outcome.params["code"], verifier, outcome.trail

    def exchange(self, client_id: str, code: str, verifier: str) -> requests.Response:
        data = {"grant_type": "authorization_code", "code": code, "redirect_uri": CALLBACK, "code_verifier": verifier}
        return self.post("/token", data={**data, "client_id": client_id})

    def refresh(self, client_id: str, refresh_token: str) -> requests.Response:
        return self.post(
            "/token", data={"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id}
        )

    def mcp(self, token: str, body: Any, session: dict[str, str] | None = None) -> Any:
        headers = {**HEADERS, "Authorization": f"Bearer {token}", "Host": self.host, **(session or {})}
        return self.gw.request("POST", "/mcp", body, headers)

    def add(self, token: str) -> Any:
        """The demo's add through a session opened with `token` (its structured result), or the refusal's status."""
        reply = self.mcp(token, init_body())
        if reply.status != 200:
            return reply.status
        session = {"Mcp-Session-Id": reply.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        assert self.mcp(token, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session).status == 202
        return reply_message(self.mcp(token, call("add", {"a": 2, "b": 3}), session))["result"]["structuredContent"]


def fleet_env(redis_url: str, state_dir: Path, public: str) -> dict[str, str]:
    return {
        "MCPGATE_AUTH_MODE": "embedded",
        "MCPGATE_PUBLIC_URL": public,
        "MCPGATE_OAUTH_USERS": f"{USER}:{passwords.make_hash(PASSWORD)}",
        "MCPGATE_STATE_DIR": str(state_dir),  # each its own: only Redis is shared
        "REDIS_URL": redis_url,
    }


@pytest.fixture(scope="module")
def fleet(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Instance, Instance]]:
    started: list[Gateway] = []
    try:
        first = Gateway(fleet_env(redis_url, tmp_path_factory.mktemp("one"), "http://127.0.0.1:{port}"))
        started.append(first)
        second = Gateway(fleet_env(redis_url, tmp_path_factory.mktemp("two"), first.base))
        started.append(second)
        for gw in started:
            gw.wait_ready()
        yield Instance(first, first.base), Instance(second, first.base)
    finally:
        for gw in started:
            gw.stop()


def test_a_client_signed_in_on_one_instance_works_on_the_other(fleet: tuple[Instance, Instance]) -> None:
    one, two = fleet
    client_id = one.register()
    browser = Browser(USER, PASSWORD)
    code, verifier, trail = one.sign_in(browser, client_id)
    assert [method for method, _, _ in trail] == ["GET", "POST", "GET", "POST", "STOP"], trail  # login, consent
    issued = two.exchange(client_id, code, verifier)  # the code made on one, spent on two
    assert issued.status_code == 200, issued.text
    tokens = issued.json()
    assert one.add(tokens["access_token"]) == {"result": 5} == two.add(tokens["access_token"])
    rotated = one.refresh(client_id, tokens["refresh_token"])  # two issued it, one rotates it
    assert rotated.status_code == 200, rotated.text
    fresh = rotated.json()
    assert two.add(fresh["access_token"]) == {"result": 5}
    # the browser's sign-in (a cookie signed with the shared key) and consent hold on two: straight back
    code_two, verifier_two, trail = two.sign_in(browser, client_id)
    assert [method for method, _, _ in trail] == ["GET", "STOP"], trail
    assert urlsplit(trail[0][1]).netloc == f"127.0.0.1:{two.gw.port}"
    # the first refresh token again, on the other instance: refused, and its family is revoked everywhere
    reused = two.refresh(client_id, tokens["refresh_token"])
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant", reused.text
    assert one.refresh(client_id, fresh["refresh_token"]).status_code == 400
    assert one.add(fresh["access_token"]) == 401 == two.add(tokens["access_token"])
    # the second sign-in's grant is another family: untouched; its code is spent once, fleet-wide
    other = one.exchange(client_id, code_two, verifier_two)
    assert other.status_code == 200 and two.add(other.json()["access_token"]) == {"result": 5}, other.text
    assert two.exchange(client_id, code_two, verifier_two).status_code == 400
    assert one.add(other.json()["access_token"]) == 401  # the reuse revoked what the code produced


def test_while_redis_is_down_oauth_answers_503_and_the_url_is_never_logged(tmp_path: Path) -> None:
    password = "pw-" + secrets.token_hex(8)
    gw: Gateway | None = None
    try:
        with redis_server() as url:
            redis.Redis.from_url(url).config_set("requirepass", password)
            gw = Gateway(
                fleet_env(url.replace("redis://", f"redis://:{password}@"), tmp_path, "http://127.0.0.1:{port}")
            )
            gw.wait_ready()
            site = Instance(gw, gw.base)
            client_id = site.register()
            code, verifier, _ = site.sign_in(Browser(USER, PASSWORD), client_id)
            tokens = site.exchange(client_id, code, verifier).json()
            assert site.add(tokens["access_token"]) == {"result": 5}
        # Redis has stopped
        for reply in (
            site.post("/register", json={"redirect_uris": [CALLBACK]}),
            site.refresh(client_id, tokens["refresh_token"]),
        ):
            assert reply.status_code == 503 and reply.json()["error"] == "temporarily_unavailable", reply.text
            assert "Redis" in reply.json()["error_description"] and reply.headers["Retry-After"]
        page = requests.get(site.authorize_url(client_id, "v" * 43), timeout=30)
        assert page.status_code == 503 and page.headers["Content-Type"].startswith("text/plain"), page.text
        refused = site.mcp(tokens["access_token"], init_body())
        assert refused.status == 503 and "retry-after" in refused.headers, refused
        log = gw.log()
        assert password not in log
        assert "Exception on /" not in log and "Error handling request" not in log, gw.log_tail()
    finally:
        if gw is not None:
            gw.stop()
