"""Helpers for the security tests of the embedded authorization server (registration, /authorize): its
environment, raw requests from a chosen loopback source address (127.0.0.0/8 is all loopback: each address is
another client), chunked bodies, and the authorization URL a client would open. The sign-in walk itself is
tests/browser.py's stand-in browser."""

from __future__ import annotations

import http.client
import json
import secrets
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

from mcpgate.serve.oauth import passwords
from tests.oauth_support import authorize_query
from tests.support import Reply

USER, PASSWORD = "ada", "security-password"
USERS = f"{USER}:{passwords.make_hash(PASSWORD)}"  # MCPGATE_OAUTH_USERS of the one user (scrypt: made once per run)


def request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    source: str = "127.0.0.1",
    chunked: bool = False,
) -> Reply:
    """One HTTP request to 127.0.0.1:port from the loopback address `source`; `chunked`: the body in 4 KiB
    chunks with no Content-Length (a streamed upload)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
    try:
        if chunked and body is not None:
            conn.request(method, path, body=_chunks(body), headers=headers or {}, encode_chunked=True)
        else:
            conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()


def _chunks(body: bytes, size: int = 4096) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def register(
    port: int, metadata: dict[str, Any], source: str = "127.0.0.1", chunked: bool = False, **headers: str
) -> Reply:
    """POST /register with `metadata` as JSON; `headers`: more headers (X_Forwarded_For="..." for
    X-Forwarded-For)."""
    sent = {"Content-Type": "application/json", **{name.replace("_", "-"): value for name, value in headers.items()}}
    return request(port, "POST", "/register", json.dumps(metadata).encode(), sent, source, chunked)


def public_client(redirect_uri: str, **extra: Any) -> dict[str, Any]:
    """The metadata a public client (as the official SDK's) registers."""
    return {
        "client_name": "security test",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        **extra,
    }


def authorize_url(port: int, client_id: str, redirect_uri: str, **extra: str) -> str:
    """The /authorize URL a client opens (PKCE S256, the gateway's resource); `extra` overrides or adds
    parameters ("" drops one)."""
    resource, state = f"http://127.0.0.1:{port}/mcp", "st-" + secrets.token_hex(4)
    query = authorize_query(client_id, redirect_uri, resource, secrets.token_urlsafe(40), state, **extra)
    return f"http://127.0.0.1:{port}/authorize?" + urlencode(query)
