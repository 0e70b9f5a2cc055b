"""A small authorization server for the client credentials grant, on loopback, for tests (never for production).

Run as a subprocess (`token_server()` runs this file with runpy: as a script, the folder's http.py would shadow
the standard library's): its first stdout line is its URL, then it
serves until SIGTERM. From a test: `with token_server() as server: ...` yields a `TokenServer` (stopped by PID).

    GET  /.well-known/oauth-authorization-server   issuer, token_endpoint, jwks_uri, the auth methods and algorithms
    GET  /jwks                                     the public key its access tokens are signed with (RS256)
    POST /token                                    client_credentials only. The client authenticates for real:
         client_secret_basic (RFC 6749 2.3.1: both parts form-encoded), client_secret_post, or private_key_jwt
         (RFC 7523: the assertion's signature checked with the client's public key, iss = sub = client_id,
         aud = this token endpoint, exp in the future and at most 300 s ahead, a jti never seen before).
         It issues an RS256 JWT: iss, sub = client_id, aud = the `resource` asked for (else the client id), scope
         (the one asked for, else "mcp"), iat, exp = iat + ttl, jti; expires_in = ttl.
Control (tests only)
    POST /control         {"clients": {id: {"secret": s} | {"public_pem": pem}}, "ttl": seconds, "mode": ...,
                          "bad_audience": n, "error": {...}, "answer": {...}} changes what it does; "mode" is one
                          of ok | oversized (a 1 MiB JSON answer) | slow (a body dripped a byte at a time) |
                          html (200 text/html) | answer (the "answer" object as it is) | error (the "error"
                          object's status and code, and with "echo": true what it received as the secret in the
                          description) | hold (token requests wait for POST /control/release, at most 60 s);
                          "bad_audience": the next n tokens are issued for another audience (a resource server
                          refuses them).
    POST /control/reset   back to no clients, ttl 300, mode ok; the records emptied
    POST /control/release lets held token requests go on
    GET  /control/log     {"received": [what each token request carried, secrets and assertions left out, with
                          the client authentication method seen and the assertion's header and claims],
                          "issued": [the claims of each token issued, and "at": when], "pending": held requests}
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hmac
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote_plus

import requests
from flask import Flask, Response, jsonify, request
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, RSAKey
from werkzeug.serving import make_server

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
MAX_ASSERTION_AHEAD = 300
HOLD_LIMIT = 60.0
DRIP_LIMIT = 600  # bytes (one per 0.1 s) a slow answer drips at most


class State:
    """Everything the server remembers, behind one lock (the server is threaded)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.url = ""
        self.key = RSAKey.generate_key(2048, {"kid": "ts-1", "alg": "RS256", "use": "sig"})
        self.released = threading.Event()
        self.reset()

    def reset(self) -> None:
        self.clients: dict[str, dict[str, Any]] = {}
        self.ttl = 300
        self.mode = "ok"
        self.error: dict[str, Any] = {"status": 400, "error": "invalid_client"}
        self.bad_audience = 0
        self.answer: dict[str, Any] = {}
        self.received: list[dict[str, Any]] = []
        self.issued: list[dict[str, Any]] = []
        self.assertions: set[str] = set()
        self.pending = 0
        self.released.clear()


def app_for(state: State) -> Flask:
    app = Flask("token_server")

    @app.get("/.well-known/oauth-authorization-server")
    def metadata() -> Response:
        return jsonify(
            {
                "issuer": state.url,
                "token_endpoint": state.url + "/token",
                "jwks_uri": state.url + "/jwks",
                "grant_types_supported": ["client_credentials"],
                "token_endpoint_auth_methods_supported": [
                    "client_secret_basic",
                    "client_secret_post",
                    "private_key_jwt",
                ],
                "token_endpoint_auth_signing_alg_values_supported": ["RS256", "ES256"],
                "response_types_supported": [],
            }
        )

    @app.get("/jwks")
    def jwks() -> Response:
        return jsonify({"keys": [state.key.as_dict(private=False)]})

    @app.post("/token")
    def token() -> Response:
        return token_answer(state)

    @app.post("/control")
    def control() -> Response:
        body = request.get_json(force=True)
        with state.lock:
            for name in ("clients", "ttl", "mode", "error", "bad_audience", "answer"):
                if name in body:
                    setattr(state, name, body[name])
        return jsonify({})

    @app.post("/control/reset")
    def reset() -> Response:
        with state.lock:
            state.reset()
        return jsonify({})

    @app.post("/control/release")
    def release() -> Response:
        state.released.set()
        return jsonify({})

    @app.get("/control/log")
    def log() -> Response:
        with state.lock:
            return jsonify({"received": state.received, "issued": state.issued, "pending": state.pending})

    return app


