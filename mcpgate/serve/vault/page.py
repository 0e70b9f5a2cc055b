"""The vault's page: a signed-in user fills, replaces or deletes their own slots.

    GET  /vault          signed in: every slot of the published servers, set or not and when, a form each;
                         else the sign-in form (the embedded server's users; a browser signed in at /authorize
                         within the last hours is signed in here too: the same session cookie)
    POST /vault          action=set (slot, value) or delete (slot); CSRF token bound to the browser's session
    POST /vault/login    username, password (the sign-in page's checks and rate limits: signin.Pages)

In resource-server mode the browser signs in through the external authorization server instead (rs_signin.py:
POST /vault/signin, GET /vault/callback), and the principal is the one the MCP endpoint's guard names for that
user's access token.

Write-only: a value is never shown back, never logged, never put in a redirect. The principal is the one the
MCP endpoint gives that user's tokens (issuer#subject), so what is filled here is what that user's MCP calls get.
Every answer carries the sign-in pages' security headers (no framing, no caching, no referrer).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from flask import Blueprint, Flask, Response, redirect, request
from markupsafe import escape

from mcpgate.serve.oauth import signin
from mcpgate.serve.vault.slots import SlotInfo
from mcpgate.serve.vault.vault import PAGE_PATH, Vault

if TYPE_CHECKING:
    from mcpgate.serve.oauth.setup import Authenticator
    from mcpgate.serve.runtime import Runtime
    from mcpgate.serve.vault.rs_signin import PageSignIn

log = logging.getLogger("mcpgate.vault")

STYLE = "body{font-family:sans-serif;max-width:44em;margin:2em auto}td,th{padding:.3em .6em;text-align:left}"


def _html(title: str, body: str, status: int = 200) -> Response:
    page = f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
    page += f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1>{body}</body></html>"
    return Response(page, status=status, mimetype="text/html")


def _when(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


class Who(Protocol):
    """Who the browser on the vault's pages is: embedded mode's sign-in (EmbeddedWho) or resource-server mode's
    (rs_signin.PageSignIn)."""

    def current(self) -> tuple[str, str] | None:
        """(principal, label) of the browser's sign-in, or None."""
        ...

    def form(self, csrf: str, back: str) -> str:
        """The sign-in form's HTML (`back`: the page to come back to, when the sign-in can)."""
        ...


class EmbeddedWho:
    """Embedded mode: the embedded server's sign-in session (its form, or /authorize in the same browser)."""

    def __init__(self, issuer: str) -> None:
        self.issuer = issuer

    def current(self) -> tuple[str, str] | None:
        who = signin.signed_in()
        return None if who is None else (f"{self.issuer}#{who[0]}", who[1])  # Identity.principal of its tokens

    def form(self, csrf: str, back: str) -> str:
        return (
            f"<form method='post' action='{PAGE_PATH}/login'><input type='hidden' name='csrf_token' "
            f"value='{escape(csrf)}'><p><label>User name <input name='username' autocomplete='username'></label>"
            "</p><p><label>Password <input type='password' name='password' autocomplete='current-password'>"
            "</label></p><p><button>Sign in</button></p></form>"
        )


class VaultPage:
    def __init__(self, vault: Vault, who: Who, slots: Callable[[], dict[str, SlotInfo]], pages: Any = None) -> None:
        self.vault, self.who, self.slots, self.pages = vault, who, slots, pages

    def show(self, note: str = "", status: int = 200) -> Response:
        who = self.who.current()
        csrf = signin.csrf_token()
        if who is None:
            form = self.who.form(csrf, PAGE_PATH)
            return _html("Sign in to your credentials", f"<p>{escape(note)}</p>" + form, status)
        principal, label = who
        csrf = escape(csrf)
        kept = self.vault.listing(principal)
        rows = []
        for name, info in sorted(self.slots().items()):
            entry = kept.get(name)
            state = f"set {_when(entry.updated_at)}" if entry else "empty"
            help_link = f" (<a href='{escape(info.help)}' rel='noreferrer'>how to get one</a>)" if info.help else ""
            rows.append(
                f"<tr><td>{escape(info.label)}{help_link}</td><td>{state}</td><td><form method='post' "
                f"action='{PAGE_PATH}'><input type='hidden' name='csrf_token' value='{csrf}'><input type='hidden' "
                f"name='slot' value='{escape(name)}'><input type='password' name='value' autocomplete='off'> "
                "<button name='action' value='set'>Save</button> "
                "<button name='action' value='delete'>Delete</button></form></td></tr>"
            )
        body = f"<p>Signed in as {escape(label)}. Values are never shown back: save a new one to replace it.</p>"
        body += f"<p>{escape(note)}</p>" if note else ""
        body += "<table><tr><th>Credential</th><th>State</th><th></th></tr>" + "".join(rows) + "</table>"
        return _html("Your credentials", body, status)

    def login(self) -> Response:
        signin.check_csrf()
        if self.pages is None:
            signin.refuse(404, "Not found", "This gateway signs you in through its authorization server.")
        name = request.form.get("username", "").strip()
        subject = self.pages.check_password(name, request.form.get("password", ""))
        if subject is None:
            return self.show("Wrong user name or password.", 200)
        signin.sign_in(subject, name)
        log.info("%s signed in to the vault's page", subject)
        return redirect(PAGE_PATH, 303)  # type: ignore[return-value]

    def change(self) -> Response:
        signin.check_csrf()
        who = self.who.current()
        if who is None:
            return self.show("Your sign-in has expired: sign in again.", 403)
        slot, action = request.form.get("slot", ""), request.form.get("action", "")
        info = self.slots().get(slot)
        if info is None:
            return self.show("No such credential.", 400)
        principal = who[0]
        if action == "delete":
            self.vault.delete(principal, slot)
            log.info("%s deleted their credential slot %s", principal, slot)
            return redirect(PAGE_PATH, 303)  # type: ignore[return-value]
        value = request.form.get("value", "")
        limit = self.vault.settings.vault_value_bytes
        if action != "set" or not value or len(value.encode()) > limit or "\x00" in value:
            return self.show(f"Give a value of 1 to {limit} bytes, without NUL (MCPGATE_VAULT_VALUE_BYTES).", 400)
        if not self.vault.put(principal, slot, value):
            return self.show("You keep the most credentials allowed (MCPGATE_VAULT_SLOTS): delete one first.", 400)
        log.info("%s set their credential slot %s", principal, slot)  # never the value
        return redirect(PAGE_PATH, 303)  # type: ignore[return-value]


