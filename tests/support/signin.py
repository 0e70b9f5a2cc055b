"""Helpers for the tests that drive the embedded server's password sign-in form directly (the rate limits, the
password checks under attack): a registered public client, and one browser's sign-in page with its CSRF token
and cookie, whose form can be posted again and again. The full walk (login, consent, code) is
tests/support/oauth.sign_in's."""

from __future__ import annotations

import re
import secrets
from urllib.parse import urlencode

import requests

from tests.support.oauth import authorize_query, register_public_client

CALLBACK = "http://127.0.0.1:9/callback"  # never fetched
_CSRF = re.compile(r'<input type="hidden" name="csrf_token" value="([^"]+)">')


def authorization_path(base: str) -> str:
    """/authorize?... for a public client registered now at `base` (resource base + "/mcp")."""
    client_id = register_public_client(base, CALLBACK, "sign-in tests")
    query = authorize_query(client_id, CALLBACK, base + "/mcp", secrets.token_urlsafe(40), "st")
    return "/authorize?" + urlencode(query)


class LoginPage:
    """One browser at the sign-in page of `path` (authorization_path): `submit` posts the form (the browser's
    cookie and CSRF token included; `headers`: e.g. an X-Forwarded-For) and returns the answer unfollowed."""

    def __init__(self, base: str, path: str, headers: dict[str, str] | None = None) -> None:
        self.url = base + path
        self.http = requests.Session()
        self.http.headers.update(headers or {})
        page = self.http.get(self.url, timeout=30)
        found = _CSRF.search(page.text)
        assert page.status_code == 200 and found, (page.status_code, page.text[:300])
        self.csrf = found.group(1)

    def submit(self, user: str, password: str, headers: dict[str, str] | None = None) -> requests.Response:
        form = {"csrf_token": self.csrf, "action": "login", "username": user, "password": password}
        return self.http.post(self.url, data=form, headers=headers, allow_redirects=False, timeout=120)

    def close(self) -> None:
        self.http.close()
