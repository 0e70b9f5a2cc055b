"""Machine credentials for an upstream (mcpgate/relay/oauth/client_credentials.py, client_token.py) never show the
client's secret, its private key, an assertion or an access token: not in a repr, not in an error message
(even when the token endpoint echoes what it received, or its URL carries a key in the query), not in a log
line at DEBUG (urllib3's own included); the token goes to the upstream's origin only, and a token endpoint's
answer that would put something other than a token into the Authorization header is refused without quoting it.
Against tests/support/token_server.py on loopback."""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus

import pytest
from joserfc.jwk import RSAKey

from mcpgate.relay.oauth.client_credentials import ClientCredentials, parse
from mcpgate.relay.oauth.client_token import TokenError
from tests.support import free_port
from tests.support.token_server import TokenServer, token_server

SECRET = "cc-secret+with/odd=chars&more"
ENV = {"CC_SECRET": SECRET}
UPSTREAM = "http://127.0.0.1:9/servers/remote/mcp"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TokenServer]:
    with token_server() as running:
        yield running


@pytest.fixture
def fresh(server: TokenServer) -> TokenServer:
    server.reset()
    server.configure(clients={"machine": {"secret": SECRET}})
    return server


def entry(server: TokenServer, **extra: Any) -> dict[str, Any]:
    return {
        "type": "client_credentials",
        "client_id": "machine",
        "client_secret_env": "CC_SECRET",
        "token_url": server.token_url,
        **extra,
    }


def creds(raw: dict[str, Any]) -> ClientCredentials:
    return parse(raw, "cfg: mcpServers.remote", environ=ENV)


def forms_of_the_secret() -> list[str]:
    basic = base64.b64encode(f"machine:{quote_plus(SECRET, safe='')}".encode()).decode()
    return [SECRET, quote_plus(SECRET, safe=""), basic]


def assert_clean(text: str) -> None:
    for form in forms_of_the_secret():
        assert form not in text, text


@pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
def test_an_echoed_secret_is_blanked_in_the_error(fresh: TokenServer, method: str) -> None:
    fresh.configure(mode="error", error={"status": 400, "error": "invalid_client", "echo": True})
    with pytest.raises(TokenError) as caught:
        creds(entry(fresh, auth_method=method)).auth(UPSTREAM).authorization()
    assert "***)" in caught.value.message, caught.value.message
    assert_clean(caught.value.message)
    assert_clean(str(caught.value.response(1)))


def test_no_secret_key_or_token_in_a_repr(fresh: TokenServer, tmp_path: Path) -> None:
    secret_creds = creds(entry(fresh))
    auth = secret_creds.auth(UPSTREAM)
    token = (auth.authorization() or "").removeprefix("Bearer ")
    key = RSAKey.generate_key(2048)
    pem = key.as_pem(private=True)
    path = tmp_path / "k.pem"
    path.write_bytes(pem)
    raw = {k: v for k, v in entry(fresh).items() if k != "client_secret_env"}
    keyed = parse({**raw, "private_key_file": str(path)}, "cfg", ENV)
    for text in (repr(secret_creds), repr(secret_creds.client), repr(auth), repr(keyed), repr(keyed.client)):
        assert_clean(text)
        assert token not in text and "PRIVATE KEY" not in text and pem.decode()[40:80] not in text, text


def test_a_key_in_the_token_url_query_stays_out_of_the_error(fresh: TokenServer) -> None:
    url = f"http://127.0.0.1:{free_port()}/token?api_key=QUERY-KEY-42"
    with pytest.raises(TokenError) as caught:
        creds(entry(fresh, token_url=url)).auth(UPSTREAM).authorization()
    assert "QUERY-KEY-42" not in caught.value.message and "/token" in caught.value.message


def test_nothing_secret_in_the_logs_at_debug(fresh: TokenServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    auth = creds(entry(fresh)).auth(UPSTREAM)
    token = (auth.authorization() or "").removeprefix("Bearer ")
    assert auth.on_unauthorized('Bearer error="invalid_token"', f"Bearer {token}")
    renewed = (auth.authorization() or "").removeprefix("Bearer ")
    fresh.configure(mode="error", error={"status": 401, "error": "invalid_client", "echo": True})
    with pytest.raises(TokenError):
        creds(entry(fresh, auth_method="client_secret_post")).auth(UPSTREAM).authorization()
    assert "got a token for" in caplog.text and "127.0.0.1" in caplog.text
    assert_clean(caplog.text)
    assert token not in caplog.text and renewed not in caplog.text


def test_the_token_goes_to_the_upstreams_origin_only(fresh: TokenServer) -> None:
    auth = creds(entry(fresh)).auth(UPSTREAM)
    assert auth.covers(UPSTREAM) and auth.covers("http://127.0.0.1:9/servers/remote/messages?session=1")
    for other in ("http://127.0.0.1:10/servers/remote/mcp", "https://127.0.0.1:9/mcp", fresh.token_url):
        assert not auth.covers(other), other


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ({"access_token": "abc\r\nX-Evil: 1", "token_type": "Bearer"}, "usable access_token"),
        ({"access_token": "tok-ABC-123 X-Evil", "token_type": "Bearer"}, "usable access_token"),
        ({"access_token": "tok-ABC-123", "token_type": "mac"}, "'mac' token"),
    ],
)
def test_a_token_that_is_no_bearer_token_is_refused_unquoted(
    fresh: TokenServer, answer: dict[str, Any], expected: str
) -> None:
    fresh.configure(mode="answer", answer=answer)
    with pytest.raises(TokenError) as caught:
        creds(entry(fresh)).auth(UPSTREAM).authorization()
    message = caught.value.message
    assert expected in message and "X-Evil" not in message and "tok-ABC" not in message, message
