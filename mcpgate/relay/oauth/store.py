"""The relay's sign-ins on disk: one JSON file per server URL, shared by every relay of the user.

Where: RelaySettings.config_dir, else $XDG_CONFIG_HOME/mcpgate, else ~/.config/mcpgate; the files live
in its `oauth` subdirectory (mode 0700), each named by a hash of the normalized server URL (the URL
itself is kept inside), mode 0600. Writes are atomic (a temporary file in the same directory,
fsync, rename), so a reader never sees half a file. A lock file per server serializes the
read-modify-write of concurrent relays (fcntl on POSIX, msvcrt on Windows), waited for on the
event loop (polled, never a blocking call) and only for a bounded time.

Interface (what the sign-in flow uses):

    store = TokenStore(settings.config_dir or None)
    with store.locked(url) as record:     # exclusive across processes; saved on exit when changed
        record.bind(issuer)               # the authorization server in force; True when it changed
        record.client / record.tokens     # the registration and tokens held for that issuer
        record.set_tokens(token_response) # access/refresh/expiry from a token endpoint's answer
    store.peek(url) -> Record | None      # read without the lock (status)
    store.forget(url) -> bool             # drop the file; True when there was one

Credentials are bound to their authorization server: a record keeps a registration and tokens per
issuer, and `bind` to another issuer shows that issuer's (none yet: register again); the others
stay on file under their issuer's name. A corrupt file is logged, moved aside (`*.corrupt-<time>`)
and read as empty: it never stops the relay.

Refresh coordination: a relay remembers the tokens it used (`record.tokens`, a copy); before
spending the refresh token it takes the lock and asks `record.newer_than(seen)` (or, given only the
refresh token it read, `record.rotated(refresh_token)`): when another relay
has already refreshed, the stored tokens differ from the ones seen and are used instead of spending
the old (rotated, dead) refresh token a second time.

Beyond the design's sketch: `Record.server_url`, `bind`, `set_tokens`, `clear_tokens`,
`access_valid`, `newer_than`, `rotated`; `TokenStore(directory, lock_timeout=...)`; `StoreLocked` when the
lock is not had in time. The file format is `{"format": 1, "server_url", "issuer", "issuers":
{issuer: {"client", "tokens"}}, "metadata"}` ("" names the issuer of a server without metadata).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

try:  # POSIX
    import fcntl as _fcntl
except ImportError:  # Windows (and tests that hide POSIX modules)
    _fcntl = None  # type: ignore[assignment]
try:
    import msvcrt as _msvcrt
except ImportError:
    _msvcrt = None  # type: ignore[assignment]

log = logging.getLogger("mcpgate.relay")

FORMAT = 1
SUBDIRECTORY = "oauth"
MAX_FILE_BYTES = 1024 * 1024  # a record is a few KiB; anything bigger is not ours
LOCK_TIMEOUT = 600.0  # seconds: longer than a browser sign-in another relay may hold the lock for
LOCK_POLL = (0.005, 0.1)  # the first and the longest pause between attempts at a held lock
DEFAULT_PORTS = {"http": 80, "https": 443}


_unlocked_warned = False


class StoreLocked(TimeoutError):
    """Another relay held the server's lock for longer than the lock timeout."""


def default_directory() -> Path:
    """$XDG_CONFIG_HOME/mcpgate, else ~/.config/mcpgate."""
    base = os.environ.get("XDG_CONFIG_HOME") or ""
    return (Path(base) if os.path.isabs(base) else Path.home() / ".config") / "mcpgate"


