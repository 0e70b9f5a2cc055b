"""The pages of per-user OAuth to remote upstreams (upstream_oauth.py), beside the vault's page:

    GET  /vault/oauth/<server>            signed in to the gateway: whether you are signed in to that upstream, a
                                          button to sign in (again) and one to sign out; else the sign-in form
    POST /vault/oauth/<server>            action=signin (303 to the upstream's authorization server) or signout
                                          (the tokens deleted, your children of that server stopped); CSRF-checked
    GET  /vault/oauth/<server>/callback   the authorization server's redirect: the state must be one the signed-in
                                          principal started (else refused, nothing kept), then the code redeemed

The elicitation of a call whose principal has not signed in points at the first one. Who the browser is: the
vault page's sign-in (page.Who: embedded mode's own form, or resource-server mode's through the external
authorization server, which comes back to this page). Every answer carries the sign-in pages' security headers;
no token is ever shown, logged or put in a redirect.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from flask import Blueprint, Flask, Response, redirect, request
from markupsafe import escape

from mcpgate.relay.oauth.discovery import SignInError
from mcpgate.serve.oauth import signin
from mcpgate.serve.vault.page import Who, _html, register
from mcpgate.serve.vault.upstream_oauth import UpstreamSignIn
from mcpgate.serve.vault.vault import PAGE_PATH

if TYPE_CHECKING:
    from mcpgate.serve.runtime import Runtime

log = logging.getLogger("mcpgate.vault")


class UpstreamPages:
    def __init__(self, who: Who, find: Callable[[str], UpstreamSignIn | None]) -> None:
        self.who, self.find = who, find

    def _who(self, server: str) -> tuple[UpstreamSignIn, str | None]:
        upstream = self.find(server)
        if upstream is None:
            signin.refuse(404, "Not found", "No server of this gateway signs you in there.")
        who = self.who.current()
        return upstream, (who[0] if who is not None else None)

    def show(self, server: str, note: str = "", status: int = 200) -> Response:
        upstream, principal = self._who(server)
        title = f"Sign in to {server}"
        if principal is None:
            form = "<p>Sign in to the gateway first, then come back to this page.</p>"
            form += self.who.form(signin.csrf_token(), urlsplit(upstream.page_url).path)
            return _html(title, f"<p>{escape(note)}</p>" + form, status)
        csrf = escape(signin.csrf_token())
        state = "signed in" if upstream.signed_in(principal) else "not signed in"
        body = f"<p>{escape(note)}</p>" if note else ""
        body += (
            f"<p>You are {state} to {escape(server)}.</p><form method='post' action='{escape(upstream.page_url)}'>"
            f"<input type='hidden' name='csrf_token' value='{csrf}'><button name='action' value='signin'>Sign in"
            "</button> <button name='action' value='signout'>Sign out</button></form>"
        )
        return _html(title, body, status)

    def change(self, server: str) -> Response:
        signin.check_csrf()
        upstream, principal = self._who(server)
        if principal is None:
            return self.show(server, "Your sign-in has expired: sign in again.", 403)
        action = request.form.get("action", "")
        if action == "signout":
            upstream.sign_out(principal)
            return self.show(server, "Signed out: your sessions with this server were ended.")
        if action != "signin":
            return self.show(server, "Choose sign in or sign out.", 400)
        try:
            url = upstream.begin(principal)
        except SignInError as exc:
            log.warning("a sign-in to server %s cannot start: %s", server, exc)
            return self.show(server, f"The sign-in cannot start: {exc}", 502)
        return redirect(url, 303)  # type: ignore[return-value]

    def callback(self, server: str) -> Response:
        upstream, principal = self._who(server)
        if principal is None:
            return self.show(server, "Sign in to the gateway in this browser, then start again.", 403)
        params = {key: value[:2048] for key, value in request.args.items()}
        try:
            upstream.finish(principal, params)
        except SignInError as exc:
            log.warning("a sign-in to server %s was refused: %s", server, exc)
            return self.show(server, f"The sign-in was refused: {exc}", 400)
        return self.show(server, "Signed in: retry your request.")


def install(app: Flask, who: Who, find: Callable[[str], UpstreamSignIn | None]) -> None:
    pages = UpstreamPages(who, find)
    bp = Blueprint("vault_upstream", __name__)
    path = PAGE_PATH + "/oauth/<server>"
    bp.add_url_rule(path, "show", lambda server: pages.show(server), methods=["GET"])
    bp.add_url_rule(path, "change", pages.change, methods=["POST"])
    bp.add_url_rule(path + "/callback", "callback", pages.callback, methods=["GET"])
    register(app, bp)


def install_for(app: Flask, runtime: Runtime, who: Who | None) -> None:
    """The pages when a published server signs its users in to its upstream (installed beside page.install_for,
    whose `who` they share; None: no page)."""
    servers = runtime.servers
    if who is None:
        return

    def find(name: str) -> UpstreamSignIn | None:
        server = servers.get(name)
        upstream = getattr(server.child_spec, "user_auth", None) if server is not None else None
        return upstream if isinstance(upstream, UpstreamSignIn) else None

    install(app, who, find)
