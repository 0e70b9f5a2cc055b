"""Which check lets a caller use the MCP endpoints, built once from the settings: the static bearer token, the
resource server for another issuer's tokens, or the embedded authorization server and its own tokens.

Each authenticator answers one question for the guard: whose request is this (the principal), or a Refusal.
"""

from __future__ import annotations

from typing import Any, Protocol

from flask import Flask

from ...core import jsonrpc
from ...settings import Settings
from .. import auth
from ..http import Refusal


class Authenticator(Protocol):
    def authenticate(self, environ: dict[str, Any]) -> str: ...


class StaticToken:
    """MCPGATE_AUTH_TOKEN: one shared secret, one principal."""

    def __init__(self, token: str) -> None:
        self.token = token

    def authenticate(self, environ: dict[str, Any]) -> str:
        if not auth.bearer_ok(environ.get("HTTP_AUTHORIZATION"), self.token):
            raise Refusal(
                401,
                jsonrpc.INVALID_REQUEST,
                "Unauthorized: send Authorization: Bearer <token>",
                headers={"WWW-Authenticate": 'Bearer realm="mcpgate"'},
            )
        return auth.STATIC_PRINCIPAL


def authenticator(settings: Settings, app: Flask) -> Authenticator | None:
    """The mode in force (Settings.auth); the OAuth modes also register their metadata (and the embedded
    server its endpoints and pages) on the app. None: the endpoint is open."""
    mode = settings.auth
    if mode == "none":
        return None
    if mode == "token":
        return StaticToken(settings.auth_token)
    from .resource import ResourceGuard, verifier_for  # the OAuth modes only: Authlib is imported on demand

    if mode == "resource-server":
        guard = ResourceGuard(settings, verifier_for(settings), [settings.oauth_issuer])
    else:
        from . import embedded

        verifier, issuer = embedded.install(app, settings)
        guard = ResourceGuard(settings, verifier, [issuer])
    guard.register(app)
    return guard
