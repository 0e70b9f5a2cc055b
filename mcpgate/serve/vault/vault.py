"""The vault of one worker: each principal's slot values, opened at a child's spawn, and the children holding them.

    open_vault(settings, cluster) -> Vault       # SettingsError (one line) when the key is missing or wrong
    vault.fill(principal, slots, argv, env) -> (argv, env, stamp)   # SlotsEmpty naming the empty slots
    vault.hold(principal, child, stamp)          # the child is stopped when a slot it was given changes
    vault.put / delete / listing                 # the page's (page.py): write-only, bounded

Two modes. With OAuth (a principal per user) the values are the vault's: sealed with MCPGATE_VAULT_KEY
(crypto.py) in SQLite or Redis (store.py, redis_store.py). Without OAuth there is one principal and the values
come from the operator's environment only: slot `github_token` is the gateway's USER_SECRET_GITHUB_TOKEN (no page,
no store, no key).

A child's stamp is the version of every slot it was given. A write on the page sweeps that principal's holders in
this worker at once; every worker holding children with secrets also checks the store's generation every
MCPGATE_VAULT_POLL seconds (in a fleet the generation is Redis's, so every instance sees every change) and stops
the holders whose stamp no longer matches: their in-flight calls get an error naming the reason. Holders are
weakly held (a child that never started is forgotten) and only alive ones are swept.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import gevent

from mcpgate.config.settings import Settings
from mcpgate.serve.vault.errors import ENV_PREFIX as ENV_PREFIX  # declared apart (errors.py), named here too
from mcpgate.serve.vault.errors import CannotOpen, VaultKeyMissing, VaultUnavailable, WrongVaultKey
from mcpgate.serve.vault.errors import SlotsEmpty as SlotsEmpty
from mcpgate.serve.vault.slots import Slots
from mcpgate.serve.vault.store import Entry, SqliteVaultStore, VaultStore

if TYPE_CHECKING:
    from mcpgate.serve.cluster.instances import Cluster
    from mcpgate.serve.vault.crypto import Cipher

log = logging.getLogger("mcpgate.vault")

REVOKED = "credentials"  # the end cause of a child stopped because a slot it holds changed (not a crash)
PAGE_PATH = "/vault"

Stamp = tuple[tuple[str, int], ...]


class Vault:
    """One worker's vault (see the module docstring)."""

    def __init__(
        self,
        store: VaultStore | None,
        cipher: Cipher | None,
        settings: Settings,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self.store, self.cipher, self.settings = store, cipher, settings
        self.url = settings.public_url.rstrip("/") + PAGE_PATH if store is not None else None
        self._environ = environ
        self._holders: dict[str, weakref.WeakKeyDictionary[Any, tuple[Stamp, Callable[[str], None] | None]]] = {}
        self._seen = store.generation() if store is not None else 0
        self._watcher: gevent.Greenlet | None = None

    # -- at a spawn ---------------------------------------------------------------------------------------
    def values(self, principal: str, slots: Slots) -> tuple[dict[str, str], Stamp]:
        """The principal's value of every slot, and the stamp (SlotsEmpty when any is empty)."""
        if self.store is None or self.cipher is None:
            found = {info.name: self._environ.get(ENV_PREFIX + info.name.upper()) for info in slots.info}
            missing = [info for info in slots.info if not found[info.name]]
            if missing:
                raise SlotsEmpty(missing, None)
            return {name: value for name, value in found.items() if value}, ()
        listing = self.store.listing(principal)
        missing = [info for info in slots.info if info.name not in listing]
        if missing:
            raise SlotsEmpty(missing, self.url)
        values = {}
        for info in slots.info:
            sealed = self.store.get(principal, info.name)
            if sealed is None:  # deleted since the listing
                raise SlotsEmpty([info], self.url)
            try:
                values[info.name] = self.cipher.open(principal, info.name, sealed).decode()
            except CannotOpen:
                log.error("a vault value of slot %s does not open here (moved?): treated as empty", info.name)
                raise SlotsEmpty([info], self.url) from None
        return values, tuple((info.name, listing[info.name].version) for info in slots.info)

    def fill(
        self, principal: str, slots: Slots, argv: Sequence[str], env: Mapping[str, str] | None
    ) -> tuple[list[str], dict[str, str], Stamp]:
        values, stamp = self.values(principal, slots)
        filled_argv, filled_env = slots.fill(argv, env, values)
        return filled_argv, filled_env, stamp

    def hold(self, principal: str, child: Any, stamp: Stamp, ender: Callable[[str], None] | None = None) -> None:
        """`child` (a ChildProcess) was given this principal's values: stopped when they change, by `ender`
        (its owner's: the calls in flight are told why first), else closed."""
        if self.store is None:
            return  # the operator's environment does not change under a running worker
        self._holders.setdefault(principal, weakref.WeakKeyDictionary())[child] = (stamp, ender)
        if self._watcher is None or self._watcher.dead:
            self._watcher = gevent.spawn(self._watch)

    # -- the page's -----------------------------------------------------------------------------------------
    def listing(self, principal: str) -> dict[str, Entry]:
        assert self.store is not None
        return self.store.listing(principal)

    def put(self, principal: str, slot: str, value: str) -> bool:
        """Store a value (False: the principal has MCPGATE_VAULT_SLOTS slots already); its holders stop."""
        assert self.store is not None and self.cipher is not None
        sealed = self.cipher.seal(principal, slot, value.encode())
        stored = self.store.put(principal, slot, sealed, self.settings.vault_slots)
        if stored:
            self.sweep(principal)
        return stored

    def delete(self, principal: str, slot: str) -> bool:
        assert self.store is not None
        gone = self.store.delete(principal, slot)
        if gone:
            self.sweep(principal)
        return gone

    # -- holders ---------------------------------------------------------------------------------------------
    def sweep(self, principal: str) -> int:
        """Stop the principal's children whose stamp no longer matches the store (the reason names the slot that
        changed or went); how many."""
        holders = self._holders.get(principal)
        if not holders or self.store is None:
            return 0
        current = {slot: entry.version for slot, entry in self.store.listing(principal).items()}
        stopped = 0
        for child, (stamp, ender) in list(holders.items()):
            changed = [slot for slot, version in stamp if current.get(slot) != version]
            if not changed:
                continue
            how = "changed" if changed[0] in current else "deleted"
            reason = f"the credential slot {changed[0]!r} was {how} by its owner"
            del holders[child]
            if child.alive:
                log.info("child %s stopped: %s", child.label, reason)
                if ender is not None:
                    ender(reason)
                child.close(reason, cause=REVOKED)  # (when the ender has not already)
                stopped += 1
        if not holders:
            self._holders.pop(principal, None)
        return stopped

    def _watch(self) -> None:
        """While children hold values: every MCPGATE_VAULT_POLL, a changed generation sweeps every holder."""
        import sqlite3  # (here, not at the top: a worker without the vault does not load SQLite)

        while self._holders:
            gevent.sleep(self.settings.vault_poll)
            try:
                generation = self.store.generation() if self.store is not None else 0
            except (sqlite3.Error, VaultUnavailable) as exc:  # the store is away a moment: checked again next time
                log.warning("cannot check the vault for changes: %s", type(exc).__name__)
                continue
            if generation == self._seen:
                for principal in [p for p, holders in self._holders.items() if not holders]:
                    self._holders.pop(principal, None)
                continue
            self._seen = generation
            for principal in list(self._holders):
                self.sweep(principal)


def open_vault(settings: Settings, cluster: Cluster | None = None) -> Vault:
    """The worker's vault for servers with slots: with OAuth, the store and the key (checked against the key
    check record: a wrong key stops the start); without, the operator's environment."""
    if not settings.auth.oauth:
        return Vault(None, None, settings)
    if not settings.vault_key:
        raise VaultKeyMissing(
            "MCPGATE_CONFIG declares user_secrets: set MCPGATE_VAULT_KEY (base64 of 32 random bytes) to keep them"
        )
    from mcpgate.serve.vault.crypto import Cipher, key_bytes  # the cipher's library only where a vault is kept

    cipher = Cipher(key_bytes(settings.vault_key))
    store: VaultStore
    if settings.redis_url:
        from mcpgate.serve.cluster.redis_client import connect
        from mcpgate.serve.vault.redis_store import RedisVaultStore

        store = RedisVaultStore(cluster.redis if cluster is not None else connect(settings.redis_url))
    else:
        store = SqliteVaultStore(settings.state_dir)
    if not cipher.check(store.check_once(cipher.check_record)):
        raise WrongVaultKey(
            "MCPGATE_VAULT_KEY does not open the vault (its values were stored under another key): set that key"
        )
    return Vault(store, cipher, settings)


class SlotFill:
    """What a ChildSpec with slots carries: the server's slots and the worker's vault (spec.ChildSpec.process)."""

    __slots__ = ("slots", "vault")

    def __init__(self, slots: Slots, vault: Vault) -> None:
        self.slots, self.vault = slots, vault

    def fill(
        self, principal: str | None, argv: Sequence[str], env: Mapping[str, str] | None
    ) -> tuple[list[str], dict[str, str], Stamp]:
        if principal is None:  # a child with a user's secrets is always some principal's
            raise ValueError("a child of a server with user_secrets needs the principal it serves")
        return self.vault.fill(principal, self.slots, argv, env)

    def hold(self, principal: str | None, child: Any, stamp: Stamp, ender: Callable[[str], None] | None) -> None:
        if principal is not None:
            self.vault.hold(principal, child, stamp, ender)

    def __repr__(self) -> str:
        return f"SlotFill({', '.join(self.slots.names)})"  # the names only (a spec may be logged)
