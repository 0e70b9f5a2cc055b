"""Remote servers never pass the client's own credentials upstream (the spec forbids token passthrough: a
token is for the audience it was issued to).

The gateway requires a token (MCPGATE_AUTH_TOKEN); an SDK client sends it, and a cookie and a header of its own,
in both eras. Upstream (tests/fixtures/remote_upstream.py logs every request's headers): a remote server with
`auth` bearer token_env gets only its own token, one without `auth` gets no Authorization at all, and none of
the client's credentials reach either. Before remote servers were published, url entries were skipped and a
file of url entries alone was refused ("lists no stdio server"): this test failed at the gateway's start.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support import MODERN, serving
from tests.support.remote import SdkUpstream, remote_config

CLIENT_TOKEN = "client-own-token-0123456789abcdef"
UPSTREAM_TOKEN = "upstream-machine-token-0123456789"
CLIENT_HEADERS = {"Authorization": f"Bearer {CLIENT_TOKEN}", "Cookie": "sid=client-cookie", "X-Client": "own"}


@pytest.fixture
def upstreams(tmp_path: Path) -> Iterator[tuple[SdkUpstream, SdkUpstream]]:
    with_auth = SdkUpstream(tmp_path, "stateful", token=UPSTREAM_TOKEN)
    without = SdkUpstream(tmp_path, "json")
    try:
        yield with_auth.start(), without.start()
    finally:
        with_auth.stop()
        without.stop()


def test_the_clients_token_never_reaches_an_upstream(
    tmp_path: Path, upstreams: tuple[SdkUpstream, SdkUpstream]
) -> None:
    with_auth, without = upstreams
    entries = {
        "machine": {"url": with_auth.url, "auth": {"type": "bearer", "token_env": "UPSTREAM_TOKEN"}},
        "open": {"url": without.url},
    }
    env = {
        "MCPGATE_CONFIG": remote_config(tmp_path / "mcp.json", entries),
        "MCPGATE_AUTH_TOKEN": CLIENT_TOKEN,
        "UPSTREAM_TOKEN": UPSTREAM_TOKEN,
    }
    with serving(env) as gw:

        async def main() -> list[str]:
            answers = []
            with anyio.fail_after(120):
                await calls(answers)
            return answers

        async def calls(answers: list[str]) -> None:
            for name in ("machine", "open"):
                for mode in ("legacy", MODERN):
                    http = httpx2.AsyncClient(headers=CLIENT_HEADERS, timeout=httpx2.Timeout(30, read=60))
                    url = f"{gw.base}/servers/{name}/mcp"
                    async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
                        result: Any = await client.call_tool("add", {"a": 1, "b": 2})
                        answers.append(result.content[0].text)

        assert anyio.run(main) == ["3"] * 4
    for upstream, expected in ((with_auth, f"Bearer {UPSTREAM_TOKEN}"), (without, None)):
        seen = upstream.requests()
        assert seen, "the upstream was never reached"
        for request in seen:
            headers = request["headers"]
            assert headers.get("authorization") == expected, request
            assert CLIENT_TOKEN not in str(headers) and "client-cookie" not in str(headers), request
            assert "x-client" not in headers, request
