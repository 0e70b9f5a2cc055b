"""What is kept of a 2025 session so that another server process can take it over (serve/cluster/takeover.py):
the principal that opened it and the view its identity chose then (views_file.ViewTable: the rule and the views'
fingerprint; a takeover applies that view, whoever's request or forward brings it), the client's initialize
parameters (protocol version, capabilities, client info), the child's InitializeResult, the log level the client
set, its resource subscriptions, and the tags of its earlier lives' event ids (a Last-Event-ID from before a
takeover is answered as such). Nothing the child said besides its InitializeResult: no message, no stream, no call.

Where: in Redis with REDIS_URL (`mcpgate:kept:<server>:<digest>` and who holds the session,
`mcpgate:held:<server>:<digest>`), else in files under MCPGATE_STATE_DIR/sessions/<server>/ (0600). Each is
named by the SHA-256 of the session id, never the id itself (the id is the session's capability: who reads the
store learns no session id from it).

When: written at the end of a successful initialize, and when the client's logging/setLevel,
resources/subscribe or resources/unsubscribe goes to the child; never on a call's path. Bounded: a record
larger than MCPGATE_SESSION_KEPT_BYTES is not kept (the session then ends with its process, as without this).
Its lifetime follows the session's: written with the idle timeout (and a margin) as its expiry, pushed back by
the server's reaper while the session lives, deleted when the session ends (the client's DELETE, idle, its
child's exit), released (kept, held by nobody) when this process stops its sessions on a graceful shutdown.

Who holds a session: `<instance>/<life>` (a process's random life id, so a restarted instance under the same
name is not taken for its earlier self). A takeover claims it atomically, compare-and-set from the holder it
saw (a Lua script; on one instance, under an exclusive lock on a file): one claimant wins.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import secrets
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mcpgate.config import paths
from mcpgate.core.digest import sha256_hex

if TYPE_CHECKING:
    from redis import Redis

    from mcpgate.config.settings import Settings
    from mcpgate.serve.cluster.instances import Cluster

log = logging.getLogger("mcpgate.session")

TAGS = 4  # event-id tags of earlier lives kept (a Last-Event-ID older than that is answered as unknown)
MARGIN = 60.0  # seconds a record outlives the idle timeout (the reaper pushes it back well before)
WATCHED = frozenset({"logging/setLevel", "resources/subscribe", "resources/unsubscribe"})
CLAIM = """
local seen = redis.call('GET', KEYS[1])
if seen == false then seen = '' end
if seen ~= ARGV[1] or redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[1], '', 'KEEPTTL') return 1 end
return 0
"""


@dataclass
class Kept:
    """One session's kept state (JSON in the store)."""

    principal: str
    initialize: dict[str, Any]  # the client's initialize params
    result: dict[str, Any]  # the child's InitializeResult
    tag: str  # this life's event-id tag
    level: str | None = None
    subscriptions: list[str] = field(default_factory=list)
    earlier: list[str] = field(default_factory=list)  # earlier lives' tags, newest last
    view: str = ""  # the view its caller's identity chose at open ("<rule>~<fingerprint>"; "": no views): a takeover's

    def encode(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Kept | None:
        try:
            raw = json.loads(data)
            kept = cls(**raw)
        except (ValueError, TypeError):
            return None
        fine = isinstance(kept.principal, str) and isinstance(kept.initialize, dict) and isinstance(kept.result, dict)
        fine = fine and isinstance(kept.view, str)
        return kept if fine and isinstance(kept.subscriptions, list) and isinstance(kept.earlier, list) else None

    def version(self) -> str | None:
        value = self.result.get("protocolVersion")
        return value if isinstance(value, str) else None


class Store(Protocol):
    """Where records and holders are: Redis (a fleet) or a directory (one instance)."""

    def load(self, digest: str) -> Kept | None: ...
    def save(self, digest: str, data: bytes, holder: str, ttl: float) -> None: ...
    def delete(self, digest: str) -> None: ...
    def holder(self, digest: str) -> str | None: ...
    def claim(self, digest: str, seen: str, holder: str, ttl: float) -> bool: ...
    def release(self, digest: str, holder: str) -> None: ...
    def refresh(self, digests: Iterable[str], ttl: float) -> None: ...


def process_start(pid: int) -> tuple[str, str]:
    """The process's start time in clock ticks since boot (/proc/<pid>/stat field 22: with the pid it names one
    process, never a later one given the same pid) and its parent's pid; ("", "") when unknown (not Linux, or no
    such process)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return fields[19].decode(), fields[1].decode()
    except (OSError, IndexError):
        return "", ""


def holder_here() -> str:
    """This process as a holder names it: pid, start time, parent's pid (a gunicorn worker's master)."""
    started, parent = process_start(os.getpid())
    return f"{os.getpid()}.{started}.{parent}"


HELD, DYING = "held", "dying"


def runs_here(holder: str) -> str | None:
    """Whether `holder` (a Keeper.me) is another process of this machine that still runs: HELD when it and its
    master run on (another worker, another gateway sharing the state directory: its sessions are not claimable,
    only its death, a restart or a graceful stop's release hands them over), DYING when its master is gone (a
    worker orphaned by a killed master exits within moments: wait for it), None when it does not run."""
    pid, started, parent = [*holder.partition("/")[2].split("."), "", "", ""][:3]
    if not pid.isdigit() or int(pid) == os.getpid():
        return None
    now, parent_now = process_start(int(pid))
    if not now or now != started:
        return None
    return HELD if parent_now == parent else DYING


def digest_of(session_id: str) -> str:
    return sha256_hex(session_id.encode())  # not OpenSSL's: core/digest.py


class RedisStore:
    def __init__(self, redis: Redis, server: str) -> None:
        self.redis = redis
        self.prefix = f"mcpgate:kept:{server}:"
        self.held = f"mcpgate:held:{server}:"
        self._claim = redis.register_script(CLAIM)
        self._release = redis.register_script(RELEASE)

    def load(self, digest: str) -> Kept | None:
        data = self.redis.get(self.prefix + digest)
        return Kept.decode(data) if isinstance(data, bytes) else None

    def save(self, digest: str, data: bytes, holder: str, ttl: float) -> None:
        pipe = self.redis.pipeline(transaction=True)
        pipe.set(self.prefix + digest, data, px=int(ttl * 1000))
        pipe.set(self.held + digest, holder, px=int(ttl * 1000))
        pipe.execute()

    def delete(self, digest: str) -> None:
        self.redis.delete(self.prefix + digest, self.held + digest)

    def holder(self, digest: str) -> str | None:
        value = self.redis.get(self.held + digest)
        return value.decode() if isinstance(value, bytes) else None

    def claim(self, digest: str, seen: str, holder: str, ttl: float) -> bool:
        keys = [self.held + digest, self.prefix + digest]
        return bool(self._claim(keys=keys, args=[seen, holder, int(ttl * 1000)]))

    def release(self, digest: str, holder: str) -> None:
        self._release(keys=[self.held + digest], args=[holder])

    def refresh(self, digests: Iterable[str], ttl: float) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for digest in digests:
            pipe.pexpire(self.prefix + digest, int(ttl * 1000))
            pipe.pexpire(self.held + digest, int(ttl * 1000))
        pipe.execute()


class DirStore:
    """Records as `<digest>.json` (written whole, then renamed), holders as `<digest>.held`; a record whose
    file was last written or refreshed longer than its time-to-live ago is gone (and removed when seen)."""

    def __init__(self, directory: Path, ttl: float) -> None:
        self.dir, self.ttl = directory, ttl
        paths.make_private_dirs(self.dir)
        self.sweep()

    def _path(self, digest: str, suffix: str) -> Path:
        return self.dir / f"{digest}{suffix}"

    def _fresh(self, path: Path) -> bool:
        try:
            return path.stat().st_mtime + self.ttl > time.time()
        except OSError:
            return False

    def _write(self, path: Path, data: bytes) -> None:
        part = path.with_suffix(path.suffix + f".{secrets.token_hex(4)}")
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(part, path)

    def load(self, digest: str) -> Kept | None:
        path = self._path(digest, ".json")
        if not self._fresh(path):
            self.delete(digest)
            return None
        try:
            return Kept.decode(path.read_bytes())
        except OSError:
            return None

    def save(self, digest: str, data: bytes, holder: str, ttl: float) -> None:
        self._write(self._path(digest, ".json"), data)
        self._write(self._path(digest, ".held"), holder.encode())

    def delete(self, digest: str) -> None:
        for suffix in (".json", ".held", ".lock"):
            self._path(digest, suffix).unlink(missing_ok=True)

    def holder(self, digest: str) -> str | None:
        try:
            return self._path(digest, ".held").read_text()
        except OSError:
            return None

    @contextlib.contextmanager
    def _locked(self, digest: str) -> Iterator[bool]:
        fd = os.open(self._path(digest, ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def claim(self, digest: str, seen: str, holder: str, ttl: float) -> bool:
        with self._locked(digest) as mine:
            if not mine or not self._fresh(self._path(digest, ".json")) or (self.holder(digest) or "") != seen:
                return False
            self._write(self._path(digest, ".held"), holder.encode())
            return True

    def release(self, digest: str, holder: str) -> None:
        with self._locked(digest) as mine:
            if mine and self.holder(digest) == holder:
                self._write(self._path(digest, ".held"), b"")

    def refresh(self, digests: Iterable[str], ttl: float) -> None:
        for digest in digests:
            for suffix in (".json", ".held"):
                with contextlib.suppress(OSError):
                    os.utime(self._path(digest, suffix))
        self.sweep()

    def sweep(self, most: int = 1000) -> None:
        """Remove up to `most` records past their time (and their holders, locks and half-written parts)."""
        with contextlib.suppress(OSError), os.scandir(self.dir) as entries:
            for count, entry in enumerate(entries):
                if count >= most:
                    break
                if not self._fresh(Path(entry.path)):
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)


class Keeper:
    """One published server's kept sessions: this process's records of its live sessions (what is rewritten when
    the client changes the level or a subscription), and the store's records of every session."""

    def __init__(
        self, store: Store, instance: str, ttl: float, max_bytes: int, errors: tuple[type[BaseException], ...]
    ):
        self.store, self.ttl, self.max_bytes = store, ttl + MARGIN, max_bytes
        self.errors: tuple[type[BaseException], ...] = (*errors, OSError)  # what the store may raise
        # who holds what this process keeps: the instance, then this process (pid and start time: another
        # process of this machine sharing the state directory asks whether the holder still runs) and a nonce
        self.me = f"{instance}/{holder_here()}.{secrets.token_hex(6)}"
        self.records: dict[str, Kept] = {}  # this process's live sessions' records (one per session at most)

    def _safely(self, what: str, action: Any) -> Any:
        try:
            return action()
        except self.errors as exc:
            log.warning("kept sessions: could not %s: %s", what, exc)
            return None

    def write(self, session_id: str, kept: Kept) -> None:
        data = kept.encode()
        if len(data) > self.max_bytes:
            log.warning("a session's kept state exceeds MCPGATE_SESSION_KEPT_BYTES (%d bytes): not kept", len(data))
            self.forget(session_id)
            return
        self.records[session_id] = kept
        self._safely("write one", lambda: self.store.save(digest_of(session_id), data, self.me, self.ttl))

    def opened(self, session_id: str, principal: str, params: Any, result: Any, tag: str, view: str = "") -> None:
        """A session's initialize succeeded: keep what a takeover replays (and the view it applies)."""
        if isinstance(params, dict) and isinstance(result, dict):
            self.write(session_id, Kept(principal, params, result, tag, view=view))

    def note(self, session_id: str, method: str, params: Any) -> None:
        """The client sent logging/setLevel, resources/subscribe or resources/unsubscribe (WATCHED)."""
        kept = self.records.get(session_id)
        if kept is None or not isinstance(params, dict):
            return
        if method == "logging/setLevel" and isinstance(params.get("level"), str):
            kept.level = params["level"]
        elif isinstance(uri := params.get("uri"), str):
            if uri in kept.subscriptions:
                kept.subscriptions.remove(uri)
            if method == "resources/subscribe":
                kept.subscriptions.append(uri)
        self.write(session_id, kept)

    def ended(self, session_id: str, shutting_down: bool) -> None:
        """The session ended here: released for a takeover when this process stops, else gone for good."""
        if self.records.pop(session_id, None) is None:
            return
        if shutting_down:
            self._safely("release one", lambda: self.store.release(digest_of(session_id), self.me))
        else:
            self.forget(session_id)

    def release(self, session_id: str) -> None:
        """Held by nobody (a takeover here could not be completed): another process may claim it."""
        self._safely("release one", lambda: self.store.release(digest_of(session_id), self.me))

    def forget(self, session_id: str) -> None:
        self.records.pop(session_id, None)
        self._safely("delete one", lambda: self.store.delete(digest_of(session_id)))

    def refresh(self) -> None:
        """Push back the expiry of every live session's record (the server's reaper calls it, off any call)."""
        if self.records:
            digests = [digest_of(session_id) for session_id in self.records]
            self._safely("refresh", lambda: self.store.refresh(digests, self.ttl))

    def load(self, session_id: str) -> tuple[Kept, str] | None:
        """A session's record and its holder ("" when released), None when nothing is kept for it."""
        digest = digest_of(session_id)

        def read() -> tuple[Kept, str] | None:
            kept = self.store.load(digest)
            return None if kept is None else (kept, self.store.holder(digest) or "")

        found: tuple[Kept, str] | None = self._safely("read one", read)
        return found

    def claim(self, session_id: str, seen: str) -> bool:
        """Take the session over from `seen` (its holder as read); True for the one claimant that wins."""
        won = self._safely("claim one", lambda: self.store.claim(digest_of(session_id), seen, self.me, self.ttl))
        return bool(won)


def keeper_for(settings: Settings, server: str, cluster: Cluster | None) -> Keeper | None:
    """The server's keeper (None with MCPGATE_SESSION_RESURRECT off, or when its state directory cannot be made)."""
    if not settings.session_resurrect or settings.modern_only:
        return None
    ttl, most = settings.session_idle_ttl, settings.session_kept_bytes
    if cluster is not None:
        return Keeper(RedisStore(cluster.redis, server), cluster.instance, ttl, most, cluster.directory.errors)
    where = Path(settings.state_dir or paths.default_state_dir()) / "sessions" / server
    try:
        return Keeper(DirStore(where, ttl + MARGIN), "", ttl, most, ())
    except OSError as exc:
        log.warning("sessions are not kept: %s cannot be used (%s)", where, exc)
        return None
