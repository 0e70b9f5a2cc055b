"""The relay's token store (mcpgate/relay/oauth/store.py) and its --auth-status / --logout actions.

Concurrency is tested with real processes on one store directory: counters updated under the lock
lose nothing, and two relays that both want to refresh at the same moment spend each rotating
refresh token once (tests/fixtures/oidc_issuer.py refuses a used one), one refreshing and the other
adopting the stored result. Atomicity: a reader polling the file while another process rewrites it
never sees a partial file. The CLI actions run through the real `mcpgate-relay` entry point.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import secrets
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import requests

from mcpgate.relay.oauth.store import Record, TokenStore, normalized
from tests.support.oauth import oidc_issuer
from tests.support.relay import HANG_GUARD, explain_stderr

SERVER = "https://mcp.example.com/mcp"
RELAY = str(Path(sys.executable).parent / "mcpgate-relay")

# argv: store directory, server URL, rounds. Each round: add one to a shared counter under the lock.
COUNTER_WORKER = """\
import sys
from mcpgate.relay.oauth.store import TokenStore
store = TokenStore(sys.argv[1])
for _ in range(int(sys.argv[3])):
    with store.locked(sys.argv[2]) as record:
        record.metadata["count"] = record.metadata.get("count", 0) + 1
"""

# argv: store directory, server URL, rounds, barrier directory, name, token endpoint metadata (JSON).
# Each round both workers read the tokens (as a relay does before deciding to refresh), meet at a barrier,
# then refresh under the lock unless the other already did (Record.newer_than). Prints a JSON summary.
REFRESH_WORKER = """\
from gevent import monkey
monkey.patch_all(select=False, subprocess=False)  # as mcpgate-relay runs: the lock is polled on the event loop
import json, os, sys, time
from mcpgate.relay.oauth import grants
from mcpgate.relay.oauth.store import TokenStore
directory, url, rounds, barrier, name, metadata = sys.argv[1:]
store, metadata = TokenStore(directory), json.loads(metadata)

def meet(step):
    open(os.path.join(barrier, f"{step}-{name}"), "w").close()
    deadline = time.monotonic() + 30
    while len([n for n in os.listdir(barrier) if n.startswith(f"{step}-")]) < 2:
        if time.monotonic() > deadline:
            sys.exit(f"barrier {step} timed out")
        time.sleep(0.002)

summary = {"refreshed": 0, "adopted": 0, "errors": []}
for r in range(int(rounds)):
    seen = dict(store.peek(url).tokens)
    meet(f"a{r}")
    with store.locked(url) as record:
        if record.newer_than(seen):
            summary["adopted"] += 1
        else:
            try:
                answer = grants.refresh(metadata, record.client, record.tokens["refresh_token"], None,
                                        "https://mcp.example.com/mcp", timeouts=(5, 10))
                record.set_tokens(answer)
                summary["refreshed"] += 1
            except grants.GrantError as exc:
                summary["errors"].append(str(exc))
    meet(f"b{r}")
print(json.dumps(summary))
"""

# argv: store directory, server URL, rounds. Rewrites a large record again and again.
WRITER_WORKER = """\
import sys
from mcpgate.relay.oauth.store import TokenStore
store = TokenStore(sys.argv[1])
for i in range(int(sys.argv[3])):
    with store.locked(sys.argv[2]) as record:
        record.metadata = {"round": i, "padding": "x" * (200_000 + (i % 7) * 10_000)}
