"""The embedded authorization server's sign-in pages (serve/oauth/signin.py, users.py, passwords.py,
ratelimit.py): unit tables for the pure parts, then gunicorn in embedded mode driven like a browser (login,
consent, CSRF, anti-framing headers, cookies, the rate limit, a plain password refused at start)."""

from __future__ import annotations

import html
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import requests

from mcpgate.config.declarations import SettingsError
from mcpgate.serve.front import auth
from mcpgate.serve.oauth import passwords, ratelimit, signin, users
from tests.support import Gateway, wait_for
from tests.support.oauth import authorize_query, embedded_env, jwt_claims, redeem_code

PASSWORD = "correct horse battery staple"
CALLBACK = "http://127.0.0.1:9/callback"


# -- users and password hashes ---------------------------------------------------------------------------------


def test_a_plain_password_is_refused_naming_the_user_never_the_value() -> None:
    good = passwords.make_hash(PASSWORD)
    with pytest.raises(SettingsError) as refused:
        users.parse(f"alice:{good},bob:hunter2")
    message = str(refused.value)
    assert "'bob'" in message and "hunter2" not in message and "MCPGATE_OAUTH_USERS" in message
    assert "python -m mcpgate.serve.oauth.passwords bob" in message
    for value in ("alice", f"alice:{good},alice:{good}", f"al:ice:{good}", f"a,b:{good}"):
        with pytest.raises(SettingsError):
            users.parse(value)
    assert users.parse(f" alice:{good} , ,") == {"alice": good}


def test_a_wrong_password_and_an_unknown_user_get_the_same_answer() -> None:
    table = users.Users(f"alice:{passwords.make_hash(PASSWORD)}")
    assert table.subject("alice", PASSWORD) == "user:alice"
    assert table.subject("alice", "wrong") is None
    assert table.subject("mallory", PASSWORD) is None
    assert table.subject("Alice", PASSWORD) is None  # names are exact


