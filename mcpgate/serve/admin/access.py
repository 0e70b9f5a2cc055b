"""Who may use the management API: the bearer of MCPGATE_ADMIN_TOKEN (compared in constant time), or, in an
OAuth mode with MCPGATE_ADMIN_SCOPE set, the bearer of an access token the gateway accepts (signature, issuer,
lifetime, one of the gateway's audiences) that carries that scope. Anyone else is refused: 401 without a
credential or with one that is not accepted, 403 for a valid OAuth token without the scope. The credential is
never logged, nor echoed in an answer.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any

from mcpgate.core import jsonrpc
from mcpgate.serve.front import auth
from mcpgate.serve.front.http import Refusal
from mcpgate.serve.oauth.setup import Authenticator

log = logging.getLogger("mcpgate.admin")

CHALLENGE = {"WWW-Authenticate": 'Bearer realm="mcpgate-admin"'}
TOKEN = "admin-token"  # who a request holding MCPGATE_ADMIN_TOKEN is, in the log


def unauthorized(message: str) -> Refusal:
    return Refusal(401, jsonrpc.INVALID_REQUEST, f"Unauthorized: {message}", headers=CHALLENGE)


class AdminAccess:
    def __init__(self, token: str, scope: str, authenticator: Authenticator | None) -> None:
        self.token = token.encode() if token else None
        self.scope = scope
        self.authenticator = authenticator if scope else None

    def check(self, environ: dict[str, Any]) -> str:
        """Who the request is (the admin token, or the OAuth principal), or a Refusal (401, 403)."""
        presented = auth.bearer_token(environ.get("HTTP_AUTHORIZATION"))
        if not presented:
            raise unauthorized("the management API needs Authorization: Bearer <admin token>")
        if self.token is not None and hmac.compare_digest(presented.encode(), self.token):
            return TOKEN
        if self.authenticator is not None:
            return self._oauth(environ, presented)
        log.warning("refused a management API request from %s: not the admin token", environ.get("REMOTE_ADDR"))
        raise unauthorized("the bearer token is not the admin token")

    def _oauth(self, environ: dict[str, Any], token: str) -> str:
        from mcpgate.serve.oauth.ratelimit import client_key
        from mcpgate.serve.oauth.resource import ANOTHER_AUDIENCE, ResourceGuard

        guard = self.authenticator
        if not isinstance(guard, ResourceGuard):
            raise unauthorized("the bearer token is not the admin token")
        gateway = guard.gateway()
        try:
            identity = guard._verify(token, gateway, client_key(environ, guard.proxies))
        except Refusal as refusal:
            log.warning("refused a management API request: %s", refusal.message)
            raise unauthorized("the access token was not accepted") from None
        if not identity.audiences & gateway.audiences:
            raise unauthorized(ANOTHER_AUDIENCE)
        if self.scope not in identity.scopes:
            log.warning("refused a management API request of %r: no scope %s", identity.principal, self.scope)
            raise Refusal(403, jsonrpc.INVALID_REQUEST, f"Forbidden: the management API needs the scope {self.scope}")
        return identity.principal
