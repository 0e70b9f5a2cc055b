"""ChildSpec: what a session's child (and a pooled child) is started from: the command, where it runs, its limits,
and how its ChildProcess is made. A remote server's (serve/remote/spec.py) and a group's (serve/hub/spec.py)
specs derive from it and make children of their own with the same surface."""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from mcpgate.child.limits import ChildLimits
from mcpgate.child.process import ChildProcess, OnMessage
from mcpgate.child.spawn import ChildUser

if TYPE_CHECKING:
    from mcpgate.serve.vault.vault import SlotFill

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class ChildSpec:
    """What a session's child is started from: the command, where it runs, and its limits."""

    argv: tuple[str, ...]
    env: dict[str, str] | None
    cwd: str | None
    stderr: str
    max_line_bytes: int
    max_write_queue_bytes: int
    close_timeout: float
    term_timeout: float
    watch: Callable[[ChildProcess], None] | None = None  # told of each child once it has ended (metrics)
    label_prefix: str = ""  # a named server's "<name>/": its sessions' and pooled children's labels start with it
    limits: ChildLimits | None = None  # set in each spawned child (mcpgate/child/limits.py); None: none
    user: ChildUser | None = None  # who the children run as (MCPGATE_CHILD_USER); None: the gateway's user
    slots: SlotFill | None = None  # per-user credentials filled in at each spawn (serve/vault); None: none

    def process(
        self,
        *,
        on_message: OnMessage,
        on_exit: Callable[[str], None],
        label: str,
        principal: str | None = None,
        on_revoke: Callable[[str], None] | None = None,
    ) -> ChildProcess:
        """A ChildProcess for this spec, not started yet; with slots, filled with `principal`'s values (it must
        then serve that principal alone) or SlotsEmpty (serve/vault/vault.py). `on_revoke(reason)`: how its
        owner stops it when one of those values changes (None: the child is closed)."""
        argv: Sequence[str] = self.argv
        env, stamp = self.env, None
        if self.slots is not None:
            argv, env, stamp = self.slots.fill(principal, self.argv, self.env)
        child = ChildProcess(
            list(argv),
            on_message=on_message,
            on_exit=on_exit if self.watch is None else lambda reason: self._ended(child, on_exit, reason),
            env=env,
            cwd=self.cwd,
            stderr=self.stderr,
            label=label,
            max_line_bytes=self.max_line_bytes,
            max_write_queue_bytes=self.max_write_queue_bytes,
            close_timeout=self.close_timeout,
            term_timeout=self.term_timeout,
            limits=self.limits,
            user=self.user,
        )
        if stamp is not None and self.slots is not None:
            child.shown_argv = list(self.argv)  # the log shows the placeholders, never the values
            self.slots.hold(principal, child, stamp, _weakly(on_revoke))
        return child

    def _ended(self, child: ChildProcess, on_exit: Callable[[str], None], reason: str) -> None:
        try:
            on_exit(reason)
        finally:
            if self.watch is not None:
                self.watch(child)


def _weakly(on_revoke: Callable[[str], None] | None) -> Callable[[str], None] | None:
    """The owner's method held weakly: the vault keys its holders weakly by child but holds what stops each one,
    and an owner's method (a session's end, the session holding the child) would keep that key, the owner and
    the child alive for as long as the worker runs. An owner gone has nothing left to stop."""
    return weakly(on_revoke) if on_revoke is not None and inspect.ismethod(on_revoke) else on_revoke


def weakly(method: Callable[P, R]) -> Callable[P, R | None]:
    """A bound method called through a weak reference to its object: what holds it does not keep the object (an
    owner) alive, and once the object is gone a call does nothing and returns None."""
    ref = weakref.WeakMethod(method)

    def call(*args: P.args, **kwargs: P.kwargs) -> R | None:
        bound = ref()
        return None if bound is None else bound(*args, **kwargs)

    return call
