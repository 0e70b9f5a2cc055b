"""Per-user OAuth to a remote upstream: an mcpServers `url` entry with `"auth": {"type": "user_oauth", ...}`.

Each signed-in principal of the gateway signs in to the upstream separately (authorization code with PKCE S256,
the upstream as the `resource` of both requests, the gateway's own callback /vault/oauth/<server>/callback, the
client pre-registered, a client ID metadata document or DCR: the relay's registration.choose). What is kept, per
principal and server, in the vault (sealed under MCPGATE_VAULT_KEY with the principal and slot as associated data):

    oauth-state:<server>   the sign-in under way: state, PKCE verifier, issuer, client, scopes, expiry (10 min);
                           single use, and only the principal who started it can finish it
    oauth:<server>         the client and the token record (flow.token_record's fields), rewritten by a refresh
    oauth-grant:<server>   a random id written at each sign-in: the version the children hold (vault.hold), so a new
                           sign-in, a sign-out or a step-up stops that principal's children of that server, and a
                           refresh does not

A principal without a grant is answered like an empty slot (SlotsEmpty: the URL-mode elicitation, or
input_required) pointing at /vault/oauth/<server>, the page that starts the sign-in (upstream_page.py). A child's
HttpClient.auth is a PrincipalToken: that principal's token only, refreshed shortly before expiry and once after a
401 (one holder at a time per principal and server across the fleet: upstream_refresh.py), a 403
insufficient_scope recording the wider scope (the union) and ending the grant so the next call asks for a new
sign-in. Tokens are never logged and never in a message.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, ClassVar
from urllib.parse import quote

import gevent
import gevent.lock
import requests

from mcpgate.config.declarations import SettingsError
from mcpgate.config.settings import Settings
from mcpgate.relay.oauth import discovery as found
from mcpgate.relay.oauth import flow, registration
from mcpgate.relay.oauth.client_token import usable_endpoint
from mcpgate.relay.oauth.discovery import Challenge, Discovery, SignInError
from mcpgate.serve.vault import upstream_refresh
from mcpgate.serve.vault.errors import CannotOpen
from mcpgate.serve.vault.slots import SlotInfo
from mcpgate.serve.vault.upstream_refresh import Refreshed
from mcpgate.serve.vault.vault import PAGE_PATH, SlotsEmpty, Stamp, Vault

log = logging.getLogger("mcpgate.vault")

GRANT, TOKENS, PENDING = "oauth-grant:", "oauth:", "oauth-state:"
STATE_TTL = 600.0  # a sign-in must come back within this long
HTTP_TIMEOUT = 30.0
KEYS = frozenset(
    {"type", "client_id", "client_secret_env", "client_metadata_url", "scope", "authorization_server", "label"}
)
MAX_FIELD = 1024


class UserOAuthError(SettingsError):
    """The entry's user_oauth object cannot be used (the message names the field, never a secret)."""


@dataclass(frozen=True)
class UserOAuth:
    """An entry's parsed `"auth": {"type": "user_oauth", ...}`; the worker's vault is attached at load."""

    per_user: ClassVar[bool] = True
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    client_metadata_url: str | None = None
    scope: tuple[str, ...] = ()
    authorization_server: str | None = None
    label: str = ""
    _vault: list[Vault] = field(default_factory=list, repr=False, compare=False, hash=False)

    def attach(self, vault: Vault) -> None:
        """The worker's vault keeps the tokens (published.py, when the entry is loaded)."""
        if vault.store is None or vault.cipher is None:
            raise UserOAuthError(
                'an auth of type "user_oauth" needs users of the gateway: MCPGATE_AUTH_MODE=embedded '
                "(or an OAuth mode) and MCPGATE_VAULT_KEY"
            )
        self._vault[:] = [vault]

    def upstream(self, settings: Settings, server: str, url: str) -> UpstreamSignIn:
        if not self._vault:
            raise UserOAuthError(f"servers.{server}: auth user_oauth: no vault attached")
        return UpstreamSignIn(self, self._vault[0], settings, server, url)


