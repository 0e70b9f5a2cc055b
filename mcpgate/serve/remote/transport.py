"""What a remote server adds to the relay's client side: its name on every error, its per-request wall clock
(request_timeout), and whether its last connection attempt failed (/healthz).

`RemoteTransport` wraps the relay's EraTransport: a request that fails is answered with the relay's error, its
message starting "remote server '<name>': "; one that runs past request_timeout is answered with an error naming
the limit (and, on a 2025 session, cancelled upstream), and the session goes on. `WatchedHttpClient` is the
relay's HttpClient telling the server's `Reachability` how each exchange went: one that could not reach the
upstream (connection refused, a timeout, a broken connection, TLS) marks it unreachable, any HTTP answer
reachable again.

An upstream that does not speak 2026-07-28 (its era set to 2025, or refusing server/discover when probed on the
first 2026-07-28 request) gets no 2026-07-28 request: they are answered -32601, so the pool takes the child for
a 2025 one and serves it through its own bridge (a call waiting for the client's input keeps the child to itself
and another child serves the other callers). Through the relay's bridge the one upstream session would be shared
by every caller of the pool's child, and its gate makes them all wait behind a call left at input_required.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import gevent

from mcpgate.config.settings import TOKEN_ENV
from mcpgate.core import jsonrpc, modern
from mcpgate.relay import errors
from mcpgate.relay.eras import MODERN, EraTransport
from mcpgate.relay.http_client import HttpClient, HttpOptions, HttpReply
from mcpgate.relay.transport import OneWay, Transport

log = logging.getLogger("mcpgate.remote")

TIMED_OUT = -32001  # the JSON-RPC code of a request that passed request_timeout (the SDKs' request timeout code)
NOT_MODERN = "this server does not speak 2026-07-28"


class Reachability:
    """Whether a remote server's last connection attempt failed (its reason), shared by its RemoteChildren."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.problem: str | None = None

    def failed(self, reason: str) -> None:
        if self.problem is None:
            log.warning("remote server %s unreachable: %s", self.name, reason)
        self.problem = reason

    def reached(self) -> None:
        if self.problem is not None:
            log.info("remote server %s reachable again", self.name)
        self.problem = None


class WatchedHttpClient(HttpClient):
    """The relay's HttpClient, each exchange's outcome told to the server's Reachability."""

    def __init__(self, options: HttpOptions, url: str, reachability: Reachability) -> None:
        super().__init__(options, url)
        self.reachability = reachability

    def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes | None = None,
        replay_safe: bool = False,
        tries: int | None = None,
        timeout: tuple[float, float] | None = None,
    ) -> HttpReply:
        try:
            reply = super().send(method, url, headers, body, replay_safe, tries, timeout)
        except errors.HttpStatusError:
            raise
        except errors.RelayError as exc:
            self.reachability.failed(exc.message)
            raise
        self.reachability.reached()
        return reply


class RequestTimedOut(errors.RelayError):
    code = TIMED_OUT
    routine = True


class RemoteTransport:
    """The relay's transport for one remote server: errors named, requests timed (see the module docstring)."""

    def __init__(self, inner: Transport, name: str, request_timeout: float) -> None:
        self.inner, self.name, self.request_timeout = inner, name, request_timeout

    def request(self, req: jsonrpc.Request) -> jsonrpc.Response:
        try:
            if modern.is_modern(req) and self._legacy_only():
                error = jsonrpc.error_response(req.id, jsonrpc.METHOD_NOT_FOUND, NOT_MODERN)
                return jsonrpc.Response(req.id, error)
            if not self.request_timeout:
                return self.inner.request(req)
            return self._timed(req)
        except errors.RelayError as exc:
            exc.message = self._named(exc.message)
            raise

    def _legacy_only(self) -> bool:
        """Whether the upstream is known not to speak 2026-07-28 (probed once when not known yet)."""
        era = self.inner
        if not isinstance(era, EraTransport):
            return False
        if era.speaks[MODERN] is None:
            era._probe_modern()  # the relay's own probe (server/discover), once per upstream connection
        return era.speaks[MODERN] is False

    def _timed(self, req: jsonrpc.Request) -> jsonrpc.Response:
        timer = gevent.Timeout(self.request_timeout)
        timer.start()
        try:
            return self.inner.request(req)
        except gevent.Timeout as fired:
            if fired is not timer:
                raise
            if not modern.is_modern(req):  # a 2026-07-28 request is cancelled by its closed stream
                gevent.spawn(self.inner.send_oneway, _cancelled(req.id))
            raise RequestTimedOut(
                f"no answer to {req.method} within request_timeout ({self.request_timeout:g} s)"
            ) from None
        finally:
            timer.close()

    def _named(self, message: str) -> str:
        message = message.replace(f"set {TOKEN_ENV} to a bearer token for this server", "give its entry an auth")
        message = message.replace(f"the bearer token in {TOKEN_ENV} was rejected", "its token was rejected")
        return f"remote server {self.name!r}: {message}"

    def send_oneway(self, message: OneWay) -> None:
        self.inner.send_oneway(message)

    def cancel_grace(self, req: jsonrpc.Request) -> float:
        return self.inner.cancel_grace(req)

    def close(self) -> None:
        self.inner.close()


def _cancelled(request_id: jsonrpc.Id) -> jsonrpc.Notification:
    params = {"requestId": request_id, "reason": "request_timeout"}
    method = "notifications/cancelled"
    return jsonrpc.Notification(method, params, {"jsonrpc": "2.0", "method": method, "params": params})
