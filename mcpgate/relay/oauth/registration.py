"""Which client the relay signs in as, in the MCP specification's order.

1. a pre-registered client (--oauth-client-id, MCPGATE_OAUTH_CLIENT_SECRET);
2. a Client ID Metadata Document URL (--oauth-client-metadata-url) when the authorization server
   says it accepts them;
3. dynamic client registration (RFC 7591) as a native application;
4. else a clear error saying what to configure.

A registration is bound to the issuer it was made with: one saved for another issuer is never
presented (the server moved to a new authorization server: register again).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

import requests

from mcpgate.relay import errors
from mcpgate.relay.oauth.discovery import SignInError

CLIENT_NAME = "mcpgate-relay"
REGISTRATION_BYTES = 64 * 1024
SECRET_METHODS = ("client_secret_basic", "client_secret_post")


def auth_method(supported: Any, has_secret: bool) -> str:
    """How to authenticate at the token endpoint: a public client uses none; one with a secret uses
    what the server lists, client_secret_basic when it lists nothing (RFC 8414's default)."""
    listed = [m for m in supported or () if isinstance(m, str)]
    if not has_secret:
        return "none"
    for method in SECRET_METHODS:
        if method in listed:
            return method
    return "client_secret_basic"


def usable(client: dict[str, Any] | None, issuer: str, redirect_uri: str | None) -> bool:
    """Whether a saved registration may be presented to this issuer (with this redirect URI)."""
    if not client or not client.get("client_id") or client.get("issuer") != issuer:
        return False
    if client.get("source") == "dcr" and redirect_uri is not None:
        return redirect_uri in (client.get("redirect_uris") or ())
    return True


class ClientOptions(Protocol):
    """What chooses the client (the relay's settings have these; a gateway's page passes its own)."""

    @property
    def oauth_client_id(self) -> str: ...
    @property
    def oauth_client_secret(self) -> str: ...
    @property
    def oauth_client_metadata_url(self) -> str: ...


def gateway_client(
    options: ClientOptions, metadata: dict[str, Any], issuer: str, redirect_uri: str, timeout: float
) -> dict[str, Any]:
    """choose() for a gateway's sign-in page, which keeps no saved registration of its own here: on a session of
    its own, closed after."""
    with requests.Session() as http:
        return choose(options, metadata, issuer, None, redirect_uri, http, timeout)


def choose(
    settings: ClientOptions,
    metadata: dict[str, Any],
    issuer: str,
    saved: dict[str, Any] | None,
    redirect_uri: str | None,
    http: requests.Session,
    timeout: float,
) -> dict[str, Any]:
    """The client for this issuer: pre-registered, CIMD, a saved registration, or a new one."""
    supported = metadata.get("token_endpoint_auth_methods_supported")
    if settings.oauth_client_id:
        secret = settings.oauth_client_secret or None
        return {
            "client_id": settings.oauth_client_id,
            "client_secret": secret,
            "token_endpoint_auth_method": auth_method(supported, bool(secret)),
            "source": "preregistered",
            "issuer": issuer,
        }
    if settings.oauth_client_metadata_url and metadata.get("client_id_metadata_document_supported") is True:
        return {
            "client_id": settings.oauth_client_metadata_url,
            "token_endpoint_auth_method": "none",
            "source": "cimd",
            "issuer": issuer,
        }
    if saved is not None and usable(saved, issuer, redirect_uri) and saved.get("source") == "dcr":
        return saved
    endpoint = metadata.get("registration_endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        hint = "pass --oauth-client-id (and MCPGATE_OAUTH_CLIENT_SECRET for a confidential client)"
        if metadata.get("client_id_metadata_document_supported") is True:
            hint += ", or --oauth-client-metadata-url with the https URL of this relay's client metadata document"
        raise SignInError(
            f"the authorization server {errors.redact(issuer)} offers no dynamic client registration: "
            f"register mcpgate-relay there and {hint}"
        )
    return register(http, endpoint, issuer, metadata, redirect_uri, timeout)


def registration_request(metadata: dict[str, Any], redirect_uri: str | None) -> dict[str, Any]:
    """The RFC 7591 request: a native application with a loopback redirect, asking for refresh tokens."""
    supported = [m for m in metadata.get("token_endpoint_auth_methods_supported") or () if isinstance(m, str)]
    method = "none" if not supported or "none" in supported else auth_method(supported, True)
    body: dict[str, Any] = {
        "client_name": CLIENT_NAME,
        "application_type": "native",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": method,
    }
    if redirect_uri is not None:
        body["redirect_uris"] = [redirect_uri]
    return body


def register(
    http: requests.Session,
    endpoint: str,
    issuer: str,
    metadata: dict[str, Any],
    redirect_uri: str | None,
    timeout: float,
) -> dict[str, Any]:
    """Dynamic client registration; the saved client records the issuer it belongs to."""
    body = registration_request(metadata, redirect_uri)
    try:
        with http.post(endpoint, json=body, timeout=timeout, stream=True) as resp:
            raw = resp.raw.read(REGISTRATION_BYTES + 1, decode_content=True)
            status = resp.status_code
    except requests.RequestException as exc:
        raise SignInError(f"client registration at {errors.redact(endpoint)} failed: {type(exc).__name__}") from None
    document = _json_object(raw)
    if status not in (200, 201) or document is None or not isinstance(document.get("client_id"), str):
        reason = (document or {}).get("error_description") or (document or {}).get("error") or f"HTTP {status}"
        raise SignInError(
            f"client registration at {errors.redact(endpoint)} was refused ({str(reason)[:200]}): "
            "pass --oauth-client-id for a client registered by hand"
        )
    secret = document.get("client_secret") if isinstance(document.get("client_secret"), str) else None
    method = document.get("token_endpoint_auth_method")
    if not isinstance(method, str) or (method in SECRET_METHODS and not secret):
        method = auth_method(metadata.get("token_endpoint_auth_methods_supported"), bool(secret))
    return {
        "client_id": document["client_id"],
        "client_secret": secret,
        "token_endpoint_auth_method": method,
        "source": "dcr",
        "issuer": issuer,
        "redirect_uris": [u for u in document.get("redirect_uris") or body.get("redirect_uris") or () if u],
    }


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        document = json.loads(raw)
    except ValueError:
        return None
    return document if isinstance(document, dict) else None
