"""Which check lets a caller use the MCP endpoints, built once from the settings: the static bearer token, the
resource server for another issuer's tokens, or the embedded authorization server and its own tokens.

Each authenticator answers one question for the guard: whose request is this (the principal), or a Refusal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from mcpgate.config.modes import AuthMode
from mcpgate.config.settings import Settings
from mcpgate.core import jsonrpc
from mcpgate.serve.front import auth
from mcpgate.serve.front.http import Refusal

if TYPE_CHECKING:
    from flask import Flask

    from mcpgate.serve.runtime import Runtime


class Authenticator(Protocol):
    def authenticate(self, environ: dict[str, Any], target: Settings | None = None) -> str:
        """The principal of a request to the server whose settings are `target` (None: GET /servers, or a
        server name not published), or a Refusal."""
        ...


class StaticToken:
    """MCPGATE_AUTH_TOKEN: one shared secret, one principal."""

    def __init__(self, token: str) -> None:
        self.token = token

    def authenticate(self, environ: dict[str, Any], target: Settings | None = None) -> str:
        if not auth.bearer_ok(environ.get("HTTP_AUTHORIZATION"), self.token):
            raise Refusal(
                401,
                jsonrpc.INVALID_REQUEST,
                "Unauthorized: send Authorization: Bearer <token>",
                headers={"WWW-Authenticate": 'Bearer realm="mcpgate"'},
            )
        return auth.STATIC_PRINCIPAL


def authenticator(settings: Settings, app: Flask, runtime: Runtime | None = None) -> Authenticator | None:
    """The mode in force (Settings.auth); the OAuth modes also register their metadata (and the embedded
    server its endpoints and pages) on the app. None: the endpoint is open. `runtime`: the worker's (serve/runtime):
    its servers (read at request time), each its own protected resource, its cluster (the embedded server's state
    goes through its Redis client), and where the embedded server is kept; None: MCPGATE_COMMAND's one server."""
    mode = settings.auth
    if mode is AuthMode.NONE:
        return None
    if mode is AuthMode.TOKEN:
        return StaticToken(settings.auth_token)
    # the OAuth modes only: Authlib is imported on demand
    from mcpgate.serve.oauth.resource import ResourceGuard, Single, offered_scopes, published_resources, verifier_for

    servers = runtime.servers if runtime is not None else Single(settings)
    if mode is AuthMode.RESOURCE_SERVER:
        guard = ResourceGuard(settings, verifier_for(settings, servers.named), [settings.oauth_issuer], servers)
    else:
        from mcpgate.serve.oauth import embedded
        from mcpgate.serve.oauth.grants import Targets

        def targets() -> Targets:  # asked at each request: a reload changes the servers
            own = [server.resource_url for server in servers.server_settings()]
            default = own[0] if len(own) == 1 else None  # one server: a request naming no resource is for it
            return Targets(tuple(published_resources(settings, servers)), default, offered_scopes(servers))

        cluster = runtime.cluster if runtime is not None else None
        verifier, server = embedded.install(app, settings, targets, any_audience=servers.named, cluster=cluster)
        if runtime is not None:
            runtime.oauth = server
        guard = ResourceGuard(settings, verifier, [server.issuer], servers)
    guard.register(app)
    return guard