def parse(raw: Any, where: str, environ: Any = None) -> UserOAuth:
    """The entry's auth object (config_file's dispatch); raises UserOAuthError naming the field."""
    import os

    env = os.environ if environ is None else environ
    if not isinstance(raw, dict) or raw.get("type") != "user_oauth":
        raise UserOAuthError(f'{where}: must be a JSON object with "type": "user_oauth"')
    unknown = sorted(str(name) for name in raw if name not in KEYS)
    if unknown:
        raise UserOAuthError(f"{where}.{unknown[0]}: not a user_oauth field (known: {', '.join(sorted(KEYS))})")
    text = {}
    for name in KEYS - {"type"}:
        value = raw.get(name)
        if value is not None and (not isinstance(value, str) or not value.strip() or len(value) > MAX_FIELD):
            raise UserOAuthError(f"{where}.{name}: must be a non-empty string of at most {MAX_FIELD} characters")
        text[name] = value
    secret = None
    if text["client_secret_env"]:
        secret = env.get(text["client_secret_env"])
        if not secret:
            raise UserOAuthError(f"{where}.client_secret_env: names {text['client_secret_env']}, which is not set")
        if not text["client_id"]:
            raise UserOAuthError(f"{where}.client_secret_env: goes with client_id")
    for name in ("client_metadata_url", "authorization_server"):
        if text[name] and (problem := usable_endpoint(text[name] or "")) is not None:
            raise UserOAuthError(f"{where}.{name}: {problem}")
    return UserOAuth(
        client_id=text["client_id"],
        client_secret=secret,
        client_metadata_url=text["client_metadata_url"],
        scope=tuple((text["scope"] or "").split()),
        authorization_server=text["authorization_server"],
        label=text["label"] or "",
    )


