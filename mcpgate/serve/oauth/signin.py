"""The pages of the embedded authorization server: /authorize (sign in, then consent), and sign-in through an
upstream identity provider (/login/upstream, /login/callback).

The authorization request itself is the server's (server.begin validates it, server.finish answers the client);
this module decides who the browser is and whether they agree. Every form carries a CSRF token bound to the
browser's signed session cookie; every answer forbids framing; failed sign-ins are rate-limited per address and
per user name; passwords are checked on a small thread pool (hashing.py), never on the worker's event loop.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from collections.abc import Collection, Iterable
from typing import Any, NoReturn, Protocol, cast

from flask import Blueprint, Flask, Request, Response, redirect, render_template, request, session
from flask.blueprints import BlueprintSetupState

from mcpgate.config.settings import Settings
from mcpgate.observe import audit, refusals
from mcpgate.serve.front import auth
from mcpgate.serve.oauth.hashing import BUSY_RETRY_AFTER, Busy, HashPool
from mcpgate.serve.oauth.passwords import NAME
from mcpgate.serve.oauth.ratelimit import FailureLimit, client_key
from mcpgate.serve.oauth.server import OAuthProblem
from mcpgate.serve.oauth.upstream import Upstream, UpstreamFailed, permitted
from mcpgate.serve.oauth.users import Users

log = logging.getLogger("mcpgate.oauth.signin")

SESSION_SECRET = "signin-session"  # the name of the Flask session key in the server's storage
SIGNED_IN_FOR = 8 * 3600.0  # seconds a sign-in in this browser stays good for new authorization requests
SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'",
    "Cache-Control": "no-store",
    "Pragma": "no-cache",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


class Pending(Protocol):
    """A validated authorization request (server.begin)."""

    client_id: str
    client_name: str
    redirect_uri: str
    scopes: Collection[str]


class ConsentStore(Protocol):
    def consented(self, subject: str, client_id: str, scopes: Iterable[str]) -> bool: ...
    def record_consent(self, subject: str, client_id: str, scopes: Iterable[str]) -> None: ...
    def secret(self, name: str) -> bytes: ...


class AuthorizationServer(Protocol):
    storage: ConsentStore

    def begin(self, request: Request) -> Pending: ...
    def finish(self, request: Request, subject: str | None) -> Response: ...
    def problem_response(self, exc: OAuthProblem, request: Request) -> Response: ...


class PageRefused(Exception):
    """A sign-in request refused where it is decided; the blueprint renders it once as an HTML page."""

    def __init__(self, status: int, title: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{status} {title}")
        self.status, self.title, self.message = status, title, message
        self.headers = headers or {}


def refuse(status: int, title: str, message: str, headers: dict[str, str] | None = None) -> NoReturn:
    raise PageRefused(status, title, message, headers)


def cookie_config(public_url: str) -> dict[str, Any]:
    """The Flask session cookie: HttpOnly, SameSite=Lax; on an https public URL Secure with the __Host- prefix
    (so no sibling host can set it)."""
    https = public_url.lower().startswith("https://")
    return {
        "SESSION_COOKIE_NAME": "__Host-mcpgate-signin" if https else "mcpgate-signin",
        "SESSION_COOKIE_SECURE": https,
        "SESSION_COOKIE_HTTPONLY": True,
        "SESSION_COOKIE_SAMESITE": "Lax",
        "SESSION_COOKIE_PATH": "/",
        "SESSION_COOKIE_DOMAIN": None,
    }


def csrf_token() -> str:
    """This browser session's CSRF token (made on first use)."""
    token = session.get("csrf")
    if not isinstance(token, str):
        token = secrets.token_urlsafe(32)
        session["csrf"] = token
    return token


def check_csrf() -> None:
    expected, presented = session.get("csrf"), request.form.get("csrf_token", "")
    if not isinstance(expected, str) or not hmac.compare_digest(expected.encode(), presented.encode()):
        refuse(
            400,
            "This form has expired",
            "The form did not come from this sign-in page in this browser (or the browser's session ended). "
            "Go back to the application and start signing in again.",
        )


def signed_in() -> tuple[str, str] | None:
    """(subject, label) of the browser's sign-in, while it is fresh."""
    subject, label, at = session.get("subject"), session.get("label"), session.get("at")
    if not isinstance(subject, str) or not isinstance(at, (int, float)) or time.time() - at > SIGNED_IN_FOR:
        return None
    return subject, str(label or subject)


