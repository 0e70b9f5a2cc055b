#!/usr/bin/env python3
"""A stand-in browser for sign-in tests: an HTTP client with a cookie jar that follows redirects and fills and
submits the forms it meets (login, consent, an upstream issuer's page) until it lands on a page without a form,
usually the client's loopback callback. Standard library only, so any Python runs it; it writes nothing to stdout
(a client that launched it may be speaking MCP there); it only talks to loopback hosts.

As a helper (tests import it):

    from tests.browser import Browser
    outcome = Browser(user="ada", password="secret").visit(authorization_url)
    outcome.url, outcome.status, outcome.params["code"], outcome.trail   # the last URL, its query, every step
    Browser(...).visit(url, stop_at="http://127.0.0.1:PORT/callback")    # stop before fetching that URL

As a command (a BROWSER for clients that open a browser; Python's webbrowser and xdg-open both run it):

    BROWSER=tests/browser.py some-client ...        # or: tests/browser.py [--wait] URL
    BROWSER_USER, BROWSER_PASSWORD  the credentials typed into a login form
    BROWSER_CONSENT                 approve (default) or deny: which button a consent form gets
    BROWSER_CHOOSE                  text naming the form, button or link to prefer (e.g. "upstream")
    BROWSER_LOG                     a file to append one JSON line per visit to (its trail, codes redacted)
    BROWSER_HOSTS                   comma-separated extra host names it may visit (loopback always)

The command returns at once and walks in a detached child (like a real browser's launcher, so a client that waits
for its opener before serving its callback does not deadlock); --wait walks in the foreground, and the exit status
then says whether it reached a page without a form (0) or gave up (1).

How it fills a form: hidden fields and defaults kept, the user in the first text/e-mail field (or one named like a
user), the password in the password field, and the form's default button (the first submit button) unless a
button reads like the consent wanted (approve/allow/... or deny/cancel/...). With several forms: the one matching
BROWSER_CHOOSE, else the one with a password field when it has credentials, else the first."""

from __future__ import annotations

import html.parser
import http.cookiejar
import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
MAX_STEPS = 25
TIMEOUT = 15.0
DETACHED_DEADLINE = 120  # seconds: a walk from the command ends by then whatever happens
APPROVE = re.compile(r"approve|allow|accept|authori[sz]e|consent|grant|yes|continue|sign.?in|log.?in|submit", re.I)
DENY = re.compile(r"deny|denied|cancel|reject|decline|refuse|\bno\b", re.I)
USER_FIELD = re.compile(r"user|login|email|name|account|identifier", re.I)
SECRET_PARAMS = ("code", "access_token", "refresh_token", "id_token", "password")


@dataclass
class Form:
    action: str
    method: str
    fields: list[tuple[str, str, str]] = field(default_factory=list)  # (type, name, value) in document order
    buttons: list[tuple[str, str, str]] = field(default_factory=list)  # (name, value, label)
    selects: dict[str, str] = field(default_factory=dict)

    def text(self) -> str:
        return " ".join([self.action, *(label for _, _, label in self.buttons), *(n for _, n, _ in self.fields)])


