"""The official SDK client signs in to the aggregate (gunicorn, embedded mode): it finds the aggregate's protected
resource metadata from the 401, asks the embedded authorization server for a token for the aggregate's URL (its
resource indicator), and calls a member's tool by its namespaced name; the token's audience is the aggregate's URL
alone, so it does not open a member's own path nor a group, in both eras.

Two servers, both the demo ("files", "notes"), the group "dev" of both; a local user and the stand-in browser."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from mcpgate.core import versions
from mcpgate.serve.oauth import passwords
from tests.browser import Browser
from tests.support import DEMO_ENTRY, Gateway, serving
from tests.support.oauth import SdkUser, post_with_token

USER, PASSWORD = "ada", "hub-password"


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    config = tmp_path_factory.mktemp("hub-oauth") / "servers.json"
    groups = {"dev": {"servers": ["files", "notes"]}}
    config.write_text(json.dumps({"mcpServers": {"files": DEMO_ENTRY, "notes": DEMO_ENTRY}, "groups": groups}))
    env = {
        "MCPGATE_CONFIG": str(config),
        "MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}",
        "MCPGATE_AUTH_MODE": "embedded",
        "MCPGATE_STATE_DIR": str(tmp_path_factory.mktemp("state")),
        "MCPGATE_OAUTH_USERS": f"{USER}:{passwords.make_hash(PASSWORD)}",
    }
    with serving(env, behind=True) as gateway:
        yield gateway


def admitted(gw: Gateway, path: str, token: str) -> int:
    """The guard's answer to a sessionless ping: 400 past the guard (no session), else its refusal."""
    return post_with_token(gw, token, {"jsonrpc": "2.0", "id": 9, "method": "ping"}, path=path).status


@pytest.mark.parametrize(("path", "tool"), [("/mcp", "files__add"), ("/groups/dev/mcp", "notes__add")])
@pytest.mark.parametrize("mode", ["legacy", versions.V2026_07_28])
def test_the_sdk_client_signs_in_to_the_aggregate(embedded: Gateway, path: str, tool: str, mode: str) -> None:
    person = SdkUser(Browser(USER, PASSWORD), "mcpgate hub (SDK)")
    try:
        url = embedded.base + path
        assert person.call_add(url, mode=mode, tool=tool) == {"result": 5}
        assert person.storage.tokens is not None and len(person.walks) == 1
        claims = person.claims()
        assert claims["aud"] == url and claims["sub"] == f"user:{USER}", claims
        token = person.storage.tokens.access_token
        assert admitted(embedded, path, token) == 400
        others = {"/mcp", "/groups/dev/mcp", "/servers/files/mcp", "/servers/notes/mcp"} - {path}
        assert {other: admitted(embedded, other, token) for other in others} == dict.fromkeys(others, 401)
    finally:
        person.close()
