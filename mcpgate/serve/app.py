"""The Flask application factory: nothing is spawned until a client initializes."""

from __future__ import annotations

import logging
import sys

from flask import Flask, Response, request

from ..core import jsonrpc
from ..settings import Settings
from . import auth, streamable
from .gateway import Gateway

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


def create_app(settings: Settings | None = None) -> Flask:
    settings = settings or Settings()
    configure_logging(settings.log_level)
    app = Flask("mcpgate")
    gateway = Gateway(settings)
    app.extensions["mcpgate"] = gateway

    @app.before_request
    def guard() -> Response | None:
        if not auth.host_allowed(request.headers.get("Host"), settings.allowed_hosts):
            log.warning("refused Host %r (allow it with MCPGATE_ALLOWED_HOSTS)", request.headers.get("Host"))
            return streamable.rpc_error(421, jsonrpc.INVALID_REQUEST,
                                        "Misdirected Request: this Host is not allowed (MCPGATE_ALLOWED_HOSTS)")
        if not auth.origin_allowed(request.headers.get("Origin"), settings.allowed_origins):
            log.warning("refused Origin %r (allow it with MCPGATE_ALLOWED_ORIGINS)", request.headers.get("Origin"))
            return streamable.rpc_error(403, jsonrpc.INVALID_REQUEST,
                                        "Forbidden: this Origin is not allowed (MCPGATE_ALLOWED_ORIGINS)")
        return None

    @app.get("/healthz")
    def healthz() -> Response:
        problem = gateway.command_problem()
        body = {"status": "unavailable" if problem else "ok", "sessions": len(gateway.sessions),
                "children": gateway.live_children()}
        if problem:
            body["error"] = problem
        return Response(jsonrpc.encode(body), status=503 if problem else 200, mimetype="application/json")

    app.register_blueprint(streamable.blueprint, url_prefix=settings.path)
    return app
