"""The 2026-07-28 host's subscriptions/listen streams, served by the relay's ModernHostBridge from a legacy
session: list_changed arrives unsolicited (every kind asked for whose feature the server has is honoured, as
some servers send list_changed without declaring listChanged); a resource URI is subscribed upstream for its
first listener and unsubscribed after its last."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gevent.event import Event
from gevent.pool import Group

from mcpgate.core import jsonrpc, modern, subscriptions
from mcpgate.core.jsonrpc import Id, IdKey, Notification, Request, Response
from mcpgate.core.subscriptions import ACKNOWLEDGED, LIST_KINDS, RESOURCES_FIELD, listen_end, listen_frame
from mcpgate.relay.bridge_calls import error, notification
from mcpgate.relay.transport import Sink

log = logging.getLogger("mcpgate.relay")

TICK = 1.0  # seconds between checks that the relay is not closing while a listen is open
UPDATED = "notifications/resources/updated"
LIST_METHODS = {method: kind for kind, (_, method) in LIST_KINDS.items()}

# Sends one gateway-owned resources/subscribe or resources/unsubscribe upstream; True when it succeeded.
ResourceRequest = Callable[[str, str], bool]


@dataclass(eq=False)
class Listener:
    id: Id
    kinds: frozenset[str]
    uris: frozenset[str]
    done: Event = field(default_factory=Event)


class SessionListens:
    def __init__(self, sink: Sink, resource_request: ResourceRequest, background: Group) -> None:
        self.sink, self.resource_request, self.background = sink, resource_request, background
        self.listeners: dict[IdKey, Listener] = {}
        self.uri_count: Counter[str] = Counter()

    def listen(
        self, req: Request, params: dict[str, Any], capabilities: dict[str, Any], closing: Callable[[], bool]
    ) -> Response:
        """A listen stream: the acknowledgment, the notifications asked for, until the host cancels or the relay
        closes; then the final result."""
        parsed = subscriptions.parse_listen_filter(params.get("notifications"))
        if isinstance(parsed, modern.Failure):
            return error(req.id, parsed.code, parsed.message)
        asked, uris = parsed
        kinds = frozenset(kind for kind in asked if LIST_KINDS[kind][0] in capabilities)
        honoured: dict[str, Any] = dict.fromkeys(sorted(kinds), True)
        if uris is not None and "resources" in capabilities:
            honoured[RESOURCES_FIELD] = [uri for uri in uris if self._subscribe(uri)]
        listener = Listener(req.id, kinds, frozenset(honoured.get(RESOURCES_FIELD, ())))
        try:
            self.sink(notification(listen_frame(ACKNOWLEDGED, {"notifications": honoured}, req.id)))
            self.listeners[jsonrpc.id_key(req.id)] = listener  # nothing of it before the acknowledgment
            while not listener.done.wait(timeout=TICK) and not closing():
                pass
        finally:
            self.listeners.pop(jsonrpc.id_key(req.id), None)
            for uri in listener.uris:
                self.uri_count[uri] -= 1
                if self.uri_count[uri] <= 0:
                    del self.uri_count[uri]
                    self.background.spawn(self.resource_request, "resources/unsubscribe", uri)
        return Response(req.id, listen_end(req.id))

    def _subscribe(self, uri: str) -> bool:
        """Count one more listener of `uri`, subscribing upstream for the first; False when that failed."""
        if self.uri_count[uri] == 0 and not self.resource_request("resources/subscribe", uri):
            del self.uri_count[uri]
            return False
        self.uri_count[uri] += 1
        return True

    def wants(self, message: Notification) -> bool:
        return message.method in LIST_METHODS or message.method == UPDATED

    def fan_out(self, message: Notification) -> None:
        kind = LIST_METHODS.get(message.method)
        uri = message.params.get("uri") if isinstance(message.params, dict) else None
        for listener in list(self.listeners.values()):
            if (kind is not None and kind in listener.kinds) or (message.method == UPDATED and uri in listener.uris):
                self.sink(notification(listen_frame(message.method, message.params, listener.id)))

    def end(self, key: IdKey) -> bool:
        """The host cancelled a listen (True) or something else (False)."""
        listener = self.listeners.get(key)
        if listener is not None:
            listener.done.set()
        return listener is not None

    def close(self) -> None:
        for listener in list(self.listeners.values()):
            listener.done.set()