def sign_in(subject: str, label: str) -> None:
    """A new session for the signed-in browser (nothing from before the sign-in carries over)."""
    session.clear()
    session.update(subject=subject, label=label, at=time.time())
    csrf_token()


def forgive(charged: Iterable[tuple[FailureLimit, str, float]]) -> None:
    """Take back failures counted before a password check (it succeeded, or never ran)."""
    for limit, key, stamp in charged:
        limit.forgive(key, stamp)


class Pages:
    """The views, with what they need from the settings."""

    def __init__(self, server: AuthorizationServer, settings: Settings) -> None:
        self.server, self.settings = server, settings
        self.users = Users(settings.oauth_users)
        self.upstream = Upstream(settings) if settings.oauth_upstream else None
        self.by_address = FailureLimit(settings.oauth_login_limit)
        self.by_account = FailureLimit(settings.oauth_account_limit)
        self.proxies = auth.networks(settings.forwarded_for_proxies)
        self.hashing = HashPool(settings.oauth_signin_threads, settings.oauth_signin_concurrency)
        self.callback_url = settings.public_url.rstrip("/") + "/login/callback"

    def setup(self, state: BlueprintSetupState) -> None:
        app = cast(Flask, state.app)
        app.secret_key = self.server.storage.secret(SESSION_SECRET)
        app.config.update(cookie_config(self.settings.public_url))
        if self.upstream is not None:
            self.upstream.register(app)

    def begin(self) -> Pending:
        try:
            return self.server.begin(request)
        except OAuthProblem as exc:
            raise Problem(self.server.problem_response(exc, request)) from exc

    def page(self, template: str, pending: Pending, status: int = 200, **values: Any) -> Response:
        query = request.query_string.decode("latin-1")
        body = render_template(
            template,
            pending=pending,
            scopes=sorted(pending.scopes),
            action="/authorize?" + query,
            upstream_action="/login/upstream?" + query,
            csrf=csrf_token(),
            users=bool(self.users),
            upstream=self.upstream.display if self.upstream else None,
            **values,
        )
        return Response(body, status=status, mimetype="text/html")

    def authorize(self) -> Response:
        if request.method == "POST":
            check_csrf()
        pending = self.begin()
        action = request.form.get("action") if request.method == "POST" else None
        if action == "login":
            return self.login(pending)
        who = signed_in()
        if who is None:
            if action is not None:
                refuse(400, "Not signed in", "Your sign-in has expired. Go back to the application and try again.")
            return self.page("login.html", pending)
        subject, label = who
        if action == "deny":
            return self.server.finish(request, None)
        if action == "allow":
            self.server.storage.record_consent(subject, pending.client_id, pending.scopes)
            log.info("%s allowed client %s (scopes %s)", subject, pending.client_id, " ".join(sorted(pending.scopes)))
            return self.server.finish(request, subject)
        if action is None and self.server.storage.consented(subject, pending.client_id, pending.scopes):
            return self.server.finish(request, subject)
        return self.page("consent.html", pending, label=label)

    def login(self, pending: Pending) -> Response:
        name = request.form.get("username", "").strip()
        subject = self.check_password(name, request.form.get("password", ""))
        if subject is None:
            return self.page("login.html", pending, error="Wrong user name or password.")
        sign_in(subject, name)
        log.info("%s signed in", subject)
        return redirect("/authorize?" + request.query_string.decode("latin-1"), 303)  # type: ignore[return-value]

    def check_password(self, name: str, password: str) -> str | None:
        """The subject the name and password sign in, or None. Refused (429) past the failures allowed to the
        client's address or to the user name, and (503) when every password check slot is taken."""
        address = client_key(request.environ, self.proxies)
        began = time.monotonic()
        account = name if NAME.fullmatch(name) else "(not a user name)"  # a bounded key
        shown = account if account in self.users.hashes else "an unknown name"  # a password typed as a name
        wait = max(self.by_address.retry_after(address), self.by_account.retry_after(account))
        if wait:
            log.warning("sign-in from %s as %s refused: too many failures", address, shown)
            refusals.count(refusals.RATE_LIMIT)
            if audit.LOG is not None:
                audit.LOG.sign_in(None, "refused", "password", began, account if shown == account else None)
            refuse(
                429,
                "Too many failed sign-ins",
                f"Too many wrong passwords from your address or for this user name. Wait {wait} seconds, then "
                "try again.",
                {"Retry-After": str(wait)},
            )
        # counted before the check, so that attempts checked at the same time count too; forgiven below
        limits = ((self.by_address, address), (self.by_account, account))
        charged = [(limit, key, limit.failed(key)) for limit, key in limits]
        try:
            subject = self.hashing.run(lambda: self.users.subject(name, password)) if self.users else None
        except Busy:
            forgive(charged)
            log.warning("sign-in from %s refused: %d password checks running or waiting", address, self.hashing.ceiling)
            refuse(
                503,
                "Sign-in is busy",
                f"Too many sign-ins are being checked right now. Wait {BUSY_RETRY_AFTER} second, then try again.",
                {"Retry-After": str(BUSY_RETRY_AFTER)},
            )
        if subject is None:
            log.warning("failed sign-in from %s as %s", address, shown)
        else:
            forgive(charged)
        if audit.LOG is not None:  # the account only when it is one (a password typed as a name stays out)
            audit.LOG.sign_in(subject, "failed" if subject is None else "ok", "password", began, subject and name)
        return subject

    def start_upstream(self) -> Response:
        check_csrf()
        if self.upstream is None:
            refuse(404, "Not found", "This gateway signs in no one through another provider.")
        self.begin()
        session["resume"] = request.query_string.decode("latin-1")
        try:
            return self.upstream.redirect(self.callback_url)
        except UpstreamFailed as exc:
            refuse(502, "Sign-in unavailable", f"{exc}. Try again later.")

    def callback(self) -> Response:
        began = time.monotonic()
        resume = session.get("resume")
        if self.upstream is None or not isinstance(resume, str):
            refuse(400, "No sign-in in progress", "Go back to the application and start signing in again.")
        try:
            identity = self.upstream.identity()
        except UpstreamFailed as exc:
            log.warning("upstream sign-in failed: %s", exc)
            if audit.LOG is not None:
                audit.LOG.sign_in(None, "failed", "upstream", began)
            refuse(400, "Sign-in failed", f"{exc}. Go back to the application and try again.")
        if not permitted(identity, self.upstream.allowed):
            log.warning(
                "upstream identity %s (%s) is not in MCPGATE_OAUTH_UPSTREAM_ALLOWED", identity.label, identity.subject
            )
            if audit.LOG is not None:
                audit.LOG.sign_in(None, "refused", "upstream", began, identity.subject)
            refuse(
                403,
                "This account may not sign in here",
                f"{self.upstream.display} signed you in as {identity.label}, but this gateway does not let that "
                "account in. Its operator can allow it (MCPGATE_OAUTH_UPSTREAM_ALLOWED).",
            )
        sign_in(identity.subject, identity.label)
        log.info("%s signed in through %s", identity.subject, self.upstream.display)
        if audit.LOG is not None:
            audit.LOG.sign_in(identity.subject, "ok", "upstream", began)
        return redirect("/authorize?" + resume, 303)  # type: ignore[return-value]


