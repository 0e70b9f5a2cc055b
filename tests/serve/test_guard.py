"""The front's pure decisions as tables, in process: the guard (serve/front/app.py's Guard) over a dict environ
for Host, Origin, cross-site requests and the static token; the request checks (checks.py); CORS (cors.py);
and the refusal each one raises, as the JSON-RPC error the endpoint answers. One end-to-end case per policy
stays with a real gunicorn in test_http.py and test_cors.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpgate.config.settings import Settings
from mcpgate.serve.front import checks
from mcpgate.serve.front.app import Guard
from mcpgate.serve.front.cors import Cors
from mcpgate.serve.front.http import Refusal
from mcpgate.serve.oauth.setup import StaticToken

LOOPBACK_PEER = "127.0.0.1"
REMOTE_PEER = "192.0.2.7"
TOKEN = "s3cret-token"


def guard(token: str | None = None, **settings: str) -> Guard:
    """A guard for these settings (MCPGATE_* names less the prefix, lower case), with the static token when given."""
    environ = {f"MCPGATE_{name.upper()}": value for name, value in settings.items()}
    if token:
        environ["MCPGATE_AUTH_TOKEN"] = token
    return Guard(Settings.from_env(environ=environ), StaticToken(token) if token else None)


def environ(host: str | None = "127.0.0.1:8000", peer: str = LOOPBACK_PEER, **headers: str) -> dict[str, Any]:
    """A request's WSGI environ: `headers` by their CGI names less HTTP_ (origin, sec_fetch_site, ...)."""
    env: dict[str, Any] = {"REQUEST_METHOD": "POST", "PATH_INFO": "/mcp", "REMOTE_ADDR": peer}
    if host is not None:
        env["HTTP_HOST"] = host
    env.update({f"HTTP_{name.upper()}": value for name, value in headers.items()})
    return env


def refusal(check: Guard, env: dict[str, Any], endpoint: bool = True) -> int | None:
    """The status the guard refuses this request with, or None when it passes; asked twice, the second time from
    what the guard remembers of a request that passed (Guard.passed), with the same answer."""
    first = answer(check, env, endpoint)
    assert answer(check, env, endpoint) == first
    return first


def answer(check: Guard, env: dict[str, Any], endpoint: bool) -> int | None:
    try:
        check.check(env, endpoint)
    except Refusal as refused:
        assert refused.code == -32600, refused  # every refusal of the guard is an Invalid Request error
        return refused.status
    return None


# -- Origin (DNS rebinding): loopback origins and the listed ones; none at all is not a browser ---------------

ALLOWED_ORIGIN = "https://allowed.example"


@pytest.mark.parametrize(
    "origin,status",
    [
        (None, None),
        ("https://evil.example", 403),
        ("null", 403),
        ("http://localhost:3000", None),
        ("http://127.0.0.1", None),
        ("http://[::1]:6274", None),
        ("http://app.localhost", None),
        ("https://allowed.example", None),
        ("HTTPS://Allowed.Example/", None),  # compared normalized
        ("https://allowed.example.evil.example", 403),
        ("ftp://localhost", 403),
        ("http://127.0.0.1.evil.example", 403),
    ],
)
def test_the_origin_rule(origin: str | None, status: int | None) -> None:
    headers = {} if origin is None else {"origin": origin}
    assert refusal(guard(allowed_origins=ALLOWED_ORIGIN), environ(**headers)) == status


@pytest.mark.parametrize(
    "settings,origin,status",
    [
        ({"cors_origins": "https://page.example"}, "https://page.example", None),  # a CORS origin is allowed
        ({"public_url": "https://mcp.example.com"}, "https://mcp.example.com", None),  # the public URL's own
        ({"public_url": "https://mcp.example.com"}, "https://other.example.com", 403),
        ({"allowed_origins": "*"}, "https://anyone.example", None),
    ],
)
def test_the_origins_other_settings_allow(settings: dict[str, str], origin: str, status: int | None) -> None:
    host = settings.get("public_url", "http://127.0.0.1").split("://")[1]
    assert refusal(guard(**settings), environ(host=host, origin=origin)) == status