def oauth_error(error: str, description: str, status: int = 400) -> Response:
    response = jsonify({"error": error, "error_description": description})
    response.status_code = status
    return response


def token_answer(state: State) -> Response:
    form = request.form.to_dict()
    record: dict[str, Any] = {
        name: value for name, value in form.items() if name not in ("client_secret", "client_assertion")
    }
    with state.lock:
        state.received.append(record)
        mode = state.mode
    client_id, method, problem = authenticate(state, form, record)
    record["method"], record["client_id"] = method, client_id
    if mode == "hold":
        with state.lock:
            state.pending += 1
        state.released.wait(HOLD_LIMIT)
        with state.lock:
            state.pending -= 1
    if mode != "ok" and mode != "hold":
        return odd_answer(state, mode, form)
    if problem is not None or client_id is None:
        return oauth_error("invalid_client", problem or "unknown client", 401)
    if form.get("grant_type") != "client_credentials":
        return oauth_error("unsupported_grant_type", "client_credentials only")
    return jsonify(issue(state, client_id, form))


def issue(state: State, client_id: str, form: dict[str, str]) -> dict[str, Any]:
    now = int(time.time())
    with state.lock:
        bad = state.bad_audience > 0
        state.bad_audience -= 1 if bad else 0
        ttl = int(state.ttl)
        audience = "https://elsewhere.example/mcp" if bad else form.get("resource") or client_id
        claims = {
            "iss": state.url,
            "sub": client_id,
            "client_id": client_id,
            "aud": audience,
            "scope": form.get("scope") or "mcp",
            "iat": now,
            "exp": now + ttl,
            "jti": secrets.token_urlsafe(12),
        }
        state.issued.append({**claims, "at": time.time()})
    access = jwt.encode({"alg": "RS256", "kid": "ts-1", "typ": "JWT"}, claims, state.key, algorithms=["RS256"])
    return {"access_token": access, "token_type": "Bearer", "expires_in": ttl, "scope": claims["scope"]}


def authenticate(state: State, form: dict[str, str], record: dict[str, Any]) -> tuple[str | None, str, str | None]:
    """(client id, method, problem): the client authentication the request carries, checked."""
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("basic "):
        try:
            pair = base64.b64decode(header[6:].strip()).decode()
        except ValueError:
            return None, "client_secret_basic", "malformed Basic credentials"
        raw_id, _, raw_secret = pair.partition(":")
        client_id, secret = unquote_plus(raw_id), unquote_plus(raw_secret)
        return client_id, "client_secret_basic", secret_problem(state, client_id, secret)
    if form.get("client_assertion_type") == ASSERTION_TYPE:
        client_id = form.get("client_id", "")
        return (
            client_id,
            "private_key_jwt",
            assertion_problem(state, client_id, form.get("client_assertion", ""), record),
        )
    if "client_secret" in form:
        client_id = form.get("client_id", "")
        return client_id, "client_secret_post", secret_problem(state, client_id, form["client_secret"])
    return None, "none", "no client authentication"


def secret_problem(state: State, client_id: str, secret: str) -> str | None:
    with state.lock:
        expected = (state.clients.get(client_id) or {}).get("secret")
    if not expected or not hmac.compare_digest(str(expected).encode(), secret.encode()):
        return "bad client secret"
    return None


