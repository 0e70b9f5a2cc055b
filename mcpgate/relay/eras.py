"""Which wire and which bridge carry each host request: the protocol eras of the host and of the upstream.

The host's era is read from each request (core.modern.is_modern: the 2026-07-28 `_meta`, or server/discover);
the upstream's from `--protocol-era`:
  legacy  the upstream is spoken to in 2025 form (AutoTransport); a modern host goes through ModernHostBridge.
  modern  the upstream is spoken to in 2026-07-28 form (ModernTransport); a legacy host goes through
          LegacyHostBridge.
  auto    the natural way first, a bridge only when needed: a legacy host's initialize goes the legacy way,
          and only when the upstream refuses it as a modern-only server does (a modern error, or an HTTP 4xx
          after which server/discover answers) does the host go through LegacyHostBridge; a modern host's first
          request probes server/discover, and only an upstream that does not answer it as a modern server
          does sends the host through ModernHostBridge over the legacy wire.
What auto finds is kept for the life of the process and logged once per host era.

The 2026-07-28 wire (relay/modern.py) and the bridges (host_bridge.py, server_bridge.py and the continuation
machine they drive) are imported when a route first needs them: a relay whose host and upstream speak 2025 never
loads them (tests/test_lazy_imports.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gevent.lock import Semaphore

from mcpgate.config.declarations import declared
from mcpgate.config.relay_settings import RelaySettings
from mcpgate.core import jsonrpc, modern, versions
from mcpgate.relay import errors
from mcpgate.relay.auto import AutoTransport
from mcpgate.relay.http_client import HttpClient
from mcpgate.relay.transport import OneWay, Sink, Transport

if TYPE_CHECKING:  # the 2026-07-28 wire: imported when a route needs it (modern_wire)
    from mcpgate.relay.modern import ModernTransport

log = logging.getLogger("mcpgate.relay")

ERAS = next(setting.choices for setting in declared(RelaySettings) if setting.name == "protocol_era")
LEGACY, MODERN = "legacy", "modern"
# HTTP statuses with which a modern-only server may refuse an initialize (a missing header, no such method).
MODERN_ONLY_HINTS = frozenset({400, 404, 405})


class EraTransport:
    def __init__(self, url: str, http: HttpClient, sink: Sink, *, era: str, transport_mode: str) -> None:
        if era not in ERAS:
            raise ValueError(f"unknown protocol era {era!r}")
        self.url, self.http, self.sink = url, http, sink
        self.era, self.transport_mode = era, transport_mode
        # Whether the upstream speaks each host era natively (None: not known yet).
        self.speaks: dict[str, bool | None] = {
            LEGACY: None if era == "auto" else era == LEGACY,
            MODERN: None if era == "auto" else era == MODERN,
        }
        self._routes: dict[str, Transport] = {}  # "legacy-natural", "modern-natural", "legacy-bridge", ...
        self._modern: ModernTransport | None = None
        self._deciding = Semaphore()
        self._host_era = LEGACY  # the era of the host's latest request (its one-way messages go the same way)

    # -- the routes -------------------------------------------------------------------------

    def _route(self, host: str) -> Transport:
        """The transport for a host of this era, as far as the upstream's era is known (undecided: natural)."""
        natural = self.speaks[host] is not False
        key = _key(host, natural)
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = self._build(host, natural)
            if self.era != "auto":
                self._log_route(host, natural)
        return route

    def _build(self, host: str, natural: bool) -> Transport:
        if host == LEGACY and natural:
            return AutoTransport(self.url, self.http, self.sink, self.transport_mode)
        if host == MODERN and natural:
            return self.modern_wire()
        if host == LEGACY:
            from mcpgate.relay.host_bridge import LegacyHostBridge

            return LegacyHostBridge(self.modern_wire(), self.sink)
        from mcpgate.relay.server_bridge import ModernHostBridge

        return ModernHostBridge(self._legacy_wire, self.sink)

    def modern_wire(self) -> ModernTransport:
        """The one ModernTransport (the modern host's wire and the legacy-host bridge's share its caches)."""
        if self._modern is None:
            from mcpgate.relay.modern import ModernTransport

            self._modern = ModernTransport(self.url, self.http, self.sink)
        return self._modern

    def _legacy_wire(self, sink: Sink) -> Transport:
        return AutoTransport(self.url, self.http, sink, self.transport_mode)

    # -- requests ---------------------------------------------------------------------------

    def request(self, req: jsonrpc.Request) -> jsonrpc.Response:
        host = MODERN if modern.is_modern(req) else LEGACY
        self._host_era = host
        if self.speaks[host] is None:
            if host == MODERN:
                self._probe_modern()
            elif req.method == "initialize":
                return self._legacy_first(req)
        return self._route(host).request(req)

    def _probe_modern(self) -> None:
        """A modern host's first request: does the upstream answer server/discover as a modern server?"""
        from mcpgate.relay.modern import ModernRefused

        with self._deciding:
            if self.speaks[MODERN] is not None:
                return
            try:
                self.modern_wire().discover()
                speaks = True
            except ModernRefused as refused:
                speaks = refused.recognised
                if not speaks:
                    log.info("%s", refused.message)
            except errors.HttpStatusError as refused:
                if refused.status in errors.CONFIG_STATUSES:
                    raise  # credentials or rate limits: nothing about the era
                log.info("server/discover was refused: %s", refused.message)
                speaks = False
            self._decide(MODERN, speaks)

    def _legacy_first(self, req: jsonrpc.Request) -> jsonrpc.Response:
        """A legacy host's initialize, the legacy way; refused as a modern-only server refuses it: bridged."""
        with self._deciding:
            if self.speaks[LEGACY] is not None:
                return self._route(LEGACY).request(req)
            natural = self._route(LEGACY)
            try:
                reply = natural.request(req)
            except errors.HttpStatusError as refused:
                if not self._modern_only(refused):
                    raise
                log.info("the upstream refused initialize (%s); it speaks 2026-07-28 only", refused.message)
                del self._routes[_key(LEGACY, True)]
                natural.close()
                self._decide(LEGACY, False)
                return self._bridged_first(req, refused)
            if not reply.is_error:
                self._decide(LEGACY, True)
            return reply

    def _bridged_first(self, req: jsonrpc.Request, refused: errors.HttpStatusError) -> jsonrpc.Response:
        """The initialize through LegacyHostBridge; when the bridge cannot reach the upstream either, the era is
        undecided again and the host is told of the refused initialize (the first, plainer answer)."""
        try:
            return self._route(LEGACY).request(req)
        except errors.RelayError as bridged:
            log.info("the 2026-07-28 bridge failed too (%s); reporting the refused initialize", bridged.message)
            self._routes.pop(_key(LEGACY, False), None)  # not closed: it shares the modern wire, still in use
            self.speaks[LEGACY] = None
            raise refused from None

    def _modern_only(self, refused: errors.HttpStatusError) -> bool:
        """Whether a refused initialize means a modern-only upstream: a modern error that does not offer a
        handshake revision, or an HTTP 400/404/405 after which server/discover answers."""
        if refused.code in modern.MODERN_ERRORS:
            return not _offers_handshake(refused)
        if refused.status not in MODERN_ONLY_HINTS:
            return False
        from mcpgate.relay.modern import ModernRefused

        try:
            self.modern_wire().discover()
        except ModernRefused as probe:
            return probe.recognised
        except errors.RelayError:
            return False
        self.speaks[MODERN] = True
        return True

    def _decide(self, host: str, natural: bool) -> None:
        self.speaks[host] = natural
        self._log_route(host, natural)

    def _log_route(self, host: str, natural: bool) -> None:
        upstream = "2026-07-28" if (host == MODERN) == natural else "2025 (sessions)"
        how = "no bridge" if natural else ("LegacyHostBridge" if host == LEGACY else "ModernHostBridge")
        era = "2026-07-28" if host == MODERN else "2025 (initialize)"
        log.info("upstream speaks %s; host speaks %s; bridging: %s", upstream, era, how)

    # -- one-way messages, cancellation, shutdown -------------------------------------------

    def send_oneway(self, message: OneWay) -> None:
        host = self._host_era
        if isinstance(message, jsonrpc.Notification) and modern.is_modern(message):
            host = MODERN
        self._route(host).send_oneway(message)

    def cancel_grace(self, req: jsonrpc.Request) -> float:
        host = MODERN if modern.is_modern(req) else LEGACY
        route = self._routes.get(_key(host, self.speaks[host] is not False))
        return route.cancel_grace(req) if route is not None else 0.0

    def close(self) -> None:
        routes = list(self._routes.values())
        if self._modern is not None and self._modern not in routes:
            routes.append(self._modern)
        self._routes.clear()
        for route in routes:
            try:
                route.close()
            except Exception:  # one route's failure must not keep the others open
                log.exception("relay error closing the upstream transport")


def _key(host: str, natural: bool) -> str:
    return f"{host}-{'natural' if natural else 'bridge'}"


def _offers_handshake(refused: errors.HttpStatusError) -> bool:
    """Whether a -32022 refusal names a handshake revision among those the upstream supports (a dual-era upstream
    refusing only the host's revision); the body excerpt is read when it is whole JSON."""
    data = refused.data if isinstance(refused.data, dict) else {}
    body = jsonrpc.parse(str(data.get("body", "")))
    error = body.obj.get("error") if isinstance(body, jsonrpc.Response) else None
    detail = error.get("data") if isinstance(error, dict) else None
    supported = detail.get("supported") if isinstance(detail, dict) else None
    return isinstance(supported, list) and any(v in versions.HANDSHAKE for v in supported)