# -- Host: listed names from anywhere, loopback names from trusted peers only, malformed ones never -------------


@pytest.mark.parametrize(
    "host,peer,status",
    [
        ("mcp.example.com", REMOTE_PEER, None),
        ("MCP.example.com:443", REMOTE_PEER, None),
        ("evil.example", LOOPBACK_PEER, 421),
        ("localhost:9", LOOPBACK_PEER, None),
        ("127.0.0.1:8000", LOOPBACK_PEER, None),
        ("[::1]:8000", "::1", None),
        ("localhost:9", REMOTE_PEER, 421),  # a loopback name from afar: rebinding through a proxy
        ("localhost:9", "::ffff:127.0.0.1", None),  # IPv4-mapped loopback
        (None, LOOPBACK_PEER, 421),
        ("", LOOPBACK_PEER, 421),
        ("a.example,mcp.example.com", LOOPBACK_PEER, 400),
        ("mcp.example.com:99999", LOOPBACK_PEER, 400),
        ("[not-v6]:80", LOOPBACK_PEER, 400),
        ("mcp.example.com@evil.example", LOOPBACK_PEER, 400),
    ],
)
def test_the_host_rule(host: str | None, peer: str, status: int | None) -> None:
    assert refusal(guard(allowed_hosts="mcp.example.com"), environ(host=host, peer=peer)) == status


def test_an_invalid_host_closes_the_connection_and_any_host_may_be_allowed() -> None:
    with pytest.raises(Refusal) as refused:
        guard().check(environ(host="a b"), endpoint=True)
    assert refused.value.status == 400 and refused.value.headers == {"Connection": "close"}
    assert refusal(guard(allowed_hosts="*"), environ(host="anything.example", peer=REMOTE_PEER)) is None


@pytest.mark.parametrize(
    "settings,peer,status",
    [
        ({}, "10.1.2.3", 421),
        ({"trusted_peers": "10.0.0.0/8"}, "10.1.2.3", None),
        ({"trusted_peers": "10.0.0.0/8"}, "11.1.2.3", 421),
    ],
)
def test_trusted_peers_may_send_a_loopback_host(settings: dict[str, str], peer: str, status: int | None) -> None:
    assert refusal(guard(**settings), environ(host="localhost:8000", peer=peer)) == status


@pytest.mark.parametrize(
    "forwarded,status", [({}, None), ({"x_forwarded_for": "198.51.100.1"}, 421), ({"forwarded": "for=x"}, 421)]
)
def test_behind_a_public_front_a_passed_on_loopback_host_is_refused(
    forwarded: dict[str, str], status: int | None
) -> None:
    check = guard(token=TOKEN, public_front="true")
    env = environ(host="localhost:8000", authorization=f"Bearer {TOKEN}", **forwarded)
    assert refusal(check, env) == status


def test_what_passed_is_remembered_only_where_nothing_else_of_the_request_counts() -> None:
    plain = guard()
    assert refusal(plain, environ(host="localhost:8000")) is None
    assert refusal(plain, environ(host="evil.example")) == 421
    assert refusal(plain, environ(origin="https://evil.example")) == 403
    assert plain.passed == {("localhost:8000", LOOPBACK_PEER, None)}  # refusals are never remembered
    assert refusal(plain, environ(host="localhost:8000", peer=REMOTE_PEER)) == 421  # the same Host from afar
    front = guard(token=TOKEN, public_front="true")  # a loopback Host through it: the forwarding headers count
    bearer = f"Bearer {TOKEN}"
    assert refusal(front, environ(host="localhost:8000", authorization=bearer)) is None
    assert refusal(front, environ(host="localhost:8000", authorization=bearer, x_forwarded_for="198.51.100.1")) == 421
    assert not front.passed
    assert refusal(front, environ(host="localhost:8000")) == 401  # the token is asked each time


# -- cross-site browser requests (Sec-Fetch-Site) on the MCP endpoints --------------------------------------


