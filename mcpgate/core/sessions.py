"""The session registry: minting, lookup, caps and idle expiry (clock passed in)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")

VISIBLE_ASCII = frozenset(range(0x21, 0x7F))


def new_session_id() -> str:
    """A cryptographically random id of visible ASCII (256 bits, URL-safe)."""
    return secrets.token_urlsafe(32)


def is_valid_session_id(value: str, max_length: int | None = 256) -> bool:
    """Visible ASCII (0x21-0x7E) only, as the transport requires, and not absurdly long.

    The cap guards the ids a client sends us; the relay passes max_length=None for an
    upstream's id, which the spec does not bound (a signed token can be long).
    """
    too_long = max_length is not None and len(value) > max_length
    return len(value) > 0 and not too_long and all(ord(ch) in VISIBLE_ASCII for ch in value)


class SessionLimitReached(RuntimeError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"session limit reached ({limit} sessions)")
        self.limit = limit


class SessionRegistry(Generic[T]):
    """Sessions by id, with a cap and an idle time-to-live."""

    def __init__(self, max_sessions: int, idle_ttl: float, mint: Callable[[], str] = new_session_id) -> None:
        if max_sessions < 1 or idle_ttl <= 0:
            raise ValueError("max_sessions and idle_ttl must be positive")
        self.max_sessions = max_sessions
        self.idle_ttl = idle_ttl
        self._mint = mint
        self._sessions: dict[str, T] = {}
        self._last_seen: dict[str, float] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._sessions))

    def create(self, build: Callable[[str], T], now: float) -> T:
        """Mint a fresh id, build the session with it, register it; SessionLimitReached when full.

        The session is built knowing its id, so it is whole when registered; if `build`
        raises, nothing is registered.
        """
        session_id = self._fresh_id()
        value = build(session_id)
        self._register(session_id, value, now)
        return value

    def room(self) -> None:
        """SessionLimitReached when no other session may be registered now."""
        if len(self._sessions) >= self.max_sessions:
            raise SessionLimitReached(self.max_sessions)

    def adopt(self, session_id: str, value: T, now: float) -> None:
        """Register a session under an id it had before (taken over); SessionLimitReached when full."""
        self.room()
        if session_id in self._sessions:
            raise ValueError("that session id is registered already")
        self._register(session_id, value, now)

    def add(self, value: T, now: float) -> str:
        """Register a value (one that need not know its id) under a fresh id; SessionLimitReached when full."""
        session_id = self._fresh_id()
        self._register(session_id, value, now)
        return session_id

    def _fresh_id(self) -> str:
        if len(self._sessions) >= self.max_sessions:
            raise SessionLimitReached(self.max_sessions)
        session_id = self._mint()
        while session_id in self._sessions:
            session_id = self._mint()
        return session_id

    def _register(self, session_id: str, value: T, now: float) -> None:
        self._sessions[session_id] = value
        self._last_seen[session_id] = now

    def get(self, session_id: str) -> T | None:
        return self._sessions.get(session_id)

    def touch(self, session_id: str, now: float) -> None:
        if session_id in self._last_seen:
            self._last_seen[session_id] = now

    def remove(self, session_id: str) -> T | None:
        self._last_seen.pop(session_id, None)
        return self._sessions.pop(session_id, None)

    def expired(self, now: float) -> list[str]:
        """Ids idle for longer than the time-to-live (still registered: the caller ends them)."""
        limit = now - self.idle_ttl
        return [sid for sid, seen in self._last_seen.items() if seen <= limit]
