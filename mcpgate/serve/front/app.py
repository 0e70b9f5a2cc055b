"""The application factory: a Flask app whose MCP endpoint is served by a thin WSGI handler, and the worker's
Runtime (serve/runtime.py: the settings, the servers, the cluster) attached to it. Flask only when a configured
feature adds routes (an OAuth mode, metrics); else a BareApp (serve/front/bare.py), and Flask is not imported.

Nothing is spawned until a client initializes.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from mcpgate import fast_json
from mcpgate.config.modes import AuthMode
from mcpgate.config.settings import Settings
from mcpgate.core import jsonrpc
from mcpgate.observe import audit, logs, refusals, tracing
from mcpgate.serve.front import auth, checks
from mcpgate.serve.front.bare import BareApp, Health, Missing
from mcpgate.serve.front.context import CONTEXT, RequestContext, context
from mcpgate.serve.front.cors import Cors
from mcpgate.serve.front.http import HttpRequest, HttpResponse, Refusal, StartResponse, buffer_body
from mcpgate.serve.kinds import RouteKind
from mcpgate.serve.oauth.setup import Authenticator, authenticator
from mcpgate.serve.runtime import Runtime
from mcpgate.serve.servers.published import LISTING, PublishedServers
from mcpgate.serve.servers.server import PublishedServer
from mcpgate.serve.sessions import legacy_sse, streamable

if TYPE_CHECKING:  # Flask is imported only when a feature adds routes (`with_routes`), the fleet with REDIS_URL
    from flask import Flask, Response
    from werkzeug.exceptions import HTTPException

    from mcpgate.serve.cluster.instances import Cluster

log = logging.getLogger("mcpgate.app")

Handler = Callable[[PublishedServer, HttpRequest], HttpResponse]
HANDLERS: dict[RouteKind, Handler] = {
    RouteKind.MCP: streamable.handle,
    RouteKind.SSE: legacy_sse.open_stream,
    RouteKind.MESSAGES: legacy_sse.post_message,
}
# A POST to a Streamable HTTP endpoint (nearly every request) goes straight to streamable.handle's POST case:
# the member read once (an Enum member read off its class costs ~950 instructions), handle's frame spared
_MCP = RouteKind.MCP


def configure_logging(level: str, form: str = "plain") -> None:
    """One line per event on stderr (MCPGATE_LOG_FORMAT: text, or one JSON object: mcpgate/observe/logs.py)."""
    root = logging.getLogger("mcpgate")
    root.setLevel(level.upper())
    logs.configure(form)
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logs.formatter(form))
        root.addHandler(handler)
        root.propagate = False


PASSED = 256  # (Host, peer, Origin) the guard remembers as passed


class Guard:
    """The checks in front of every path: Host and Origin (DNS rebinding), then, on the MCP endpoints, the
    authenticator of the mode in force, which names the request's principal. Each refusal is raised as a
    Refusal; decisions are cached, bounded."""

    def __init__(
        self, settings: Settings, authenticator: Authenticator | None = None, cluster: Cluster | None = None
    ) -> None:
        self.authenticator = authenticator
        self.cluster = cluster  # in a fleet: a request another instance forwarded carries its principal, signed
        public = urlsplit(settings.public_url) if settings.public_url else None
        # the public URL's own Host and Origin need no further setting (its sign-in pages post to themselves)
        own_host = (public.netloc,) if public else ()
        own_origin = (f"{public.scheme}://{public.netloc}",) if public else ()
        self.host_kind = functools.lru_cache(maxsize=256)(
            functools.partial(auth.host_kind, allowed=(*settings.allowed_hosts, *own_host))
        )
        self.origin_allowed = functools.lru_cache(maxsize=256)(
            # an origin listed for CORS is allowed by the Origin check too
            functools.partial(
                auth.origin_allowed, allowed=(*settings.allowed_origins, *settings.cors_origins, *own_origin)
            )
        )
        self.peer_trusted = functools.lru_cache(maxsize=256)(
            functools.partial(auth.peer_trusted, trusted=auth.networks(settings.trusted_peers))
        )
        # the pages that may call the endpoints from another site (Sec-Fetch-Site: cross-site)
        listed = (*settings.allowed_origins, *settings.cors_origins, *own_origin)
        self.cross_site_origins = frozenset(checks.normalized_origin(origin) for origin in listed)
        self.public_front = settings.public_front  # a proxy's loopback connection carries remote clients
        # (Host, peer, Origin) that passed the Host and Origin checks, which read nothing else of the request: a
        # client sends the same three each time. Bounded (first come); a loopback Host through the public front
        # is never kept (that check reads the forwarding headers too).
        self.passed: set[tuple[Any, Any, Any]] = set()

    def check(self, environ: dict[str, Any], endpoint: bool, target: Settings | None = None) -> None:
        """`target`: the settings of the server the request is for (None: GET /servers, or an unknown name)."""
        if (environ.get("HTTP_HOST"), environ.get("REMOTE_ADDR"), environ.get("HTTP_ORIGIN")) not in self.passed:
            self.check_host_and_origin(environ)
        if endpoint and "HTTP_SEC_FETCH_SITE" in environ:  # only a browser's request says where it comes from
            self.check_cross_site(environ)
        if endpoint and self.cluster is not None and "HTTP_MCPGATE_FORWARDED" in environ:
            found = context(environ)
            found.principal = self.cluster.forwarded_principal(environ, found)  # instead of the token (403)
        elif endpoint and self.authenticator is not None:
            context(environ).principal = self.authenticator.authenticate(environ, target)

    def check_host_and_origin(self, environ: dict[str, Any]) -> None:
        """The Host (DNS rebinding, loopback names from trusted peers only) and the Origin; one that passed is
        remembered (`passed`)."""
        host = environ.get("HTTP_HOST")
        kind = self.host_kind(host)
        if kind is auth.HostKind.INVALID:  # RFC 9112 3.2 (the worker refuses it first; this for any server)
            raise Refusal(
                400, jsonrpc.INVALID_REQUEST, "Bad Request: invalid Host", headers={"Connection": "close"}, kind="host"
            )
        if kind is auth.HostKind.REFUSED:
            log.warning("refused Host %r (allow it with MCPGATE_ALLOWED_HOSTS)", host)
            raise Refusal(
                421,
                jsonrpc.INVALID_REQUEST,
                "Misdirected Request: this Host is not allowed (MCPGATE_ALLOWED_HOSTS)",
                kind=refusals.HOST,
            )
        if kind is auth.HostKind.LOOPBACK and not self.peer_trusted(environ.get("REMOTE_ADDR")):
            log.warning(
                "refused loopback Host %r from peer %s (a proxy there? MCPGATE_TRUSTED_PEERS)",
                host,
                environ.get("REMOTE_ADDR"),
            )
            raise Refusal(
                421,
                jsonrpc.INVALID_REQUEST,
                "Misdirected Request: a loopback Host name from a non-loopback peer",
                kind=refusals.HOST,
            )
        if kind is auth.HostKind.LOOPBACK and self.public_front and auth.passed_on(environ):
            log.warning("refused loopback Host %r passed on by the public front (MCPGATE_ALLOWED_HOSTS)", host)
            raise Refusal(
                421,
                jsonrpc.INVALID_REQUEST,
                "Misdirected Request: a loopback Host name through the public front (MCPGATE_ALLOWED_HOSTS)",
                kind=refusals.HOST,
            )
        origin = environ.get("HTTP_ORIGIN")
        if not self.origin_allowed(origin):
            log.warning("refused Origin %r (allow it with MCPGATE_ALLOWED_ORIGINS)", origin)
            raise Refusal(
                403,
                jsonrpc.INVALID_REQUEST,
                "Forbidden: this Origin is not allowed (MCPGATE_ALLOWED_ORIGINS)",
                kind=refusals.ORIGIN,
            )
        if len(self.passed) < PASSED and not (kind is auth.HostKind.LOOPBACK and self.public_front):
            self.passed.add((host, environ.get("REMOTE_ADDR"), origin))

    def check_cross_site(self, environ: dict[str, Any]) -> None:
        try:
            checks.require_not_cross_site(
                environ.get("HTTP_SEC_FETCH_SITE"), environ.get("HTTP_ORIGIN"), self.cross_site_origins
            )
        except Refusal as refusal:
            log.warning("refused a cross-site browser request to %s (Sec-Fetch-Site)", environ.get("PATH_INFO"))
            refusal.kind = refusals.ORIGIN
            raise

    def may_know(self, environ: dict[str, Any]) -> bool:
        """Whether the caller may be told what is served (server names, sessions, children): anyone when the
        endpoints are open, else who could list the servers (GET /servers' credentials)."""
        if self.authenticator is None:
            return True
        try:
            self.authenticator.authenticate(environ, None)
        except Refusal:
            return False
        return True


class Endpoint:
    """WSGI middleware: the guard in front of every path; each server's MCP paths (the published servers route them) to
    its server's handler, GET /servers to the listing, the rest to Flask. A Refusal raised anywhere below
    becomes its HTTP error here, once; CORS headers are added here."""

    def __init__(
        self, app: Callable[..., Iterable[bytes]], servers: PublishedServers, guard: Guard, cors: Cors
    ) -> None:
        self.app, self.servers, self.guard, self.cors = app, servers, guard, cors
        self.cluster = guard.cluster
        self.cors_on = cors.enabled  # its origins are set once
        self.page_body_limit = servers.settings.max_form_bytes  # the pages' bodies (the endpoints have their own)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        route = self.servers.route(path)
        server = self.servers.get(route[0]) if route is not None else None
        listing = route is None and path in LISTING
        endpoint = route is not None or listing  # an unknown server's name is told only to who may know it
        trace = None  # tracing off: one check, and none of a trace's
        if tracing.TRACER is not None and route is not None:
            trace = environ[tracing.KEY] = [tracing.now(), route[0]]  # tracing.begin's: the request's list
        if self.cors_on:
            start_response = self._with_cors(environ, start_response)
        try:
            if self.cors_on and self._preflight(environ):
                self.guard.check(environ, endpoint=False)  # Host and Origin; a browser sends no token here
                origin = environ["HTTP_ORIGIN"]
                response = HttpResponse(
                    204,
                    headers=dict(
                        self.cors.preflight_headers(origin, environ.get("HTTP_ACCESS_CONTROL_REQUEST_HEADERS"))
                    ),
                )
            else:
                target = server.settings if server is not None else None
                if trace is not None:  # tracing off: no span, not even an empty one
                    try:  # the guard's step starts with the request's span (one clock read for both)
                        self.guard.check(environ, endpoint, target)
                    finally:  # its end, appended here (no call): the list's third item (tracing.steps_of)
                        trace.append(tracing.now())
                else:
                    self.guard.check(environ, endpoint, target)
                if route is not None:
                    response = self._serve(environ, route, server)
                elif listing:
                    response = self.servers.listing(HttpRequest(environ))
                else:
                    buffer_body(environ, self.page_body_limit)  # a bounded body, chunked or not (413)
                    return self.app(environ, start_response)
        except Refusal as refusal:
            if refusal.kind is not None:  # a defence's: counted here, once (/metrics' mcpgate_refusals)
                refusals.count(refusal.kind)
            if audit.LOG is not None:  # its audit line: the kind, never a token (mcpgate/observe/audit.py)
                audit.LOG.refused(environ, refusal.status, refusal.code, refusal.kind, context(environ))
            response = refusal.response()
        if trace is not None:  # the request's spans end with its response
            return tracing.finish(environ, response.status, response.body, response(environ, start_response))
        return response(environ, start_response)

    def _serve(
        self, environ: dict[str, Any], route: tuple[str, RouteKind], server: PublishedServer | None
    ) -> HttpResponse:
        name, kind = route
        if server is None:
            raise self.servers.unknown(name, environ)
        if server.views is not None and not server.views.sees(name, environ):  # forwarded: the view it signed
            raise self.servers.unknown(name, environ)  # not there for this caller
        noted = environ.get(CONTEXT)  # context(environ)'s, its call only to make one
        if type(noted) is not RequestContext:
            noted = context(environ)
        noted.server = name
        if self.cluster is not None:  # here, or forwarded to the instance owning the session it names
            if server.views is None and noted.view:  # a forwarder's view, and no views here
                from mcpgate.serve.servers import views_file

                raise views_file.mismatch(str(noted.view), "")
            return self.cluster.serve(environ, kind, functools.partial(HANDLERS[kind], server), noted)
        request = HttpRequest(environ)
        if kind is _MCP and request.method == "POST":
            return streamable.handle_post(server, request)
        return HANDLERS[kind](server, request)

    def _preflight(self, environ: dict[str, Any]) -> bool:
        return self.cors_on and self.cors.is_preflight(
            environ["REQUEST_METHOD"], environ.get("HTTP_ORIGIN"), environ.get("HTTP_ACCESS_CONTROL_REQUEST_METHOD")
        )

    def _with_cors(self, environ: dict[str, Any], start_response: StartResponse) -> StartResponse:
        """start_response adding the CORS headers of a real response to a listed origin (none otherwise)."""
        if self._preflight(environ):
            return start_response
        extra = self.cors.response_headers(environ.get("HTTP_ORIGIN"))
        if not extra:
            return start_response

        def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            return start_response(status, headers + extra, exc_info)

        return start


def where(servers: PublishedServers, guard: Guard, environ: dict[str, Any]) -> str:
    """What a 404 adds after "Not Found": where the MCP endpoints are, the named servers' path shape (their names
    from GET /servers, behind its authentication), MCPGATE_PATH to a caller who may know what is served."""
    if servers.named:
        from mcpgate.serve.servers import config_file

        return f": the MCP endpoints here are {config_file.paths('<name>')[0]} (GET {config_file.PREFIX} lists them)"
    if guard.may_know(environ):
        return f": the MCP endpoint here is {servers.settings.path}"
    return ""


def not_here(missing: Missing) -> Callable[[HTTPException], Response]:
    """Flask's 404 and 405 as JSON-RPC errors (a client, or a relay passing the body to its host, may land on any
    path); a 404 says where the MCP endpoints are (`missing`)."""
    from flask import Response, request

    def answer(error: HTTPException) -> Response:
        extra = missing(request.environ) if error.code == 404 else ""
        body = jsonrpc.error_response(None, jsonrpc.INVALID_REQUEST, f"{error.name}{extra}")
        response = Response(jsonrpc.encode(body), status=error.code or 404, mimetype="application/json")
        allowed = getattr(error, "valid_methods", None)
        if allowed:
            response.headers["Allow"] = ", ".join(allowed)
        return response

    return answer


def with_routes(settings: Settings) -> bool:
    """Whether a configured feature adds routes to the app, so that it must be a Flask app: metrics, an OAuth mode."""
    return settings.metrics or settings.auth in (AuthMode.RESOURCE_SERVER, AuthMode.EMBEDDED)


def flask_app(health: Health, missing: Missing) -> Flask:
    """The Flask app: /healthz, and the 404 and 405 as JSON-RPC errors."""
    from flask import Flask, Response, request

    app = Flask("mcpgate")

    @app.get("/healthz")
    def healthz() -> Response:
        status, body = health(request.environ)
        return Response(jsonrpc.encode(body), status=status, mimetype="application/json")

    app.register_error_handler(404, not_here(missing))
    app.register_error_handler(405, not_here(missing))
    return app


def create_app(settings: Settings | None = None, listening: Sequence[str] | None = None) -> Flask | BareApp:
    """The app, its Runtime attached (`listening`: the worker's addresses; None: those it loads the app within)."""
    settings = settings or Settings.from_env()
    configure_logging(settings.log_level, settings.log_format)
    fast_json.install()
    tracing.setup(settings.tracing, "mcpgate")
    runtime = Runtime.build(settings, listening)  # the cluster (None without REDIS_URL), then the servers
    servers = runtime.servers

    def health(environ: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        status, body = servers.health()  # the details are in the log (preflight), not for every caller
        if runtime.draining:  # a graceful stop: balancers send new sessions elsewhere
            status, body = 503, {**body, "status": "draining"}
        if not guard.may_know(environ):  # a balancer needs the status; names and counts are not its
            body = {"status": body["status"]}
        elif servers.views is not None:  # the servers the caller's view shows (serve/servers/published.py)
            body = servers.seen_health(body, environ)
        return status, body

    def missing(environ: dict[str, Any]) -> str:
        return where(servers, guard, environ)

    app = flask_app(health, missing) if with_routes(settings) else BareApp(health, missing)
    runtime.attach(app)
    instance = runtime.cluster.instance if runtime.cluster is not None else settings.instance_id or None
    audit.configure(settings.audit_log, settings.audit_queue, settings.audit_arguments, instance)
    # a BareApp only without an OAuth mode, whose authenticator (none, or the static token) registers no route
    guard = Guard(settings, authenticator(settings, cast("Flask", app), runtime), runtime.cluster)
    if settings.auth.oauth and servers.vault is not None:  # the per-user credentials' pages (serve/vault)
        from mcpgate.serve.vault import page, upstream_page

        who = page.install_for(cast("Flask", app), runtime, guard.authenticator)
        upstream_page.install_for(cast("Flask", app), runtime, who)  # per-user OAuth to remote upstreams (user_oauth)
    servers.watch()
    cors = Cors(settings.cors_origins)
    if settings.admin_token or settings.admin_scope:  # the management API (serve/admin): not imported when off
        from mcpgate.serve.admin import api as admin

        app.wsgi_app = admin.mount(app.wsgi_app, settings, runtime, guard.authenticator)  # type: ignore[method-assign]
    app.wsgi_app = Endpoint(app.wsgi_app, servers, guard, cors)  # type: ignore[method-assign]
    if settings.metrics and not isinstance(app, BareApp):  # off: no /metrics route and no wrapper on any request
        from mcpgate.serve import metrics, request_figures

        installed = metrics.install(app, settings.metrics_token, servers.items)
        observed = request_figures.Observed(app.wsgi_app, installed.figures)
        app.wsgi_app = observed  # type: ignore[method-assign]
    return app