@pytest.mark.parametrize(
    "headers,endpoint,status",
    [
        ({"sec_fetch_site": "cross-site"}, True, 403),  # an <img> or a form: no Origin
        ({"sec_fetch_site": "cross-site", "origin": "http://localhost:3000"}, True, 403),  # loopback, not listed
        ({"sec_fetch_site": "cross-site", "origin": "https://page.example"}, True, None),  # a listed CORS page
        ({"sec_fetch_site": "Cross-Site", "origin": "https://page.example/"}, True, None),
        ({"sec_fetch_site": "cross-site"}, False, None),  # a page, not an endpoint
        ({"sec_fetch_site": "same-origin"}, True, None),
        ({"sec_fetch_site": "same-site"}, True, None),
        ({"sec_fetch_site": "none"}, True, None),
    ],
)
def test_the_cross_site_rule(headers: dict[str, str], endpoint: bool, status: int | None) -> None:
    check = guard(cors_origins="https://page.example")
    assert refusal(check, environ(**headers), endpoint) == status


# -- the static token (MCPGATE_AUTH_TOKEN): on the endpoints only -------------------------------------------


@pytest.mark.parametrize(
    "authorization,endpoint,status",
    [
        (None, True, 401),
        ("Bearer wrong", True, 401),
        ("Basic czNjcmV0", True, 401),
        ("Bearer ", True, 401),
        (f"Bearer {TOKEN} extra", True, 401),
        (f"Bearer {TOKEN}", True, None),
        (f"bearer  {TOKEN} ", True, None),
        (None, False, None),  # a page (and a CORS preflight) carries no token
    ],
)
def test_the_static_token(authorization: str | None, endpoint: bool, status: int | None) -> None:
    headers = {} if authorization is None else {"authorization": authorization}
    assert refusal(guard(token=TOKEN), environ(**headers), endpoint) == status


def test_who_may_know_what_is_served() -> None:
    assert guard().may_know(environ())
    assert not guard(token=TOKEN).may_know(environ())
    assert guard(token=TOKEN).may_know(environ(authorization=f"Bearer {TOKEN}"))


def test_a_refused_token_asks_for_a_bearer_credential() -> None:
    with pytest.raises(Refusal) as refused:
        guard(token=TOKEN).check(environ(), endpoint=True)
    assert refused.value.headers["WWW-Authenticate"].startswith("Bearer")


# -- the request checks (checks.py) -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "check,header,status",
    [
        (checks.require_post_accept, "application/json, text/event-stream", None),
        (checks.require_post_accept, "*/*", None),
        (checks.require_post_accept, "application/*, text/*", None),
        (checks.require_post_accept, "Application/JSON;q=0.9, text/event-stream;q=0.8", None),
        (checks.require_post_accept, None, 406),
        (checks.require_post_accept, "", 406),
        (checks.require_post_accept, " , ", 406),
        (checks.require_post_accept, "application/json", 406),
        (checks.require_post_accept, "text/event-stream", 406),
        (checks.require_post_accept, "text/html", 406),
        (checks.require_get_accept, "text/event-stream", None),
        (checks.require_get_accept, "*/*", None),
        (checks.require_get_accept, "application/json", 406),
        (checks.require_event_stream_accept, "text/event-stream", None),
        (checks.require_event_stream_accept, "*/*", 406),  # a browser's <img> or <script>
        (checks.require_event_stream_accept, "text/*", 406),
        (checks.require_json_content, "application/json", None),
        (checks.require_json_content, "application/json; charset=utf-8", None),
        (checks.require_json_content, None, 415),
        (checks.require_json_content, "", 415),
        (checks.require_json_content, "Application/JSON", None),
        (checks.require_json_content, "text/plain", 415),
    ],
)
def test_the_request_checks(check: Any, header: str | None, status: int | None) -> None:
    for _ in range(2):  # the second time from what the check remembers of the header (memo.remembered)
        try:
            check(header)
        except Refusal as refused:
            assert (refused.status, refused.code) == (status, -32600), refused
        else:
            assert status is None


# -- CORS (cors.py) ------------------------------------------------------------------------------------------

PAGE = "https://page.example"


