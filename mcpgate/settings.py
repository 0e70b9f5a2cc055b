"""Every setting of mcpgate, declared once: name, type, default, environment variable or flag, doc, validator
(how a declaration works, and what is generated from it: mcpgate/declarations.py).

`Settings` holds the gateway's settings (`gunicorn mcpgate.wsgi`, environment variables), gunicorn's own
knobs included; `RelaySettings` holds `mcpgate-relay`'s (command-line flags, its token from the
environment). Both are frozen dataclasses, so every value reaches mypy as a typed field. The relay's
argument parser and both README tables are generated from these declarations
(`python -m mcpgate.settings`), and a test fails when the README and the declarations disagree.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import validators
from .declarations import MiB, declare, load, non_negative, positive
from .declarations import SettingsError as SettingsError  # the error every caller of the settings catches
from .declarations import add_arguments as add_arguments
from .declarations import declared as declared
from .declarations import markdown_table as table

BIND_DEFAULT = "127.0.0.1:8000"


# -- the gateway --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """The gateway's settings, from MCPGATE_* environment variables (and PORT)."""

    command: str = declare(
        "",
        "The stdio MCP server to run, split with POSIX shell-word rules and run without a "
        "shell. Empty: the bundled demo server.",
        validate=validators.command,
    )
    cwd: str = declare(
        "", "Working directory of the child; must exist. Empty: the gateway's own.", validate=validators.directory
    )
    child_env: dict[str, str] = declare(
        {},
        "Extra environment variables for the child, as a JSON object. Only "
        "HOME, LOGNAME, PATH, SHELL, TERM and USER are inherited otherwise.",
        validate=validators.env_object,
    )
    pass_env: tuple[str, ...] = declare(
        (),
        "Comma-separated names of the gateway's environment variables to pass "
        "to the child (for secrets the child needs).",
    )
    stderr: str = declare(
        "inherit",
        'Child stderr: "inherit" (logged line by line with the session id), '
        '"discard", or an absolute file path to append to.',
        validate=validators.stderr,
    )
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
    auth_token: str = declare(
        "",
        "When set, every request to the MCP endpoint must carry Authorization: Bearer "
        "<this token> (401 otherwise). Never logged, never passed to the child.",
        validate=validators.token,
        secret=True,
    )
    allow_unauthenticated: bool = declare(
        False,
        "true: serve beyond loopback without authentication (logged as a "
        "warning at every start). Otherwise a non-loopback bind needs "
        "MCPGATE_AUTH_TOKEN.",
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
    max_sessions: int = declare(
        100, "Most concurrent sessions (each is one child process); past it, 503.", validate=positive
    )
    session_idle_ttl: float = declare(
        1800.0, "Seconds a session may stay idle before its child is stopped.", validate=positive
    )
    modern_only: bool = declare(
        False,
        "Serve only MCP 2026-07-28 (stateless): initialize is refused naming the supported revisions, GET and "
        "DELETE get 405. Off: one endpoint serves both eras.",
    )
    cache_ttl_ms: int = declare(
        60000,
        "ttlMs put on the cacheable 2026-07-28 results (discover, the lists, resources/read) that carry none.",
        validate=non_negative,
    )
    probe_timeout: float = declare(
        3.0,
        "Seconds a pooled child has to answer server/discover before it is taken for a legacy (initialize) server.",
        validate=positive,
    )
    pool_children: int = declare(
        4, "Most pooled children per principal serving 2026-07-28 requests; past it, requests wait.", validate=positive
    )
    pool_child_requests: int = declare(
        16, "Requests in flight per pooled child before the pool starts another.", validate=positive
    )
    pool_spares: int = declare(
        1,
        "Free legacy pooled children kept started beside the one the next request takes: a call that may ask "
        "its client for input needs a child to itself, and a spare spares it a cold start. 0: only on demand.",
        validate=non_negative,
    )
    pool_idle_ttl: float = declare(
        300.0, "Seconds a pooled child may stay idle before it is stopped.", validate=positive
    )
    pool_wait: float = declare(
        30.0,
        "Seconds a 2026-07-28 request waits for a pooled child to take it; then 503.",
        validate=positive,
    )
    pool_restarts: int = declare(
        5,
        "Crashes of a principal's pooled children within a minute before the pool stops restarting them (503 "
        "naming the reason until the minute has passed).",
        validate=positive,
    )
    input_ttl: float = declare(
        120.0,
        "Seconds a bridged input request (elicitation, sampling, roots for a legacy child) waits for the "
        "client's retry; then the child's call is cancelled and its requestState expires.",
        validate=positive,
    )
    max_body_bytes: int = declare(8 * MiB, "Largest POST body accepted (413 past it).", validate=positive)
    max_message_bytes: int = declare(
        8 * MiB, "Largest message line a child may write; past it the session closes.", validate=positive
    )
    write_queue_bytes: int = declare(
        16 * MiB, "Most unwritten bytes queued for one child's stdin; past it the session closes.", validate=positive
    )
    buffer_messages: int = declare(
        1000, "Messages held per session for a client with no stream open (oldest dropped past it).", validate=positive
    )
    stream_queue: int = declare(
        1000,
        "Messages queued for one open HTTP stream before the gateway waits for the client to read.",
        validate=positive,
    )
    stream_queue_bytes: int = declare(
        16 * MiB,
        "Bytes queued for one HTTP stream before the gateway waits for the client to read (one message always fits).",
        validate=positive,
    )
    stream_stall_timeout: float = declare(
        30.0,
        "Seconds the gateway waits for a client to read a full stream; then that stream ends (the session "
        "and the worker go on).",
        validate=positive,
    )
    buffer_bytes: int = declare(
        16 * MiB,
        "Bytes held per session for a client with no stream open (oldest dropped past it).",
        validate=positive,
    )
    replay_events: int = declare(
        100, "Events each SSE stream keeps for a client that resumes it with Last-Event-ID.", validate=positive
    )
    replay_bytes: int = declare(
        1 * MiB,
        "Bytes each SSE stream keeps for resumption (its newest event is always kept).",
        validate=positive,
    )
    replay_streams: int = declare(
        8,
        "SSE streams per session kept resumable after their connection ended (oldest forgotten).",
        validate=positive,
    )
    sse_retry: float = declare(
        1.0,
        "Seconds a 2025-11-25 client is told to wait before reconnecting a dropped SSE stream (the retry "
        "field of the priming event).",
        validate=non_negative,
    )
    sse_after: float = declare(
        10.0,
        "Seconds a request may go unanswered before its reply switches to SSE with keepalives.",
        validate=non_negative,
    )
    keepalive: float = declare(15.0, "Seconds between SSE keepalive comments.", validate=positive)
    close_timeout: float = declare(
        2.0, "Seconds to wait after closing a child's stdin before SIGTERM.", validate=non_negative
    )
    term_timeout: float = declare(2.0, "Seconds to wait after SIGTERM before SIGKILL.", validate=non_negative)
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
        30.0, "Seconds a request body may go without a byte arriving; past it 400 and closed.", validate=positive
    )
    idle_connections: int = declare(
        500,
        "Most connections waiting for a request (idle keep-alive or headers not complete), at most half of "
        "MCPGATE_WORKER_CONNECTIONS; past it the longest-waiting one is closed, so such sockets never take "
        "the slots of requests and streams.",
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

    def problem(self) -> str | None:
        """A conflict between settings, or None."""
        if "*" in self.cors_origins and self.auth_token:
            return (
                "MCPGATE_CORS_ORIGINS may be * only when authentication is off: list the origins whose pages "
                "may call the gateway"
            )
        if self.port and self.bind:
            return (
                "PORT and MCPGATE_BIND are both set: PORT (set by platforms such as Heroku) binds "
                "0.0.0.0:$PORT; unset one of them"
            )
        return None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        return load(cls, environ, **overrides)

    @property
    def addresses(self) -> list[str]:
        """Where gunicorn listens."""
        if self.port:
            return [f"0.0.0.0:{self.port}"]
        return [self.bind or BIND_DEFAULT]


# -- the relay ----------------------------------------------------------------------------------------------

TOKEN_ENV = "MCPGATE_BEARER_TOKEN"


@dataclass(frozen=True)
class RelaySettings:
    """`mcpgate-relay`'s settings: command-line flags, and the bearer token from the environment."""

    url: str = declare(
        "",
        "The remote MCP endpoint, for example https://mcp.example.com/mcp (Streamable HTTP) or "
        "https://host/sse (HTTP+SSE).",
        env=None,
        flag="url",
        metavar="URL",
        validate=validators.url,
        shown_default="(required)",
    )
    header: tuple[tuple[str, str], ...] = declare(
        (),
        "An extra HTTP header sent with every request; repeatable.",
        env=None,
        flag="--header",
        short="-H",
        item=validators.header,
        metavar="'NAME: VALUE'",
    )
    transport: str = declare(
        "auto",
        "auto: Streamable HTTP, falling back to HTTP+SSE when the server refuses the "
        "initialize POST with 400/404/405; streamable-http or sse: only that one.",
        env=None,
        flag="--transport",
        choices=("auto", "streamable-http", "sse"),
    )
    protocol_era: str = declare(
        "auto",
        "Which MCP era the upstream is spoken to in. auto: each host the way it speaks (2025 initialize or "
        "2026-07-28 per-request metadata), bridged only when the upstream does not speak that era; legacy: "
        "2025 sessions; modern: 2026-07-28. The other era's host goes through a bridge.",
        env=None,
        flag="--protocol-era",
        choices=("auto", "legacy", "modern"),
    )
    connect_timeout: float = declare(
        10.0,
        "Limit for opening a connection, in seconds.",
        env=None,
        flag="--connect-timeout",
        metavar="SECONDS",
        validate=positive,
    )
    read_timeout: float = declare(
        300.0,
        "Longest silence tolerated while waiting for reply bytes, in seconds; the "
        "GET stream simply reconnects after it.",
        env=None,
        flag="--read-timeout",
        metavar="SECONDS",
        validate=positive,
    )
    log_level: str = declare(
        "warning", "stderr log verbosity.", env=None, flag="--log-level", choices=("debug", "info", "warning", "error")
    )
    no_cancel_filter: bool = declare(
        False,
        "On notifications/cancelled, only forward it: keep the request's reply "
        "open and pass a late reply to the host (default: close the reply and drop "
        "late replies for 60 s).",
        env=None,
        flag="--no-cancel-filter",
    )
    max_message_bytes: int = declare(
        16 * MiB,
        "Largest message accepted from the host or the upstream; a larger one is answered with a JSON-RPC error.",
        env=None,
        flag="--max-message-bytes",
        metavar="BYTES",
        validate=positive,
    )
    max_inflight: int = declare(
        64,
        "Requests relayed at the same time; more wait in a queue (see --max-queued), never refused.",
        env=None,
        flag="--max-inflight",
        metavar="N",
        validate=positive,
    )
    max_queued: int = declare(
        256,
        "Requests waiting for one of the --max-inflight places; while the queue is full, stdin is not read.",
        env=None,
        flag="--max-queued",
        metavar="N",
        validate=positive,
    )
    cancel_grace: float = declare(
        5.0,
        "After the host cancels a request on a 2025 Streamable HTTP upstream, how long its reply stream is "
        "still read for the other messages it carries (its response and progress are dropped), in seconds; "
        "0 closes it at once.",
        env=None,
        flag="--cancel-grace",
        metavar="SECONDS",
        validate=non_negative,
    )
    shutdown_grace: float = declare(
        3.0,
        "On stdin EOF or SIGINT/SIGTERM, how long in-flight replies may still arrive, in seconds.",
        env=None,
        flag="--shutdown-grace",
        metavar="SECONDS",
        validate=positive,
    )
    bearer_token: str = declare(
        "",
        "Sent as Authorization: Bearer <token> (preferred over -H: command lines show in ps). Never logged.",
        env=TOKEN_ENV,
        validate=validators.token,
        secret=True,
    )

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> RelaySettings:
        """Settings from parsed flags (see add_arguments) and the environment."""
        given = {s.name: getattr(args, s.name) for s in declared(cls) if s.flag}
        given["header"] = tuple(given.get("header") or ())
        return load(cls, environ, **given)


def markdown_table() -> str:
    """The README's table of the gateway's settings."""
    return table(Settings, "Variable")


def relay_markdown_table() -> str:
    """The README's table of the relay's options."""
    return table(RelaySettings, "Option")


if __name__ == "__main__":
    print(markdown_table())
    print()
    print(relay_markdown_table())