Route = tuple[str, str, Callable[[], Response], list[str]]  # path, endpoint name, view, methods


def install(
    app: Flask,
    vault: Vault,
    who: Who,
    slots: Callable[[], dict[str, SlotInfo]],
    pages: Any = None,
    routes: tuple[Route, ...] = (),
) -> None:
    """Register /vault on `app` (whose session key is set: the signin blueprint's, or rs_signin's). `slots`: the
    published servers' slots at request time; `pages`: a signin.Pages (its password check and rate limits) for
    the page's own sign-in form (embedded mode); `routes`: the sign-in's own (resource-server mode)."""
    page = VaultPage(vault, who, slots, pages)
    bp = Blueprint("vault", __name__)
    bp.add_url_rule(PAGE_PATH, "show", lambda: page.show(), methods=["GET"])
    bp.add_url_rule(PAGE_PATH, "change", page.change, methods=["POST"])
    if pages is not None:
        bp.add_url_rule(PAGE_PATH + "/login", "login", page.login, methods=["POST"])
    for path, name, view, methods in routes:
        bp.add_url_rule(path, name, view, methods=methods)
    register(app, bp)


def register(app: Flask, bp: Blueprint) -> None:
    """Register a blueprint of the vault's pages: a refused page answered as one, the sign-in's security headers
    on every answer."""

    @bp.errorhandler(signin.PageRefused)
    def refused(exc: signin.PageRefused) -> Response:
        response = _html(exc.title, f"<p>{escape(exc.message)}</p>", exc.status)
        response.headers.update(exc.headers)
        return response

    @bp.after_request
    def protect(response: Response) -> Response:
        for name, value in signin.SECURITY_HEADERS.items():
            response.headers[name] = value
        return response

    app.register_blueprint(bp)


def install_for(app: Flask, runtime: Runtime, authenticator: Authenticator | None = None) -> Who | None:
    """The page on the app of a worker in an OAuth mode whose servers keep per-user values (the app factory's
    hook): embedded mode signs the browser in itself; resource-server mode through the external authorization
    server, checked by `authenticator` (the MCP endpoint's own ResourceGuard). Who the pages' browser is, or None
    (no page)."""
    servers, oauth = runtime.servers, runtime.oauth
    if servers.vault is None or servers.vault.store is None:
        return None

    def slots() -> dict[str, SlotInfo]:
        found: dict[str, SlotInfo] = {}
        for _name, server in servers.items():
            fill = server.child_spec.slots
            if fill is not None:
                found.update((info.name, info) for info in fill.slots.info)
        return found

    if oauth is not None:
        who = EmbeddedWho(oauth.issuer)
        install(app, servers.vault, who, slots, signin.Pages(oauth, runtime.settings))
        return who
    from mcpgate.serve.oauth.resource import ResourceGuard

    if not isinstance(authenticator, ResourceGuard):
        return None
    from mcpgate.serve.vault import rs_signin  # (its OAuth client only in resource-server mode)

    signed = rs_signin.install(app, runtime.settings, authenticator)
    install(app, servers.vault, signed, slots, None, sign_in_routes(signed))
    return signed


def sign_in_routes(signed: PageSignIn) -> tuple[Route, ...]:
    """Resource-server mode's POST /vault/signin (to the authorization server) and GET /vault/callback."""
    from mcpgate.relay.oauth.discovery import SignInError
    from mcpgate.serve.vault.rs_signin import CALLBACK_PATH, SIGNIN_PATH

    def start() -> Response:
        signin.check_csrf()
        try:
            url = signed.begin(request.form.get("next", PAGE_PATH))
        except SignInError as exc:
            log.warning("a sign-in to the vault's page cannot start: %s", exc)
            return _html("Sign-in unavailable", f"<p>The sign-in cannot start: {escape(str(exc))}</p>", 502)
        return redirect(url, 303)  # type: ignore[return-value]

    def callback() -> Response:
        params = {key: value[:2048] for key, value in request.args.items()}
        try:
            back = signed.finish(params, request.environ)
        except SignInError as exc:
            log.warning("a sign-in to the vault's page was refused: %s", exc)
            body = f"<p>The sign-in was refused: {escape(str(exc))}</p><p><a href='{PAGE_PATH}'>Start again</a></p>"
            return _html("Sign-in refused", body, 400)
        return redirect(back, 303)  # type: ignore[return-value]

    return ((SIGNIN_PATH, "signin", start, ["POST"]), (CALLBACK_PATH, "callback", callback, ["GET"]))