@pytest.mark.parametrize(
    "origins,method,origin,requested,preflight",
    [
        ([PAGE], "OPTIONS", PAGE, "POST", True),
        ([PAGE], "OPTIONS", PAGE.upper() + "/", "POST", True),
        ([PAGE], "OPTIONS", PAGE, None, False),  # an OPTIONS that asks for no method is not a preflight
        ([PAGE], "OPTIONS", "https://evil.example", "POST", False),
        ([PAGE], "POST", PAGE, "POST", False),
        ([PAGE], "OPTIONS", None, "POST", False),
        (["*"], "OPTIONS", "https://anyone.example", "DELETE", True),
        ([], "OPTIONS", PAGE, "POST", False),
    ],
)
def test_what_a_preflight_is(
    origins: list[str], method: str, origin: str | None, requested: str | None, preflight: bool
) -> None:
    assert Cors(origins).is_preflight(method, origin, requested) is preflight


@pytest.mark.parametrize(
    "origins,origin,allow",
    [
        ([PAGE], PAGE, PAGE),
        ([PAGE], "https://evil.example", None),
        (["*"], PAGE, "*"),
        ([], PAGE, None),
        ([PAGE], None, None),
    ],
)
def test_the_cors_headers_of_a_real_response(origins: list[str], origin: str | None, allow: str | None) -> None:
    headers = dict(Cors(origins).response_headers(origin))
    assert headers.get("Access-Control-Allow-Origin") == allow
    if allow is not None:
        assert headers["Access-Control-Expose-Headers"] == "Mcp-Session-Id, MCP-Protocol-Version"
        assert headers["Vary"] == "Origin"


@pytest.mark.parametrize(
    "requested,echoed,not_echoed",
    [
        (None, [], []),
        ("content-type, mcp-session-id", [], []),
        ("Mcp-Param-Region, mcp-param-region", ["Mcp-Param-Region"], []),
        ("x-evil, Mcp-Param-Bad Name, Mcp-Param-Ok", ["Mcp-Param-Ok"], ["x-evil", "Mcp-Param-Bad Name"]),
    ],
)
def test_a_preflights_allowed_headers(requested: str | None, echoed: list[str], not_echoed: list[str]) -> None:
    headers = dict(Cors([PAGE]).preflight_headers(PAGE, requested))
    allowed = headers["Access-Control-Allow-Headers"].split(", ")
    assert headers["Access-Control-Allow-Origin"] == PAGE
    assert set(headers["Access-Control-Allow-Methods"].split(", ")) == {"GET", "POST", "DELETE", "OPTIONS"}
    assert {"Content-Type", "Authorization", "Mcp-Session-Id", "MCP-Protocol-Version", "Last-Event-ID"} <= set(allowed)
    assert all(allowed.count(name) == 1 for name in echoed), allowed
    assert not set(not_echoed) & set(allowed)


# -- the refusal catalogue: what each refusal of the front answers -------------------------------------------

CATALOGUE = [
    (lambda: guard().check(environ(host="a,b"), True), 400, "Bad Request: invalid Host"),
    (lambda: guard().check(environ(host="evil.example"), True), 421, "Misdirected Request: this Host is not"),
    (lambda: guard().check(environ(host="localhost", peer=REMOTE_PEER), True), 421, "Misdirected Request: a loopback"),
    (lambda: guard().check(environ(origin="https://evil.example"), True), 403, "Forbidden: this Origin"),
    (lambda: guard().check(environ(sec_fetch_site="cross-site"), True), 403, "Forbidden: a cross-site"),
    (lambda: guard(token=TOKEN).check(environ(), True), 401, "Unauthorized: send Authorization"),
    (lambda: checks.require_post_accept("text/html"), 406, "Not Acceptable"),
    (lambda: checks.require_json_content("text/plain"), 415, "Unsupported Media Type"),
]


@pytest.mark.parametrize("refuse,status,message", CATALOGUE)
def test_each_refusal_is_one_jsonrpc_error_with_its_status(refuse: Any, status: int, message: str) -> None:
    with pytest.raises(Refusal) as refused:
        refuse()
    response = refused.value.response()
    assert response.status == status and isinstance(response.body, bytes)
    answer = json.loads(response.body)
    assert answer["jsonrpc"] == "2.0" and answer["id"] is None and answer["error"]["code"] == -32600
    assert answer["error"]["message"].startswith(message), answer
    assert ("Content-Type", "application/json") in response.headers
