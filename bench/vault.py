"""What per-user credentials cost: the vault's lookup (a principal's slots read from SQLite and opened with
AES-256-GCM, once per child started) and the pool's child selection for a principal (on every 2026-07-28 call),
in one process, on real pooled children of the bundled demo server started with a slot each.

    python bench/vault.py                 # 200 principals in the vault, 3 with children, 20000 rounds
    python bench/vault.py --rounds 50000

Prints microseconds per operation (the median of 5 runs of `rounds` each). A call never reads the vault: its
principal's group already holds children filled at their spawn, so the per-call cost is the selection alone; a
child's spawn adds one lookup (a process start costs milliseconds besides).
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcpgate.config.settings import Settings
from mcpgate.serve.servers.server import PublishedServer
from mcpgate.serve.vault.crypto import Cipher
from mcpgate.serve.vault.slots import SlotInfo, Slots
from mcpgate.serve.vault.store import SqliteVaultStore
from mcpgate.serve.vault.vault import SlotFill, Vault

SLOTS = Slots(env=(("DEMO_TOKEN", "token"),), args=(), info=(SlotInfo("token", "Token"),))


def per_op(call: Callable[[], object], rounds: int) -> float:
    """Median microseconds per call of `call` over 5 runs of `rounds` calls."""
    runs = []
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(rounds):
            call()
        runs.append((time.perf_counter() - began) / rounds * 1e6)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--principals", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=20000)
    args = parser.parse_args()
    key = os.urandom(32)
    with tempfile.TemporaryDirectory() as state:
        settings = Settings(public_url="http://127.0.0.1:1", vault_key=base64.b64encode(key).decode(), state_dir=state)
        vault = Vault(SqliteVaultStore(state), Cipher(key), settings)
        principals = [f"http://127.0.0.1:1#user:{n}" for n in range(args.principals)]
        for principal in principals:
            vault.put(principal, "token", f"token-of-{principal}")
        lookup = per_op(lambda: vault.values(principals[7], SLOTS), max(1, args.rounds // 10))
        server = PublishedServer(settings, slots=SlotFill(SLOTS, vault))
        busy = principals[:3]
        try:
            for principal in busy:
                server.pool.acquire(principal)  # a child each, started with its own value
            pick = per_op(lambda: server.pool.acquire(busy[1]), args.rounds)
        finally:
            server.shutdown(10.0)
    print(f"vault lookup per child spawn (SQLite + AES-GCM, {args.principals} principals): {lookup:.1f} us")
    print(f"child selection per call (the principal's group, least loaded ready child): {pick:.2f} us")
    print(f"per call with the vault on: {pick:.2f} us (target < 50 us); per spawn: +{lookup:.1f} us")


if __name__ == "__main__":
    main()