print("done", flush=True)
"""


def python(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str], timeout: float = HANG_GUARD) -> str:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 0, explain_stderr(err)
    return out


def relay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RELAY, *args], capture_output=True, text=True, timeout=HANG_GUARD, stdin=subprocess.DEVNULL)


def signed_in(store: TokenStore, url: str = SERVER) -> None:
    with store.locked(url) as record:
        record.bind("https://auth.example.com")
        record.client = {"client_id": "relay-client", "client_secret": "CLIENT-SECRET-9", "source": "dcr"}
        record.set_tokens(
            {"access_token": "ACCESS-TOKEN-1", "refresh_token": "REFRESH-TOKEN-1", "expires_in": 3600},
            requested="mcp:read mcp:write",
        )


# -- the file --------------------------------------------------------------------------------------------


def test_modes_are_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        store = TokenStore(str(tmp_path / "config"))
        signed_in(store)
    finally:
        os.umask(old)
    path = store.path(SERVER)
    assert stat.S_IMODE(os.stat(tmp_path / "config").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.with_suffix(".lock")).st_mode) == 0o600
    assert json.loads(path.read_text())["server_url"] == SERVER  # the URL is kept inside the file


def test_one_file_per_normalized_url_under_xdg_config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    store = TokenStore()
    assert store.path(SERVER).parent == tmp_path / "xdg" / "mcpgate" / "oauth"
    assert normalized("HTTPS://MCP.Example.com:443/mcp#frag") == SERVER
    assert store.path("HTTPS://MCP.Example.com:443/mcp") == store.path(SERVER)
    assert store.path("https://mcp.example.com:8443/mcp") != store.path(SERVER)
    assert store.path("https://mcp.example.com/other") != store.path(SERVER)
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert TokenStore().path(SERVER).parent == tmp_path / "home" / ".config" / "mcpgate" / "oauth"


def test_a_reader_never_sees_a_partial_file(tmp_path: Path) -> None:
    store = TokenStore(str(tmp_path))
    with store.locked(SERVER) as record:
        record.metadata = {"round": -1}
    path = store.path(SERVER)
    writer = python("-c", WRITER_WORKER, str(tmp_path), SERVER, "150")
    reads = 0
    try:
        while writer.poll() is None:
            data = json.loads(path.read_bytes())  # raises on a torn or half-written file
            assert data["format"] == 1 and "round" in data["metadata"]
            reads += 1
    finally:
        finish(writer)
    print(f"{reads} whole reads during 150 rewrites")
    assert reads > 0
    assert json.loads(path.read_bytes())["metadata"]["round"] == 149
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name, path.with_suffix(".lock").name]  # no temp left


def test_a_corrupt_file_is_reported_moved_aside_and_read_as_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = TokenStore(str(tmp_path))
    signed_in(store)
    path = store.path(SERVER)
    path.write_bytes(b'{"format": 1, "issuer": "https://auth.exa')
    with caplog.at_level(logging.WARNING, logger="mcpgate.relay"):
        assert store.peek(SERVER) is None  # peek only reports
        assert path.exists()
        with store.locked(SERVER) as record:
            assert record.issuer is None and record.tokens == {} and record.client == {}
            record.bind("https://auth.example.com")
    assert "corrupt" in caplog.text and "moved to" in caplog.text and "ACCESS-TOKEN" not in caplog.text
    aside = [p for p in path.parent.iterdir() if ".corrupt-" in p.name]
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b'{"format": 1')
    assert store.peek(SERVER) is not None and store.peek(SERVER).issuer == "https://auth.example.com"  # type: ignore[union-attr]
    path.write_text(json.dumps(["not", "a", "record"]))
    with store.locked(SERVER) as record:
        assert record.issuer is None


def test_credentials_are_kept_per_issuer(tmp_path: Path) -> None:
    store = TokenStore(str(tmp_path))
    signed_in(store)
    with store.locked(SERVER) as record:
        assert record.bind("https://auth.example.com") is False
        assert record.bind("https://new-auth.example.com") is True  # the server moved: register again
        assert record.client == {} and record.tokens == {}
        record.client = {"client_id": "second", "source": "dcr"}
    held = store.peek(SERVER)
    assert held is not None and held.issuer == "https://new-auth.example.com" and held.client["client_id"] == "second"
    with store.locked(SERVER) as record:
        assert record.bind("https://auth.example.com") is True
        assert record.client["client_id"] == "relay-client" and record.tokens["refresh_token"] == "REFRESH-TOKEN-1"


def test_tokens_from_a_token_answer() -> None:
    record = Record(server_url=SERVER)
    record.set_tokens({"access_token": "a1", "refresh_token": "r1", "expires_in": 100, "scope": "x"}, now=1000.0)
    assert record.tokens == {
        "access_token": "a1",
        "refresh_token": "r1",
        "expires_at": 1100.0,
        "scope": "x",
        "token_type": "Bearer",
    }
    assert record.access_valid(now=1000.0) and not record.access_valid(now=1050.0)  # 60 s margin
    seen = dict(record.tokens)
    assert not record.newer_than(seen)
    record.set_tokens(
        {"access_token": "a2", "token_type": "bearer"}, now=2000.0
    )  # a refresh answer without a new refresh token
    assert (
        record.tokens["refresh_token"] == "r1" and record.tokens["scope"] == "x" and "expires_at" not in record.tokens
    )
    assert record.newer_than(seen) and record.access_valid(now=10**10)  # no expiry given: valid until refused
    assert not record.rotated("r1") and record.rotated("r0") and not Record(server_url=SERVER).rotated("r1")
    assert "a2" not in repr(record) and "r1" not in repr(record)


def test_forget(tmp_path: Path) -> None:
    store = TokenStore(str(tmp_path))
    assert store.forget(SERVER) is False
    signed_in(store)
    assert store.forget(SERVER) is True
    assert store.peek(SERVER) is None and store.forget(SERVER) is False


# -- two processes -----------------------------------------------------------------------------------


def test_two_processes_lose_no_update(tmp_path: Path) -> None:
    rounds = 200
    workers = [python("-c", COUNTER_WORKER, str(tmp_path), SERVER, str(rounds)) for _ in range(2)]
    for worker in workers:
        finish(worker)
    held = TokenStore(str(tmp_path)).peek(SERVER)
    assert held is not None and held.metadata["count"] == 2 * rounds


def sign_in_by_code(issuer: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The issuer's metadata and a code grant's token answer for its preregistered confidential client."""
    metadata = requests.get(f"{issuer}/.well-known/oauth-authorization-server", timeout=10).json()
    verifier = secrets.token_urlsafe(32)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    redirect = "http://127.0.0.1:9/callback"
    query = {
        "response_type": "code",
        "client_id": "test-client",
        "redirect_uri": redirect,
        "state": "s",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": SERVER,
    }
    answer = requests.get(f"{metadata['authorization_endpoint']}?{urlencode(query)}", allow_redirects=False, timeout=10)
    code = parse_qs(urlsplit(answer.headers["Location"]).query)["code"][0]
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect,
        "code_verifier": verifier,
        "resource": SERVER,
    }
    tokens = requests.post(
        metadata["token_endpoint"], data=form, auth=("test-client", "test-secret"), timeout=10
    ).json()
    assert tokens.get("refresh_token"), tokens
    return metadata, tokens


