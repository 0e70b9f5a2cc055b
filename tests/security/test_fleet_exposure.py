"""Issue 21, item 1: the fleet recipe (deploy/Procfile.fleet, run by honcho as written) serves the network only
with authentication, and a remote client cannot pass for a local one.

A real remote peer: a network namespace joined to this one by a veth pair (needs root), HAProxy bound on this
side's veth address. HAProxy connects to the instances from loopback, so before the fix the instances took
every request for a local one: no sign-in was asked for (the instances' own bind is loopback), and a forged
`Host: localhost` passed the DNS-rebinding check. Now the recipe tells the instances they are behind a public
front (MCPGATE_PUBLIC_FRONT=true): without a token or OAuth it refuses to start; with one, the peer gets 401
until it sends the token, and a loopback Host name the proxy passes on (X-Forwarded-For) is refused (421).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpgate.config.settings import Settings
from mcpgate.core.wire import PROTOCOL_VERSION, SESSION_ID
from mcpgate.serve.front import preflight
from tests.support import HEADERS, call, init_body, reply_message
from tests.support.recipe import PeerRequest, Recipe, RemotePeer, fleet_recipe, from_peer, remote_peer

REDIS_PASSWORD = "exposure-redis-password-0123456789"
TOKEN = "exposure-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


@pytest.fixture(scope="module")
def remote() -> Iterator[RemotePeer]:
    with remote_peer() as peer:
        yield peer


def test_the_recipe_refuses_to_start_open(remote: RemotePeer, tmp_path: Path) -> None:
    """No token, no OAuth, HAProxy reachable from the network: every instance refuses, so the runner stops."""
    with fleet_recipe(tmp_path, {"MCPGATE_REDIS_PASSWORD": REDIS_PASSWORD}, front_host=remote.local) as recipe:
        code = recipe.wait_stopped()
    log = recipe.log()
    assert code != 0, log
    assert "refusing to serve through a public front (MCPGATE_PUBLIC_FRONT=true" in log, log
    assert "MCPGATE_ALLOW_UNAUTHENTICATED=true" in log  # how to serve it open on purpose


def test_told_to_it_starts_open_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    """MCPGATE_ALLOW_UNAUTHENTICATED=true: the start check lets a public front through, with a warning."""
    settings = Settings.from_env({"MCPGATE_PUBLIC_FRONT": "true", "MCPGATE_ALLOW_UNAUTHENTICATED": "true"})
    with caplog.at_level(logging.WARNING):
        assert preflight.run(settings, ["127.0.0.1:8001"], logging.getLogger("test.preflight")) is None
    assert "through a public front" in caplog.text and "WITHOUT authentication" in caplog.text


@pytest.fixture(scope="module")
def guarded(remote: RemotePeer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Recipe]:
    """The recipe with a token, its HAProxy on the veth address, the clients' host name that address."""
    dotenv = {
        "MCPGATE_REDIS_PASSWORD": REDIS_PASSWORD,
        "MCPGATE_AUTH_TOKEN": TOKEN,
        "MCPGATE_ALLOWED_HOSTS": remote.local,
    }
    with fleet_recipe(tmp_path_factory.mktemp("guarded"), dotenv, front_host=remote.local) as recipe:
        recipe.wait_up()
        yield recipe


def test_a_remote_client_needs_the_token(remote: RemotePeer, guarded: Recipe) -> None:
    port = guarded.ports["front"]
    here = {**HEADERS, "Host": f"{remote.local}:{port}"}
    anonymous, signed_in = from_peer(
        remote,
        remote.local,
        PeerRequest(port, "POST", "/mcp", here, init_body()),
        PeerRequest(port, "POST", "/mcp", {**here, **BEARER}, init_body()),
    )
    assert anonymous.status == 401, anonymous
    assert signed_in.status == 200, signed_in
    session = {**here, **BEARER, SESSION_ID: signed_in.headers["mcp-session-id"], PROTOCOL_VERSION: "2025-11-25"}
    initialized, echoed, without_token = from_peer(
        remote,
        remote.local,
        PeerRequest(port, "POST", "/mcp", session, INITIALIZED),
        PeerRequest(port, "POST", "/mcp", session, call("echo", {"message": "from the peer"})),
        PeerRequest(port, "POST", "/mcp", {k: v for k, v in session.items() if k != "Authorization"}, call("echo", {})),
    )
    assert initialized.status == 202, initialized
    assert reply_message(echoed)["result"]["content"][0]["text"] == "from the peer", echoed
    assert without_token.status == 401, without_token
    assert TOKEN not in guarded.log()


@pytest.mark.parametrize(
    "forged",
    [
        {"Host": "localhost"},
        {"Host": "localhost:8000"},
        {"Host": "127.0.0.1"},
        {"Host": "[::1]:8000"},
        {"Host": "localhost", "X-Forwarded-For": "127.0.0.1"},
    ],
    ids=["localhost", "localhost-port", "127.0.0.1", "ipv6-loopback", "own-x-forwarded-for"],
)
def test_a_forged_loopback_host_from_the_peer_is_refused(
    remote: RemotePeer, guarded: Recipe, forged: dict[str, str]
) -> None:
    port = guarded.ports["front"]
    with_token, without = from_peer(
        remote,
        remote.local,
        PeerRequest(port, "POST", "/mcp", {**HEADERS, **BEARER, **forged}, init_body()),
        PeerRequest(port, "POST", "/mcp", {**HEADERS, **forged}, init_body()),
    )
    assert with_token.status == 421, with_token
    assert without.status == 421, without
    assert "through the public front" in with_token.json()["error"]["message"]


def test_the_balancers_health_checks_still_pass(guarded: Recipe) -> None:
    """HAProxy's checks send Host: localhost from loopback with no X-Forwarded-For: a local request, served."""
    assert all(up for server, up in guarded.balancer().servers_up().items() if server.startswith("sticky/"))
