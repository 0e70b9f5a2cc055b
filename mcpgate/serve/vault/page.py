"""The vault's page (MCPGATE_AUTH_MODE=embedded): a signed-in user fills, replaces or deletes their own slots.

    GET  /vault          signed in: every slot of the published servers, set or not and when, a form each;
                         else the sign-in form (the embedded server's users; a browser signed in at /authorize
                         within the last hours is signed in here too: the same session cookie)
    POST /vault          action=set (slot, value) or delete (slot); CSRF token bound to the browser's session
    POST /vault/login    username, password (the sign-in page's checks and rate limits: signin.Pages)

Write-only: a value is never shown back, never logged, never put in a redirect. The principal is the one the
embedded server's tokens name (issuer#subject), so what is filled here is what that user's MCP calls get.
Every answer carries the sign-in pages' security headers (no framing, no caching, no referrer).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flask import Blueprint, Flask, Response, redirect, request
from markupsafe import escape

from mcpgate.serve.oauth import signin
from mcpgate.serve.vault.slots import SlotInfo
from mcpgate.serve.vault.vault import PAGE_PATH, Vault

if TYPE_CHECKING:
    from mcpgate.serve.runtime import Runtime

log = logging.getLogger("mcpgate.vault")

STYLE = "body{font-family:sans-serif;max-width:44em;margin:2em auto}td,th{padding:.3em .6em;text-align:left}"


def _html(title: str, body: str, status: int = 200) -> Response:
    page = f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
    page += f"<style>{STYLE}</style></head><body><h1>{escape(title)}</h1>{body}</body></html>"
    return Response(page, status=status, mimetype="text/html")


def _when(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


class VaultPage:
    def __init__(self, vault: Vault, issuer: str, slots: Callable[[], dict[str, SlotInfo]], pages: Any) -> None:
        self.vault, self.issuer, self.slots, self.pages = vault, issuer, slots, pages

    def principal(self, subject: str) -> str:
        return f"{self.issuer}#{subject}"  # identity.Identity.principal of the embedded server's tokens

    def show(self, note: str = "", status: int = 200) -> Response:
        who = signin.signed_in()
        csrf = escape(signin.csrf_token())
        if who is None:
            form = (
                f"<form method='post' action='{PAGE_PATH}/login'><input type='hidden' name='csrf_token' "
                f"value='{csrf}'><p><label>User name <input name='username' autocomplete='username'></label></p>"
                "<p><label>Password <input type='password' name='password' autocomplete='current-password'>"
                "</label></p><p><button>Sign in</button></p></form>"
            )
            return _html("Sign in to your credentials", f"<p>{escape(note)}</p>" + form, status)
        subject, label = who
        kept = self.vault.listing(self.principal(subject))
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
        name = request.form.get("username", "").strip()
        subject = self.pages.check_password(name, request.form.get("password", ""))
        if subject is None:
            return self.show("Wrong user name or password.", 200)
        signin.sign_in(subject, name)
        log.info("%s signed in to the vault's page", subject)
        return redirect(PAGE_PATH, 303)  # type: ignore[return-value]

    def change(self) -> Response:
        signin.check_csrf()
        who = signin.signed_in()
        if who is None:
            return self.show("Your sign-in has expired: sign in again.", 403)
        slot, action = request.form.get("slot", ""), request.form.get("action", "")
        info = self.slots().get(slot)
        if info is None:
            return self.show("No such credential.", 400)
        principal = self.principal(who[0])
        if action == "delete":
            self.vault.delete(principal, slot)
            log.info("%s deleted their credential slot %s", who[0], slot)
            return redirect(PAGE_PATH, 303)  # type: ignore[return-value]
        value = request.form.get("value", "")
        limit = self.vault.settings.vault_value_bytes
        if action != "set" or not value or len(value.encode()) > limit or "\x00" in value:
            return self.show(f"Give a value of 1 to {limit} bytes, without NUL (MCPGATE_VAULT_VALUE_BYTES).", 400)
        if not self.vault.put(principal, slot, value):
            return self.show("You keep the most credentials allowed (MCPGATE_VAULT_SLOTS): delete one first.", 400)
        log.info("%s set their credential slot %s", who[0], slot)  # never the value
        return redirect(PAGE_PATH, 303)  # type: ignore[return-value]


def install(app: Flask, vault: Vault, issuer: str, slots: Callable[[], dict[str, SlotInfo]], pages: Any) -> None:
    """Register /vault on `app` (whose signin blueprint set the session key). `slots`: the published servers' slots
    at request time; `pages`: a signin.Pages (its password check and rate limits)."""
    page = VaultPage(vault, issuer, slots, pages)
    bp = Blueprint("vault", __name__)
    bp.add_url_rule(PAGE_PATH, "show", lambda: page.show(), methods=["GET"])
    bp.add_url_rule(PAGE_PATH, "change", page.change, methods=["POST"])
    bp.add_url_rule(PAGE_PATH + "/login", "login", page.login, methods=["POST"])
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


def install_for(app: Flask, runtime: Runtime) -> None:
    """The page on the app of a worker in embedded mode whose servers have slots (the app factory's hook)."""
    servers, oauth = runtime.servers, runtime.oauth
    if oauth is None or servers.vault is None or servers.vault.store is None:
        return

    def slots() -> dict[str, SlotInfo]:
        found: dict[str, SlotInfo] = {}
        for _name, server in servers.items():
            fill = server.child_spec.slots
            if fill is not None:
                found.update((info.name, info) for info in fill.slots.info)
        return found

    install(app, servers.vault, oauth.issuer, slots, signin.Pages(oauth, runtime.settings))
