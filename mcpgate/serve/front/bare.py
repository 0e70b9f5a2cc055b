"""The app when no configured feature adds routes (no OAuth mode, no metrics): what Flask answered below the
Endpoint, in plain WSGI, so that such a worker imports neither Flask, werkzeug, Jinja nor click (about 8 MB of
an idle worker's memory; issue 24). The app factory builds a Flask app whenever a feature registers routes.

Below the Endpoint (which serves every server's MCP paths and GET /servers) only two things are left: /healthz
(GET and HEAD; OPTIONS names the methods; any other method is 405 with Allow) and every other path, 404. Both
errors are JSON-RPC errors, as the Flask app's error handlers answer them; runs of slashes in the path match as
one, as Flask's routing matches them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from mcpgate.core import jsonrpc
from mcpgate.serve.front.http import HttpResponse, StartResponse, json_response, rpc_error

HEALTHZ = "/healthz"
ALLOW = "GET, HEAD, OPTIONS"
_SLASHES = re.compile(r"//+")

Health = Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]  # the status and body of /healthz for a request
Missing = Callable[[dict[str, Any]], str]  # what a 404 adds after "Not Found" for a request (where the endpoints are)


class BareApp:
    """A WSGI app with the two attributes of a Flask app the gateway uses: `extensions` (where the Runtime is
    attached) and `wsgi_app` (what the Endpoint, and the factory's wrappers, wrap)."""

    def __init__(self, health: Health, missing: Missing) -> None:
        self.health, self.missing = health, missing
        self.extensions: dict[str, Any] = {}
        self.wsgi_app: Callable[[dict[str, Any], StartResponse], Iterable[bytes]] = self.answer

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        return self.wsgi_app(environ, start_response)

    def answer(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        return self.response(environ)(environ, start_response)

    def response(self, environ: dict[str, Any]) -> HttpResponse:
        if _SLASHES.sub("/", environ.get("PATH_INFO", "")) != HEALTHZ:
            return rpc_error(404, jsonrpc.INVALID_REQUEST, f"Not Found{self.missing(environ)}")
        method = environ.get("REQUEST_METHOD", "")
        if method in ("GET", "HEAD"):
            status, body = self.health(environ)
            return json_response(jsonrpc.encode(body), status)
        if method == "OPTIONS":
            return HttpResponse(200, b"", "text/html; charset=utf-8", {"Allow": ALLOW})
        return rpc_error(405, jsonrpc.INVALID_REQUEST, "Method Not Allowed", headers={"Allow": ALLOW})