class Page(html.parser.HTMLParser):
    """The forms, links and visible text of one HTML page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[Form] = []
        self.links: list[tuple[str, str]] = []  # (href, text)
        self.words: list[str] = []
        self._button: list[str] | None = None
        self._button_attrs: dict[str, str] = {}
        self._link: list[str] | None = None
        self._link_href = ""
        self._select: str | None = None
        self._textarea: str | None = None
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        form = self.forms[-1] if self.forms else None
        if tag in ("script", "style"):
            self._skip += 1
        elif tag == "form":
            self.forms.append(Form(a.get("action", ""), a.get("method", "get").lower()))
        elif tag == "input" and form is not None:
            kind = a.get("type", "text").lower()
            if kind in ("submit", "image"):
                form.buttons.append((a.get("name", ""), a.get("value", ""), a.get("value", "") or "submit"))
            elif kind in ("checkbox", "radio"):
                if "checked" in a:
                    form.fields.append((kind, a.get("name", ""), a.get("value", "on")))
            elif kind not in ("button", "reset", "file"):
                form.fields.append((kind, a.get("name", ""), a.get("value", "")))
        elif tag == "button" and form is not None and a.get("type", "submit").lower() == "submit":
            self._button, self._button_attrs = [], a
        elif tag == "select" and form is not None:
            self._select = a.get("name", "")
        elif tag == "option" and form is not None and self._select is not None:
            if self._select not in form.selects or "selected" in a:
                form.selects[self._select] = a.get("value", "")
        elif tag == "textarea" and form is not None:
            self._textarea = a.get("name", "")
            form.fields.append(("textarea", self._textarea, ""))
        elif tag == "a" and a.get("href"):
            self._link, self._link_href = [], a["href"]

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1
        elif tag == "button" and self._button is not None and self.forms:
            label = " ".join(self._button).strip()
            attrs = self._button_attrs
            self.forms[-1].buttons.append((attrs.get("name", ""), attrs.get("value", ""), label or "submit"))
            self._button = None
        elif tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None
        elif tag == "a" and self._link is not None:
            self.links.append((self._link_href, " ".join(self._link).strip()))
            self._link = None

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        text = data.strip()
        if not text:
            return
        self.words.append(text)
        for sink in (self._button, self._link):
            if sink is not None:
                sink.append(text)
        if self._textarea is not None and self.forms:
            kind, name, value = self.forms[-1].fields[-1]
            self.forms[-1].fields[-1] = (kind, name, value + data)

    def text(self) -> str:
        return " ".join(self.words)


@dataclass
class Outcome:
    """Where a visit ended: the last URL (fetched, or the one it stopped at), its status (0 when not fetched)
    and body, and every step as (method, URL with secrets redacted, status)."""

    url: str
    status: int
    body: str
    trail: list[tuple[str, str, int]]

    @property
    def params(self) -> dict[str, str]:
        """The last URL's query parameters (one value each): code, state, iss, error ..."""
        return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.url).query, keep_blank_values=True))

    def describe(self) -> str:
        steps = "\n".join(f"  {m} {u} -> {s}" for m, u, s in self.trail)
        return f"ended at {redact(self.url)} ({self.status}):\n{steps}\n  page: {page_text(self.body)[:400]}"


