"""Machine credentials for a remote upstream (mcpgate/relay/oauth/client_credentials.py, client_token.py): the
`auth` object's checks, the client credentials grant with each client authentication method against
tests/support/token_server.py (a real authorization server on loopback that verifies the secret or the
assertion's signature), the token kept and fetched again before it expires, one fetch for many callers under
gevent, bounded token endpoint answers, and requests through the relay's HttpClient to a gunicorn mcpgate in
resource-server mode that accepts the tokens (its metadata names the token server: the endpoint is discovered).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from joserfc.jwk import ECKey, RSAKey
from mcp import Client

from mcpgate.relay.http_client import HttpClient
from mcpgate.relay.oauth.client_credentials import ClientCredentials, ClientCredentialsError, parse
from mcpgate.relay.oauth.client_token import MAX_TOKEN_BYTES, TokenError
from tests.support import HEADERS, MODERN, Gateway, free_port, init_body, serving, wait_for, write_config
from tests.support.relay import http_options
from tests.support.token_server import TokenServer, token_server

SECRET = "s3cret value/with+odd&chars%"
SECRET_ENV = "CC_TEST_SECRET"
WHERE = "servers.json: mcpServers.remote"
UPSTREAM = "http://127.0.0.1:9/mcp"  # never contacted by the tests of the grant alone
DROP = object()  # a field left out


@pytest.fixture(scope="module")
def shared_server() -> Iterator[TokenServer]:
    with token_server() as server:
        yield server


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, str]]:
    """kind -> (the private key's PEM file, the public key's PEM)."""
    folder = tmp_path_factory.mktemp("keys")
    made: dict[str, tuple[str, str]] = {}
    for kind, key in (("rsa", RSAKey.generate_key(2048)), ("ec", ECKey.generate_key("P-256"))):
        path = folder / f"{kind}.pem"
        path.write_bytes(key.as_pem(private=True))
        made[kind] = (str(path), key.as_pem(private=False).decode())
    return made


@pytest.fixture
def server(shared_server: TokenServer, keys: dict[str, tuple[str, str]]) -> TokenServer:
    shared_server.reset()
    clients: dict[str, Any] = {"m-secret": {"secret": SECRET}}
    clients.update({f"m-{kind}": {"public_pem": public} for kind, (_, public) in keys.items()})
    shared_server.configure(clients=clients)
    return shared_server


def secret_entry(server: TokenServer, **extra: Any) -> dict[str, Any]:
    return {
        "type": "client_credentials",
        "client_id": "m-secret",
        "client_secret_env": SECRET_ENV,
        "token_url": server.token_url,
        **extra,
    }


def key_entry(server: TokenServer, keys: dict[str, tuple[str, str]], kind: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "client_credentials",
        "client_id": f"m-{kind}",
        "private_key_file": keys[kind][0],
        "token_url": server.token_url,
        **extra,
    }


def credentials(raw: dict[str, Any]) -> ClientCredentials:
    return parse(raw, WHERE, environ={SECRET_ENV: SECRET})


def no_secret_in(text: str) -> None:
    assert SECRET not in text and "s3cret" not in text, text


# -- the auth object ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "field", "problem"),
    [
        ({"type": "bearer"}, "auth.type", "client_credentials"),
        ({"client_id": ""}, "auth.client_id", "non-empty"),
        ({"client_id": DROP}, "auth.client_id", "non-empty"),
        ({"private_key_file": "/nowhere.pem"}, "auth.client_secret_env", "exactly one"),
        ({"client_secret_env": None}, "auth.client_secret_env", "environment variable"),
        ({"client_secret_env": "NOT_SET_ANYWHERE"}, "auth.client_secret_env", "NOT_SET_ANYWHERE"),
        ({"auth_method": "private_key_jwt"}, "auth.auth_method", "with a secret"),
        ({"auth_method": "tls_client_auth"}, "auth.auth_method", "client_secret_basic or client_secret_post"),
        ({"key_id": "k1"}, "auth.key_id", "private_key_file"),
        ({"token_url": "http://auth.example.com/token"}, "auth.token_url", "https"),
        ({"scope": 7}, "auth.scope", "string"),
        ({"client_secret": SECRET}, "auth.client_secret", "not a client_credentials field"),
    ],
)
def test_a_bad_auth_object_is_refused_naming_where_and_the_field(
    server: TokenServer, change: dict[str, Any], field: str, problem: str
) -> None:
    raw = {name: value for name, value in {**secret_entry(server), **change}.items() if value is not DROP}
    with pytest.raises(ClientCredentialsError) as caught:
        credentials(raw)
    message = str(caught.value)
    assert message.startswith(f"{WHERE}: {field}: ") and problem in message, message
    no_secret_in(message)


def test_neither_a_secret_nor_a_key_is_refused(server: TokenServer) -> None:
    raw = secret_entry(server)
    del raw["client_secret_env"]
    with pytest.raises(ClientCredentialsError, match="exactly one of client_secret_env and private_key_file"):
        credentials(raw)


def test_a_where_that_ends_with_the_auth_key_is_not_repeated(server: TokenServer) -> None:
    with pytest.raises(ClientCredentialsError) as caught:
        parse({**secret_entry(server), "scope": ""}, f"{WHERE}: auth", environ={SECRET_ENV: SECRET})
    assert str(caught.value) == f"{WHERE}: auth: scope: must be a non-empty string"


def test_an_empty_variable_is_named_as_not_set(server: TokenServer) -> None:
    with pytest.raises(ClientCredentialsError, match=f"names {SECRET_ENV}, which is not set"):
        parse(secret_entry(server), WHERE, environ={SECRET_ENV: ""})


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "cannot be read"),
        (b"not a key at all", "no RSA or EC private key"),
        ("public", "public key"),
        ("small-rsa", "under 2048 bits"),
        ("p256k", "unsupported curve (secp256k1)"),
    ],
)
@pytest.mark.filterwarnings("ignore:Key size should be")
def test_a_bad_key_file_is_refused(
    server: TokenServer, keys: dict[str, tuple[str, str]], tmp_path: Path, content: Any, problem: str
) -> None:
    path = tmp_path / "key.pem"
    if content == "public":
        path.write_text(keys["rsa"][1])
    elif content == "small-rsa":
        path.write_bytes(RSAKey.generate_key(1024, private=True, auto_kid=False).as_pem(private=True))
    elif content == "p256k":
        path.write_bytes(ECKey.generate_key("secp256k1").as_pem(private=True))
    elif content is not None:
        path.write_bytes(content)
    raw = {**key_entry(server, keys, "rsa"), "private_key_file": str(path)}
    with pytest.raises(ClientCredentialsError) as caught:
        credentials(raw)
    assert str(caught.value).startswith(f"{WHERE}: auth.private_key_file: ") and problem in str(caught.value)


def test_parsed_credentials_show_no_secret_and_compare_by_configuration(
    server: TokenServer, keys: dict[str, tuple[str, str]]
) -> None:
    first, again = credentials(secret_entry(server)), credentials(secret_entry(server))
    assert first == again and first != credentials(secret_entry(server, scope="other"))
    no_secret_in(repr(first))
    keyed = credentials(key_entry(server, keys, "rsa", key_id="k1"))
    assert keyed == credentials(key_entry(server, keys, "rsa", key_id="k1"))
    assert "PRIVATE" not in repr(keyed) and keyed.client.alg == "RS256"
    assert credentials(key_entry(server, keys, "ec")).client.alg == "ES256"


def test_one_token_source_per_upstream(server: TokenServer) -> None:
    creds = credentials(secret_entry(server))
    assert creds.auth(UPSTREAM) is creds.auth(UPSTREAM)
    assert creds.auth("http://127.0.0.1:10/mcp") is not creds.auth(UPSTREAM)
    creds.close()


# -- the grant -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
def test_a_secret_gets_a_token_once_with_the_resource_and_scope(server: TokenServer, method: str) -> None:
    auth = credentials(secret_entry(server, auth_method=method, scope="mcp tools")).auth(UPSTREAM)
    header = auth.authorization()
    assert header is not None and header.startswith("Bearer ey")
    assert auth.authorization() == header and auth.fetches == 1
    (received,) = server.log()["received"]
    assert received["method"] == method and received["client_id"] == "m-secret"
    assert received["grant_type"] == "client_credentials"
    assert received["resource"] == UPSTREAM and received["scope"] == "mcp tools"
    (issued,) = server.log()["issued"]
    assert issued["aud"] == UPSTREAM and issued["sub"] == "m-secret"


def test_the_default_method_with_a_secret_is_basic(server: TokenServer) -> None:
    credentials(secret_entry(server)).auth(UPSTREAM).authorization()
    assert [r["method"] for r in server.log()["received"]] == ["client_secret_basic"]


@pytest.mark.parametrize(("kind", "alg"), [("rsa", "RS256"), ("ec", "ES256")])
def test_private_key_jwt_is_verified_by_the_authorization_server(
    server: TokenServer, keys: dict[str, tuple[str, str]], kind: str, alg: str
) -> None:
    auth = credentials(key_entry(server, keys, kind, key_id="key-7")).auth(UPSTREAM)
    assert (auth.authorization() or "").startswith("Bearer ")
    (received,) = server.log()["received"]
    assert received["method"] == "private_key_jwt" and "client_assertion" not in received
    header, claims = received["assertion_header"], received["assertion_claims"]
    assert header["alg"] == alg and header["kid"] == "key-7"
    assert claims["iss"] == claims["sub"] == f"m-{kind}" and claims["aud"] == server.token_url
    assert 0 < claims["exp"] - claims["iat"] <= 300 and claims["jti"]


def test_a_key_the_server_does_not_know_is_refused(server: TokenServer, keys: dict[str, tuple[str, str]]) -> None:
    raw = {**key_entry(server, keys, "ec"), "client_id": "m-rsa"}  # the EC key signs for the RSA key's client
    with pytest.raises(TokenError) as caught:
        credentials(raw).auth(UPSTREAM).authorization()
    assert caught.value.oauth_error == "invalid_client" and not caught.value.retryable
    assert caught.value.maybe_sent is False and "bad assertion" in caught.value.message


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
def test_a_refused_secret_is_a_clear_error_even_when_the_server_echoes_it(server: TokenServer, method: str) -> None:
    server.configure(mode="error", error={"status": 401, "error": "invalid_client", "echo": True})
    with pytest.raises(TokenError) as caught:
        credentials(secret_entry(server, auth_method=method)).auth(UPSTREAM).authorization()
    error = caught.value
    assert error.oauth_error == "invalid_client" and error.status == 401 and not error.retryable
    assert "invalid_client" in error.message and "m-secret" in error.message and "***" in error.message
    no_secret_in(error.message)


def test_a_server_error_is_retryable(server: TokenServer) -> None:
    server.configure(mode="error", error={"status": 503, "error": "temporarily_unavailable"})
    with pytest.raises(TokenError) as caught:
        credentials(secret_entry(server)).auth(UPSTREAM).authorization()
    assert caught.value.retryable and caught.value.oauth_error == "temporarily_unavailable"


def test_an_unreachable_token_endpoint_is_named(server: TokenServer) -> None:
    url = f"http://127.0.0.1:{free_port()}/token"
    with pytest.raises(TokenError) as caught:
        credentials(secret_entry(server, token_url=url)).auth(UPSTREAM).authorization()
    assert caught.value.retryable and url in caught.value.message and "refused" in caught.value.message


@pytest.mark.parametrize(
    ("mode", "words", "retryable"),
    [
        ("oversized", f"more than {MAX_TOKEN_BYTES} bytes", False),
        ("slow", "too slowly", True),
        ("html", "HTTP 200 without a JSON object", False),
    ],
)
def test_odd_token_endpoint_answers_are_clear_errors(
    server: TokenServer, mode: str, words: str, retryable: bool
) -> None:
    server.configure(mode=mode)
    with pytest.raises(TokenError) as caught:
        credentials(secret_entry(server)).auth(UPSTREAM, timeout=1.5).authorization()
    assert words in caught.value.message and caught.value.retryable is retryable, caught.value.message
    assert server.token_url in caught.value.message


def test_the_token_is_fetched_again_before_it_expires(server: TokenServer) -> None:
    server.configure(ttl=3)
    auth = credentials(secret_entry(server)).auth(UPSTREAM)
    first = auth.authorization()
    assert auth.authorization() == first  # not yet: the token is fresh
    wait_for(lambda: auth.authorization() != first, timeout=30, what="a second token issued")
    issued = server.log()["issued"]
    assert len(issued) == 2 and auth.fetches == 2
    assert issued[1]["at"] < issued[0]["exp"], "the second token came after the first had expired"


CONCURRENT = """
from gevent import monkey

