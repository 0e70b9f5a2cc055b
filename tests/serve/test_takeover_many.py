"""Many 2025 sessions taken over at once (issue 27): Redis, three instances behind the recipe's HAProxy (sticky
routing), 50 sessions of the official SDK client in one process; the instance holding the most of them SIGKILLed.
Its sessions go on (at least 99 %: with 50 over three instances, every one) under their own session ids with no
404, and so do the others'; the first call of each of its sessions after the kill adds at most 1.5 s at p99 to a
normal call's time (the figures are printed: `-s` shows them; on a machine so busy that opening a session, which
starts a child as a takeover does, takes longer than 0.75 s at p99, the bound is twice that)."""

from __future__ import annotations

import math
import re
import statistics
import time
from dataclasses import dataclass, field

import anyio
import httpx2
import pytest

from tests.serve.test_takeover import Seen, instance_env, sdk
from tests.support import Gateway, crash
from tests.support.fleet import recipe_front, redis_server

NAMES = ("i1", "i2", "i3")
SESSIONS = 50
AT_ONCE = 10  # sessions opening or calling at the same time (a two-core machine)
CONTINUED = 0.99  # the share of the killed instance's sessions that must go on (the figure)
ADDED_P99 = 1.5  # seconds the first call after the takeover may add at p99 (the figure)
HANG_GUARD = 300

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class Witness(Seen):
    """Seen, and what each 404 answered (the request's method and the body): `refusals` while the session was the
    client's, `late` once the client had sent its DELETE (a GET stream of its own racing its end: not a failure)."""

    def __init__(self) -> None:
        super().__init__()
        self.refusals: list[str] = []
        self.late: list[str] = []
        self.deleting = False

    async def request(self, request: httpx2.Request) -> None:
        await super().request(request)
        self.deleting = self.deleting or request.method == "DELETE"

    async def response(self, response: httpx2.Response) -> None:
        await super().response(response)
        if response.status_code == 404:
            body = (await response.aread())[:300].decode(errors="replace")
            (self.late if self.deleting else self.refusals).append(f"{response.request.method} 404 {body}")


@dataclass
class Session:
    index: int
    seen: Witness = field(default_factory=Witness)
    normal: float = 0.0  # seconds a call took before the kill
    after: float = 0.0  # seconds the first call after the kill took
    opening: float = 0.0  # seconds the open and first call took (a child started)
    since_kill: float = 0.0  # seconds from the kill to the answer of the first call after it
    failure: str = ""

    def owner(self) -> str:
        return next(iter(self.seen.ids)).split(".", 1)[0] if self.seen.ids else ""

    def continued(self) -> bool:
        return not self.failure and not self.seen.refusals and len(self.seen.ids) == 1


async def timed_echo(client: object, message: str) -> float:
    began = time.perf_counter()
    result = await client.call_tool("echo", {"message": message})  # type: ignore[attr-defined]
    took = time.perf_counter() - began
    assert result.content[0].text == message, result
    return took


@dataclass
class Run:
    gate: anyio.Semaphore = field(default_factory=lambda: anyio.Semaphore(AT_ONCE))
    opened: list[Session] = field(default_factory=list)
    killed: anyio.Event = field(default_factory=anyio.Event)
    killed_at: float = 0.0


async def one_session(session: Session, url: str, run: Run) -> None:
    """Open the session and call twice (the second timed: a normal call), wait for the kill, call once more
    (timed); a failure anywhere is the session's. At most AT_ONCE sessions open or call at a time."""
    stage = "open"
    await run.gate.acquire()
    held = True
    try:
        began = time.perf_counter()
        async with sdk(url, session.seen) as client:
            await timed_echo(client, f"s{session.index}-warm")
            session.opening = time.perf_counter() - began
            session.normal = await timed_echo(client, f"s{session.index}-normal")
            held = False
            run.gate.release()
            run.opened.append(session)
            await run.killed.wait()
            stage = "after the kill"
            async with run.gate:
                session.after = await timed_echo(client, f"s{session.index}-after")
                session.since_kill = time.perf_counter() - run.killed_at
    except Exception as exc:  # noqa: BLE001 - counted: a session that did not go on
        session.failure = f"{stage}: {innermost(exc)}"
        if stage == "open":
            run.opened.append(session)
    finally:
        if held:
            run.gate.release()