class UpstreamSignIn:
    """One remote server's per-user sign-ins in one worker (see the module docstring)."""

    def __init__(self, config: UserOAuth, vault: Vault, settings: Settings, server: str, url: str) -> None:
        self.config, self.vault, self.server, self.url = config, vault, server, url
        base = settings.public_url.rstrip("/") + f"{PAGE_PATH}/oauth/{quote(server, safe='')}"
        self.page_url, self.redirect_uri = base, base + "/callback"
        self.info = SlotInfo(GRANT + server, config.label or f"sign-in to {server}")
        self._discovery: Discovery | None = None
        self._clients: dict[str, dict[str, Any]] = {}  # per issuer: the registration this worker uses
        self._locks: dict[str, gevent.lock.BoundedSemaphore] = {}

    def __repr__(self) -> str:
        return f"UpstreamSignIn({self.server!r})"

    # -- the vault's rows --------------------------------------------------------------------------------------
    def _read(self, principal: str, slot: str) -> dict[str, Any] | None:
        assert self.vault.store is not None and self.vault.cipher is not None
        sealed = self.vault.store.get(principal, slot)
        if sealed is None:
            return None
        try:
            data = json.loads(self.vault.cipher.open(principal, slot, sealed))
        except (CannotOpen, ValueError):
            log.error(
                "the %s record of server %s does not open here: treated as absent", slot.split(":")[0], self.server
            )
            return None
        return data if isinstance(data, dict) else None

    def _write(self, principal: str, slot: str, data: dict[str, Any]) -> None:
        if not self.vault.put(principal, slot, json.dumps(data)):
            raise SignInError("you keep the most credentials allowed (MCPGATE_VAULT_SLOTS): delete one first")

    def tokens(self, principal: str) -> dict[str, Any] | None:
        return self._read(principal, TOKENS + self.server)

    def signed_in(self, principal: str) -> bool:
        assert self.vault.store is not None
        listing = self.vault.store.listing(principal)
        return GRANT + self.server in listing and TOKENS + self.server in listing

    # -- a child's ----------------------------------------------------------------------------------------------
    def token_source(self, principal: str | None) -> tuple[PrincipalToken, Stamp]:
        """The principal's token source for one child, and the stamp it is held by; SlotsEmpty when the
        principal has not signed in to this upstream (answered with the page starting the sign-in)."""
        if principal is None:
            raise ValueError("a child of a server with user_oauth needs the principal it serves")
        assert self.vault.store is not None
        listing = self.vault.store.listing(principal)
        grant = listing.get(GRANT + self.server)
        record = self.tokens(principal) if grant is not None else None
        if grant is None or record is None or not (record.get("tokens") or {}).get("access_token"):
            raise SlotsEmpty([self.info], self.page_url)
        return PrincipalToken(self, principal, record), ((GRANT + self.server, grant.version),)

    def write_tokens(self, principal: str, record: dict[str, Any]) -> None:
        self._write(principal, TOKENS + self.server, record)

    def refresh(self, principal: str, seen: dict[str, Any]) -> Refreshed:
        """Newer tokens than `seen`: another child's or instance's refresh, else one now, one holder at a time
        (upstream_refresh.py); one greenlet of this worker at a time asks the store."""
        lock = self._locks.setdefault(principal, gevent.lock.BoundedSemaphore())
        assert self.vault.store is not None
        with lock:
            return upstream_refresh.refresh(self, self.vault.store, principal, seen)

    def end(self, principal: str, why: str, wider: tuple[str, ...] = ()) -> None:
        """The principal's grant ends (its children of this server stop); with `wider`, the next sign-in asks
        for those scopes too (step-up), the tokens kept until then."""
        log.info("the sign-in of a user to server %s ends: %s", self.server, why)
        if wider:
            record = self.tokens(principal) or {}
            record["step_up"] = sorted(set(record.get("step_up") or ()) | set(wider))
            self._write(principal, TOKENS + self.server, record)
        else:
            self.vault.delete(principal, TOKENS + self.server)
        self.vault.delete(principal, GRANT + self.server)

    def sign_out(self, principal: str) -> None:
        self.vault.delete(principal, PENDING + self.server)
        self.end(principal, "signed out by its owner")

    # -- the sign-in (upstream_page.py) ----------------------------------------------------------------------
    def discovery(self) -> Discovery:
        if self._discovery is not None and time.time() - self._discovery.fetched_at < 3600:
            return self._discovery
        with requests.Session() as http:
            if self.config.authorization_server:
                issuer = self.config.authorization_server
                metadata = found._as_metadata(http, issuer, HTTP_TIMEOUT)  # the relay's own lookup
                if metadata is None:
                    raise SignInError(f"no authorization server metadata found for {issuer}")
                self._discovery = Discovery(found.canonical_resource(self.url), issuer, metadata)
            else:
                self._discovery = found.discover(http, self.url, Challenge(), HTTP_TIMEOUT)
        return self._discovery

    def client(self, disc: Discovery) -> dict[str, Any]:
        held = self._clients.get(disc.issuer)
        if held is not None:
            return held
        options = SimpleNamespace(
            oauth_client_id=self.config.client_id or "",
            oauth_client_secret=self.config.client_secret or "",
            oauth_client_metadata_url=self.config.client_metadata_url or "",
        )
        client = registration.gateway_client(options, disc.metadata, disc.issuer, self.redirect_uri, HTTP_TIMEOUT)
        self._clients[disc.issuer] = client
        return client

    def begin(self, principal: str) -> str:
        """Where the principal's browser goes to sign in to the upstream; the state is kept for them alone."""
        disc = self.discovery()
        flow.require_pkce(disc)
        endpoint, token_endpoint = disc.endpoint("authorization_endpoint"), disc.endpoint("token_endpoint")
        if endpoint is None or token_endpoint is None:
            raise SignInError(f"the authorization server {disc.issuer} names no endpoints to sign in")
        for url in (endpoint, token_endpoint):  # a browser is sent there, a code and a verifier are posted there
            if usable_endpoint(url) is not None:
                raise SignInError(f"the authorization server {disc.issuer} names an endpoint that is not https")
        client = self.client(disc)
        held = tuple((self.tokens(principal) or {}).get("step_up") or ())
        scopes = found.choose_scope(" ".join(self.config.scope), Challenge(), disc, held)
        state, verifier = secrets.token_urlsafe(32), secrets.token_urlsafe(48)
        session = flow.oauth_client(client, redirect_uri=self.redirect_uri, code_challenge_method="S256")
        extra: dict[str, Any] = {"resource": disc.resource}
        if scopes:
            extra["scope"] = " ".join(scopes)
        url, _ = session.create_authorization_url(endpoint, state=state, code_verifier=verifier, **extra)
        session.close()
        pending = {
            "state": state,
            "verifier": verifier,
            "scopes": list(scopes),
            "client": client,
            "discovery": disc.to_dict(),
            "expires_at": time.time() + STATE_TTL,
        }
        self._write(principal, PENDING + self.server, pending)
        return str(url)

    def finish(self, principal: str, params: dict[str, str]) -> None:
        """The callback: the state must be the one this principal started (single use, unexpired); then the code
        is exchanged and the tokens kept; raises SignInError (its message names no secret)."""
        pending = self._read(principal, PENDING + self.server)
        presented = params.get("state", "")
        if pending is None or not hmac.compare_digest(str(pending.get("state", "")).encode(), presented.encode()):
            raise SignInError("this sign-in was not started by you (or was finished already): start it again")
        self.vault.delete(principal, PENDING + self.server)  # single use
        if float(pending.get("expires_at") or 0) < time.time():
            raise SignInError("this sign-in took too long: start it again")
        disc = Discovery.from_dict(pending["discovery"])
        if disc is None:
            raise SignInError("this sign-in cannot be finished: start it again")
        code = flow.check_response(params, disc)
        client, scopes = pending["client"], tuple(pending.get("scopes") or ())
        token_endpoint = disc.endpoint("token_endpoint") or ""
        session = flow.oauth_client(client, redirect_uri=self.redirect_uri)
        token = flow.exchange(session, token_endpoint, code, pending["verifier"], self.redirect_uri, disc.resource)
        record = {
            "client": client,
            "issuer": disc.issuer,
            "resource": disc.resource,
            "token_endpoint": token_endpoint,
            "tokens": flow.token_record(token, scopes),
        }
        self._write(principal, TOKENS + self.server, record)
        self._write(principal, GRANT + self.server, {"id": secrets.token_urlsafe(12), "at": time.time()})
        log.info("a user signed in to server %s", self.server)


