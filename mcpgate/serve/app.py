"""The application factory: a Flask app whose MCP endpoint is served by a thin WSGI handler.

Nothing is spawned until a client initializes.
"""

from __future__ import annotations

import functools
import logging
import sys
from typing import Any, Callable, Iterable

from flask import Flask, Response, request

from ..core import jsonrpc
from ..settings import Settings
from . import auth, streamable
from .gateway import Gateway
from .http import HttpRequest, HttpResponse, StartResponse, rpc_error

log = logging.getLogger("mcpgate.app")


def configure_logging(level: str) -> None:
    """One line per event on stderr."""
    root = logging.getLogger("mcpgate")
    root.setLevel(level.upper())
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        root.propagate = False


class Guard:
    """The DNS-rebinding defence for every request: Host, then Origin (decisions cached, bounded)."""

    def __init__(self, settings: Settings) -> None:
        self.token = settings.auth_token
        self.host_allowed = functools.lru_cache(maxsize=256)(
            functools.partial(auth.host_allowed, allowed=settings.allowed_hosts))
        self.origin_allowed = functools.lru_cache(maxsize=256)(
            functools.partial(auth.origin_allowed, allowed=settings.allowed_origins))

    def refuse(self, host: str | None, origin: str | None) -> HttpResponse | None:
        if not self.host_allowed(host):
            log.warning("refused Host %r (allow it with MCPGATE_ALLOWED_HOSTS)", host)
            return rpc_error(421, jsonrpc.INVALID_REQUEST,
                             "Misdirected Request: this Host is not allowed (MCPGATE_ALLOWED_HOSTS)")
        if not self.origin_allowed(origin):
            log.warning("refused Origin %r (allow it with MCPGATE_ALLOWED_ORIGINS)", origin)
            return rpc_error(403, jsonrpc.INVALID_REQUEST,
                             "Forbidden: this Origin is not allowed (MCPGATE_ALLOWED_ORIGINS)")
        return None

    def unauthorized(self, authorization: str | None) -> HttpResponse | None:
        if auth.bearer_ok(authorization, self.token):
            return None
        return rpc_error(401, jsonrpc.INVALID_REQUEST, "Unauthorized: send Authorization: Bearer <token>",
                         headers={"WWW-Authenticate": 'Bearer realm="mcpgate"'})


class Endpoint:
    """WSGI middleware: the MCP endpoint path goes to streamable.handle, everything else to Flask."""

    def __init__(self, app: Callable[..., Iterable[bytes]], gateway: Gateway, guard: Guard, path: str) -> None:
        self.app, self.gateway, self.guard = app, gateway, guard
        self.paths = {path, path + "/"}

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        self.gateway.track_connection(environ.get("gunicorn.sock") or environ.get("gunicorn.socket"))
        if environ.get("PATH_INFO") not in self.paths:
            return self.app(environ, start_response)
        response = self.guard.refuse(environ.get("HTTP_HOST"), environ.get("HTTP_ORIGIN")) or \
            self.guard.unauthorized(environ.get("HTTP_AUTHORIZATION"))
        if response is None:
            response = streamable.handle(self.gateway, HttpRequest(environ))
        return response(environ, start_response)


def create_app(settings: Settings | None = None) -> Flask:
    settings = settings or Settings.from_env()
    configure_logging(settings.log_level)
    app = Flask("mcpgate")
    gateway = Gateway(settings)
    guard = Guard(settings)
    app.extensions["mcpgate"] = gateway

    @app.before_request
    def check_host_and_origin() -> Any:
        refused = guard.refuse(request.headers.get("Host"), request.headers.get("Origin"))
        if refused is not None:
            return Response(refused.body, status=refused.status, headers=refused.headers)
        return None

    @app.get("/healthz")
    def healthz() -> Response:
        problem = gateway.command_problem()
        body: dict[str, Any] = {"status": "unavailable" if problem else "ok", "sessions": len(gateway.sessions),
                                "children": gateway.live_children()}
        if problem:
            body["error"] = problem
        return Response(jsonrpc.encode(body), status=503 if problem else 200, mimetype="application/json")

    app.wsgi_app = Endpoint(app.wsgi_app, gateway, guard, settings.path)  # type: ignore[method-assign]
    return app
