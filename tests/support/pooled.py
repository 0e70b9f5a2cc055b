"""A pooled child (serve/modern/pooled_child.py) whose process is never started, for tests that hand it what its
child "sends" (PooledChild._on_message) or read what it would send: the pool's callbacks are stand-ins that do
nothing (an input-required result passes as it is)."""

from __future__ import annotations

from mcpgate.serve.modern.pooled_child import Era, PooledChild
from mcpgate.serve.sessions.spec import ChildSpec


def never_started(era: Era | None = None, spec: ChildSpec | None = None) -> PooledChild:
    """A PooledChild of `spec` (a `true` command by default), of this era when one is given (else not yet probed)."""
    child = PooledChild(
        spec or ChildSpec(("true",), None, None, "inherit", 1 << 20, 1 << 20, 1.0, 1.0),
        label="pool-1",
        probe_timeout=1.0,
        start_timeout=1.0,
        init_timeout=1.0,
        ttl_ms=0,
        on_exit=lambda _child, _reason: None,
        on_input_request=lambda _child, _request: None,
        on_input_withdrawn=lambda _child, _id: None,
        on_listen_message=lambda _child, _message: False,
        on_input_required=lambda _child, _call, result: result,
    )
    if era is not None:
        child.era, child.modern = era, era is Era.MODERN
    return child