def test_two_relays_refreshing_at_once_spend_each_refresh_token_once(tmp_path: Path) -> None:
    rounds = 12
    with oidc_issuer() as issuer:
        metadata, tokens = sign_in_by_code(issuer)
        store = TokenStore(str(tmp_path / "config"))
        with store.locked(SERVER) as record:
            record.bind(metadata["issuer"])
            record.client = {"client_id": "test-client", "client_secret": "test-secret", "source": "preregistered"}
            record.set_tokens(tokens)
        before = requests.get(f"{issuer}/stats", timeout=10).json()["token"]
        barrier = tmp_path / "barrier"
        barrier.mkdir()
        args = [str(tmp_path / "config"), SERVER, str(rounds), str(barrier)]
        workers = [python("-c", REFRESH_WORKER, *args, name, json.dumps(metadata)) for name in ("one", "two")]
        summaries = [json.loads(finish(worker)) for worker in workers]
        spent = requests.get(f"{issuer}/stats", timeout=10).json()["token"] - before
        # the refresh token held at the end still works: the last rotation was kept
        last = store.peek(SERVER)
        assert last is not None
        form = {"grant_type": "refresh_token", "refresh_token": last.tokens["refresh_token"]}
        assert requests.post(metadata["token_endpoint"], data=form, auth=("test-client", "test-secret"), timeout=10).ok
    print(f"refreshes: {[s['refreshed'] for s in summaries]}, adopted: {[s['adopted'] for s in summaries]}")
    assert [s["errors"] for s in summaries] == [[], []]
    assert sum(s["refreshed"] for s in summaries) == rounds == spent  # one refresh per round, never a reused token
    assert sum(s["adopted"] for s in summaries) == rounds


# -- the CLI actions -------------------------------------------------------------------------------------


def test_auth_status_and_logout_through_mcpgate_relay(tmp_path: Path) -> None:
    config = str(tmp_path / "config")
    nothing = relay("--auth-status", SERVER, "--config-dir", config)
    assert nothing.returncode == 1 and "nothing held" in nothing.stdout, nothing.stderr
    signed_in(TokenStore(config))
    status = relay("--auth-status", SERVER, "--config-dir", config)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert f"server: {SERVER}" in lines
    assert "issuer: https://auth.example.com" in lines
    assert "client: relay-client (dcr, confidential)" in lines
    assert "scopes: mcp:read mcp:write" in lines
    assert any(line.startswith("access token: held, expires at ") for line in lines)
    assert "refresh token: held" in lines
    for secret in ("ACCESS-TOKEN-1", "REFRESH-TOKEN-1", "CLIENT-SECRET-9"):
        assert secret not in status.stdout + status.stderr
    gone = relay("--logout", SERVER, "--config-dir", config)
    assert (
        gone.returncode == 0
        and gone.stdout.strip() == f"forgot the sign-in held for {SERVER} (issuer https://auth.example.com)"
    )
    assert not TokenStore(config).path(SERVER).exists()
    again = relay("--logout", SERVER, "--config-dir", config)
    assert again.returncode == 0 and again.stdout.strip() == f"nothing was held for {SERVER}"


def test_auth_status_reads_xdg_config_home(tmp_path: Path) -> None:
    signed_in(TokenStore(str(tmp_path / "xdg" / "mcpgate")))
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    status = subprocess.run(
        [RELAY, "--auth-status", SERVER],
        capture_output=True,
        text=True,
        env=env,
        timeout=HANG_GUARD,
        stdin=subprocess.DEVNULL,
    )
    assert status.returncode == 0 and "refresh token: held" in status.stdout, status.stderr
