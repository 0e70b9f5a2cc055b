"""A tools/call round trip leaves no reference cycle behind in the worker, on either hot path (a 2025 session's
and a 2026-07-28 stateless call through the pool): what it made goes with its last reference, so the worker's
cyclic garbage collector has nothing of mcpgate's to find (a cycle per call made it run every ~40 calls).

The worker runs with gc.DEBUG_SAVEALL (a hooks file over mcpgate's gunicorn settings); its SIGUSR2 makes it
collect and write what the collection found that is mcpgate's (the type or function's module), then forget it."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import (
    Gateway,
    call,
    direct_children,
    modern_body,
    open_session,
    post_modern,
    reply_message,
    serving,
    wait_for,
)

HOOKS = """
import mcpgate.gunicorn_config as _gateway
from mcpgate.gunicorn_config import *  # noqa: F403

_OUT = {out!r}
_RUNS = [0]


def _found(thing):
    kind = type(thing)
    module = getattr(thing, "__module__", None) if callable(thing) and not isinstance(thing, type) else None
    name = getattr(thing, "__qualname__", "") if module else kind.__qualname__
    module = module or kind.__module__
    return f"{{module}}.{{name}}" if isinstance(module, str) and module.startswith("mcpgate") else None


def _collect(signum, frame):
    import gc, os

    gc.collect()
    found = sorted(filter(None, map(_found, gc.garbage)))
    del gc.garbage[:]
    _RUNS[0] += 1
    path = f"{{_OUT}}.{{_RUNS[0]}}"
    with open(path + ".tmp", "w") as f:
        f.write("\\n".join(found))
    os.replace(path + ".tmp", path)


def post_worker_init(worker):
    _gateway.post_worker_init(worker)
    import gc, signal

    gc.set_debug(gc.DEBUG_SAVEALL)
    signal.signal(signal.SIGUSR2, _collect)
"""


class Collections:
    """The worker's collections on demand: each `found()` is what the cyclic collector found since the last."""

    def __init__(self, gw: Gateway, out: Path) -> None:
        [self.worker] = direct_children(gw.proc.pid)
        self.out, self.runs = out, 0

    def found(self) -> list[str]:
        self.runs += 1
        written = Path(f"{self.out}.{self.runs}")
        os.kill(self.worker, signal.SIGUSR2)
        assert wait_for(written.exists, timeout=20), "the worker wrote nothing"
        return [line for line in written.read_text().splitlines() if line]


@pytest.fixture(scope="module")
def saving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Collections]]:
    folder = tmp_path_factory.mktemp("garbage")
    hooks = folder / "gunicorn_hooks.py"
    hooks.write_text(HOOKS.format(out=str(folder / "found")))
    with serving({"MCPGATE_METRICS": "false"}, config=str(hooks)) as gw:
        yield gw, Collections(gw, folder / "found")


def session_calls(gw: Gateway, count: int) -> None:
    session = open_session(gw)
    for n in range(count):
        reply = gw.request("POST", body=call("echo", {"message": f"m{n}"}, msg_id=n + 2), headers=session)
        assert reply.status == 200 and "result" in reply_message(reply), reply


def stateless_calls(gw: Gateway, count: int) -> None:
    for n in range(count):
        body = modern_body(n + 1, "tools/call", {"name": "echo", "arguments": {"message": f"m{n}"}})
        reply = post_modern(gw, body)
        assert reply.status == 200 and "result" in reply_message(reply), reply


@pytest.mark.parametrize("calls", [session_calls, stateless_calls], ids=["2025-session", "2026-07-28-pooled"])
def test_a_tools_call_round_trip_leaves_no_cyclic_garbage(
    saving: tuple[Gateway, Collections], calls: Callable[[Gateway, int], None]
) -> None:
    gw, collections = saving
    calls(gw, 3)  # first use: what is made once (imports, caches, the pooled child) is not garbage of a call
    collections.found()
    calls(gw, 10)
    assert collections.found() == []