class PrincipalToken:
    """One child's HttpClient.auth: its principal's token for the upstream, never anyone else's."""

    def __init__(self, signin: UpstreamSignIn, principal: str, record: dict[str, Any]) -> None:
        self._signin, self._principal = signin, principal
        self._tokens: dict[str, Any] = dict(record.get("tokens") or {})
        self._origin = found.origin(signin.url)
        self._ending = False

    def __repr__(self) -> str:  # never the token
        return f"PrincipalToken({self._signin.server!r})"

    def covers(self, url: str) -> bool:
        return found.origin(url) == self._origin

    def authorization(self) -> str | None:
        if upstream_refresh.expiring(self._tokens) and self._tokens.get("refresh_token"):
            self._renew()
        token = self._tokens.get("access_token")
        return f"Bearer {token}" if token else None

    def accepted(self, sent: str | None) -> None:
        pass

    def _renew(self) -> Refreshed:
        outcome = self._signin.refresh(self._principal, self._tokens)
        if outcome.record is not None:
            self._tokens = dict(outcome.record.get("tokens") or {})
        return outcome

    def on_unauthorized(self, www_authenticate: str | None, sent: str | None = None) -> bool:
        """A 401: a newer or refreshed token is tried once; when the authorization server refuses the refresh
        (and nobody saved newer tokens) the sign-in ends (the next call asks again). A refresh that could not
        be made now (the authorization server unreachable, another holder's too slow) ends nothing."""
        held = self._tokens.get("access_token")
        if sent is not None and held and sent != f"Bearer {held}":
            return True  # renewed meanwhile by another request of this child
        outcome = self._renew()
        if outcome.record is not None:
            return True
        if outcome.over:
            self._end("the upstream refused the token and it could not be refreshed")
        return False

    def on_forbidden(self, www_authenticate: str | None, sent: str | None = None) -> bool:
        """A 403 insufficient_scope: the next sign-in asks for the union of scopes (step-up)."""
        challenge = found.parse_challenge(www_authenticate)
        if challenge.insufficient_scope:
            held = tuple(str(self._tokens.get("scope") or "").split())
            self._end("the upstream asks for more scopes", tuple(dict.fromkeys([*held, *challenge.scope])) or ("",))
        return False

    def _end(self, why: str, wider: tuple[str, ...] = ()) -> None:
        if not self._ending:  # in its own greenlet: the sweep stops this very child
            self._ending = True
            gevent.spawn(self._signin.end, self._principal, why, tuple(s for s in wider if s))
