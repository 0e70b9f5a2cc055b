"""The `subscriptions/listen` hub of one pooled child: many client streams, one set of child subscriptions.

A 2026-07-28 client opens a long-lived stream with `subscriptions/listen` and a filter (toolsListChanged,
promptsListChanged, resourcesListChanged, resourceSubscriptions). The hub answers with the subset the child's
capabilities allow (the acknowledgment is each stream's first message), and fans the child's notifications
out to the streams that asked for them, each frame carrying that stream's own listen request id as
`_meta[io.modelcontextprotocol/subscriptionId]`.

What the child is asked for depends on its era:
- legacy (initialize-era) child: list_changed notifications arrive unsolicited; `resources/subscribe` is
  sent when the first stream wants a URI and `resources/unsubscribe` when the last one that wanted it ends.
- modern child: ONE `subscriptions/listen` request stays open on the child for the union of what the streams
  want. When that union changes a new one is opened; the old one keeps delivering until the new one is
  acknowledged, then it is cancelled (notifications/cancelled), so a change leaves no gap.

Fan-out never waits for a client: the hub is driven from the child's reader, so a stream with no room for a
frame is ended at once (the client may listen again) and the others go on.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from mcpgate.core import jsonrpc, versions
from mcpgate.core.jsonrpc import Id, Notification, Response
from mcpgate.core.modern import Failure
from mcpgate.core.subscriptions import (
    ACKNOWLEDGED,
    LIST_KINDS,
    LISTEN,
    RESOURCES_FIELD,
    listen_end,
    listen_frame,
    parse_listen_filter,
)
from mcpgate.core.wire import META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, META_SUBSCRIPTION_ID
from mcpgate.serve.sessions.stream import Stream, StreamLimits

log = logging.getLogger("mcpgate.listen")

CANCELLED = "notifications/cancelled"
UPDATED = "notifications/resources/updated"
SUBSCRIBE = "resources/subscribe"
UNSUBSCRIBE = "resources/unsubscribe"
_KIND_OF_METHOD = {method: kind for kind, (_, method) in LIST_KINDS.items()}
# Child listen ids cancelled lately: their late notifications are consumed and dropped.
_RECENTLY_CANCELLED = 16


class ChildLink(Protocol):
    """What the hub needs of the pool's child."""

    modern: bool  # the child speaks 2026-07-28 (else legacy: unsolicited list_changed, resources/subscribe)
    capabilities: dict[str, Any]  # the child's server capabilities (discover or initialize result)

    def request(self, method: str, params: dict[str, Any], on_response: Callable[[dict[str, Any]], None]) -> str | None:
        """Send a gateway-owned request to the child; its minted id (None: the child is gone)."""
        ...

    def notify(self, method: str, params: dict[str, Any]) -> bool:
        """Send a notification to the child (False: the child is gone)."""
        ...


@dataclass(eq=False, slots=True)
class _Listener:
    stream: Stream
    subscription_id: Id
    kinds: frozenset[str]  # honoured list kinds (filter field names)
    uris: frozenset[str]  # honoured resource URIs
    opened_at: float


@dataclass(eq=False, slots=True)
class _ChildListen:
    """One subscriptions/listen request the hub keeps open on a modern child."""

    notifications: dict[str, Any]
    id: str = ""
    acknowledged: bool = False
    retiring: list[_ChildListen] = field(default_factory=list)


parse_filter = parse_listen_filter


def honoured_filter(
    kinds: frozenset[str], uris: tuple[str, ...] | None, capabilities: Mapping[str, Any]
) -> dict[str, Any]:
    """The acknowledged filter: the asked list kinds the child announces listChanged for, and the asked URIs
    (`uris` None: none were asked) when it announces resources.subscribe."""
    honoured: dict[str, Any] = {}
    for kind in LIST_KINDS:
        if kind in kinds and _capability(capabilities, LIST_KINDS[kind][0], "listChanged"):
            honoured[kind] = True
    if uris is not None and _capability(capabilities, "resources", "subscribe"):
        honoured[RESOURCES_FIELD] = list(uris)
    return honoured


def _capability(capabilities: Mapping[str, Any], name: str, feature: str) -> bool:
    section = capabilities.get(name)
    return isinstance(section, Mapping) and section.get(feature) is True


def frame(message: Notification, subscription_id: Id) -> bytes:
    """The child's notification as one client stream gets it: its own subscription id in `_meta`."""
    return jsonrpc.encode(listen_frame(message.method, message.params, subscription_id))


def final_result(subscription_id: Id) -> bytes:
    """The response that ends a listen stream gracefully."""
    return jsonrpc.encode(listen_end(subscription_id))


