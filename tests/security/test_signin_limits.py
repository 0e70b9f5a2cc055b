"""Issue 20, finding 7: the sign-in limit read X-Forwarded-For from any loopback peer, so a client next to the
gateway (or any client, behind a proxy that passes the header on) wrote a new address into every attempt and was
never limited; and nothing limited the failures of one account tried from many addresses.

Now X-Forwarded-For counts only from the networks of MCPGATE_FORWARDED_FOR_PROXIES (empty by default), and
failures are also limited per user name (MCPGATE_OAUTH_ACCOUNT_LIMIT), for known and unknown names alike. A real
gunicorn, its sign-in form posted as a browser does.
"""

from __future__ import annotations

from pathlib import Path

import requests

from mcpgate.serve.oauth import passwords
from tests.support import serving
from tests.support.oauth import embedded_env
from tests.support.signin import LoginPage, authorization_path

PASSWORD = "correct horse battery staple"
HASH = passwords.make_hash(PASSWORD, "scrypt:1024:8:1")  # cheap: these tests count failures, they do not time them
USERS = f"alice:{HASH},bob:{HASH}"
WRONG = "Wrong user name or password."


def from_address(address: str) -> dict[str, str]:
    return {"X-Forwarded-For": address}


def assert_limited(reply: requests.Response) -> None:
    assert reply.status_code == 429 and "Too many failed sign-ins" in reply.text, (reply.status_code, reply.text[:300])
    assert 1 <= int(reply.headers["Retry-After"]) <= 60


def test_a_spoofed_forwarded_for_from_loopback_does_not_reset_the_limit(tmp_path: Path) -> None:
    env = embedded_env(tmp_path, USERS, MCPGATE_OAUTH_LOGIN_LIMIT="3", MCPGATE_OAUTH_ACCOUNT_LIMIT="1000")
    with serving(env) as gw:
        page = LoginPage(gw.base, authorization_path(gw.base))
        for n in range(3):  # another name and another claimed address each time
            wrong = page.submit(f"user{n}", "guess", headers=from_address(f"198.51.100.{n + 1}"))
            assert wrong.status_code == 200 and WRONG in wrong.text, wrong.text[:300]
        assert_limited(page.submit("alice", PASSWORD, headers=from_address("198.51.100.99")))
        assert_limited(page.submit("bob", PASSWORD))  # the address counted is the peer's, header or not


def test_failures_are_limited_per_account_across_addresses(tmp_path: Path) -> None:
    env = embedded_env(
        tmp_path,
        USERS,
        MCPGATE_OAUTH_LOGIN_LIMIT="3",
        MCPGATE_OAUTH_ACCOUNT_LIMIT="4",
        MCPGATE_FORWARDED_FOR_PROXIES="127.0.0.0/8",  # the test's requests stand for a proxy's, each client its own
    )
    with serving(env) as gw:
        page = LoginPage(gw.base, authorization_path(gw.base))
        addresses = (f"203.0.113.{n}" for n in range(1, 255))
        for name in ("alice", "mallory"):  # a configured name and an unknown one are held back alike
            for _ in range(4):
                wrong = page.submit(name, "guess", headers=from_address(next(addresses)))
                assert wrong.status_code == 200 and WRONG in wrong.text, wrong.text[:300]
            assert_limited(page.submit(name, PASSWORD, headers=from_address(next(addresses))))
        signed_in = page.submit("bob", PASSWORD, headers=from_address(next(addresses)))  # another account is not
        assert signed_in.status_code == 303, (signed_in.status_code, signed_in.text[:300])
        log = gw.log()
        assert "failed sign-in from 203.0.113.1 as alice" in log and "as an unknown name" in log
        assert PASSWORD not in log and "mallory" not in log
