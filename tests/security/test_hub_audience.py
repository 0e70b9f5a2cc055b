"""The hub's paths are protected resources of their own (gunicorn, resource-server mode against
tests/fixtures/oidc_issuer.py): the aggregate at MCPGATE_PATH and each /groups/<name>/mcp publish their protected
resource metadata (RFC 9728) and take only tokens whose audience is their own URL. A token minted for a member
server is refused at the aggregate and at a group (a member's token must not open every other server of the
group), and the aggregate's token is refused at a member's own path and at a group: 401 invalid_token naming the
metadata of the path asked.

Two servers, both the demo: "files" and "notes"; the group "dev" of both; the aggregate of both at /mcp."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.support import DEMO_ENTRY, Gateway, Reply, serving
from tests.support.oauth import mint_token, post_with_token

WELL_KNOWN = "/.well-known/oauth-protected-resource"
SERVERS = {"files": DEMO_ENTRY, "notes": {**DEMO_ENTRY, "mcpgate": {"oauth_scopes": ["mcp", "notes"]}}}
SCOPES = {"aggregate": "mcp notes", "dev": "mcp notes", "files": "mcp", "notes": "mcp notes"}  # each path's
PATHS = {"aggregate": "/mcp", "dev": "/groups/dev/mcp", "files": "/servers/files/mcp", "notes": "/servers/notes/mcp"}
SEEN: list[str] = []  # every token sent: none may reach the gateway's log


@pytest.fixture(scope="module")
def gw(issuer: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    config = tmp_path_factory.mktemp("hub-audience") / "servers.json"
    config.write_text(json.dumps({"mcpServers": SERVERS, "groups": {"dev": {"servers": ["files", "notes"]}}}))
    env = {
        "MCPGATE_CONFIG": str(config),
        "MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}",
        "MCPGATE_AUTH_MODE": "resource-server",
        "MCPGATE_OAUTH_ISSUER": issuer,
        "MCPGATE_OAUTH_SCOPES": "mcp",  # files'; notes needs notes too
    }
    with serving(env) as gateway:
        yield gateway
    log = gateway.log()
    assert not [token for token in SEEN if token in log], "a token reached the gateway's log"


def mint(issuer: str, aud: str, scope: str = "mcp notes") -> str:
    token = mint_token(issuer, {"aud": aud, "scope": scope})
    SEEN.append(token)
    return token


def ping(gw: Gateway, token: str | None, where: str) -> Reply:
    """A sessionless ping: 400 once past the guard (no session), else the guard's refusal."""
    return post_with_token(gw, token, {"jsonrpc": "2.0", "id": 9, "method": "ping"}, path=PATHS[where])


def metadata_url(gw: Gateway, where: str) -> str:
    return f"{gw.base}{WELL_KNOWN}{PATHS[where]}"


@pytest.mark.parametrize("where", ["aggregate", "dev"])
def test_the_aggregate_and_a_group_publish_their_own_metadata(gw: Gateway, issuer: str, where: str) -> None:
    reply = gw.request("GET", f"{WELL_KNOWN}{PATHS[where]}")
    assert reply.status == 200, reply
    document = reply.json()
    assert document["resource"] == gw.base + PATHS[where], document
    assert document["authorization_servers"] == [issuer], document
    assert document["scopes_supported"] == ["mcp", "notes"], document  # every member's own scopes
    missing = ping(gw, None, where)  # the challenge names that document
    assert missing.status == 401, missing
    expected = f'Bearer scope="mcp notes", resource_metadata="{metadata_url(gw, where)}"'
    assert missing.headers["www-authenticate"] == expected
    assert gw.request("GET", f"{WELL_KNOWN}/groups/nope/mcp").status == 404


@pytest.mark.parametrize(
    ("minted_for", "asked_at"),
    [
        ("files", "aggregate"),  # a member's token does not open the aggregate
        ("notes", "dev"),  # nor a group
        ("aggregate", "files"),  # and the aggregate's does not open a member's own path
        ("aggregate", "dev"),
        ("dev", "aggregate"),
    ],
)
def test_a_token_for_another_resource_is_refused(gw: Gateway, issuer: str, minted_for: str, asked_at: str) -> None:
    reply = ping(gw, mint(issuer, gw.base + PATHS[minted_for]), asked_at)
    assert reply.status == 401, reply
    assert reply.headers["www-authenticate"] == (
        'Bearer error="invalid_token", error_description="the token is meant for another audience", '
        f'scope="{SCOPES[asked_at]}", resource_metadata="{metadata_url(gw, asked_at)}"'
    )
    assert gw.request("GET", f"{WELL_KNOWN}{PATHS[asked_at]}").status == 200  # the document it names exists


@pytest.mark.parametrize("where", list(PATHS))
def test_a_token_for_the_path_opens_it(gw: Gateway, issuer: str, where: str) -> None:
    assert ping(gw, mint(issuer, gw.base + PATHS[where]), where).status == 400  # past the guard: no session


@pytest.mark.parametrize("where", ["aggregate", "dev"])
def test_a_group_needs_every_members_scopes(gw: Gateway, issuer: str, where: str) -> None:
    """notes' own path needs the scope notes: a token for the group without it opens none of the group (else it
    would reach notes' tools that notes' own path refuses it)."""
    reply = ping(gw, mint(issuer, gw.base + PATHS[where], "mcp"), where)
    assert reply.status == 403, reply
    assert reply.headers["www-authenticate"] == (
        'Bearer error="insufficient_scope", error_description="the token lacks the scope notes", '
        f'scope="mcp notes", resource_metadata="{metadata_url(gw, where)}"'
    )
