"""Every setting of mcpgate, declared once: name, type, default, environment variable or flag, doc, validator
(how a declaration works, and what is generated from it: mcpgate/config/declarations.py).

`Settings` holds the gateway's settings (`gunicorn mcpgate.wsgi`, environment variables), gunicorn's own
knobs included; `RelaySettings` holds `mcpgate-relay`'s (command-line flags, its token from the
environment). Both are frozen dataclasses, so every value reaches mypy as a typed field. The relay's
argument parser and both README tables are generated from these declarations
(`python -m mcpgate.config.settings`), and a test fails when the README and the declarations disagree.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mcpgate.config import validators
from mcpgate.config.declarations import MiB, declare, load, non_negative, positive, unknown_variables
from mcpgate.config.declarations import SettingsError as SettingsError  # the error every caller of the settings catches
from mcpgate.config.declarations import add_arguments as add_arguments
from mcpgate.config.declarations import declared as declared
from mcpgate.config.declarations import markdown_table as table

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
    public_front: bool = declare(
        False,
        "true: a balancer or proxy on this machine serves this instance beyond loopback (deploy/Procfile.fleet "
        "sets it). The start then needs authentication as a public bind does (or MCPGATE_ALLOW_UNAUTHENTICATED), "
        "and a request the proxy passed on (it carries X-Forwarded-For or Forwarded) may not use a loopback Host "
        "name: the proxy's loopback address says nothing about where its client is.",
    )
    auth_mode: str = declare(
        "",
        "Who may use the MCP endpoint: none; token (MCPGATE_AUTH_TOKEN); resource-server (OAuth access "
        "tokens of MCPGATE_OAUTH_ISSUER); embedded (the gateway's own OAuth authorization server, signing in "
        "MCPGATE_OAUTH_USERS or through MCPGATE_OAUTH_UPSTREAM). Empty: token when MCPGATE_AUTH_TOKEN is set, "
        "embedded when users or an upstream are, resource-server when an issuer is, else none.",
        validate=validators.auth_mode,
        shown_default="(from the others)",
    )
    public_url: str = declare(
        "",
        "The gateway's public base URL as clients reach it (for example https://myapp.herokuapp.com); the "
        "OAuth resource is this plus MCPGATE_PATH (named servers: plus /servers/<name>/mcp). Required by the "
        "two OAuth modes.",
        validate=validators.optional_url,
    )
    oauth_scopes: tuple[str, ...] = declare(
        ("mcp",),
        "OAuth modes: comma-separated scopes an access token must carry to use the endpoint (403 "
        "insufficient_scope otherwise); the embedded server offers them. Empty: none required.",
        shown_default="mcp",
    )
    oauth_issuer: str = declare(
        "",
        "resource-server mode: the authorization server whose access tokens are accepted (their iss); its "
        "metadata gives the JWKS unless MCPGATE_OAUTH_JWKS_URL is set.",
        validate=validators.optional_url,
    )
    oauth_jwks_url: str = declare(
        "", "resource-server mode: the issuer's JWKS URL (empty: from its metadata).", validate=validators.optional_url
    )
    oauth_audience: str = declare(
        "",
        "resource-server mode: the aud a token must name, for every server. Empty: the resource URL of the "
        "server asked (MCPGATE_PUBLIC_URL plus its path); tokens for any other audience are refused.",
    )
    oauth_introspection_url: str = declare(
        "",
        "resource-server mode: an RFC 7662 introspection endpoint for opaque (non-JWT) access tokens.",
        validate=validators.optional_url,
    )
    oauth_client_id: str = declare("", "resource-server mode: the client id the gateway introspects with.")
    oauth_client_secret: str = declare(
        "", "resource-server mode: the secret the gateway introspects with. Never logged.", secret=True
    )
    oauth_introspection_limit: int = declare(
        60,
        "resource-server mode: introspection requests a client address may cause per minute (tokens not "
        "answered from the cache); 429 past it.",
        validate=positive,
    )
    oauth_users: str = declare(
        "",
        "embedded mode: who may sign in, as comma-separated name:hash pairs; make a hash with "
        "python -m mcpgate.serve.oauth.passwords NAME. Plain-text passwords are refused.",
        secret=True,
    )
    oauth_upstream: str = declare(
        "",
        "embedded mode: sign in through another identity provider instead of (or beside) users: github, or an "
        "OpenID Connect issuer URL (for example https://accounts.google.com).",
    )
    oauth_upstream_client_id: str = declare("", "embedded mode: the gateway's client id at the upstream.")
    oauth_upstream_client_secret: str = declare(
        "", "embedded mode: the gateway's client secret at the upstream. Never logged.", secret=True
    )
    oauth_upstream_allowed: tuple[str, ...] = declare(
        (),
        "embedded mode with an upstream: comma-separated identities allowed in (GitHub logins, e-mail "
        "addresses or subjects: a GitHub account id as github:<id>); * allows anyone the upstream signs in. "
        "Required with an upstream.",
    )
    oauth_redirect_allowlist: tuple[str, ...] = declare(
        (),
        "embedded mode: redirect URIs a client may register besides loopback (any port) and https ones: exact "
        "URIs, or a scheme such as cursor: for all of its URIs.",
    )
    oauth_cimd_allowlist: tuple[str, ...] = declare(
        (),
        "embedded mode: Client ID Metadata Document URLs accepted as client ids: exact URLs, or prefixes "
        "ending in / (for example https://claude.ai/). Empty: client id metadata documents are off.",
    )
    oauth_access_ttl: float = declare(3600.0, "embedded mode: access token lifetime, in seconds.", validate=positive)
    oauth_refresh_ttl: float = declare(
        30 * 86400.0, "embedded mode: refresh token lifetime, in seconds.", validate=positive
    )
    oauth_login_limit: int = declare(
        10, "embedded mode: failed sign-ins a client address may make per minute (429 past it).", validate=positive
    )
    oauth_account_limit: int = declare(
        20,
        "embedded mode: failed sign-ins one user name may have per minute, from all addresses together (429 "
        "past it, whoever asks).",
        validate=positive,
    )
    oauth_signin_threads: int = declare(
        1,
        "embedded mode: threads per worker that check passwords, off the event loop and at low priority (an "
        "scrypt check takes about 0.2-0.5 s of one core and 32 MiB).",
        validate=positive,
    )
    oauth_signin_concurrency: int = declare(
        8,
        "embedded mode: most password checks a worker runs or queues at once; past it a sign-in is answered "
        "503 with Retry-After at once.",
        validate=positive,
    )
    oauth_client_limit: int = declare(
        10000,
        "embedded mode: most registered clients kept; past it a registration forgets the oldest one never used "
        "(503 only when every client kept was used).",
        validate=positive,
    )
    oauth_unused_client_ttl: float = declare(
        3600.0, "embedded mode: seconds a registration that never got a code is kept.", validate=positive
    )
    oauth_register_limit: int = declare(
        30,
        "embedded mode: registrations a client address may make per minute (429 past it). Keep it times "
        "MCPGATE_OAUTH_UNUSED_CLIENT_TTL in minutes well under MCPGATE_OAUTH_CLIENT_LIMIT (30 x 60 = 1,800): "
        "then no one address fills the table.",
        validate=positive,
    )
    oauth_client_metadata_bytes: int = declare(
        8192,
        "embedded mode: most bytes of a registration's metadata as stored (JSON; each field has its own cap "
        "too); a larger one is invalid_client_metadata.",
        validate=positive,
    )
    state_dir: str = declare(
        "",
        "Where the embedded authorization server keeps its SQLite state (clients, grants, keys). Empty: "
        "$XDG_STATE_HOME/mcpgate, else ~/.local/state/mcpgate. Keep it on a persistent disk.",
    )
    state_key: str = declare(
        "",
        "A key (at least 32 characters, e.g. python -c 'import secrets; "
        "print(secrets.token_urlsafe(32))') that encrypts the signing key, the sign-in cookie key and a fleet's "
        "cluster key where they are kept (MCPGATE_STATE_DIR or Redis), so a child running as the gateway's user "
        "learns nothing from them. Plain ones are replaced by new sealed ones at the first start with it. Never "
        "logged.",
        validate=validators.state_key,
        secret=True,
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
    config: str = declare(
        "",
        'A JSON file in the format desktop hosts use ({"mcpServers": {"<name>": {"command", "args", "env", '
        '"cwd", "mcpgate": {per-server settings}}}}): each server is published at /servers/<name>/mcp. '
        "Empty: MCPGATE_COMMAND alone, at MCPGATE_PATH.",
    )
    config_poll: float = declare(
        2.0,
        "Seconds between checks of MCPGATE_CONFIG for changes; a changed file adds, replaces and removes "
        "servers without touching the sessions of unchanged ones. 0: read it only at start.",
        validate=non_negative,
    )
    tools_allow: tuple[str, ...] = declare(
        (),
        "Comma-separated tool names the clients may see and call; empty: all. Others vanish from tools/list "
        "and a call to one is refused.",
    )
    tools_deny: tuple[str, ...] = declare(
        (),
        "Comma-separated tool names hidden from clients (after MCPGATE_TOOLS_ALLOW): gone from tools/list, "
        "a call refused with a JSON-RPC error.",
    )
    child_cpu_seconds: int = declare(
        0, "CPU seconds a child may use (RLIMIT_CPU); past it, it is ended. 0: no limit.", validate=non_negative
    )
    child_memory_bytes: int = declare(
        0,
        "Address space a child may map (RLIMIT_AS), in bytes; a child past it is ended. 0: no limit.",
        validate=non_negative,
    )
    child_open_files: int = declare(
        0, "Open files a child may hold (RLIMIT_NOFILE). 0: inherited.", validate=non_negative
    )
    child_processes: int = declare(
        0,
        "Processes a child's process group may hold (itself included); past it, the child is ended. 0: no limit.",
        validate=non_negative,
    )
    child_no_network: bool = declare(
        False,
        "true: children run in a private network namespace with no network at all (refused at start where "
        "the kernel does not allow it unprivileged).",
    )
    child_user: str = declare(
        "",
        "Run every child as this user (a name or uid; not root), so it cannot read the gateway's memory, "
        "environment or state directory. Needs the gateway to run as root (checked at start); the state "
        "directory must then be 0700 and the gateway's. Empty: children run as the gateway's user.",
    )
    child_group: str = declare(
        "", "With MCPGATE_CHILD_USER: the children's group (a name or gid; not root). Empty: the user's own."
    )
    request_timeout: float = declare(
        0.0,
        "Longest a single request may run, in seconds; past it the child is ended through the stop ladder and "
        "its waiting requests are answered with an error naming the limit. 0: no limit.",
        validate=non_negative,
    )
    metrics: bool = declare(False, "true: serve Prometheus metrics at /metrics.")
    metrics_token: str = declare(
        "",
        "When set, /metrics needs Authorization: Bearer <this token>. Never logged.",
        validate=validators.token,
        secret=True,
    )
    instance_id: str = declare(
        "",
        "This instance's name in the session ids it mints and in the shared directory (letters, digits, - and "
        "_; unique across the fleet). Empty: a random one, chosen in the worker after the fork.",
        validate=validators.instance_id,
    )
    redis_url: str = declare(
        "",
        "Redis shared by several instances (redis://, rediss://): the OAuth server's state, the instance "
        "directory, per-principal session caps, forwarding to a session's owner. Empty: one instance, "
        "state on local disk.",
        env="REDIS_URL",
        secret=True,
    )
    cluster_secret: str = declare(
        "",
        "The key that authenticates session ids and requests forwarded between instances (HMAC). Empty: one "
        "made once and kept in Redis (or a random one per process without Redis). Never logged.",
        secret=True,
    )
    internal_url: str = declare(
        "",
        "How the other instances reach this one for forwarded requests (for example http://10.0.0.5:8001). "
        "Empty: the bind address when it names one host (with 0.0.0.0: this host's name).",
        validate=validators.optional_url,
    )
    cluster_peers: tuple[str, ...] = declare(
        (),
        "Comma-separated addresses or networks the other instances connect from: only they may send a forwarded "
        "request (Mcpgate-Forwarded). Empty: the forwarding instance's own address in the directory (the host of "
        "its MCPGATE_INTERNAL_URL; for an instance on this machine, any address of this machine).",
        validate=validators.networks,
    )
    principal_sessions: int = declare(
        0,
        "Most 2025 sessions one principal may hold across every instance (counted in Redis; on one instance, "
        "in memory); past it, 503. 0: no cap beyond MCPGATE_MAX_SESSIONS.",
        validate=non_negative,
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
        "Seconds a pooled child has to answer server/discover before it is also sent a ping; one that answers the "
        "ping but not server/discover within as long again is restarted and sent initialize alone (silence is "
        "never taken for an era: MCPGATE_START_TIMEOUT).",
        validate=positive,
    )
    start_timeout: float = declare(
        60.0,
        "Seconds a pooled child has, from its start, to give its first answer (to server/discover, or to "
        "initialize for a server known to speak only that); none within it is a failed start.",
        validate=positive,
    )
    pool_children: int = declare(
        4, "Most pooled children per principal serving 2026-07-28 requests; past it, requests wait.", validate=positive
    )
    pool_children_total: int = declare(
        32,
        "Most pooled children of all principals together (those still stopping included); past it, the least "
        "recently used idle child of another principal is stopped to make room, or requests wait.",
        validate=positive,
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
        "client's retry; then the child's call is cancelled and its requestState expires. A modern child's "
        "requestState is accepted back for as long.",
        validate=positive,
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
    def auth(self) -> str:
        """The authentication mode in force: MCPGATE_AUTH_MODE, or the one the other settings imply."""
        if self.auth_mode:
            return self.auth_mode
        if self.auth_token:
            return "token"
        if self.oauth_users or self.oauth_upstream:
            return "embedded"
        if self.oauth_issuer:
            return "resource-server"
        return "none"

    @property
    def resource_url(self) -> str:
        """The OAuth resource this gateway is (RFC 8707/9728): the public URL plus the endpoint path."""
        return self.public_url.rstrip("/") + self.path if self.public_url else ""

    def auth_problem(self) -> str | None:
        """What the authentication mode in force lacks, or None."""
        mode = self.auth
        if mode == "token" and not self.auth_token:
            return "MCPGATE_AUTH_MODE=token needs MCPGATE_AUTH_TOKEN"
        if mode in ("none", "token"):
            return None
        if not self.public_url:
            return f"MCPGATE_AUTH_MODE={mode} needs MCPGATE_PUBLIC_URL (the gateway's URL as clients reach it)"
        if mode == "resource-server" and not self.oauth_issuer:
            return "MCPGATE_AUTH_MODE=resource-server needs MCPGATE_OAUTH_ISSUER (the authorization server clients use)"
        if self.oauth_introspection_url and not (self.oauth_client_id and self.oauth_client_secret):
            return "MCPGATE_OAUTH_INTROSPECTION_URL needs MCPGATE_OAUTH_CLIENT_ID and MCPGATE_OAUTH_CLIENT_SECRET"
        if mode == "embedded":
            if not (self.oauth_users or self.oauth_upstream):
                return "MCPGATE_AUTH_MODE=embedded needs MCPGATE_OAUTH_USERS or MCPGATE_OAUTH_UPSTREAM (who signs in)"
            if self.oauth_upstream and not (self.oauth_upstream_client_id and self.oauth_upstream_client_secret):
                return (
                    "MCPGATE_OAUTH_UPSTREAM needs MCPGATE_OAUTH_UPSTREAM_CLIENT_ID and "
                    "MCPGATE_OAUTH_UPSTREAM_CLIENT_SECRET (register the gateway with the provider)"
                )
            if self.oauth_upstream and not self.oauth_upstream_allowed:
                return (
                    "MCPGATE_OAUTH_UPSTREAM needs MCPGATE_OAUTH_UPSTREAM_ALLOWED: the identities allowed in "
                    "(* for anyone the provider signs in)"
                )
        return None

    def problem(self) -> str | None:
        """A conflict between settings, or None."""
        auth_problem = self.auth_problem()
        if auth_problem:
            return auth_problem
        if "*" in self.cors_origins and self.auth != "none":
            return (
                "MCPGATE_CORS_ORIGINS may be * only when authentication is off: list the origins whose pages "
                "may call the gateway"
            )
        if self.port and self.bind:
            return (
                "PORT and MCPGATE_BIND are both set: PORT binds 0.0.0.0:$PORT; unset one of them. Platforms such "
                "as Heroku set PORT, and so do Procfile runners (honcho, foreman) for every process: a Procfile "
                "line that sets MCPGATE_BIND starts with `unset PORT;`"
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

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> RelaySettings:
        """Settings from parsed flags (see add_arguments) and the environment."""
        given = {s.name: getattr(args, s.name) for s in declared(cls) if s.flag}
        given = {name: value for name, value in given.items() if value is not None}  # unset: env, then default
        given["header"] = tuple(given.get("header") or ())
        return load(cls, environ, **given)


# MCPGATE_* variables that are no setting but known all the same: deploy/Procfile.fleet's own (Redis's port and
# directory, HAProxy's routing; MCPGATE_I<n>: where instance i<n> listens), which its runner gives every process.
RECIPE_VARIABLES = ("MCPGATE_REDIS_PORT", "MCPGATE_REDIS_DIR", "MCPGATE_ROUTING")
_INSTANCE_ADDRESS = re.compile(r"MCPGATE_I[0-9]+")


def unknown(environ: Mapping[str, str] | None = None) -> list[str]:
    """The MCPGATE_* variables neither the gateway, the relay nor the fleet recipe reads, each with the nearest
    known name (reported at start: a mistyped setting would be silently ignored)."""
    environ = os.environ if environ is None else environ
    known = {s.env for cls in (Settings, RelaySettings) for s in declared(cls) if s.env}
    known.update(RECIPE_VARIABLES, (name for name in environ if _INSTANCE_ADDRESS.fullmatch(name)))
    return unknown_variables(environ, known, "MCPGATE_")


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
