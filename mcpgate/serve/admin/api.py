"""The management API: JSON over HTTP under /admin/, no web UI. Off unless MCPGATE_ADMIN_TOKEN (or, in an OAuth
mode, MCPGATE_ADMIN_SCOPE) is set: then `mount` puts it in front of the app's pages, below the Endpoint (so the
Host and Origin checks and the pages' body bound apply first); off, /admin/ is a 404 as any unknown path.

- GET  /admin/servers         each server: name, health, era when known, sessions, children, pin policy
- GET  /admin/pins            each server with pins in force: its policy and pending changes (?server=<name>)
- POST /admin/pins/approve    {"server", "tool", "fingerprint"}: pin the new definition, show the tool again
- POST /admin/pins/reject     {"server", "tool", "fingerprint"}: keep the old pin, the tool stays hidden
- POST /admin/reload          read MCPGATE_CONFIG again (PublishedServers.reload): what changed
- GET  /admin/vault           per server, each user-secret slot: how many principals set it, first and last
                              (?principal=<name>: that principal's slots, set or not and when); never a value
                              (serve/admin/vault.py)

Every request is authenticated first (serve/admin/access.py), then routed; every refusal is a Refusal (a JSON
body) answered once by the Endpoint. POST bodies are JSON objects of at most MCPGATE_ADMIN_BODY_BYTES.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from mcpgate.config.modes import AuthMode
from mcpgate.core import jsonrpc
from mcpgate.serve.admin import vault
from mcpgate.serve.admin.access import AdminAccess
from mcpgate.serve.front.http import HttpRequest, HttpResponse, Refusal, StartResponse, json_response
from mcpgate.serve.modern import era_probe
from mcpgate.serve.modern.pooled_child import verdict_key

if TYPE_CHECKING:
    from mcpgate.config.settings import Settings
    from mcpgate.serve.oauth.setup import Authenticator
    from mcpgate.serve.runtime import Runtime
    from mcpgate.serve.servers.published import PublishedServers

log = logging.getLogger("mcpgate.admin")

PREFIX = "/admin"
WHO = "mcpgate.admin"  # the environ key naming who was let in (access.check's answer), for the handlers' logs
FINGERPRINT_CHARS = 64
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def bad_request(message: str) -> Refusal:
    return Refusal(400, jsonrpc.INVALID_PARAMS, f"Bad Request: {message}")


def ok(body: dict[str, Any]) -> HttpResponse:
    return json_response(json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode())


class AdminApi:
    """WSGI middleware: /admin/... answered here, every other path passed to `app`."""

    def __init__(
        self, app: WsgiApp, servers: PublishedServers, access: AdminAccess, body_bytes: int, vault_principals: int
    ) -> None:
        self.app, self.servers, self.access, self.body_bytes = app, servers, access, body_bytes
        self.vault_principals = vault_principals
        self.routes: dict[tuple[str, str], Callable[[HttpRequest], HttpResponse]] = {
            ("GET", "/servers"): self.list_servers,
            ("GET", "/pins"): self.list_pins,
            ("POST", "/pins/approve"): self.approve,
            ("POST", "/pins/reject"): self.reject,
            ("POST", "/reload"): self.reload,
            ("GET", "/vault"): self.vault,
        }

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path != PREFIX and not path.startswith(PREFIX + "/"):
            return self.app(environ, start_response)
        return self.answer(HttpRequest(environ), path[len(PREFIX) :].rstrip("/"))(environ, start_response)

    def answer(self, request: HttpRequest, route: str) -> HttpResponse:
        who = self.access.check(request.environ)  # before anything is told, even which paths exist
        request.environ[WHO] = who
        handler = self.routes.get((request.method, route))
        if handler is None:
            allowed = [method for method, path in self.routes if path == route]
            if allowed:
                raise Refusal(405, jsonrpc.INVALID_REQUEST, "Method Not Allowed", headers={"Allow": ", ".join(allowed)})
            known = ", ".join(sorted({f"{method} {PREFIX}{path}" for method, path in self.routes}))
            raise Refusal(404, jsonrpc.INVALID_REQUEST, f"Not Found: the management API has {known}")
        if request.method == "POST":
            log.info("management API: %s %s%s by %s", request.method, PREFIX, route, who)
        return handler(request)

    # -- reading --

    def list_servers(self, request: HttpRequest) -> HttpResponse:
        _status, health = self.servers.health()
        states = health.get("servers") or {}
        listed = []
        for name, server in self.servers.items():
            state = states.get(name) or {"status": health["status"]}
            era = era_probe.remembered(verdict_key(server.child_spec))
            listed.append(
                {
                    "name": name,
                    "status": state["status"],
                    "era": era.value if era is not None else None,
                    "sessions": len(server.sessions),
                    "children": server.live_children(),
                    "pins": server.pins.policy if server.pins is not None else "off",
                }
            )
        return ok({"status": health["status"], "servers": listed})

    def list_pins(self, request: HttpRequest) -> HttpResponse:
        wanted = parse_qs(request.environ.get("QUERY_STRING", "")).get("server")
        if wanted is not None and self.servers.get(wanted[0]) is None:
            raise self._unknown(wanted[0])
        listed: dict[str, Any] = {}
        for name, server in self.servers.items():
            if (wanted is None or name == wanted[0]) and server.pins is not None:
                listed[name] = {"policy": server.pins.policy, "pending": server.pins.pending()}
        return ok({"servers": listed})

    def vault(self, request: HttpRequest) -> HttpResponse:
        wanted = parse_qs(request.environ.get("QUERY_STRING", "")).get("principal")
        who = str(request.environ.get(WHO, "?"))
        principal = wanted[0] if wanted is not None else None
        return ok(vault.report(self.servers, principal, self.vault_principals, who))

    # -- deciding --

    def approve(self, request: HttpRequest) -> HttpResponse:
        return self._decide(request, approve=True)

    def reject(self, request: HttpRequest) -> HttpResponse:
        return self._decide(request, approve=False)

    def _decide(self, request: HttpRequest, approve: bool) -> HttpResponse:
        body = self._body(request)
        fields = {key: body.get(key) for key in ("server", "tool", "fingerprint")}
        missing = [key for key, value in fields.items() if not isinstance(value, str) or not value]
        if missing:
            raise bad_request(
                f"the body needs {', '.join(missing)} (strings): the pending change as GET /admin/pins shows it"
            )
        name, tool, fingerprint = (str(fields[key]) for key in ("server", "tool", "fingerprint"))
        server = self.servers.get(name)
        if server is None:
            raise self._unknown(name)
        if server.pins is None:
            raise Refusal(409, jsonrpc.INVALID_REQUEST, f"Conflict: server {name!r} pins no tool definitions")
        change = server.pins.decide(tool, fingerprint, approve)
        if change is None:
            raise Refusal(
                409,
                jsonrpc.INVALID_REQUEST,
                "Conflict: no pending change of that tool with that fingerprint (GET /admin/pins lists them)",
            )
        return ok(
            {
                "approved" if approve else "rejected": {
                    "server": server.name,
                    "tool": change.name,
                    "fingerprint": change.new,
                }
            }
        )

    def _body(self, request: HttpRequest) -> dict[str, Any]:
        media = (request.header("Content-Type") or "").split(";", 1)[0].strip().lower()
        if media != "application/json":
            raise Refusal(415, jsonrpc.INVALID_REQUEST, "Unsupported Media Type: send Content-Type: application/json")
        data = request.read_body(self.body_bytes)
        if data is None:
            raise Refusal(413, jsonrpc.INVALID_REQUEST, f"Payload Too Large: the body exceeds {self.body_bytes} bytes")
        try:
            body = json.loads(data)
        except (ValueError, RecursionError):
            raise bad_request("the body is not JSON") from None
        if not isinstance(body, dict):
            raise bad_request("the body must be a JSON object")
        return body

    # -- the servers --

    def reload(self, request: HttpRequest) -> HttpResponse:
        report = self.servers.reload()
        body = dataclasses.asdict(report)
        if report.error is not None:
            raise Refusal(
                409, jsonrpc.INVALID_PARAMS, "Conflict: MCPGATE_CONFIG was refused, nothing changed", data=body
            )
        return ok({"reloaded": body})

    def _unknown(self, name: str) -> Refusal:
        return Refusal(
            404, jsonrpc.INVALID_PARAMS, f"Not Found: no server {name[:64]!r}", data={"servers": self.servers.names()}
        )


def mount(app: WsgiApp, settings: Settings, runtime: Runtime, authenticator: Authenticator | None) -> WsgiApp:
    """`app` behind the management API when it is on (MCPGATE_ADMIN_TOKEN, or MCPGATE_ADMIN_SCOPE with an OAuth
    mode), else `app` itself."""
    oauth = settings.auth in (AuthMode.RESOURCE_SERVER, AuthMode.EMBEDDED) and authenticator is not None
    if settings.admin_scope and not oauth:
        log.warning("MCPGATE_ADMIN_SCOPE is set without an OAuth mode: no access token opens the management API")
    scope = settings.admin_scope if oauth else ""
    if not settings.admin_token and not scope:
        return app
    access = AdminAccess(settings.admin_token, scope, authenticator)
    return AdminApi(app, runtime.servers, access, settings.admin_body_bytes, settings.admin_vault_principals)
