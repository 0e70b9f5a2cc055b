"""A tools/call round trip leaves no reference cycle behind in the worker, on either hot path (a 2025 session's
and a 2026-07-28 stateless call through the pool): what it made goes with its last reference, so the worker's
cyclic garbage collector has nothing of mcpgate's to find (a cycle per call made it run every ~40 calls). Nor
does a child's whole life: a 2025 session opened, called and ended (DELETE, or its child crashed; its child
spoken to directly or through the bridge to a 2026-07-28 child), and a pooled
child stopped once idle past MCPGATE_POOL_IDLE_TTL (each ended child was ~50 objects of cyclic garbage, its
three pipe files among them, until a collection).

The worker runs with gc.DEBUG_SAVEALL (a hooks file over mcpgate's gunicorn settings); its SIGUSR2 makes it
collect and write what the collection found that is mcpgate's (the type or function's module) or a file
object, then forget it."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import (
    FIXTURES,
    Gateway,
    call,
    children,
    direct_children,
    modern_body,
    open_session,
    post_modern,
    reply_message,
    serving,
    wait_dead,
    wait_for,
    worker_children,
)

HOOKS = """
import mcpgate.gunicorn_config as _gateway
from mcpgate.gunicorn_config import *  # noqa: F403

_OUT = {out!r}
_RUNS = [0]


def _found(thing):
    kind = type(thing)
    if kind.__module__ == "_io" and kind.__name__ == "FileIO":  # a child's pipe
        return "_io.FileIO"
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


@contextlib.contextmanager
def saving_worker(folder: Path, env: dict[str, str]) -> Iterator[tuple[Gateway, Collections]]:
    hooks = folder / "gunicorn_hooks.py"
    hooks.write_text(HOOKS.format(out=str(folder / "found")))
    with serving(env, config=str(hooks), behind=True) as gw:
        yield gw, Collections(gw, folder / "found")


@pytest.fixture(scope="module")
def saving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Collections]]:
    with saving_worker(tmp_path_factory.mktemp("garbage"), {"MCPGATE_METRICS": "false"}) as saved:
        yield saved


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


# -- a child's whole life ---------------------------------------------------------------------------------------


def gone(gw: Gateway, kids: list[int]) -> None:
    """Wait until the children have exited and the worker has logged each one's end (its supervisor done)."""
    assert wait_dead(kids) == [], gw.log_tail()
    for kid in kids:
        assert wait_for(functools.partial(ended_in_log, gw, kid)), gw.log_tail()


def ended_in_log(gw: Gateway, kid: int) -> bool:
    log = gw.log()
    return f"pid={kid} exited" in log or f"pid={kid} killed" in log


def ended_session(gw: Gateway, crashed: bool) -> None:
    """A 2025 session opened, called and ended (DELETE, or its child killed), once its child has exited."""
    before = set(worker_children(gw))
    session = open_session(gw)
    reply = gw.request("POST", body=call("echo", {"message": "m"}), headers=session)
    assert reply.status == 200 and "result" in reply_message(reply), reply
    kids = [kid for kid in worker_children(gw) if kid not in before]
    assert len(kids) == 1, kids
    if crashed:
        os.kill(kids[0], signal.SIGKILL)
    else:
        assert gw.request("DELETE", headers=session).status in (200, 204)
    gone(gw, kids)


@pytest.mark.parametrize("crashed", [False, True], ids=["deleted", "child-crashed"])
def test_an_ended_session_and_its_child_leave_no_cyclic_garbage(
    saving: tuple[Gateway, Collections], crashed: bool
) -> None:
    gw, collections = saving
    ended_session(gw, crashed)
    collections.found()
    for _ in range(3):  # a session's end lets go of the children stopped before it (serve/servers/server.py)
        ended_session(gw, crashed)
    assert collections.found() == []


def test_a_session_bridged_to_a_2026_07_28_child_leaves_no_cyclic_garbage(tmp_path: Path) -> None:
    """A 2025 session whose child speaks only 2026-07-28 (serve/sessions/modern_bridge.py: the bridge and its
    listens point back at the session)."""
    command = f"{sys.executable} {FIXTURES / 'modern_only_server.py'}"
    with saving_worker(tmp_path, {"MCPGATE_METRICS": "false", "MCPGATE_COMMAND": command}) as (gw, collections):
        ended_session(gw, crashed=False)
        collections.found()
        for _ in range(3):
            ended_session(gw, crashed=False)
        assert collections.found() == []


def test_a_pooled_child_stopped_once_idle_leaves_no_cyclic_garbage(tmp_path: Path) -> None:
    env = {"MCPGATE_METRICS": "false", "MCPGATE_POOL_IDLE_TTL": "0.3", "MCPGATE_POOL_SPARES": "0"}
    with saving_worker(tmp_path, env) as (gw, collections):

        def idled() -> None:
            stateless_calls(gw, 1)
            gone(gw, worker_children(gw))
            assert wait_for(lambda: children(gw) == 0), gw.log_tail()

        idled()
        collections.found()
        for _ in range(3):
            idled()
        assert collections.found() == []