def run_passwords(*args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mcpgate.serve.oauth.passwords", *args]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=60)


def test_the_passwords_command_prints_name_and_hash_from_stdin() -> None:
    done = run_passwords("alice", stdin=PASSWORD + "\n")
    assert done.returncode == 0, done.stderr
    name, _, stored = done.stdout.strip().partition(":")
    assert name == "alice" and passwords.is_hash(stored) and passwords.matches(stored, PASSWORD)
    assert PASSWORD not in done.stdout
    assert users.parse(done.stdout.strip()) == {"alice": stored}  # what it prints is what the setting takes
    assert run_passwords("al:ice", stdin=PASSWORD).returncode == 2
    assert run_passwords("alice", stdin="\n").returncode == 1


def test_hashes_are_told_from_passwords() -> None:
    assert passwords.is_hash(passwords.make_hash("x"))
    assert not passwords.is_hash("hunter2")
    assert not passwords.is_hash("scrypt:32768:8:1$salt")  # no digest
    assert not passwords.is_hash("plain$text$here")


# -- the rate limit ----------------------------------------------------------------------------------------------


def test_failures_past_the_limit_wait_out_the_minute() -> None:
    now = [1000.0]
    limit = ratelimit.FailureLimit(3, clock=lambda: now[0])
    for _ in range(3):
        assert limit.retry_after("a") == 0
        limit.failed("a")
    assert limit.retry_after("a") == 60 and limit.retry_after("b") == 0
    now[0] += 59.5
    assert limit.retry_after("a") == 1
    now[0] += 1
    assert limit.retry_after("a") == 0
    limit.failed("a")  # the oldest of the three fell out of the window: one more is two in the last minute
    assert limit.retry_after("a") == 0


def test_the_failure_table_is_bounded() -> None:
    limit = ratelimit.FailureLimit(2, tracked=100)
    for n in range(1000):
        limit.failed(f"10.0.{n // 256}.{n % 256}")
    assert len(limit.failures) == 100
    assert all(len(stamps) <= 2 for stamps in limit.failures.values())
    assert "10.0.3.231" in limit.failures and "10.0.0.0" not in limit.failures  # the oldest went first


def test_the_address_counted() -> None:
    proxies = auth.networks(("127.0.0.0/8", "10.0.0.0/8"))
    forwarded = {"HTTP_X_FORWARDED_FOR": "1.1.1.1, 203.0.113.7"}
    key = ratelimit.client_key
    assert key({"REMOTE_ADDR": "198.51.100.2", **forwarded}, proxies) == "198.51.100.2"  # not a proxy
    assert key({"REMOTE_ADDR": "127.0.0.1", **forwarded}, ()) == "127.0.0.1"  # no proxies named: header ignored
    assert key({"REMOTE_ADDR": "127.0.0.1", **forwarded}, proxies) == "203.0.113.7"
    # the rightmost entry outside the proxies; what the client wrote to its left never counts
    for chain in ("9.9.9.9, 203.0.113.7, 10.1.1.1", "203.0.113.7 , 10.1.1.1,10.2.2.2", "203.0.113.7:4711, 10.0.0.3"):
        assert key({"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": chain}, proxies) == "203.0.113.7", chain
    assert key({"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "junk, 10.9.9.9"}, proxies) == "10.9.9.9"
    assert key({"REMOTE_ADDR": "127.0.0.1"}, proxies) == "127.0.0.1"
    v6 = key({"REMOTE_ADDR": "2001:db8:1:2:aaaa::1"}, proxies)
    assert v6 == key({"REMOTE_ADDR": "2001:db8:1:2:bbbb::9"}, proxies) == "2001:db8:1:2::/64"
    assert key({"REMOTE_ADDR": "::ffff:192.0.2.1"}, proxies) == "192.0.2.1"
    assert key({"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "[2001:db8::5]:80"}, proxies) == "2001:db8::/64"


def test_a_forgiven_failure_no_longer_counts() -> None:
    limit = ratelimit.FailureLimit(2)
    stamp = limit.failed("a")
    limit.failed("a")
    assert limit.retry_after("a") > 0
    limit.forgive("a", stamp)
    assert limit.retry_after("a") == 0 and len(limit.failures["a"]) == 1
    limit.forgive("a", stamp)  # twice: nothing more
    limit.forgive("b", stamp)
    assert len(limit.failures["a"]) == 1 and "b" not in limit.failures


def test_the_cookie_is_host_only_and_secure_on_https() -> None:
    https = signin.cookie_config("https://gw.example.com")
    assert https["SESSION_COOKIE_NAME"].startswith("__Host-") and https["SESSION_COOKIE_SECURE"] is True
    assert https["SESSION_COOKIE_PATH"] == "/" and https["SESSION_COOKIE_DOMAIN"] is None
    plain = signin.cookie_config("http://127.0.0.1:8000")
    assert not plain["SESSION_COOKIE_NAME"].startswith("__Host-") and plain["SESSION_COOKIE_SECURE"] is False
    for config in (https, plain):
        assert config["SESSION_COOKIE_HTTPONLY"] is True and config["SESSION_COOKIE_SAMESITE"] == "Lax"


# -- through gunicorn (embedded mode), driven like a browser --------------------------------------------------

_FORM = re.compile(r'<form method="post" action="(?P<action>[^"]*)">(?P<body>.*?)</form>', re.S)
_HIDDEN = re.compile(r'<input type="hidden" name="(?P<name>[^"]+)" value="(?P<value>[^"]*)">')


def forms(page: str) -> list[tuple[str, dict[str, str]]]:
    """(action, hidden fields) of every form on a page."""
    found = []
    for match in _FORM.finditer(page):
        fields = {m["name"]: html.unescape(m["value"]) for m in _HIDDEN.finditer(match["body"])}
        found.append((html.unescape(match["action"]), fields))
    return found


class Browser:
    """A cookie jar and a client address (X-Forwarded-For, honoured from the loopback peer: the site's gateway
    names loopback in MCPGATE_FORWARDED_FOR_PROXIES)."""

    def __init__(self, base: str, address: str, host: str | None = None) -> None:
        self.base, self.http = base, requests.Session()
        self.http.headers["X-Forwarded-For"] = address
        if host:
            self.http.headers["Host"] = host

    def get(self, path: str) -> requests.Response:
        return self.http.get(self.base + path, allow_redirects=False, timeout=30)

    def post(self, path: str, data: dict[str, str]) -> requests.Response:
        return self.http.post(self.base + path, data=data, allow_redirects=False, timeout=30)

    def submit(self, page: requests.Response, index: int = 0, **fields: str) -> requests.Response:
        action, hidden = forms(page.text)[index]
        return self.post(action, {**hidden, **fields})


def register(base: str, host: str | None = None, name: str = "Signin <Test>") -> str:
    body = {
        "client_name": name,
        "redirect_uris": [CALLBACK],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
    }
    reply = requests.post(base + "/register", json=body, headers={"Host": host} if host else {}, timeout=30)
    assert reply.status_code == 201, reply.text
    return str(reply.json()["client_id"])


def authorize_path(client_id: str, resource: str, verifier: str, state: str = "st-1") -> str:
    return "/authorize?" + urlencode(authorize_query(client_id, CALLBACK, resource, verifier, state))


def assert_guarded(reply: requests.Response) -> None:
    assert reply.headers.get("X-Frame-Options") == "DENY", reply.headers
    assert "frame-ancestors 'none'" in reply.headers.get("Content-Security-Policy", ""), reply.headers
    assert reply.headers.get("Cache-Control") == "no-store"


class Site:
    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.base = f"http://127.0.0.1:{gw.port}"
        self.resource = self.base + "/mcp"
        self.client_id = register(self.base)
        self.verifier = secrets.token_urlsafe(40)
        self.path = authorize_path(self.client_id, self.resource, self.verifier)
        self.addresses = iter(f"203.0.113.{n}" for n in range(1, 255))

    def browser(self) -> Browser:
        return Browser(self.base, next(self.addresses))  # each its own address: rate-limit buckets apart


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    env = embedded_env(
        tmp_path_factory.mktemp("state"),
        f"alice:{passwords.make_hash(PASSWORD)}",
        MCPGATE_OAUTH_LOGIN_LIMIT="3",
        MCPGATE_FORWARDED_FOR_PROXIES="127.0.0.0/8",
    )
    gw = Gateway(env)
    try:
        gw.wait_ready()
        yield Site(gw)
    finally:
        gw.stop()


def code_of(reply: requests.Response) -> dict[str, list[str]]:
    assert reply.status_code == 302, (reply.status_code, reply.text[:400])
    location = reply.headers["Location"]
    assert location.startswith(CALLBACK + "?"), location
    return parse_qs(urlsplit(location).query)


def test_sign_in_then_consent_then_a_code_for_the_user(site: Site) -> None:
    browser = site.browser()
    login = browser.get(site.path)
    assert login.status_code == 200 and "text/html" in login.headers["Content-Type"], login.text[:400]
    assert_guarded(login)
    assert site.client_id in login.text and "Signin &lt;Test&gt;" in login.text  # named, and escaped
    assert 'name="password"' in login.text
    signed_in = browser.submit(login, username="alice", password=PASSWORD)
    assert signed_in.status_code == 303 and signed_in.headers["Location"].endswith(site.path)
    assert_guarded(signed_in)
    consent = browser.get(site.path)
    assert consent.status_code == 200, consent.text[:400]
    assert_guarded(consent)
    for shown in ("Signin &lt;Test&gt;", site.client_id, CALLBACK, "<code>mcp</code>", "alice"):
        assert shown in consent.text, shown
    granted = code_of(browser.submit(consent, action="allow"))
    assert granted["state"] == ["st-1"] and granted["iss"] == [site.base] and granted["code"]
    token = redeem_code(site.base, granted["code"][0], site.verifier, site.client_id, CALLBACK, resource=site.resource)
    assert token.status_code == 200, token.text
    claims = jwt_claims(token.json()["access_token"])
    assert claims["sub"] == "user:alice" and claims["aud"] == site.resource
    again = browser.get(site.path)  # consented before: straight back to the client
    assert code_of(again)["code"] != granted["code"]


def test_deny_sends_access_denied(site: Site) -> None:
    browser = site.browser()
    browser.submit(browser.get(site.path), username="alice", password=PASSWORD)
    other = register(site.base, name="Other")  # not consented yet
    path = authorize_path(other, site.resource, site.verifier, state="st-2")
    consent = browser.get(path)
    assert "Other" in consent.text and other in consent.text
    denied = code_of(browser.submit(consent, action="deny"))
    assert denied["error"] == ["access_denied"] and denied["state"] == ["st-2"] and "code" not in denied


def test_every_form_needs_this_browsers_csrf_token(site: Site) -> None:
    browser, stranger = site.browser(), site.browser()
    login = browser.get(site.path)
    _, fields = forms(login.text)[0]
    assert fields["csrf_token"]
    without = browser.post(site.path, {"action": "login", "username": "alice", "password": PASSWORD})
    assert without.status_code == 400 and "expired" in without.text and "text/html" in without.headers["Content-Type"]
    assert_guarded(without)
    stranger.get(site.path)  # a session of its own, and another token
    forged = stranger.post(site.path, {**fields, "username": "alice", "password": PASSWORD})
    assert forged.status_code == 400
    no_cookie = requests.post(site.base + site.path, data={**fields, "username": "alice", "password": PASSWORD})
    assert no_cookie.status_code == 400
    consent_forged = browser.post(site.path, {"action": "allow"})  # not signed in, no token either
    assert consent_forged.status_code == 400
    assert browser.submit(login, username="alice", password=PASSWORD).status_code == 303  # the real form works


def test_session_cookie_attributes_on_http(site: Site) -> None:
    cookie = site.browser().get(site.path).headers["Set-Cookie"]
    assert cookie.startswith("mcpgate-signin=") and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    assert "Path=/" in cookie and "Secure" not in cookie and "Expires" not in cookie


def test_wrong_password_and_unknown_user_look_alike_then_429(site: Site) -> None:
    browser = site.browser()
    login = browser.get(site.path)
    wrong = browser.submit(login, username="alice", password="not it")
    unknown = browser.submit(login, username="mallory", password=PASSWORD)
    assert wrong.status_code == unknown.status_code == 200
    assert wrong.text == unknown.text and "Wrong user name or password." in wrong.text
    assert_guarded(wrong)
    assert browser.submit(login, username="alice", password="third").status_code == 200
    blocked = browser.submit(login, username="alice", password=PASSWORD)  # right, but the limit (3) is reached
    assert blocked.status_code == 429 and "Too many failed sign-ins" in blocked.text, blocked.text[:300]
    assert 1 <= int(blocked.headers["Retry-After"]) <= 60
    assert_guarded(blocked)
    elsewhere = site.browser()  # another address is not held back
    assert elsewhere.submit(elsewhere.get(site.path), username="alice", password=PASSWORD).status_code == 303
    assert "failed sign-in from 203.0.113." in site.gw.log() and PASSWORD not in site.gw.log()


def test_an_invalid_request_is_the_servers_answer(site: Site) -> None:
    reply = site.browser().get(site.path.replace(site.client_id, "no-such-client"))
    assert reply.status_code == 400 and "Location" not in reply.headers


def test_https_public_url_sets_a_secure_host_only_cookie(tmp_path: Any) -> None:
    env = embedded_env(tmp_path, f"alice:{passwords.make_hash(PASSWORD)}", MCPGATE_PUBLIC_URL="https://gw.example")
    gw = Gateway(env)
    try:
        gw.wait_ready()
        base = f"http://127.0.0.1:{gw.port}"
        client_id = register(base, host="gw.example")
        page = Browser(base, "198.51.100.1", host="gw.example").get(
            authorize_path(client_id, "https://gw.example/mcp", secrets.token_urlsafe(40))
        )
        assert page.status_code == 200, page.text[:400]
        cookie = page.headers["Set-Cookie"]
        assert cookie.startswith("__Host-mcpgate-signin=") and "; Secure" in cookie and "HttpOnly" in cookie
        assert "SameSite=Lax" in cookie and "Path=/" in cookie and "Domain" not in cookie
    finally:
        gw.stop()


def test_a_plain_password_stops_the_start_naming_the_user(tmp_path: Any) -> None:
    gw = Gateway(embedded_env(tmp_path, "alice:hunter2-secret"))
    try:
        assert wait_for(lambda: gw.proc.poll() is not None, timeout=30), "gunicorn started with a plain password"
        log = gw.log()
        assert "user 'alice' has no password hash" in log and "hunter2-secret" not in log, log[-2000:]
    finally:
        gw.stop()
