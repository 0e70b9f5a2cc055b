"""Issue 20, finding 13: with authentication off on loopback, a page of another site must not start children
through the user's browser (`<img src=http://localhost:8000/sse>` needs no CORS).

A real gunicorn (auth off, one CORS origin listed) is sent what browsers send for such requests: every MCP path
refuses `Sec-Fetch-Site: cross-site` unless the page's Origin is listed (403, a JSON-RPC error), and the HTTP+SSE
GET must name text/event-stream in its Accept (an <img>'s `*/*` does not: 406). The worker's child processes
are counted: none start. Then a headless Chromium loads a page of another site holding the <img>.
"""

from __future__ import annotations

import http.client
import http.server
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import HEADERS, Gateway, chromium, init_body, serving, static_site, wait_for, worker_children

LISTED = "https://app.example"
IMG_ACCEPT = "image/avif,image/webp,image/apng,image/svg+xml,image/*,*/*;q=0.8"  # Chromium's, for an <img>
IMG = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image", "Accept": IMG_ACCEPT}
SSE = {"Accept": "text/event-stream"}


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    with serving({"MCPGATE_CORS_ORIGINS": LISTED, "MCPGATE_KEEPALIVE": "0.5"}, behind=True) as gateway:
        yield gateway


def answer(gw: Gateway, method: str, path: str, headers: dict[str, str], body: Any = None) -> tuple[int, Any]:
    """The status, and the JSON body of a refusal; a stream that opened is closed at once (its body unread)."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body).encode(), headers=headers)
        resp = conn.getresponse()
        if resp.status == 200 and resp.getheader("Content-Type", "").startswith("text/event-stream"):
            return resp.status, None
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("method", "path", "headers", "status"),
    [
        ("GET", "/sse", IMG, 403),  # <img src=.../sse> of another site's page
        ("GET", "/sse", {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Dest": "document", **SSE}, 403),  # a link
        ("POST", "/mcp", {**HEADERS, "Sec-Fetch-Site": "cross-site"}, 403),
        ("POST", "/messages?session_id=x", {**HEADERS, "Sec-Fetch-Site": "CROSS-SITE"}, 403),
        ("GET", "/mcp", IMG, 403),
        ("POST", "/mcp", {**HEADERS, "Sec-Fetch-Site": "cross-site", "Origin": "http://localhost:3000"}, 403),
        ("GET", "/sse", {"Accept": IMG_ACCEPT}, 406),  # a browser without fetch metadata
        ("GET", "/sse", {"Accept": "*/*"}, 406),  # curl's
        ("GET", "/sse", {}, 406),
        ("GET", "/sse", {"Accept": "text/*"}, 406),
    ],
)
def test_a_cross_site_or_non_sse_request_starts_nothing(
    gw: Gateway, method: str, path: str, headers: dict[str, str], status: int
) -> None:
    before = worker_children(gw)
    got, body = answer(gw, method, path, headers, init_body() if method == "POST" else None)
    assert got == status, (got, body)
    assert isinstance(body, dict) and body["jsonrpc"] == "2.0" and body["error"]["code"] == -32600, body
    assert worker_children(gw) == before == []


def test_what_legitimate_clients_send_still_works(gw: Gateway) -> None:
    sessions = gw.request("GET", "/healthz").json()["sessions"]
    same = {**HEADERS, "Sec-Fetch-Site": "same-origin"}
    assert answer(gw, "POST", "/mcp", same, init_body())[0] == 200
    listed = {**HEADERS, "Sec-Fetch-Site": "cross-site", "Origin": LISTED}  # a page the operator listed for CORS
    assert answer(gw, "POST", "/mcp", listed, init_body())[0] == 200
    assert answer(gw, "GET", "/sse", {**SSE, "Sec-Fetch-Site": "same-site"})[0] == 200  # an EventSource
    assert answer(gw, "GET", "/sse", {"Accept": "text/event-stream; charset=utf-8"})[0] == 200
    assert answer(gw, "GET", "/sse", {**SSE, "Sec-Fetch-Site": "none"})[0] == 200  # a typed URL
    assert answer(gw, "GET", "/healthz", IMG)[0] == 200  # not an MCP path
    # the streams closed at once: their sessions (and children) end with them
    assert wait_for(lambda: gw.request("GET", "/healthz").json()["sessions"] == sessions + 2), gw.log_tail()


# -- a real browser: a page of another site (localhost) embedding <img src=http://127.0.0.1:PORT/sse> ----------

PAGE = '<!doctype html><html><body><img id="probe" src="http://127.0.0.1:GATEWAY_PORT/sse"></body></html>'


@pytest.fixture
def page(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    with static_site(tmp_path) as port:
        yield port, tmp_path


def test_a_real_browser_page_of_another_site_starts_nothing(gw: Gateway, page: tuple[int, Path]) -> None:
    browser = chromium()
    port, root = page
    (root / "img.html").write_text(PAGE.replace("GATEWAY_PORT", str(gw.port)))
    opened_before = gw.log().count("HTTP+SSE stream opened")
    refused_before = gw.log().count("refused a cross-site browser request to /sse")
    args = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={root / 'profile'}",
        "--virtual-time-budget=5000",
        "--dump-dom",
        f"http://localhost:{port}/img.html",  # localhost and 127.0.0.1 are different sites
    ]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr[-2000:]
    assert 'id="probe"' in out.stdout, out.stdout[-2000:]
    # the browser's request arrived and was refused; no stream (and so no session, no child) was opened
    assert gw.log().count("refused a cross-site browser request to /sse") > refused_before, gw.log_tail()
    assert gw.log().count("HTTP+SSE stream opened") == opened_before, gw.log_tail()
