"""The settings of who may use the MCP endpoints (mcpgate.serve.front.auth, mcpgate.serve.oauth): the mode
(none, a token, an OAuth resource server, the embedded OAuth authorization server), each mode's settings and
limits, and where the embedded server keeps its state and the key that seals it. `auth` is the mode in force,
`auth_problem()` what it lacks.

Declarations only (how one works: mcpgate.config.declarations). mcpgate.config.settings assembles `Settings`
from this area and the others, and every reader takes the values from there; the fields' order here is their
order in the README's settings table.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpgate.config import validators
from mcpgate.config.declarations import declare, positive
from mcpgate.config.modes import AuthMode


@dataclass(frozen=True, init=False, repr=False, eq=False)
class AuthSettings:
    """Who may use the MCP endpoints: the authentication mode and its settings."""

    auth_token: str = declare(
        "",
        "When set, every request to the MCP endpoint must carry Authorization: Bearer "
        "<this token> (401 otherwise). Never logged, never passed to the child.",
        validate=validators.token,
        secret=True,
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

    @property
    def auth(self) -> AuthMode:
        """The authentication mode in force: MCPGATE_AUTH_MODE, or the one the other settings imply."""
        if self.auth_mode:
            return AuthMode(self.auth_mode)
        if self.auth_token:
            return AuthMode.TOKEN
        if self.oauth_users or self.oauth_upstream:
            return AuthMode.EMBEDDED
        if self.oauth_issuer:
            return AuthMode.RESOURCE_SERVER
        return AuthMode.NONE

    def auth_problem(self) -> str | None:
        """What the authentication mode in force lacks, or None."""
        mode = self.auth
        if mode is AuthMode.TOKEN and not self.auth_token:
            return "MCPGATE_AUTH_MODE=token needs MCPGATE_AUTH_TOKEN"
        if not mode.oauth:
            return None
        if not self.public_url:
            return f"MCPGATE_AUTH_MODE={mode} needs MCPGATE_PUBLIC_URL (the gateway's URL as clients reach it)"
        if mode is AuthMode.RESOURCE_SERVER and not self.oauth_issuer:
            return "MCPGATE_AUTH_MODE=resource-server needs MCPGATE_OAUTH_ISSUER (the authorization server clients use)"
        if self.oauth_introspection_url and not (self.oauth_client_id and self.oauth_client_secret):
            return "MCPGATE_OAUTH_INTROSPECTION_URL needs MCPGATE_OAUTH_CLIENT_ID and MCPGATE_OAUTH_CLIENT_SECRET"
        if mode is AuthMode.EMBEDDED:
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
