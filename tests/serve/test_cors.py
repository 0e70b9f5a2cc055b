"""CORS: off by default; listed origins get preflights answered and real responses readable, in raw HTTP and in
a headless Chromium running a page of another origin that calls the endpoint with fetch."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpgate.config.settings import Settings, SettingsError
from mcpgate.serve.front.cors import Cors
from tests.support import HEADERS, Gateway, chromium, init_body, serving, static_site

PAGE_ORIGIN = "https://app.example"
TOKEN = "cors-t0ken"


def preflight(gw: Gateway, origin: str, headers: str = "content-type, mcp-session-id") -> Any:
    return gw.request(
        "OPTIONS",
        headers={"Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": headers},
    )


@pytest.fixture(scope="module")
def listed() -> Iterator[Gateway]:
    """A gateway listing PAGE_ORIGIN for CORS, behind a token (the rules themselves: test_guard.py, in process)."""
    with serving({"MCPGATE_CORS_ORIGINS": PAGE_ORIGIN, "MCPGATE_AUTH_TOKEN": TOKEN}, behind=True) as gw:
        yield gw


def test_cors_is_off_by_default(demo_gateway: Gateway) -> None:
    reply = preflight(demo_gateway, "http://localhost:3000")
    assert reply.status == 405 and "access-control-allow-origin" not in reply.headers, reply
    reply = demo_gateway.request("POST", body=init_body(), headers={**HEADERS, "Origin": "http://localhost:3000"})
    assert reply.status == 200 and not any(k.startswith("access-control-") for k in reply.headers), reply


def test_a_listed_origin_gets_preflight_and_readable_responses(listed: Gateway) -> None:
    gw = listed
    reply = preflight(gw, PAGE_ORIGIN, "authorization, content-type, mcp-protocol-version, Mcp-Param-Region, x-evil")
    assert reply.status == 204 and reply.body == b"", reply  # no token on a preflight: browsers send none
    assert reply.headers["access-control-allow-origin"] == PAGE_ORIGIN
    assert set(reply.headers["access-control-allow-methods"].split(", ")) >= {"GET", "POST", "DELETE"}
    allowed = {name.lower() for name in reply.headers["access-control-allow-headers"].split(", ")}
    assert allowed >= {
        "content-type",
        "authorization",
        "mcp-session-id",
        "mcp-protocol-version",
        "last-event-id",
        "mcp-method",
        "mcp-name",
        "mcp-param-region",
    }
    assert "x-evil" not in allowed
    auth = {**HEADERS, "Origin": PAGE_ORIGIN, "Authorization": f"Bearer {TOKEN}"}
    reply = gw.request("POST", body=init_body(), headers=auth)
    assert reply.status == 200, reply
    assert reply.headers["access-control-allow-origin"] == PAGE_ORIGIN
    assert "Mcp-Session-Id" in reply.headers["access-control-expose-headers"]
    refused = gw.request("POST", body=init_body(), headers={**HEADERS, "Origin": PAGE_ORIGIN})
    assert refused.status == 401 and refused.headers["access-control-allow-origin"] == PAGE_ORIGIN  # readable error


def test_an_unlisted_origin_gets_no_cors_headers_and_the_origin_rule(listed: Gateway) -> None:
    gw = listed  # the Origin rule comes before the token
    reply = preflight(gw, "https://evil.example")
    assert reply.status == 403 and not any(k.startswith("access-control-") for k in reply.headers), reply
    reply = gw.request("POST", body=init_body(), headers={**HEADERS, "Origin": "https://evil.example"})
    assert reply.status == 403 and not any(k.startswith("access-control-") for k in reply.headers), reply


def test_a_wildcard_only_without_authentication() -> None:
    assert Settings.from_env(environ={"MCPGATE_CORS_ORIGINS": "*"}).cors_origins == ("*",)
    with pytest.raises(SettingsError, match="MCPGATE_CORS_ORIGINS may be \\* only when authentication is off"):
        Settings.from_env(environ={"MCPGATE_CORS_ORIGINS": "*", "MCPGATE_AUTH_TOKEN": TOKEN})
    cors = Cors(["*"])
    assert cors.response_headers("https://any.example")[0] == ("Access-Control-Allow-Origin", "*")
    assert Cors([]).response_headers("https://any.example") == [] and not Cors([]).enabled


# -- a real browser --------------------------------------------------------------------------------------------

PAGE = """<!doctype html><html><body><pre id="out">pending</pre><script>
const url = "http://127.0.0.1:GATEWAY_PORT/mcp";
const headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                 "Authorization": "Bearer TOKEN"};
const post = (body, extra) => fetch(url, {method: "POST", headers: {...headers, ...extra}, body: JSON.stringify(body)});
async function run() {
  let reply = await post({jsonrpc: "2.0", id: 1, method: "initialize", params: {protocolVersion: "2025-11-25",
                          capabilities: {}, clientInfo: {name: "page", version: "1"}}}, {});
  const session = reply.headers.get("Mcp-Session-Id");
  await reply.json();
  const inSession = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"};
  await post({jsonrpc: "2.0", method: "notifications/initialized"}, inSession);
  reply = await post({jsonrpc: "2.0", id: 2, method: "tools/call",
                      params: {name: "add", arguments: {a: 2, b: 3}}}, inSession);
  const result = (await reply.json()).result.structuredContent;
  document.getElementById("out").textContent = "session " + (session ? "read" : "unreadable") +
      " result " + JSON.stringify(result);
}
run().catch(error => { document.getElementById("out").textContent = "failed " + error; });
</script></body></html>"""


@pytest.fixture
def page_server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A static file server on another port: the page's origin."""
    with static_site(tmp_path) as port:
        yield port, tmp_path


def page_text(browser: str, url: str, profile: Path) -> str:
    """The page's #out text once its script ran, from Chromium's --dump-dom."""
    args = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=20000",
        "--dump-dom",
        url,
    ]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr[-2000:]
    start = out.stdout.find('<pre id="out">')
    assert start >= 0, out.stdout[-2000:]
    return out.stdout[start + len('<pre id="out">') : out.stdout.find("</pre>", start)]


def test_a_browser_page_of_a_listed_origin_calls_the_endpoint(
    gateway_factory: Any, page_server: Any, tmp_path: Path
) -> None:
    browser = chromium()
    page_port, root = page_server
    origin = f"http://127.0.0.1:{page_port}"
    listed: Gateway = gateway_factory({"MCPGATE_CORS_ORIGINS": origin, "MCPGATE_AUTH_TOKEN": TOKEN})
    unlisted: Gateway = gateway_factory({"MCPGATE_AUTH_TOKEN": TOKEN})
    for name, gw in (("listed", listed), ("unlisted", unlisted)):
        (root / f"{name}.html").write_text(PAGE.replace("GATEWAY_PORT", str(gw.port)).replace("TOKEN", TOKEN))
    text = page_text(browser, f"{origin}/listed.html", tmp_path / "profile-a")
    assert text == 'session read result {"result":5}', text
    text = page_text(browser, f"{origin}/unlisted.html", tmp_path / "profile-b")
    assert text.startswith("failed TypeError"), text  # the browser blocks what CORS does not allow
