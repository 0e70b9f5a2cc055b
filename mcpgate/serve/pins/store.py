"""Where a server's pinned tool definitions and pending changes are kept (mcpgate.serve.pins.guard uses them).

Per server: its pins (tool name -> core.pins.Pin: the fingerprint and a digest per field), its pending changes
(tool name -> Pending: the old and new fingerprints, the fields that changed, when, the new definition for
review when small enough, and whether it was rejected), and whether a complete listing was seen (`sealed`).

- Redis (REDIS_URL: every instance of a fleet shares them): `mcpgate:pins:<server>` (a hash of pins),
  `mcpgate:pins:<server>:pending` (a hash of pending changes), `mcpgate:pins:<server>:rejected` (a hash: name ->
  the rejected fingerprint), `mcpgate:pins:<server>:sealed`. A first-seen pin is HSETNX (the first writer wins);
  approving or rejecting is one Lua script (the pending change must still be the one reviewed).
- Else a file per server, MCPGATE_STATE_DIR/pins/<server>.json (0600, in a 0700 directory), rewritten whole
  (written aside, then renamed) under an exclusive lock on <server>.lock, so every worker of the machine sees
  the same pins.
- In memory, for one process, when the directory cannot be made (logged at start).

No expiry: a pin lasts until approved over. The bounds (tools per server, pending per server, bytes of a kept
definition) are the guard's.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mcpgate.config import paths
from mcpgate.core.pins import Pin

if TYPE_CHECKING:
    from redis import Redis


@dataclass
class Pending:
    """A change awaiting approval: `old` None for a tool first seen after the server's first complete listing."""

    name: str
    verdict: str  # "changed" | "new"
    old: str | None
    new: str
    fields: list[str]
    at: float  # when first seen (seconds since the epoch)
    pin: dict[str, Any]  # the new Pin, encoded: what an approval pins
    definition: dict[str, Any] | None = None  # the new definition, for review (None: larger than the bound)
    rejected: bool = False

    def encode(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def decode(cls, data: str | bytes) -> Pending | None:
        try:
            pending = cls(**json.loads(data))
        except (ValueError, TypeError):
            return None
        fine = isinstance(pending.name, str) and isinstance(pending.new, str) and isinstance(pending.pin, dict)
        return pending if fine and Pin.decode(pending.pin) is not None else None


@dataclass
class State:
    pins: dict[str, Pin] = field(default_factory=dict)
    pending: dict[str, Pending] = field(default_factory=dict)
    sealed: bool = False


class PinStore(Protocol):
    def load(self) -> State: ...
    def update(self, pin: Mapping[str, Pin], pending: Mapping[str, Pending], settle: Iterable[str], seal: bool) -> None:
        """Pin what has no pin yet, record or replace pending changes, drop settled ones, seal."""

    def decide(self, name: str, fingerprint: str, approve: bool) -> Pending | None:
        """Approve (pin the new fingerprint, drop the change) or reject (keep it, hidden) the pending change of
        `name` whose new fingerprint is `fingerprint`; None when there is no such change."""


DECIDE = """
local raw = redis.call('HGET', KEYS[2], ARGV[1])
if not raw then return false end
local change = cjson.decode(raw)
if change['new'] ~= ARGV[2] then return false end
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
  redis.call('HDEL', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
else
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
end
return raw
"""


def _pin_json(pin: Pin) -> str:
    return json.dumps(pin.encode(), separators=(",", ":"))


class RedisPins:
    def __init__(self, redis: Redis, server: str) -> None:
        self.redis = redis
        base = f"mcpgate:pins:{server}"
        self.keys = (base, base + ":pending", base + ":rejected", base + ":sealed")
        self._decide = redis.register_script(DECIDE)

    def load(self) -> State:
        pins_key, pending_key, rejected_key, sealed_key = self.keys
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(pins_key)
        pipe.hgetall(pending_key)
        pipe.hgetall(rejected_key)
        pipe.exists(sealed_key)
        raw_pins, raw_pending, raw_rejected, sealed = pipe.execute()
        state = State(sealed=bool(sealed))
        for name, data in raw_pins.items():
            pin = _decode_pin(data)
            if pin is not None:
                state.pins[name.decode("utf-8", "surrogatepass")] = pin
        rejected = {k.decode("utf-8", "surrogatepass"): v.decode() for k, v in raw_rejected.items()}
        for data in raw_pending.values():
            pending = Pending.decode(data)
            if pending is not None:
                pending.rejected = rejected.get(pending.name) == pending.new
                state.pending[pending.name] = pending
        return state

    def update(self, pin: Mapping[str, Pin], pending: Mapping[str, Pending], settle: Iterable[str], seal: bool) -> None:
        pins_key, pending_key, rejected_key, sealed_key = self.keys
        pipe = self.redis.pipeline(transaction=True)
        for name, value in pin.items():
            pipe.hsetnx(pins_key, _key(name), _pin_json(value))
        for name, change in pending.items():
            pipe.hset(pending_key, _key(name), change.encode())
        for name in settle:
            pipe.hdel(pending_key, _key(name))
            pipe.hdel(rejected_key, _key(name))
        if seal:
            pipe.set(sealed_key, "1")
        pipe.execute()

    def decide(self, name: str, fingerprint: str, approve: bool) -> Pending | None:
        state_pin = ""
        if approve:
            current = self.redis.hget(self.keys[1], _key(name))
            change = Pending.decode(current) if isinstance(current, bytes) else None
            if change is None or change.new != fingerprint:
                return None
            state_pin = json.dumps(change.pin, separators=(",", ":"))
        raw = self._decide(keys=list(self.keys[:3]), args=[_key(name), fingerprint, "1" if approve else "0", state_pin])
        return Pending.decode(raw) if isinstance(raw, bytes) else None


def _key(name: str) -> bytes:
    return name.encode("utf-8", "surrogatepass")


def _decode_pin(data: str | bytes) -> Pin | None:
    try:
        return Pin.decode(json.loads(data))
    except ValueError:
        return None


def _state_of(obj: Any) -> State:
    state = State(sealed=bool(obj.get("sealed")) if isinstance(obj, dict) else False)
    if not isinstance(obj, dict):
        return state
    for name, data in (obj.get("pins") or {}).items():
        pin = Pin.decode(data)
        if pin is not None:
            state.pins[name] = pin
    for data in obj.get("pending") or []:
        pending = Pending.decode(json.dumps(data))
        if pending is not None:
            state.pending[pending.name] = pending
    return state


def _encoded(state: State) -> bytes:
    obj = {
        "sealed": state.sealed,
        "pins": {name: pin.encode() for name, pin in state.pins.items()},
        "pending": [asdict(change) for change in state.pending.values()],
    }
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")


class MemoryPins:
    """One process's pins (the state directory could not be made)."""

    def __init__(self) -> None:
        self.state = State()

    def load(self) -> State:
        return _state_of(json.loads(_encoded(self.state)))  # a copy

    def update(self, pin: Mapping[str, Pin], pending: Mapping[str, Pending], settle: Iterable[str], seal: bool) -> None:
        _apply(self.state, pin, pending, settle, seal)

    def decide(self, name: str, fingerprint: str, approve: bool) -> Pending | None:
        return _decide(self.state, name, fingerprint, approve)


def _apply(
    state: State, pin: Mapping[str, Pin], pending: Mapping[str, Pending], settle: Iterable[str], seal: bool
) -> None:
    for name, value in pin.items():
        state.pins.setdefault(name, value)
    state.pending.update(pending)
    for name in settle:
        state.pending.pop(name, None)
    state.sealed = state.sealed or seal


def _decide(state: State, name: str, fingerprint: str, approve: bool) -> Pending | None:
    change = state.pending.get(name)
    if change is None or change.new != fingerprint:
        return None
    pin = Pin.decode(change.pin)
    if approve and pin is not None:
        state.pins[name] = pin
        del state.pending[name]
    else:
        change.rejected = True
    return change


class DirPins:
    """A server's pins as one file, rewritten whole under a lock (every worker of the machine shares it)."""

    def __init__(self, directory: Path, server: str) -> None:
        paths.make_private_dirs(directory)
        self.path = directory / f"{server}.json"
        self.lock = directory / f"{server}.lock"
        self._seen: tuple[tuple[int, int, int], State] | None = None  # the file's stamp and what it held

    def _read(self) -> State:
        try:
            return _state_of(json.loads(self.path.read_bytes()))
        except FileNotFoundError:
            return State()
        except ValueError:
            return State()

    def _write(self, state: State) -> None:
        part = self.path.with_suffix(f".{secrets.token_hex(4)}")
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(_encoded(state))
        os.replace(part, self.path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[State]:
        fd = os.open(self.lock, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            state = self._read()
            yield state
            self._write(state)
        finally:
            os.close(fd)

    def load(self) -> State:
        """The file's state, read again only when it changed (its mtime, size or inode)."""
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            return State()
        stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
        if self._seen is None or self._seen[0] != stamp:
            self._seen = (stamp, self._read())
        return self._seen[1]

    def update(self, pin: Mapping[str, Pin], pending: Mapping[str, Pending], settle: Iterable[str], seal: bool) -> None:
        with self._locked() as state:
            _apply(state, pin, pending, settle, seal)

    def decide(self, name: str, fingerprint: str, approve: bool) -> Pending | None:
        with self._locked() as state:
            return _decide(state, name, fingerprint, approve)