class Problem(Exception):
    """An invalid authorization request: the server's own answer (an error redirect or an error page)."""

    def __init__(self, response: Response) -> None:
        super().__init__("invalid authorization request")
        self.response = response


def blueprint(server: AuthorizationServer, settings: Settings) -> Blueprint:
    """/authorize, /login/upstream and /login/callback. Reads MCPGATE_OAUTH_USERS now (a plain password stops
    the start with a SettingsError naming the user)."""
    pages = Pages(server, settings)
    bp = Blueprint("signin", __name__, template_folder="templates")
    bp.record_once(pages.setup)
    bp.add_url_rule("/authorize", "authorize", pages.authorize, methods=["GET", "POST"])
    bp.add_url_rule("/login/upstream", "upstream", pages.start_upstream, methods=["POST"])
    bp.add_url_rule("/login/callback", "callback", pages.callback, methods=["GET"])

    @bp.errorhandler(PageRefused)
    def refused(exc: PageRefused) -> Response:
        body = render_template("refused.html", title=exc.title, message=exc.message)
        return Response(body, status=exc.status, headers=exc.headers, mimetype="text/html")

    @bp.errorhandler(Problem)
    def problem(exc: Problem) -> Response:
        return exc.response

    @bp.after_request
    def protect(response: Response) -> Response:
        for name, value in SECURITY_HEADERS.items():
            response.headers[name] = value
        return response

    return bp
