"""The grants without a browser (mcpgate/relay/oauth/grants.py): device authorization (RFC 8628), client
credentials with each client authentication method, and refresh.

Against a small authorization server of this module's own on loopback (a thread of the test process: it
answers from a script and records every request), and for client credentials also against
tests/fixtures/oidc_issuer.py.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
import requests
from joserfc import jwt
from joserfc.jwk import ECKey, RSAKey

from mcpgate.relay.oauth import grants
from mcpgate.relay.oauth.grants import GrantError
from tests.support import free_port
from tests.support.oauth import jwt_claims, oidc_issuer

RESOURCE = "https://mcp.example.com/mcp"
TIMEOUTS = (5.0, 10.0)
PUBLIC = {"client_id": "relay-public"}
CONFIDENTIAL = {"client_id": "relay-machine", "client_secret": "SECRET-a:b"}
TOKEN = {"access_token": "at-1", "token_type": "Bearer", "expires_in": 300, "scope": "mcp:read"}


class AuthServer:
    """POST /device and /token answer from `replies` (path -> list of (status, body), popped in order);
    every request is recorded in `seen` as (path, headers, form)."""

    def __init__(self) -> None:
        self.replies: dict[str, list[tuple[int, dict[str, Any]]]] = {"/device": [], "/token": []}
        self.seen: list[tuple[str, dict[str, str], dict[str, str]]] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def metadata(self, **extra: Any) -> dict[str, Any]:
        return {
            "issuer": self.url,
            "token_endpoint": f"{self.url}/token",
            "device_authorization_endpoint": f"{self.url}/device",
            **extra,
        }

    def forms(self, path: str) -> list[dict[str, str]]:
        return [form for seen_path, _, form in self.seen if seen_path == path]


def _handler(server: AuthServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            form = {name: values[0] for name, values in parse_qs(body).items()}
            server.seen.append((self.path, dict(self.headers.items()), form))
            queue = server.replies.get(self.path) or [(404, {"error": "not_found"})]
            status, answer = queue.pop(0) if len(queue) > 1 else queue[0]
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def server() -> Iterator[AuthServer]:
    s = AuthServer()
    s.thread.start()
    try:
        yield s
    finally:
        s.httpd.shutdown()
        s.httpd.server_close()
        s.thread.join(10)


def no_sleep(seconds: float) -> None:
    pass


def pending(error: str = "authorization_pending") -> tuple[int, dict[str, Any]]:
    return 400, {"error": error}


def device_answer(**extra: Any) -> dict[str, Any]:
    return {
        "device_code": "DEVICE-CODE-7",
        "user_code": "WDJB-MJHT",
        "verification_uri": "https://example.com/device",
        "expires_in": 600,
        "interval": 2,
        **extra,
    }


# -- device authorization -------------------------------------------------------------------------------


def test_device_grant_polls_with_the_interval_and_slows_down(server: AuthServer) -> None:
    server.replies["/device"] = [(200, device_answer(verification_uri_complete="https://example.com/device?c=WDJB"))]
    server.replies["/token"] = [pending(), pending("slow_down"), pending(), (200, TOKEN)]
    printed: list[str] = []
    slept: list[float] = []
    answer = grants.device_code(
        server.metadata(),
        PUBLIC,
        "mcp:read",
        RESOURCE,
        printed.append,
        timeout=60,
        timeouts=TIMEOUTS,
        sleep=slept.append,
    )
    assert answer["access_token"] == "at-1"
    assert slept == [2, 2, 7, 7]  # slow_down adds 5 s for this and every later poll
    told = "open https://example.com/device?c=WDJB (or https://example.com/device and enter the code WDJB-MJHT)"
    assert printed == [f"mcpgate-relay: to sign in, {told}"]
    [asked] = server.forms("/device")
    assert asked == {"client_id": "relay-public", "scope": "mcp:read", "resource": RESOURCE}
    polls = server.forms("/token")
    assert len(polls) == 4
    for poll in polls:
        assert poll == {
            "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
            "device_code": "DEVICE-CODE-7",
            "resource": RESOURCE,
            "client_id": "relay-public",
        }
    assert all("Authorization" not in headers for _, headers, _ in server.seen)  # a public client


def test_device_grant_prints_the_code_without_a_complete_uri(server: AuthServer) -> None:
    server.replies["/device"] = [(200, device_answer(user_code="AB\x1b[2JCD"))]
    server.replies["/token"] = [(200, TOKEN)]
    printed: list[str] = []
    grants.device_code(
        server.metadata(), PUBLIC, None, None, printed.append, timeout=60, timeouts=TIMEOUTS, sleep=lambda s: None
    )
    assert printed == [
        "mcpgate-relay: to sign in, open https://example.com/device and enter the code AB[2JCD"
    ]  # no escape
    assert "scope" not in server.forms("/device")[0] and "resource" not in server.forms("/token")[0]


@pytest.mark.parametrize(
    ("error", "message"),
    [
        ("expired_token", "the device code expired before the sign-in was completed"),
        ("access_denied", "the device sign-in was denied"),
        ("invalid_client", "the token endpoint answered invalid_client"),
    ],
)
def test_device_grant_ends_on_an_error(server: AuthServer, error: str, message: str) -> None:
    server.replies["/device"] = [(200, device_answer())]
    server.replies["/token"] = [pending(), pending(error)]
    with pytest.raises(GrantError) as failed:
        grants.device_code(
            server.metadata(), PUBLIC, None, RESOURCE, print, timeout=60, timeouts=TIMEOUTS, sleep=lambda s: None
        )
    assert failed.value.error == error and str(failed.value).startswith(message)
    assert len(server.forms("/token")) == 2


def test_device_grant_gives_up_at_its_deadline(server: AuthServer) -> None:
    server.replies["/device"] = [(200, device_answer(interval=0.05))]
    server.replies["/token"] = [pending()]  # for ever
    with pytest.raises(GrantError, match=r"not completed within 0\.5 s"):
        grants.device_code(server.metadata(), PUBLIC, None, None, lambda line: None, timeout=0.5, timeouts=TIMEOUTS)
    assert len(server.forms("/token")) >= 1
    server.seen.clear()
    server.replies["/device"] = [(200, device_answer(interval=0.05, expires_in=0.3))]  # the code's life bounds it too
    with pytest.raises(GrantError, match=r"not completed within 0\.3 s"):
        grants.device_code(server.metadata(), PUBLIC, None, None, lambda line: None, timeout=60, timeouts=TIMEOUTS)


def test_device_grant_refusals(server: AuthServer) -> None:
    no_endpoint = {"issuer": server.url, "token_endpoint": f"{server.url}/token"}
    with pytest.raises(GrantError, match="no device_authorization_endpoint"):
        grants.device_code(no_endpoint, PUBLIC, None, None, print, timeout=60, timeouts=TIMEOUTS)
    server.replies["/device"] = [(400, {"error": "invalid_scope", "error_description": "no such scope"})]
    with pytest.raises(GrantError, match="the device authorization endpoint answered invalid_scope: no such scope"):
        grants.device_code(server.metadata(), PUBLIC, "bogus", None, print, timeout=60, timeouts=TIMEOUTS)
    server.replies["/device"] = [(200, {"device_code": "x"})]
    with pytest.raises(GrantError, match="lacks user_code, verification_uri"):
        grants.device_code(server.metadata(), PUBLIC, None, None, print, timeout=60, timeouts=TIMEOUTS)
    assert server.forms("/token") == []


def test_device_grant_authenticates_a_confidential_client(server: AuthServer) -> None:
    server.replies["/device"] = [(200, device_answer())]
    server.replies["/token"] = [(200, TOKEN)]
    grants.device_code(
        server.metadata(), CONFIDENTIAL, None, None, print, timeout=60, timeouts=TIMEOUTS, sleep=lambda s: None
    )
    for _, headers, form in server.seen:
        assert headers["Authorization"] == basic("relay-machine", "SECRET-a:b") and "client_secret" not in form


# -- client credentials ---------------------------------------------------------------------------------


def basic(client_id: str, secret: str) -> str:
    return "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode()


@pytest.mark.parametrize(
    ("listed", "registered", "expected"),
    [
        (None, None, "client_secret_basic"),  # RFC 8414's default when nothing is listed
        (["client_secret_basic", "client_secret_post"], None, "client_secret_basic"),
        (["client_secret_post"], None, "client_secret_post"),
        (["client_secret_basic", "client_secret_post"], "client_secret_post", "client_secret_post"),
    ],
)
def test_client_credentials_with_a_secret(
    server: AuthServer, listed: list[str] | None, registered: str | None, expected: str
) -> None:
    server.replies["/token"] = [(200, TOKEN)]
    metadata = server.metadata(**({"token_endpoint_auth_methods_supported": listed} if listed else {}))
    client = {**CONFIDENTIAL, **({"token_endpoint_auth_method": registered} if registered else {})}
    assert grants.auth_method(metadata, client) == expected
    answer = grants.client_credentials(metadata, client, "mcp:read mcp:write", RESOURCE, timeouts=TIMEOUTS)
    assert answer["access_token"] == "at-1"
    [(_, headers, form)] = server.seen
    assert form["grant_type"] == "client_credentials"
    assert form["scope"] == "mcp:read mcp:write" and form["resource"] == RESOURCE
    if expected == "client_secret_basic":
        assert headers["Authorization"] == basic("relay-machine", "SECRET-a:b") and "client_secret" not in form
    else:
        assert "Authorization" not in headers
        assert form["client_id"] == "relay-machine" and form["client_secret"] == "SECRET-a:b"


@pytest.mark.parametrize("kind", ["ec-pem", "rsa-file", "ec-jwk"])
def test_client_credentials_with_private_key_jwt(server: AuthServer, tmp_path: Path, kind: str) -> None:
    key: ECKey | RSAKey = RSAKey.generate_key(2048) if kind.startswith("rsa") else ECKey.generate_key("P-256")
    source = (
        key.as_pem(private=True).decode() if "pem" in kind or "file" in kind else json.dumps(key.as_dict(private=True))
    )
    if kind.endswith("file"):
        (tmp_path / "client.pem").write_text(source)
        source = str(tmp_path / "client.pem")
    listed = ["ES256", "RS256"]
    metadata = server.metadata(
        token_endpoint_auth_methods_supported=["private_key_jwt"],
        token_endpoint_auth_signing_alg_values_supported=listed,
    )
    server.replies["/token"] = [(200, TOKEN)]
    grants.client_credentials(
        metadata, {"client_id": "relay-machine"}, None, RESOURCE, timeouts=TIMEOUTS, private_key=source
    )
    [(_, headers, form)] = server.seen
    assert "Authorization" not in headers and "client_secret" not in form
    assert form["client_assertion_type"] == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    token = jwt.decode(form["client_assertion"], key, algorithms=listed)  # verified with the public half
    assert token.header["alg"] == ("RS256" if kind.startswith("rsa") else "ES256")
    claims = token.claims
    assert claims["iss"] == claims["sub"] == "relay-machine" and claims["aud"] == server.url  # the issuer
    assert claims["jti"] and 0 < claims["exp"] - claims["iat"] <= 300


def test_client_credentials_refusals(server: AuthServer) -> None:
    with pytest.raises(GrantError, match="needs a client id"):
        grants.client_credentials(server.metadata(), {}, None, None, timeouts=TIMEOUTS)
    with pytest.raises(GrantError, match="needs MCPGATE_OAUTH_CLIENT_SECRET or a private key"):
        grants.client_credentials(server.metadata(), PUBLIC, None, None, timeouts=TIMEOUTS)
    only_post = server.metadata(token_endpoint_auth_methods_supported=["client_secret_post"])
    with pytest.raises(GrantError, match="does not accept private_key_jwt"):
        grants.client_credentials(only_post, PUBLIC, None, None, timeouts=TIMEOUTS, private_key="-----BEGIN junk")
    only_jwt = server.metadata(token_endpoint_auth_methods_supported=["private_key_jwt"])
    with pytest.raises(GrantError, match="accepts no client secret method"):
        grants.client_credentials(only_jwt, CONFIDENTIAL, None, None, timeouts=TIMEOUTS)
    with pytest.raises(GrantError, match="is not an RSA, EC or OKP private key"):
        grants.client_credentials(only_jwt, PUBLIC, None, None, timeouts=TIMEOUTS, private_key="-----BEGIN junk")
    assert server.seen == []


def test_token_endpoint_errors_are_safe_grant_errors(server: AuthServer) -> None:
    server.replies["/token"] = [(401, {"error": "invalid_client", "error_description": "bad\x1b[31m secret"})]
    with pytest.raises(GrantError) as failed:
        grants.client_credentials(server.metadata(), CONFIDENTIAL, None, None, timeouts=TIMEOUTS)
    assert failed.value.error == "invalid_client"
    assert str(failed.value) == "the token endpoint answered invalid_client: bad[31m secret"
    server.replies["/token"] = [(200, {"access_token": "x", "token_type": "DPoP"})]
    with pytest.raises(GrantError, match="issued a 'DPoP' token; only Bearer"):
        grants.client_credentials(server.metadata(), CONFIDENTIAL, None, None, timeouts=TIMEOUTS)
    server.replies["/token"] = [(200, {"token_type": "Bearer"})]
    with pytest.raises(GrantError, match="without an access_token"):
        grants.client_credentials(server.metadata(), CONFIDENTIAL, None, None, timeouts=TIMEOUTS)
    closed = {"issuer": "x", "token_endpoint": f"http://127.0.0.1:{free_port()}/token?secret=q"}
    with pytest.raises(GrantError, match=r"the token endpoint http://127.0.0.1:\d+/token\?\.\.\. is unreachable"):
        grants.client_credentials(closed, CONFIDENTIAL, None, None, timeouts=TIMEOUTS)


def test_client_credentials_against_the_oidc_issuer() -> None:
    with oidc_issuer() as issuer:
        metadata = requests.get(f"{issuer}/.well-known/oauth-authorization-server", timeout=10).json()
        client = {"client_id": "test-client", "client_secret": "test-secret"}
        answer = grants.client_credentials(metadata, client, "mcp:read", RESOURCE, timeouts=TIMEOUTS)
        wrong = {"client_id": "test-client", "client_secret": "not-it"}
        with pytest.raises(GrantError) as failed:
            grants.client_credentials(metadata, wrong, None, RESOURCE, timeouts=TIMEOUTS)
    claims = jwt_claims(answer["access_token"])
    assert claims["aud"] == RESOURCE and claims["client_id"] == "test-client" and answer["scope"] == "mcp:read"
    assert failed.value.error == "invalid_client" and "not-it" not in str(failed.value)


# -- refresh --------------------------------------------------------------------------------------------


def test_refresh_sends_the_resource_and_reports_a_dead_refresh_token(server: AuthServer) -> None:
    server.replies["/token"] = [(200, {**TOKEN, "refresh_token": "rt-2"}), (400, {"error": "invalid_grant"})]
    answer = grants.refresh(server.metadata(), PUBLIC, "rt-1", None, RESOURCE, timeouts=TIMEOUTS)
    assert answer["refresh_token"] == "rt-2"
    assert server.forms("/token")[0] == {
        "grant_type": "refresh_token",
        "refresh_token": "rt-1",
        "resource": RESOURCE,
        "client_id": "relay-public",
    }
    with pytest.raises(GrantError) as failed:
        grants.refresh(server.metadata(), PUBLIC, "rt-1", "mcp:read", RESOURCE, timeouts=TIMEOUTS)
    assert failed.value.error == "invalid_grant" and "rt-1" not in str(failed.value)
    assert server.forms("/token")[1]["scope"] == "mcp:read"