def innermost(exc: BaseException) -> str:
    """The first exception an exception group holds (the SDK's task groups wrap the one that ended a call)."""
    while inner := getattr(exc, "exceptions", None):
        exc = inner[0]
    return f"{type(exc).__name__}: {exc}"


def p(values: list[float], share: float) -> float:
    """The nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def test_fifty_sessions_one_instance_killed_its_sessions_go_on() -> None:
    with redis_server() as url:
        gws = {name: Gateway(instance_env(url, name)) for name in NAMES}
        sessions = [Session(index) for index in range(SESSIONS)]
        try:
            for gw in gws.values():
                gw.wait_ready()
            with recipe_front(gws, "sticky") as lb:

                async def conduct() -> str:
                    run = Run()
                    with anyio.fail_after(HANG_GUARD):
                        async with anyio.create_task_group() as group:
                            for session in sessions:
                                group.start_soon(one_session, session, lb.url, run)
                            while len(run.opened) < SESSIONS:
                                await anyio.sleep(0.05)
                            failed = [s.failure for s in sessions if s.failure]
                            assert not failed, f"sessions failed before the kill: {failed}"
                            owners = [s.owner() for s in sessions]
                            victim = max(NAMES, key=owners.count)
                            run.killed_at = time.perf_counter()
                            await anyio.to_thread.run_sync(crash, gws[victim])
                            run.killed.set()
                    return victim

                victim = anyio.run(conduct)
                print(f"\nHAProxy's log: {lb.log_path}")
            report(sessions, victim, gws)
        finally:
            for gw in gws.values():
                gw.stop()


TAKEN_OVER = re.compile(r" taken over \(child pid \d+\) in ([0-9.]+) s")


def report(sessions: list[Session], victim: str, gws: dict[str, Gateway]) -> None:
    """Print the figures and check them against the issue's."""
    survivors = [gw for name, gw in gws.items() if name != victim]
    theirs = [s for s in sessions if s.owner() == victim]
    went_on = [s for s in theirs if s.continued()]
    normal = statistics.median(s.normal for s in sessions)
    firsts = [s.after for s in went_on]
    added = [took - normal for took in firsts]
    takeovers = [float(took) for gw in survivors for took in TAKEN_OVER.findall(gw.log())]
    print(f"\n{victim} killed: {len(went_on)} of its {len(theirs)} sessions (of {len(sessions)}) went on;")
    print(f"a normal call {normal * 1000:.0f} ms (median)")
    for label, values in (
        ("the first call after the kill", firsts),
        ("added", added),
        ("kill to its answer", [s.since_kill for s in went_on]),
        ("the takeovers themselves (the survivors' logs)", takeovers),
        ("an open and first call (a child started; before the kill)", [s.opening for s in sessions]),
    ):
        if values:
            print(f"{label}: p50 {p(values, 0.5) * 1000:.0f} ms, p99 {p(values, 0.99) * 1000:.0f} ms")
    late = [refusal for s in sessions for refusal in s.seen.late]
    print(f"404s answered after the client's own DELETE (its GET stream racing its end): {len(late)}")
    stopped = {s.index: (s.failure, s.seen.ids, s.seen.refusals) for s in sessions if not s.continued()}
    assert theirs and len(went_on) >= CONTINUED * len(theirs), stopped
    assert all(s.continued() for s in sessions if s.owner() != victim), stopped  # the others' are untouched
    assert len(takeovers) >= len(went_on), [gw.log_tail() for gw in survivors]
    # a takeover starts a child as an open does: on a machine too busy to open a session in ADDED_P99 / 2, the bound
    # is twice what an open took here before the kill (the figure printed above is the issue's)
    bound = max(ADDED_P99, 2 * p([s.opening for s in sessions], 0.99))
    assert p(added, 0.99) <= bound, f"added at p99: {p(added, 0.99):.3f} s (bound {bound:.2f} s); {sorted(firsts)}"
