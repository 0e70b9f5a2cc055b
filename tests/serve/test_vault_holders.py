"""A child given a user's secrets is stopped by its owner when they change, and the vault's hold on it does not
outlive the owner: the vault keys its holders weakly by child but holds what stops each one, so ChildSpec gives
it the owner's method weakly (an owner's bound method, a session's end, kept the session and its child alive for
as long as the worker ran). In process: a real child, the SQLite store, the cyclic collector off.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcpgate.core.jsonrpc import Notification, Request, Response
from mcpgate.serve.sessions.spec import ChildSpec
from mcpgate.serve.vault.vault import SlotFill, Vault
from tests.serve.test_vault_unit import gh_with_one_slot
from tests.support.collector import collector_off

GUARD = 20.0  # a hang guard, never a speed assertion
READS_STDIN = (sys.executable, "-c", "import sys; sys.stdin.buffer.read()")  # exits at stdin's EOF


class Owner:
    """A session's part: it holds its child, and stops it when the child's secrets change (on_revoke)."""

    def __init__(self, spec: ChildSpec) -> None:
        self.ended = ""
        self.child = spec.process(
            on_message=self.on_message, on_exit=self.on_exit, label="t", principal="iss#alice", on_revoke=self.end
        )

    def on_message(self, message: Request | Notification | Response) -> None:
        pass

    def on_exit(self, reason: str) -> None:
        pass

    def end(self, reason: str) -> None:
        self.ended = reason
        self.child.close(reason)


@pytest.fixture(autouse=True)
def no_collector() -> Iterator[None]:
    yield from collector_off()


def slotted(tmp_path: Path) -> tuple[Vault, ChildSpec]:
    vault, entry = gh_with_one_slot(tmp_path)
    assert entry.slots is not None
    vault.put("iss#alice", "tok", "A-1")
    spec = ChildSpec(
        argv=READS_STDIN,
        env=entry.env,
        cwd=None,
        stderr="discard",
        max_line_bytes=1 << 20,
        max_write_queue_bytes=1 << 20,
        close_timeout=5.0,
        term_timeout=5.0,
        slots=SlotFill(entry.slots, vault),
    )
    return vault, spec


def test_a_changed_secret_stops_the_child_through_its_owner(tmp_path: Path) -> None:
    vault, spec = slotted(tmp_path)
    owner = Owner(spec)
    owner.child.start()
    try:
        vault.put("iss#alice", "tok", "A-2")
        assert owner.ended == "the credential slot 'tok' was changed by its owner"
        assert owner.child.join(GUARD)
    finally:
        owner.child.stop("test end", timeout=GUARD)


def test_the_vault_does_not_keep_an_ended_owner_and_its_child(tmp_path: Path) -> None:
    _vault, spec = slotted(tmp_path)
    owner = Owner(spec)
    owner.child.start()
    assert owner.child.stop("the client ended the session", timeout=GUARD)
    owner_gone, child_gone = weakref.ref(owner), weakref.ref(owner.child)
    del owner
    assert owner_gone() is None and child_gone() is None