monkey.patch_all()
import json, sys

import gevent

from mcpgate.relay.oauth.client_credentials import parse

raw, upstream, callers, timeout = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
auth = parse(raw, "test").auth(upstream, timeout=timeout)
jobs = [gevent.spawn(auth.authorization) for _ in range(callers)]
gevent.joinall(jobs, timeout=120)
failed = [str(job.exception) for job in jobs if job.exception]
print(json.dumps({"headers": [job.value for job in jobs], "errors": failed, "fetches": auth.fetches}), flush=True)
"""


def run_callers(server: TokenServer, callers: int, timeout: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CONCURRENT, json.dumps(secret_entry(server)), UPSTREAM, str(callers), str(timeout)],
        env={**os.environ, SECRET_ENV: SECRET},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(proc: subprocess.Popen[str]) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, err[-3000:]
    return dict(json.loads(out.splitlines()[-1]))


def test_concurrent_callers_wait_for_one_fetch(server: TokenServer) -> None:
    server.configure(mode="hold")
    proc = run_callers(server, 20, 60.0)
    try:
        wait_for(lambda: server.log()["pending"] == 1, timeout=60, what="the token request held")
        server.release()
        result = finished(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    headers = result["headers"]
    assert len(headers) == 20 and len(set(headers)) == 1 and headers[0].startswith("Bearer ")
    assert result["fetches"] == 1 and len(server.log()["received"]) == 1


def test_callers_waiting_for_a_stuck_fetch_give_up_in_time_and_the_failure_stands(server: TokenServer) -> None:
    server.configure(mode="hold")  # never released: the fetch in flight times out too
    result = finished(run_callers(server, 5, 1.0))
    server.release()
    assert result["fetches"] == 0 and len(result["errors"]) == 5
    for error in result["errors"]:  # each waiter gave up, or took the failed fetch's error: none fetched again
        assert "gave up waiting 1 s for the token fetch in flight" in error or server.token_url in error, error
    assert len(server.log()["received"]) == 1


def test_a_failed_refresh_keeps_the_token_that_is_still_valid(server: TokenServer) -> None:
    server.configure(ttl=4)
    auth = credentials(secret_entry(server)).auth(UPSTREAM)
    first = auth.authorization()
    server.configure(mode="error", error={"status": 503, "error": "temporarily_unavailable"})

    def refresh_tried() -> bool:
        assert auth.authorization() == first
        return len(server.log()["received"]) == 2

    wait_for(refresh_tried, timeout=30, what="the refresh tried")
    assert auth.authorization() == first and len(server.log()["received"]) == 2  # not again at once
    assert auth.fetches == 1


def test_a_failed_fetch_stands_for_a_while_without_a_new_request(server: TokenServer) -> None:
    server.configure(mode="error", error={"status": 401, "error": "invalid_client"})
    auth = credentials(secret_entry(server)).auth(UPSTREAM)
    for _ in range(3):
        with pytest.raises(TokenError, match="invalid_client"):
            auth.authorization()
    assert len(server.log()["received"]) == 1


def test_no_secret_or_token_in_the_logs(
    server: TokenServer, keys: dict[str, tuple[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    auth = credentials(secret_entry(server)).auth(UPSTREAM)
    token = (auth.authorization() or "").removeprefix("Bearer ")
    credentials(key_entry(server, keys, "rsa")).auth(UPSTREAM).authorization()
    server.configure(mode="error", error={"status": 401, "error": "invalid_client", "echo": True})
    with pytest.raises(TokenError):
        credentials(secret_entry(server, auth_method="client_secret_post")).auth(UPSTREAM).authorization()
    assert "got a token for" in caplog.text
    no_secret_in(caplog.text)
    assert token and token not in caplog.text


# -- through HttpClient, to a gunicorn mcpgate that accepts the tokens ------------------------------------------


@pytest.fixture(scope="module")
def protected(shared_server: TokenServer) -> Iterator[Gateway]:
    env = {"MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}", "MCPGATE_OAUTH_ISSUER": shared_server.url}
    with serving(env, behind=True) as gateway:
        yield gateway


def mcp_url(gw: Gateway) -> str:
    return f"http://127.0.0.1:{gw.port}/mcp"


def initialize(auth: Any, url: str) -> int:
    http = HttpClient(http_options(tries=1), url)
    http.auth = auth
    try:
        reply = http.send("POST", url, HEADERS, json.dumps(init_body()).encode())
        status = reply.status_code
        http.done(reply)
        return status
    finally:
        http.close()


def test_a_request_reaches_the_upstream_with_a_token_from_the_discovered_endpoint(
    server: TokenServer, protected: Gateway
) -> None:
    raw = secret_entry(server)
    del raw["token_url"]
    url = mcp_url(protected)
    auth = credentials(raw).auth(url)
    assert initialize(auth, url) == 200
    (received,) = server.log()["received"]
    assert received["resource"] == url and auth.fetches == 1


def test_a_401_fetches_one_new_token(server: TokenServer, protected: Gateway) -> None:
    server.configure(bad_audience=1)  # the first token is for another audience: the upstream refuses it
    url = mcp_url(protected)
    auth = credentials(secret_entry(server)).auth(url)
    assert initialize(auth, url) == 200
    assert auth.fetches == 2 and len(server.log()["issued"]) == 2


def test_a_token_the_upstream_keeps_refusing_is_fetched_once_per_request_never_in_a_loop(
    server: TokenServer, protected: Gateway
) -> None:
    server.configure(bad_audience=100)
    url = mcp_url(protected)
    auth = credentials(secret_entry(server)).auth(url)
    assert initialize(auth, url) == 401
    assert auth.fetches == 2  # the first token, then one more after the 401
    assert initialize(auth, url) == 401
    assert auth.fetches == 2 and len(server.log()["received"]) == 2  # refused just after its fetch: not again yet


def test_a_gateway_calls_its_remote_upstream_with_one_token_for_every_session(
    server: TokenServer, protected: Gateway, tmp_path: Path
) -> None:
    """The whole path: an mcpServers entry with a url and this auth (config_file parses it, serve/remote plugs the
    token source into each remote child's HttpClient); a 2025 session and 2026-07-28 calls reach the protected
    upstream's demo server, on one token fetched once; the secret is in no log line of the gateway."""
    auth = {k: v for k, v in secret_entry(server).items() if k != "token_url"}  # discovered from the upstream
    config = write_config(tmp_path / "mcp.json", {"up": {"url": mcp_url(protected), "auth": auth}})
    with serving({"MCPGATE_CONFIG": config, SECRET_ENV: SECRET, "MCPGATE_LOG_LEVEL": "debug"}) as gw:

        async def main() -> list[str]:
            texts = []
            for mode in ("legacy", MODERN):
                async with Client(f"{gw.base}/servers/up/mcp", mode=mode) as session:
                    result = await session.call_tool("echo", {"message": mode})
                    texts.append(str(result.content[0].text))
            return texts

        async def guarded() -> list[str]:
            with anyio.fail_after(90):
                return await main()

        assert anyio.run(guarded) == ["legacy", MODERN]
        log = gw.log()
    received = server.log()["received"]
    assert len(received) == 1 and received[0]["resource"] == mcp_url(protected), received
    no_secret_in(log)
