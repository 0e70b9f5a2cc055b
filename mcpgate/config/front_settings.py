"""The settings of the HTTP front (mcpgate.serve.front) and of gunicorn, which serves it: the endpoints' paths,
who may reach them (Host, Origin, CORS, proxies, serving beyond loopback), the bounds of a connection and its
request body, metrics, the log level, and gunicorn's own knobs (read by mcpgate/gunicorn_config.py).

Declarations only (how one works: mcpgate.config.declarations). mcpgate.config.settings assembles `Settings`
from this area and the others, and every reader takes the values from there; the fields' order here is their
order in the README's settings table.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpgate.config import validators
from mcpgate.config.declarations import MiB, declare, positive

BIND_DEFAULT = "127.0.0.1:8000"


@dataclass(frozen=True, init=False, repr=False, eq=False)
class FrontSettings:
    """The HTTP front: its paths, its exposure, its connections and gunicorn's knobs."""

    path: str = declare("/mcp", "The Streamable HTTP endpoint path.", validate=validators.path)
    sse_path: str = declare(
        "/sse",
        "The 2024-11-05 HTTP+SSE transport: the path a client GETs to open its session's stream.",
        validate=validators.path,
    )
    messages_path: str = declare(
        "/messages",
        "The 2024-11-05 HTTP+SSE transport: the path its clients POST messages to (?session_id=...).",
        validate=validators.path,
    )
    allow_unauthenticated: bool = declare(
        False,
        "true: serve beyond loopback without authentication (logged as a "
        "warning at every start). Otherwise a non-loopback bind needs "
        "MCPGATE_AUTH_TOKEN.",
    )
    public_front: bool = declare(
        False,
        "true: a balancer or proxy on this machine serves this instance beyond loopback (deploy/Procfile.fleet "
        "sets it). The start then needs authentication as a public bind does (or MCPGATE_ALLOW_UNAUTHENTICATED), "
        "and a request the proxy passed on (it carries X-Forwarded-For or Forwarded) may not use a loopback Host "
        "name: the proxy's loopback address says nothing about where its client is.",
    )
    allowed_hosts: tuple[str, ...] = declare(
        (),
        "Comma-separated Host values accepted besides loopback names (for "
        "example myapp.herokuapp.com); * accepts any Host.",
    )
    allowed_origins: tuple[str, ...] = declare(
        (),
        "Comma-separated Origin values accepted besides loopback "
        "origins (for example https://claude.ai); * accepts any Origin.",
    )
    cors_origins: tuple[str, ...] = declare(
        (),
        "Comma-separated origins whose browser pages may call the endpoint (CORS; for example "
        "https://app.example.com). Empty: CORS off. * only when MCPGATE_AUTH_TOKEN is unset.",
    )
    trusted_peers: tuple[str, ...] = declare(
        ("127.0.0.0/8", "::1"),
        "Comma-separated peer addresses or networks "
        "allowed to use a loopback Host name (localhost, 127.0.0.1, [::1]): "
        "loopback, plus a reverse proxy on another machine if you run one.",
        validate=validators.networks,
        shown_default="127.0.0.0/8,::1",
    )
    forwarded_for_proxies: tuple[str, ...] = declare(
        (),
        "Comma-separated addresses or networks your reverse proxies or platform router connect from (for "
        "example 10.0.0.0/8): from these peers X-Forwarded-For names the client, whose address the sign-in "
        "limit counts (the rightmost entry not in these networks). Empty: X-Forwarded-For is ignored.",
        validate=validators.networks,
    )
    max_body_bytes: int = declare(
        8 * MiB, "Largest request body of the MCP endpoints (413 and closed past it).", validate=positive
    )
    max_form_bytes: int = declare(
        64 * 1024,
        "Largest request body of every other path: OAuth registration, token and revocation, the sign-in pages "
        "(413 and closed past it, chunked bodies included).",
        validate=positive,
    )
    metrics: bool = declare(False, "true: serve Prometheus metrics at /metrics.")
    tracing: bool = declare(
        False,
        "true: OpenTelemetry traces of the MCP requests, sent by OTLP/HTTP as the standard OTEL_* variables say "
        "(OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER...); needs the otel extra.",
    )
    metrics_token: str = declare(
        "",
        "When set, /metrics needs Authorization: Bearer <this token>. Never logged.",
        validate=validators.token,
        secret=True,
    )
    log_level: str = declare(
        "INFO", "Log level: DEBUG logs each message's direction, session, method and id.", validate=validators.log_level
    )
    # gunicorn's own knobs (read by mcpgate/gunicorn_config.py)
    bind: str = declare(
        "",
        "gunicorn: the address to listen on, HOST:PORT or unix:PATH. Not together with PORT.",
        validate=validators.bind,
        shown_default=BIND_DEFAULT,
    )
    port: int = declare(
        0,
        "gunicorn: when set (as Heroku-style platforms do), listen on 0.0.0.0:PORT.",
        env="PORT",
        validate=validators.port,
        shown_default="(unset)",
    )
    worker_connections: int = declare(
        2000, "gunicorn: most open client connections (each open SSE stream holds one).", validate=positive
    )
    keepalive_timeout: float = declare(
        5.0, "Seconds an idle keep-alive connection stays open after a reply before it is closed.", validate=positive
    )
    header_timeout: float = declare(
        10.0,
        "Seconds a connection has to send a whole request line and header block (from its start, or the next "
        "request's first byte); past it the connection is closed.",
        validate=positive,
    )
    body_timeout: float = declare(
        30.0,
        "Seconds a request body may go without a byte arriving, and its time before MCPGATE_BODY_MIN_RATE "
        "counts; past either, 400 and closed.",
        validate=positive,
    )
    body_min_rate: int = declare(
        1024,
        "Bytes a second a request body must average: it has MCPGATE_BODY_TIMEOUT seconds plus one more per "
        "this many bytes received to arrive whole.",
        validate=positive,
    )
    idle_connections: int = declare(
        500,
        "Most connections waiting for a request (idle keep-alive, headers not complete, or a body still "
        "arriving), at most half of MCPGATE_WORKER_CONNECTIONS; past it the longest-waiting one is closed, so "
        "such sockets never take the slots of requests and streams.",
        validate=positive,
    )
    graceful_timeout: int = declare(
        15, "gunicorn: seconds a graceful shutdown waits for replies and children.", validate=positive
    )
    access_log: str = declare(
        "",
        'gunicorn: access log, "-" for stderr or an absolute file path. Empty: none.',
        validate=validators.access_log,
    )

    @property
    def addresses(self) -> list[str]:
        """Where gunicorn listens."""
        if self.port:
            return [f"0.0.0.0:{self.port}"]
        return [self.bind or BIND_DEFAULT]
