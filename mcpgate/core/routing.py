"""Which HTTP stream each message from a child belongs to.

A response goes to the stream of the POST that carried its request; progress
goes to the stream of the request that owns the token; every other notification
and every server-to-client request goes to the session's GET stream, else to an
open request stream of the same session, else into the session's buffer until
a stream opens. Nothing is broadcast and nothing crosses sessions. Streams are
opaque, hashable objects owned by the caller.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from typing import Final, Generic, NamedTuple, TypeVar

from mcpgate.core.cancel import CancelTracker
from mcpgate.core.jsonrpc import Id, IdKey, Notification, Request, Response, id_key, is_valid_id, progress_token

S = TypeVar("S", bound=Hashable)  # the caller's stream type


# The two targets that are not streams: enum singletons, so mypy narrows `route.target is DROP`
# and no stream the caller names can ever be mistaken for one.
class Buffer(enum.Enum):
    """The target of a message no open stream can take: the session keeps it until one opens."""

    BUFFER = "buffer"


class Drop(enum.Enum):
    """The target of a message that goes nowhere (Route.reason says why)."""

    DROP = "drop"


BUFFER: Final = Buffer.BUFFER
DROP: Final = Drop.DROP
PROGRESS = "notifications/progress"


class DuplicateRequestId(ValueError):
    def __init__(self, request_id: Id) -> None:
        super().__init__(f"request id {request_id!r} is already in flight in this session")
        self.request_id = request_id


class Route(NamedTuple, Generic[S]):
    """Where a message goes: a stream, BUFFER, or DROP (with the reason). A tuple: a request's is made with
    tuple.__new__ (open_request), without a Python frame."""

    target: S | Buffer | Drop
    reason: str = ""
    done: bool = False  # a response that completes its request


_new_tuple = tuple.__new__


class Router(Generic[S]):
    def __init__(self, cancelled: CancelTracker) -> None:
        self.cancelled = cancelled
        # Each request in flight: the route its response takes, made when the request is sent (the response is
        # then routed without making anything).
        self._in_flight: dict[IdKey, Route[S]] = {}
        self._tokens: dict[IdKey, IdKey] = {}  # the progress token of each request in flight that routes one
        self._progress: dict[IdKey, S] = {}
        # request streams still open, oldest first (open_stream, close_stream)
        self.open_streams: dict[S, None] = {}
        self.get_stream: S | None = None

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def open_request(self, request: Request, stream: S) -> None:
        """Record a client request about to be sent to the child on behalf of `stream`."""
        request_id = request.id
        key: IdKey = ("s", request_id) if isinstance(request_id, str) else ("n", request_id)  # id_key, inlined
        if key in self._in_flight:
            raise DuplicateRequestId(request_id)
        params = request.params
        if isinstance(params, dict) and "_meta" in params:  # without it, no progress token (progress_token)
            meta = params["_meta"]  # nor without the key in it (a traced request's _meta: its traceparent alone)
            token = progress_token(request) if isinstance(meta, dict) and "progressToken" in meta else None
            token_key = id_key(token) if token is not None else None
            if token_key is not None and token_key not in self._progress:  # a reused token is not routed twice
                self._progress[token_key] = stream
                self._tokens[key] = token_key
        self._in_flight[key] = _new_tuple(Route, (stream, "", True))  # Route(stream, "", True) without its __new__
        cancelled = self.cancelled
        if cancelled.deadlines:  # else nothing is cancelled (nearly always): forget's call spared
            cancelled.forget(key)

    def open_stream(self, stream: S) -> None:
        self.open_streams[stream] = None

    def close_stream(self, stream: S) -> None:
        self.open_streams.pop(stream, None)
        get = self.get_stream
        if get is not None and (get is stream or get == stream):
            self.get_stream = None

    def route(self, message: Request | Notification | Response, now: float) -> Route[S]:
        if isinstance(message, Response):  # the usual message: a response, routed by its id
            if message.id is None:
                return Route(DROP, "error response without an id")
            request_id = message.id
            key: IdKey = ("s", request_id) if isinstance(request_id, str) else ("n", request_id)  # id_key, inlined
            route = self._in_flight.pop(key, None)
            if route is None:
                if self.cancelled.drop_late(key, now):
                    return Route(DROP, "late response to a cancelled request")
                return Route(DROP, "response to no request in flight")
            if self._tokens:
                self._release(key)
            return route
        if isinstance(message, Notification) and message.method == PROGRESS:
            token = message.params.get("progressToken") if isinstance(message.params, dict) else None
            stream = self._progress.get(id_key(token)) if is_valid_id(token) else None
            if stream is not None:
                return Route(stream)
            return Route(DROP, "progress for a token no open request owns")
        return Route(self.general_target())

    def general_target(self) -> S | Buffer:
        """The stream for messages that belong to no request: GET, else the newest open request stream."""
        if self.get_stream is not None:
            return self.get_stream
        if self.open_streams:
            return next(reversed(self.open_streams))
        return BUFFER

    def cancel(self, request_id: Id, now: float) -> S | None:
        """The client cancelled a request: forget it, drop its late response; return its stream."""
        key = id_key(request_id)
        route = self._in_flight.pop(key, None)
        if route is None:
            return None
        if self._tokens:
            self._release(key)
        self.cancelled.cancel(key, now)
        return route.target  # type: ignore[return-value]  # a request's route is always to its stream

    def abandon_all(self) -> list[tuple[Id, S]]:
        """The child is gone: every request still waiting, with its stream."""
        waiting: list[tuple[Id, S]] = [(value, route.target) for (_, value), route in self._in_flight.items()]  # type: ignore[misc]
        self._in_flight.clear()
        self._tokens.clear()
        self._progress.clear()
        return waiting

    def _release(self, key: IdKey) -> None:
        """A request is no longer in flight: its progress token, if it has one, routes nothing more."""
        token = self._tokens.pop(key, None)
        if token is not None:
            self._progress.pop(token, None)
