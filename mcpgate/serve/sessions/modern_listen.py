"""A 2025 session's change notifications from a 2026-07-28-only child (serve/sessions/modern_bridge.py's part of it).

The session is sent list_changed for every list the child's DiscoverResult declares and resources/updated for
the URIs it subscribed to. For that the bridge keeps ONE subscriptions/listen open on the child, opened once the
client sent notifications/initialized and opened again whenever the subscribed URIs change: the new one is
acknowledged before the old one is cancelled (notifications/cancelled, as stdio ends a request), and a
resources/subscribe or resources/unsubscribe is answered once the listen that carries it is acknowledged, so no
change after that answer is missed. The listen's notifications reach the session without the subscriptionId.
A listen the child ends is not opened again until the subscribed URIs change (logged).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcpgate.core import jsonrpc, subscriptions, wire
from mcpgate.core.jsonrpc import Id, IdKey, Notification, Request, Response
from mcpgate.core.subscriptions import ACKNOWLEDGED, LISTEN

log = logging.getLogger("mcpgate.session")

MAX_URIS = 1024  # resources one session may subscribe to through the bridge


@dataclass(eq=False)
class _Listen:
    id: Id
    filter: dict[str, Any]
    waiting: list[Id] = field(default_factory=list)  # subscribe/unsubscribe requests answered at its acknowledgment


class Listens:
    def __init__(
        self,
        label: str,
        mint: Callable[[str], str],
        send: Callable[[Id, str, dict[str, Any]], object],  # a request to the child (the bridge adds the _meta)
        cancel: Callable[[Id], object],  # notifications/cancelled to the child
        route: Callable[[Request | Notification | Response], None],  # a message for the client
    ) -> None:
        self.label = label
        self._mint, self._send, self._cancel, self._route = mint, send, cancel, route
        self.capabilities: dict[str, Any] = {}  # the child's, from its DiscoverResult
        self.initialized = False
        self._uris: dict[str, None] = {}  # resources the client subscribed to, in order
        self._listen: _Listen | None = None  # the newest listen opened on the child
        self._open: dict[IdKey, _Listen] = {}  # every listen still open, by its id (the subscription id)

    def detach(self) -> None:
        """The child is gone: drop the ways back to the bridge and the session (no reference cycle is left)."""
        self._mint, self._send, self._cancel, self._route = _no_id, _nothing, _nothing, _nothing

    def client_initialized(self) -> None:
        self.initialized = True
        self._relisten([])

    def subscription(self, request: Request) -> None:
        """resources/subscribe or resources/unsubscribe: answered once the listen carrying it is acknowledged."""
        params = request.params if isinstance(request.params, dict) else {}
        uri = params.get("uri")
        if not isinstance(uri, str):
            self._answer(request.id, jsonrpc.INVALID_PARAMS, f"{request.method}: uri must be a string")
            return
        before = list(self._uris)
        if request.method == "resources/unsubscribe":
            self._uris.pop(uri, None)
        elif uri not in self._uris and len(self._uris) >= MAX_URIS:
            self._answer(request.id, jsonrpc.INVALID_REQUEST, f"more than {MAX_URIS} subscriptions in one session")
            return
        else:
            self._uris[uri] = None
        if list(self._uris) == before or not self.initialized:
            self._answer(request.id)
            return
        self._relisten([request.id])

    def _relisten(self, waiting: list[Id]) -> None:
        wanted = subscriptions.bridged_filter(self.capabilities, self._uris)
        if self._listen is not None and self._listen.filter == wanted:
            self._listen.waiting.extend(waiting)  # the same filter: answered with its acknowledgment
            return
        if not wanted:
            self._listen = None
            self._retire(keep=None)
            for request_id in waiting:
                self._answer(request_id)
            return
        listen = _Listen(self._mint("listen"), wanted, list(waiting))
        self._listen = listen
        self._open[jsonrpc.id_key(listen.id)] = listen
        self._send(listen.id, LISTEN, {"notifications": wanted})

    def _retire(self, keep: _Listen | None) -> None:
        for key, listen in list(self._open.items()):
            if listen is not keep:
                del self._open[key]
                self._cancel(listen.id)
                self._release(listen)

    def _release(self, listen: _Listen) -> None:
        for request_id in listen.waiting:
            self._answer(request_id)
        listen.waiting = []

    def _answer(self, request_id: Id, code: int = 0, message: str = "") -> None:
        empty: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "result": {}}
        obj = jsonrpc.error_response(request_id, code, message) if code else empty
        self._route(Response(request_id, obj))

    # -- from the child -------------------------------------------------------------------------------------------
    def notification(self, message: Notification) -> bool:
        """Whether the notification was one of a listen's (taken: passed on without its subscriptionId)."""
        params = message.params if isinstance(message.params, dict) else {}
        meta = params.get("_meta")
        subscription = meta.get(wire.META_SUBSCRIPTION_ID) if isinstance(meta, dict) else None
        listen = self._open.get(jsonrpc.id_key(subscription)) if jsonrpc.is_valid_id(subscription) else None
        if listen is None:
            return False
        if message.method == ACKNOWLEDGED:
            if listen is self._listen:
                self._retire(keep=listen)
            self._release(listen)
            log.info("session %s: listening on the child for %s", self.label, params.get("notifications"))
            return True
        plain = subscriptions.without_subscription_id(message.params) or None  # params left empty: none
        obj: dict[str, Any] = {"jsonrpc": "2.0", "method": message.method}
        if plain is not None:
            obj["params"] = plain
        self._route(Notification(message.method, plain, obj))
        return True

    def ended(self, message: Response) -> bool:
        """Whether the response ends one of the listens (taken)."""
        listen = self._open.pop(jsonrpc.id_key(message.id), None) if message.id is not None else None
        if listen is None:
            return False
        if listen is self._listen:
            self._listen = None
            log.info("session %s: the child ended the listen for changes%s", self.label, " (error)" * message.is_error)
        self._release(listen)
        return True


def _no_id(kind: str) -> str:
    return ""


def _nothing(*_args: object) -> None:
    """A detached Listens' send, cancel and route."""