def redact(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    query = [(k, "REDACTED" if k in SECRET_PARAMS else v) for k, v in urllib.parse.parse_qsl(parts.query, True)]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def page_text(body: str) -> str:
    page = Page()
    page.feed(body)
    return page.text()


class _LoopbackSecure(http.cookiejar.DefaultCookiePolicy):
    """Secure cookies go back to http://127.0.0.1 and localhost too, as real browsers do for loopback."""

    def return_ok_secure(self, cookie: http.cookiejar.Cookie, request: Any) -> bool:
        host = urllib.parse.urlsplit(request.get_full_url()).hostname or ""
        return host in LOOPBACK or bool(super().return_ok_secure(cookie, request))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # every 3xx comes back to visit(), which decides


class Browser:
    """One browser profile (its cookies persist across visits, as a signed-in browser's do)."""

    def __init__(
        self,
        user: str = "",
        password: str = "",
        consent: str = "approve",
        choose: str = "",
        hosts: tuple[str, ...] = (),
    ) -> None:
        self.user, self.password, self.consent, self.choose = user, password, consent, choose
        self.hosts = LOOPBACK | {h.lower() for h in hosts}
        self.cookies = http.cookiejar.CookieJar(policy=_LoopbackSecure())
        self.opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPCookieProcessor(self.cookies), _NoRedirect()
        )

    def visit(self, url: str, stop_at: str | None = None) -> Outcome:
        """Follow redirects and submit forms from `url` until a page without a form, a redirect to a URL
        starting with `stop_at` (not fetched) or to a non-http scheme, or MAX_STEPS."""
        trail: list[tuple[str, str, int]] = []
        method, data, logins = "GET", None, 0
        for _ in range(MAX_STEPS):
            if (stop_at and url.startswith(stop_at)) or urllib.parse.urlsplit(url).scheme not in ("http", "https"):
                trail.append(("STOP", redact(url), 0))
                return Outcome(url, 0, "", trail)
            status, headers, body = self._fetch(method, url, data)
            trail.append((method, redact(url), status))
            if 300 <= status < 400 and headers.get("location"):
                url, method, data = urllib.parse.urljoin(url, headers["location"]), "GET", None
                continue
            page = Page()
            page.feed(body)
            step = self._next(page, url, logins)
            if step is None:
                return Outcome(url, status, body, trail)
            method, url, data, login = step
            logins += login
        raise RuntimeError(f"stand-in browser: no end after {MAX_STEPS} steps:\n" + "\n".join(map(str, trail)))

    def _fetch(self, method: str, url: str, data: bytes | None) -> tuple[int, dict[str, str], str]:
        host = (urllib.parse.urlsplit(url).hostname or "").lower()
        if host not in self.hosts:
            raise RuntimeError(f"stand-in browser: refusing to visit {host!r} (loopback only): {redact(url)}")
        request = urllib.request.Request(url, data=data, method=method, headers={"Accept": "text/html,*/*"})
        if data is not None:
            request.add_header("Content-Type", "application/x-www-form-urlencoded")
        try:
            with self.opener.open(request, timeout=TIMEOUT) as resp:
                return resp.status, {k.lower(): v for k, v in resp.headers.items()}, _text(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, {k.lower(): v for k, v in exc.headers.items()}, _text(exc.read())

    def _next(self, page: Page, url: str, logins: int) -> tuple[str, str, bytes | None, bool] | None:
        """The request this page leads to (method, URL, body, whether it signs in): a form's submission or a
        chosen link; None when the page is the end."""
        form = self._pick(page.forms)
        if form is None:
            for href, label in page.links:
                if self.choose and self.choose.lower() in f"{href} {label}".lower():
                    return "GET", urllib.parse.urljoin(url, href), None, False
            return None
        login = any(kind == "password" for kind, _, _ in form.fields)
        if login and logins >= 2:
            return None  # a login form a third time: the credentials are refused; that page is the end
        body = urllib.parse.urlencode(self._fill(form))
        action = urllib.parse.urljoin(url, form.action)
        if form.method == "post":
            return "POST", action, body.encode(), login
        return "GET", urllib.parse.urlunsplit(urllib.parse.urlsplit(action)._replace(query=body)), None, login

    def _pick(self, forms: list[Form]) -> Form | None:
        if not forms:
            return None
        if self.choose:
            for form in forms:
                if self.choose.lower() in form.text().lower():
                    return form
        if self.password:
            for form in forms:
                if any(kind == "password" for kind, _, _ in form.fields):
                    return form
        return forms[0]

    def _fill(self, form: Form) -> list[tuple[str, str]]:
        pairs: list[tuple[str, str]] = []
        user_done = False
        texts = [name for kind, name, _ in form.fields if kind in ("text", "email")]
        user_name = next((n for n in texts if USER_FIELD.search(n)), texts[0] if texts else None)
        for kind, name, value in form.fields:
            if not name:
                continue
            if kind == "password":
                value = self.password
            elif name == user_name and not user_done and self.user:
                value, user_done = self.user, True
            pairs.append((name, value))
        pairs += list(form.selects.items())
        button = self._button(form)
        if button is not None and button[0]:
            pairs.append((button[0], button[1]))
        return pairs

    def _button(self, form: Form) -> tuple[str, str, str] | None:
        if not form.buttons:
            return None
        words = [f"{name} {value} {label}" for name, value, label in form.buttons]
        if self.consent == "deny":
            wanted = [b for b, w in zip(form.buttons, words, strict=True) if DENY.search(w)]
        else:
            wanted = [b for b, w in zip(form.buttons, words, strict=True) if not DENY.search(w)]
            wanted.sort(key=lambda b: not APPROVE.search(" ".join(b)))  # stable: approve-like first
        return (wanted or form.buttons)[0]


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def from_environment() -> Browser:
    hosts = tuple(h.strip() for h in os.environ.get("BROWSER_HOSTS", "").split(",") if h.strip())
    return Browser(
        user=os.environ.get("BROWSER_USER", ""),
        password=os.environ.get("BROWSER_PASSWORD", ""),
        consent=os.environ.get("BROWSER_CONSENT", "approve"),
        choose=os.environ.get("BROWSER_CHOOSE", ""),
        hosts=hosts,
    )


def _log(record: dict[str, Any]) -> None:
    path = os.environ.get("BROWSER_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as sink:
            sink.write(json.dumps(record) + "\n")


def main(argv: list[str]) -> int:
    wait = "--wait" in argv
    urls = [a for a in argv if a != "--wait"]
    if len(urls) != 1:
        print("usage: tests/browser.py [--wait] URL", file=sys.stderr)
        return 2
    if not wait:
        subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--wait", urls[0]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        return 0
    signal.alarm(DETACHED_DEADLINE)  # a walk nobody waits for still ends
    try:
        outcome = from_environment().visit(urls[0])
    except Exception as exc:  # noqa: BLE001 - report any failure to the log and stderr
        _log({"ok": False, "error": str(exc)})
        print(f"tests/browser.py: {exc}", file=sys.stderr)
        return 1
    _log({"ok": True, "url": redact(outcome.url), "status": outcome.status, "trail": outcome.trail})
    print(f"tests/browser.py: {outcome.describe().splitlines()[0]}", file=sys.stderr)
    return 0 if outcome.status < 400 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