def normalized(server_url: str) -> str:
    """The URL as a key: scheme and host lowercased, the default port and any fragment dropped."""
    parts = urlsplit(server_url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    netloc = host if port in (None, DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def file_stem(server_url: str) -> str:
    return hashlib.sha256(normalized(server_url).encode()).hexdigest()[:32]


@dataclass
class Record:
    """What is held for one server: the issuer in force, its registration and tokens, a metadata cache.

    client: client_id, client_secret (optional), source ("preregistered" | "cimd" | "dcr"), issuer.
    tokens: access_token, refresh_token, expires_at (epoch seconds), scope, token_type.
    metadata: free form (PRM and AS documents, fetched_at).
    """

    server_url: str
    issuer: str | None = None
    client: dict[str, Any] = field(default_factory=dict)
    tokens: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    others: dict[str, dict[str, Any]] = field(default_factory=dict)  # other issuers' {"client", "tokens"}

    def __repr__(self) -> str:  # never a token or a secret
        return (
            f"Record(server_url={self.server_url!r}, issuer={self.issuer!r}, "
            f"client_id={self.client.get('client_id')!r}, tokens={sorted(self.tokens)})"
        )

    def bind(self, issuer: str | None) -> bool:
        """Make `issuer` the authorization server in force. True when it changed: the previous one's
        credentials are kept under its name and the new one's (held from before, or none) shown."""
        if issuer == self.issuer:
            return False
        if self.client or self.tokens:
            self.others[self.issuer or ""] = {"client": self.client, "tokens": self.tokens}
        held = self.others.pop(issuer or "", {})
        self.issuer = issuer
        self.client = dict(held.get("client") or {})
        self.tokens = dict(held.get("tokens") or {})
        return True

    def set_tokens(
        self, response: Mapping[str, Any], *, requested: str | None = None, now: float | None = None
    ) -> None:
        """Keep a token endpoint's answer. Without a scope it is the `requested` one (RFC 6749 5.1), else
        the one held; a refresh answer without a refresh token keeps the old one (RFC 6749 section 6);
        without expires_in the expiry is unknown (None)."""
        now = time.time() if now is None else now
        refresh = response.get("refresh_token") or self.tokens.get("refresh_token")
        expires_in = response.get("expires_in")
        expires_at = response.get("expires_at")
        if (isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool)) or (
            isinstance(expires_in, str) and expires_in.isascii() and expires_in.isdigit()
        ):
            expires_at = now + float(expires_in)
        self.tokens = {
            "access_token": response.get("access_token"),
            "token_type": response.get("token_type") or "Bearer",
            "scope": _first(response.get("scope"), requested, self.tokens.get("scope")),
            "expires_at": float(expires_at) if isinstance(expires_at, (int, float)) else None,
            "refresh_token": refresh,
        }
        self.tokens = {name: value for name, value in self.tokens.items() if value is not None}

    def clear_tokens(self) -> None:
        self.tokens = {}

    def access_valid(self, now: float | None = None, margin: float = 60.0) -> bool:
        """An access token is held and does not expire within `margin` seconds (unknown expiry: valid)."""
        if not self.tokens.get("access_token"):
            return False
        expires_at = self.tokens.get("expires_at")
        now = time.time() if now is None else now
        return expires_at is None or float(expires_at) - margin > now

    def newer_than(self, seen: Mapping[str, Any]) -> bool:
        """True when the stored tokens are not the ones a relay read earlier (`seen`): another relay
        refreshed (or signed in) meanwhile, so use these instead of spending the old refresh token."""
        if not self.tokens.get("access_token"):
            return False
        return any(self.tokens.get(name) != seen.get(name) for name in ("access_token", "refresh_token"))

    def rotated(self, refresh_token: str | None) -> bool:
        """True when the stored refresh token is not the one read earlier: another relay spent that one
        (use the stored tokens; spending it again would fail, or revoke the family on a strict server)."""
        stored = self.tokens.get("refresh_token")
        return bool(stored) and stored != refresh_token

    def to_json(self) -> dict[str, Any]:
        issuers = dict(self.others)
        if self.client or self.tokens:
            issuers[self.issuer or ""] = {"client": self.client, "tokens": self.tokens}
        return {
            "format": FORMAT,
            "server_url": self.server_url,
            "issuer": self.issuer,
            "issuers": issuers,
            "metadata": self.metadata,
        }

    @classmethod
    def from_json(cls, server_url: str, data: Any) -> Record:
        """Raises ValueError when `data` is not a record of this format."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError("not a token record of format 1")
        issuer, issuers, metadata = data.get("issuer"), data.get("issuers"), data.get("metadata")
        if not (issuer is None or isinstance(issuer, str)) or not isinstance(issuers, dict):
            raise ValueError("issuer or issuers malformed")
        if not isinstance(metadata, dict):
            raise ValueError("metadata malformed")
        for entry in issuers.values():
            if not isinstance(entry, dict) or not all(isinstance(entry.get(k, {}), dict) for k in ("client", "tokens")):
                raise ValueError("an issuer's entry is malformed")
        others = copy.deepcopy(issuers)
        mine = others.pop(issuer or "", {})
        return cls(
            server_url=data.get("server_url") or server_url,
            issuer=issuer,
            client=dict(mine.get("client") or {}),
            tokens=dict(mine.get("tokens") or {}),
            metadata=metadata,
            others=others,
        )


class TokenStore:
    """The records of every server, in one directory (see the module docstring)."""

    def __init__(self, directory: str | None = None, *, lock_timeout: float = LOCK_TIMEOUT) -> None:
        self.root = Path(directory).expanduser() if directory else default_directory()
        self.directory = self.root / SUBDIRECTORY
        self.lock_timeout = lock_timeout

    def path(self, server_url: str) -> Path:
        return self.directory / f"{file_stem(server_url)}.json"

    @contextmanager
    def locked(self, server_url: str) -> Iterator[Record]:
        """The server's record under an exclusive lock across processes; saved (atomic, 0600) on exit
        when it changed, also when the block raised (a rotated refresh token must not be lost)."""
        self._ensure_directory()
        path = self.path(server_url)
        with self._lock(path):
            record = self._load(server_url, path, move_aside=True) or Record(server_url=normalized(server_url))
            before = _encoded(record)  # a copy: the block may change the record's dicts in place
            try:
                yield record
            finally:
                after = _encoded(record)
                if after != before:
                    self._write(path, after)

    def peek(self, server_url: str) -> Record | None:
        """The record as it is on disk, without the lock (a corrupt file reads as None, left in place)."""
        return self._load(server_url, self.path(server_url), move_aside=False)

    def forget(self, server_url: str) -> bool:
        """Drop the server's record. True when there was one."""
        path = self.path(server_url)
        if not path.exists():
            return False
        with self._lock(path):
            try:
                path.unlink()
            except FileNotFoundError:
                return False
            _fsync_directory(self.directory)
            return True

    # -- the file ------------------------------------------------------------------------------------

    def _ensure_directory(self) -> None:
        if not self.root.exists():
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.directory.mkdir(mode=0o700, exist_ok=True)
        if os.name == "posix":
            os.chmod(self.directory, 0o700)

    def _load(self, server_url: str, path: Path, *, move_aside: bool) -> Record | None:
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read the sign-in record %s (%s); treated as empty", path, exc.strerror)
            return None
        try:
            if len(raw) > MAX_FILE_BYTES:
                raise ValueError(f"larger than {MAX_FILE_BYTES} bytes")
            return Record.from_json(server_url, json.loads(raw))
        except ValueError as exc:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
            self._corrupt(path, str(exc).split(":")[0], move_aside)
            return None

    def _corrupt(self, path: Path, why: str, move_aside: bool) -> None:
        if not move_aside:
            log.warning("the sign-in record %s is corrupt (%s); treated as empty", path, why)
            return
        aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
        try:
            os.replace(path, aside)
        except OSError:
            aside = path
        log.warning("the sign-in record %s was corrupt (%s); moved to %s and treated as empty", path, why, aside.name)

    def _write(self, path: Path, body: bytes) -> None:
        fd, temp = tempfile.mkstemp(dir=self.directory, prefix=f".{path.stem}.", suffix=".tmp")  # mode 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp)
            raise
        _fsync_directory(self.directory)

    # -- the lock ------------------------------------------------------------------------------------

    @contextmanager
    def _lock(self, path: Path) -> Iterator[None]:
        self._ensure_directory()
        lock_path = path.with_suffix(".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        with os.fdopen(fd, "r+b", buffering=0) as f:
            _acquire(f, self.lock_timeout, lock_path)
            try:
                yield
            finally:
                _release(f)


def _encoded(record: Record) -> bytes:
    return json.dumps(record.to_json(), indent=1, sort_keys=True).encode()


def _first(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)


def _try_lock(f: IO[bytes]) -> bool:
    global _unlocked_warned
    try:
        if _fcntl is None and _msvcrt is None:
            if not _unlocked_warned:
                log.warning("no file locking on this system: concurrent relays may each refresh a token")
                _unlocked_warned = True
        elif _fcntl is not None:
            _fcntl.flock(f.fileno(), _fcntl.LOCK_EX | _fcntl.LOCK_NB)
        elif _msvcrt is not None:
            f.seek(0)
            _msvcrt.locking(f.fileno(), _msvcrt.LK_NBLCK, 1)
    except OSError:  # BlockingIOError on POSIX, PermissionError on Windows
        return False
    return True


def _acquire(f: IO[bytes], timeout: float, lock_path: Path) -> None:
    """Poll for the lock, sleeping between attempts (time.sleep yields under gevent), until the timeout."""
    deadline = time.monotonic() + timeout
    pause = LOCK_POLL[0]
    while not _try_lock(f):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise StoreLocked(f"another mcpgate-relay held {lock_path} for more than {timeout:g} s")
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, LOCK_POLL[1])


def _release(f: IO[bytes]) -> None:
    with contextlib.suppress(OSError):
        if _fcntl is not None:
            _fcntl.flock(f.fileno(), _fcntl.LOCK_UN)
        elif _msvcrt is not None:
            f.seek(0)
            _msvcrt.locking(f.fileno(), _msvcrt.LK_UNLCK, 1)


def _fsync_directory(directory: Path) -> None:
    """Make a rename or an unlink durable (POSIX; Windows cannot open a directory)."""
    if os.name != "posix":
        return
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
