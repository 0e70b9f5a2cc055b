"""Helpers shared by the security tests (test modules never import each other): raw sockets (what the worker
answers and whether it closes), a gateway that must refuse to start, and for the embedded authorization server
(registration, /authorize) its one user, registrations from a chosen loopback source address (127.0.0.0/8 is all
loopback: each address is another client), whole or chunked, and the authorization URL a client would open. The
sign-in walk itself is tests/browser.py's stand-in browser; the generic pieces are tests/support/'s and
tests/support/oauth.py's."""

from __future__ import annotations

import json
import secrets
import socket
import sys
from typing import Any
from urllib.parse import urlencode

import pytest

from mcpgate.serve.oauth import passwords
from tests.support import Gateway, Reply, send
from tests.support.oauth import authorize_query

WAIT = 15.0  # seconds a test waits for what the worker must do (only so a broken worker fails, not hangs)

USER, PASSWORD = "ada", "security-password"
USERS = f"{USER}:{passwords.make_hash(PASSWORD)}"  # MCPGATE_OAUTH_USERS of the one user (scrypt: made once per run)


def answer_and_close(sock: socket.socket, timeout: float = WAIT) -> tuple[bytes, bool]:
    """What the worker sends on `sock`, and whether it closed the connection before `timeout`."""
    sock.settimeout(timeout)
    received = b""
    try:
        while chunk := sock.recv(65536):
            received += chunk
        return received, True
    except ConnectionResetError:
        return received, True
    except TimeoutError:
        return received, False


def refused_start(env: dict[str, str], python: str = sys.executable) -> str:
    """The log of a gateway that must not start with `env` (a failure if it serves)."""
    gw = Gateway(env, python=python)
    try:
        with pytest.raises(RuntimeError, match="gunicorn exited"):
            gw.wait_ready()
        return gw.log()
    finally:
        gw.stop()


# -- the embedded authorization server ----------------------------------------------------------------------------


def register(
    port: int, metadata: dict[str, Any], source: str = "127.0.0.1", chunked: bool = False, **headers: str
) -> Reply:
    """POST /register with `metadata` as JSON; `headers`: more headers (X_Forwarded_For="..." for
    X-Forwarded-For)."""
    sent = {"Content-Type": "application/json", **{name.replace("_", "-"): value for name, value in headers.items()}}
    return send(
        "127.0.0.1", port, "POST", "/register", json.dumps(metadata).encode(), sent, source=source, chunked=chunked
    )


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