def assertion_problem(state: State, client_id: str, assertion: str, record: dict[str, Any]) -> str | None:
    with state.lock:
        pem = (state.clients.get(client_id) or {}).get("public_pem")
    if not pem:
        return "no key registered for this client"
    try:
        key = public_key(pem)
        token = jwt.decode(assertion, key, algorithms=["RS256", "ES256", "ES384", "ES512"])
    except (JoseError, ValueError) as exc:
        return f"bad assertion ({type(exc).__name__})"
    claims, now = token.claims, time.time()
    record["assertion_header"], record["assertion_claims"] = dict(token.header), dict(claims)
    if claims.get("iss") != client_id or claims.get("sub") != client_id:
        return "iss and sub must be the client id"
    if claims.get("aud") != state.url + "/token":
        return "aud must be the token endpoint"
    exp = claims.get("exp")
    if not isinstance(exp, int) or exp <= now or exp > now + MAX_ASSERTION_AHEAD + 5:
        return "exp must be in the next 300 s"
    jti = claims.get("jti")
    with state.lock:
        if not isinstance(jti, str) or jti in state.assertions:
            return "jti missing or replayed"
        state.assertions.add(jti)
    return None


def public_key(pem: str) -> RSAKey | ECKey:
    try:
        return RSAKey.import_key(pem)
    except (JoseError, ValueError, TypeError):
        return ECKey.import_key(pem)


def odd_answer(state: State, mode: str, form: dict[str, str]) -> Response:
    if mode == "oversized":
        body = {"access_token": "x" * 16, "token_type": "Bearer", "padding": "p" * (1024 * 1024)}
        return jsonify(body)
    if mode == "answer":
        with state.lock:
            return jsonify(state.answer)
    if mode == "html":
        return Response("<html><body>Sign in</body></html>", 200, content_type="text/html")
    if mode == "slow":

        def drip() -> Iterator[bytes]:
            for _ in range(DRIP_LIMIT):
                yield b" "
                time.sleep(0.1)

        return Response(drip(), 200, content_type="application/json")
    with state.lock:
        error = dict(state.error)
    description = "the client could not be authenticated"
    if error.get("echo"):
        description += f" (received {form.get('client_secret') or request.headers.get('Authorization')})"
    return oauth_error(str(error.get("error")), description, int(error.get("status") or 400))


# -- the test side ---------------------------------------------------------------------------------------------


class TokenServer:
    """A running token_server.py: its URL and its control endpoints."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.token_url = url + "/token"

    def configure(self, **settings: Any) -> None:
        requests.post(self.url + "/control", json=settings, timeout=10).raise_for_status()

    def reset(self) -> None:
        requests.post(self.url + "/control/reset", timeout=10).raise_for_status()

    def release(self) -> None:
        requests.post(self.url + "/control/release", timeout=10).raise_for_status()

    def log(self) -> dict[str, Any]:
        reply = requests.get(self.url + "/control/log", timeout=10)
        reply.raise_for_status()
        return dict(reply.json())


@contextlib.contextmanager
def token_server(timeout: float = 20.0) -> Iterator[TokenServer]:
    """This module's server as a subprocess on a free loopback port for a `with` block, stopped by PID."""
    from tests.support.gateway import stop_process

    # run_path, not the file as the script: its folder (with an http.py) must not shadow the standard library
    runner = f"import runpy; runpy.run_path({__file__!r}, run_name='__main__')"
    proc = subprocess.Popen(
        [sys.executable, "-c", runner], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert proc.stdout is not None
        ready: list[str] = []
        reader = threading.Thread(target=lambda: ready.append(proc.stdout.readline() if proc.stdout else ""))
        reader.start()
        reader.join(timeout)
        if not ready or not ready[0].startswith("http://"):
            raise RuntimeError(f"token_server did not start (exit {proc.poll()})")
        yield TokenServer(ready[0].strip())
    finally:
        stop_process(proc)
        if proc.stdout is not None:
            proc.stdout.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    state = State()
    server = make_server("127.0.0.1", args.port, app_for(state), threaded=True)
    state.url = f"http://127.0.0.1:{server.server_port}"
    print(state.url, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
