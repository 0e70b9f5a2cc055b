"""The settings of `mcpgate-relay` (mcpgate.relay): its command-line flags, and its bearer token and OAuth client
credentials from the environment (TOKEN_ENV and the env= of each). The relay's argument parser and its README
table are generated from these declarations (mcpgate.config.declarations: add_arguments, markdown_table).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass

from mcpgate.config import validators
from mcpgate.config.declarations import MiB, declare, declared, load, non_negative, positive

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
    oauth: bool = declare(
        False,
        "Sign in with OAuth before the first request (otherwise only when the server answers 401 naming "
        "its resource metadata).",
        env=None,
        flag="--oauth",
    )
    oauth_device: bool = declare(
        False,
        "Sign in with the device authorization grant (RFC 8628): a code printed on stderr, no local browser.",
        env=None,
        flag="--oauth-device",
    )
    oauth_client_id: str = declare(
        "",
        "A client id registered with the server's authorization server (skips registration).",
        env="MCPGATE_OAUTH_CLIENT_ID",
        flag="--oauth-client-id",
        metavar="ID",
    )
    oauth_client_secret: str = declare(
        "",
        "The registered client's secret (a confidential client; with --oauth-client-credentials, for machine "
        "use). Never logged.",
        env="MCPGATE_OAUTH_CLIENT_SECRET",
        secret=True,
    )
    oauth_client_key: str = declare(
        "",
        "A private key (PEM or JWK, or the path of a file holding one) the client authenticates with instead "
        "of a secret (private_key_jwt, RFC 7523), with --oauth-client-credentials. Never logged.",
        env="MCPGATE_OAUTH_CLIENT_KEY",
        secret=True,
    )
    oauth_client_credentials: bool = declare(
        False,
        "Use the client credentials grant (no user, no browser): needs --oauth-client-id and "
        "MCPGATE_OAUTH_CLIENT_SECRET.",
        env=None,
        flag="--oauth-client-credentials",
    )
    oauth_client_metadata_url: str = declare(
        "",
        "An https URL of a Client ID Metadata Document describing this relay, used as its client id where the "
        "authorization server accepts them.",
        env=None,
        flag="--oauth-client-metadata-url",
        metavar="URL",
        validate=validators.optional_url,
    )
    oauth_scope: str = declare(
        "",
        "Scopes to ask for (space-separated). Empty: the server's challenge, else its advertised scopes.",
        env=None,
        flag="--oauth-scope",
        metavar="SCOPES",
    )
    oauth_timeout: float = declare(
        300.0,
        "How long to wait for the browser sign-in to finish, in seconds.",
        env=None,
        flag="--oauth-timeout",
        metavar="SECONDS",
        validate=positive,
    )
    config_dir: str = declare(
        "",
        "Where signed-in tokens and registrations are kept (files of mode 0600). Empty: "
        "$XDG_CONFIG_HOME/mcpgate, else ~/.config/mcpgate.",
        env=None,
        flag="--config-dir",
        metavar="DIR",
    )
    logout: bool = declare(
        False, "Forget the tokens and registration held for URL, then exit.", env=None, flag="--logout"
    )
    auth_status: bool = declare(
        False, "Print what is held for URL (never the tokens), then exit.", env=None, flag="--auth-status"
    )
    bearer_token: str = declare(
        "",
        "Sent as Authorization: Bearer <token> (preferred over -H: command lines show in ps). Never logged.",
        env=TOKEN_ENV,
        validate=validators.token,
        secret=True,
    )
    tracing: bool = declare(
        False,
        "true: a span per host request, its context sent upstream in the traceparent header; OTLP/HTTP as the "
        "OTEL_* variables say (needs the otel extra).",
        env="MCPGATE_TRACING",
    )

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> RelaySettings:
        """Settings from parsed flags (see add_arguments) and the environment."""
        given = {s.name: getattr(args, s.name) for s in declared(cls) if s.flag}
        given = {name: value for name, value in given.items() if value is not None}  # unset: env, then default
        given["header"] = tuple(given.get("header") or ())
        return load(cls, environ, **given)