def _has_room(stream: Stream, size: int) -> bool:
    """Stream.deliver would queue this without waiting (one message always fits an empty stream)."""
    count, queued = stream.unread
    return not count or (count < stream.limits.messages and queued + size <= stream.limits.bytes)


class ListenHub:
    """The listen streams of one child (see the module docstring). Not thread-safe: one gevent hub drives it."""

    def __init__(self, link: ChildLink, limits: StreamLimits, clock: Callable[[], float] = time.monotonic) -> None:
        self.link = link
        self.limits = limits
        self.clock = clock
        self.closed = False  # end_all was called: no more streams
        self._listeners: dict[Stream, _Listener] = {}
        self._uri_count: Counter[str] = Counter()  # legacy child: streams wanting each subscribed URI
        self._child: _ChildListen | None = None  # modern child: the newest listen requested of it
        self._cancelled: deque[str] = deque(maxlen=_RECENTLY_CANCELLED)

    def __len__(self) -> int:
        return len(self._listeners)

    # -- client streams ------------------------------------------------------------------------------------

    def open(self, subscription_id: Id, wanted: object) -> Stream | Failure:
        """A new client stream whose first message is the acknowledgment of the honoured subset."""
        if self.closed:
            return Failure(503, jsonrpc.CONNECTION_CLOSED, "subscriptions/listen: the server is going away")
        parsed = parse_filter(wanted)
        if isinstance(parsed, Failure):
            return parsed
        honoured = honoured_filter(*parsed, self.link.capabilities)
        stream = Stream(self.limits)
        ack = {
            "jsonrpc": "2.0",
            "method": ACKNOWLEDGED,
            "params": {"_meta": {META_SUBSCRIPTION_ID: subscription_id}, "notifications": honoured},
        }
        stream.deliver(jsonrpc.encode(ack))
        listener = _Listener(
            stream,
            subscription_id,
            frozenset(kind for kind in LIST_KINDS if honoured.get(kind)),
            frozenset(honoured.get(RESOURCES_FIELD, ())),
            self.clock(),
        )
        self._listeners[stream] = listener
        self._child_wants_more(listener)
        return stream

    def close(self, stream: Stream) -> None:
        """The stream is over (its client went away): release what no other stream wants."""
        listener = self._listeners.pop(stream, None)
        stream.close()
        if listener is None:
            return
        log.debug(
            "listen stream ended after %.1fs (%d still open)", self.clock() - listener.opened_at, len(self._listeners)
        )
        self._child_wants_less(listener)

    def end_all(self, reason: str, graceful: bool) -> None:
        """End every stream (graceful: each first gets the final complete result of its listen request) and
        release the child's subscriptions. The hub takes no new streams afterwards."""
        self.closed = True
        listeners = list(self._listeners.values())
        self._end_streams(graceful)
        if listeners:
            log.info("ended %d listen stream(s): %s", len(listeners), reason)
        for listener in listeners:
            self._child_wants_less(listener)

    def _end_streams(self, graceful: bool) -> None:
        listeners = list(self._listeners.values())
        self._listeners.clear()
        for listener in listeners:
            if graceful:
                meta = {META_SUBSCRIPTION_ID: listener.subscription_id}
                final = {
                    "jsonrpc": "2.0",
                    "id": listener.subscription_id,
                    "result": {"resultType": "complete", "_meta": meta},
                }
                listener.stream.deliver(jsonrpc.encode(final), done=True, force=True)
            listener.stream.end()

    # -- the child's messages ------------------------------------------------------------------------------

    def on_child_message(self, message: Notification | Response) -> bool:
        """Route one message from the child; True when it was the hub's (delivered or dropped here)."""
        if not isinstance(message, Notification):
            return False  # responses to the hub's requests reach it through link.request's callback
        if self.link.modern:
            return self._on_modern(message)
        kind = _KIND_OF_METHOD.get(message.method)
        if kind is not None:
            self._fan_out(message, lambda listener: kind in listener.kinds)
            return True
        if message.method == UPDATED:
            self._fan_out_updated(message)
            return True
        return False

    def _on_modern(self, message: Notification) -> bool:
        params = message.params if isinstance(message.params, dict) else {}
        meta = params.get("_meta")
        child_id = meta.get(META_SUBSCRIPTION_ID) if isinstance(meta, dict) else None
        listen = self._child_listen(child_id)
        if listen is None:
            return isinstance(child_id, str) and child_id in self._cancelled
        if message.method == ACKNOWLEDGED:
            self._acknowledged(listen)
        elif message.method == UPDATED:
            self._fan_out_updated(message)
        elif (kind := _KIND_OF_METHOD.get(message.method)) is not None:
            self._fan_out(message, lambda listener: kind in listener.kinds)
        return True  # anything else on our listen is not for any client

    def _fan_out_updated(self, message: Notification) -> None:
        uri = message.params.get("uri") if isinstance(message.params, dict) else None
        if isinstance(uri, str):
            self._fan_out(message, lambda listener: uri in listener.uris)

    def _fan_out(self, message: Notification, wants: Callable[[_Listener], bool]) -> None:
        for listener in [listener for listener in self._listeners.values() if wants(listener)]:
            data = frame(message, listener.subscription_id)
            if not _has_room(listener.stream, len(data)) or not listener.stream.deliver(data):
                count, size = listener.stream.unread
                log.warning("a listen stream fell behind (%d messages, %d bytes unread); ending it", count, size)
                self.close(listener.stream)

    # -- what the child is asked for -----------------------------------------------------------------------

    def _child_wants_more(self, listener: _Listener) -> None:
        if self.link.modern:
            self._sync_child_listen()
            return
        for uri in sorted(listener.uris):
            self._uri_count[uri] += 1
            if self._uri_count[uri] == 1:
                self._legacy_request(SUBSCRIBE, uri)

    def _child_wants_less(self, listener: _Listener) -> None:
        if self.link.modern:
            self._sync_child_listen()
            return
        for uri in sorted(listener.uris):
            self._uri_count[uri] -= 1
            if self._uri_count[uri] <= 0:
                del self._uri_count[uri]
                self._legacy_request(UNSUBSCRIBE, uri)

    def _legacy_request(self, method: str, uri: str) -> None:
        def answered(response: dict[str, Any]) -> None:
            if "error" in response:
                log.warning("the child refused %s: %s", method, response.get("error"))

        if self.link.request(method, {"uri": uri}, answered) is None:
            log.debug("%s not sent: the child is gone", method)

    def _union(self) -> dict[str, Any] | None:
        """The filter the child listen needs for every open stream (None: nothing to listen for)."""
        union: dict[str, Any] = {}
        for kind in LIST_KINDS:
            if any(kind in listener.kinds for listener in self._listeners.values()):
                union[kind] = True
        uris = sorted(set().union(*(listener.uris for listener in self._listeners.values())))
        if uris:
            union[RESOURCES_FIELD] = uris
        return union or None

    def _sync_child_listen(self) -> None:
        wanted = None if self.closed else self._union()
        current = self._child
        if current is not None and current.notifications == wanted:
            return
        if wanted is None:
            self._child = None
            if current is not None:
                for listen in [*current.retiring, current]:
                    self._cancel(listen)
            return
        listen = _ChildListen(wanted)
        self._child = listen
        if current is not None:
            # the acknowledged ones keep delivering until the new one is acknowledged
            for old in [*current.retiring, current]:
                if old.acknowledged:
                    listen.retiring.append(old)
                else:
                    self._cancel(old)
        params = {"_meta": {META_PROTOCOL_VERSION: versions.MODERN[0], META_CLIENT_CAPABILITIES: {}}}
        minted = self.link.request(LISTEN, {**params, "notifications": wanted}, lambda r: self._ended(listen, r))
        if minted is None:
            log.warning("subscriptions/listen not sent: the child is gone")
            self._child = None
            return
        listen.id = minted

    def _child_listen(self, child_id: object) -> _ChildListen | None:
        current = self._child
        if current is None or not isinstance(child_id, str) or not child_id:
            return None
        if current.id == child_id:
            return current
        return next((old for old in current.retiring if old.id == child_id), None)

    def _acknowledged(self, listen: _ChildListen) -> None:
        listen.acknowledged = True
        if listen is self._child:
            for old in listen.retiring:
                self._cancel(old)
            listen.retiring.clear()

    def _cancel(self, listen: _ChildListen) -> None:
        if listen.id:
            self._cancelled.append(listen.id)
            self.link.notify(CANCELLED, {"requestId": listen.id, "reason": "the gateway's listeners changed"})

    def _ended(self, listen: _ChildListen, response: dict[str, Any]) -> None:
        """The child answered one of the hub's listen requests: it ended that subscription."""
        current = self._child
        if current is not None and listen in current.retiring:
            current.retiring.remove(listen)
            return
        if listen is not current:
            return
        graceful = isinstance(response.get("result"), dict)
        log.info(
            "the child ended its subscriptions/listen (%s); ending the listen streams",
            response.get("error", "complete"),
        )
        self._child = None
        for old in current.retiring:
            self._cancel(old)
        self._end_streams(graceful)
