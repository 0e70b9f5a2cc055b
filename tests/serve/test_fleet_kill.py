"""An instance SIGKILLed under load, behind the recipe's HAProxy (deploy/haproxy.cfg) in each of its routing modes
(issue 27): Redis, instances i1 and i2 that live throughout and i4 that dies (i3 of the recipe is a port nothing
listens on), SDK clients calling through HAProxy without a pause before, during and after the kill.

Every call on a session a live instance owns is answered, whether it was in flight at the kill (through the
dying instance, which forwarded it to the owner, in round-robin), sent on a kept-alive connection HAProxy had to
it, or sent while it died; so is every 2026-07-28 call (no session: round-robin in every mode). The sessions the
dead instance owned go on under their ids (taken over by a live instance: serve/cluster/takeover.py); a call of
theirs in flight at the kill may be answered with the "server restarted" error, and none is lost otherwise."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support import MODERN, Gateway, crash, wait_for
from tests.support.fleet import Balancer, recipe_front, redis_server

SECRET = "fleet-kill-test-secret-0123456789abcdef"
LIVE = ("i1", "i2")
VICTIM = "i4"
SESSIONS = 9  # 2025 clients; round-robin initializes put about a third on the victim
STATELESS = 3  # 2026-07-28 clients
CALLS_BEFORE = 5  # calls each client has had answered before the kill
CALLS_AFTER = 5  # calls each live client has had answered after HAProxy marked the victim down
HANG_GUARD = 90
SLOW = 0.5  # seconds of the slow calls


def instance_env(redis_url: str, name: str) -> dict[str, str]:
    return {
        "REDIS_URL": redis_url,
        "MCPGATE_INSTANCE_ID": name,
        "MCPGATE_CLUSTER_SECRET": SECRET,
        "MCPGATE_INTERNAL_URL": "http://127.0.0.1:{port}",
        "MCPGATE_KEEPALIVE": "1",
    }


@pytest.fixture(scope="module")
def fleet() -> Iterator[tuple[str, dict[str, Gateway]]]:
    """Redis and the instances that live throughout."""
    with redis_server() as url:
        live = {name: Gateway(instance_env(url, name)) for name in LIVE}
        try:
            for gw in live.values():
                gw.wait_ready()
            yield url, live
        finally:
            for gw in live.values():
                gw.stop()


@dataclass
class Caller:
    """One SDK client calling echo without a pause: its session's owner, its answered calls, what went wrong."""

    index: int
    modern: bool = False
    session_id: str = ""
    answered: int = 0
    answered_after: int = 0  # answered once the victim was marked down
    failures: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # each non-2xx HTTP answer: its status, where from, its body
    ended: bool = False  # its session ended (a failure other than a call in flight at the kill)

    @property
    def owner(self) -> str:
        return self.session_id.split(".", 1)[0]


@dataclass
class Run:
    callers: list[Caller]
    killed: anyio.Event = field(default_factory=anyio.Event)
    down: anyio.Event = field(default_factory=anyio.Event)
    stop: anyio.Event = field(default_factory=anyio.Event)


async def call_on(run: Run, caller: Caller, base: str) -> None:
    async def seen(response: httpx2.Response) -> None:
        caller.session_id = caller.session_id or response.headers.get("mcp-session-id", "")
        if response.status_code >= 400:  # what the SDK reduces to "Server returned an error response"
            body = (await response.aread())[:300].decode(errors="replace")
            kind = response.headers.get("content-type", "-")
            caller.refused.append(f"{response.request.method} {response.status_code} {kind} {body!r}")

    http = httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=HANG_GUARD), event_hooks={"response": [seen]})
    transport = streamable_http_client(f"{base}/mcp", http_client=http)
    client = Client(transport, mode=MODERN if caller.modern else "legacy")
    try:
        async with http, client:
            while not run.stop.is_set():
                caller.refused.clear()
                message = f"c{caller.index}-{caller.answered}"
                slow = caller.answered % 2 == 1  # in flight for a while: some are at the kill
                try:
                    if slow:
                        done = await client.call_tool("slow", {"seconds": SLOW, "steps": 1})
                        assert done.content[0].text == f"done after {SLOW:g} s", done  # type: ignore[union-attr]
                        caller.answered += 1
                        caller.answered_after += run.down.is_set()
                        continue
                    echoed = await client.call_tool("echo", {"message": message})
                except Exception as exc:  # noqa: BLE001 - counted: a lost call
                    answers = f" (HTTP: {caller.refused})" if caller.refused else ""
                    caller.failures.append(f"{type(exc).__name__}: {exc}{answers}")
                    if caller.owner == VICTIM and "restarted" not in str(exc):
                        caller.ended = True
                        return  # its session ended with its owner
                    continue
                assert echoed.content[0].text == message, echoed  # type: ignore[union-attr]
                caller.answered += 1
                caller.answered_after += run.down.is_set()
    except Exception as exc:  # noqa: BLE001 - the client's transport failed under it: its calls are lost
        caller.failures.append(f"the client ended: {exc!r} (HTTP: {caller.refused})")


async def under_load(lb: Balancer, victim: Gateway) -> list[Caller]:
    callers = [Caller(index) for index in range(SESSIONS)]
    callers += [Caller(SESSIONS + index, modern=True) for index in range(STATELESS)]
    run = Run(callers)

    def live() -> list[Caller]:
        return [c for c in callers if not c.ended and (c.owner == VICTIM or not c.failures)]

    async def conduct() -> None:
        while not all(caller.answered >= CALLS_BEFORE for caller in callers):
            await anyio.sleep(0.05)
        await anyio.to_thread.run_sync(crash, victim)
        run.killed.set()
        await anyio.to_thread.run_sync(lambda: wait_for(lambda: not lb.servers_up()[f"sticky/{VICTIM}"]))
        run.down.set()
        while not all(caller.answered_after >= CALLS_AFTER for caller in live()):
            await anyio.sleep(0.05)
        run.stop.set()

    with anyio.fail_after(HANG_GUARD):
        async with anyio.create_task_group() as group:
            for caller in callers:
                group.start_soon(call_on, run, caller, lb.base)
            await conduct()
    return callers


def unusual(lb: Balancer) -> str:
    """HAProxy's log lines but those of requests answered 2xx at the first try (the recipe's log-format: the
    status, the server, how the exchange ended, the retries, "+" first when one was redispatched)."""
    lines = [line for line in lb.log().splitlines() if not re.search(r" 2\d\d .* retries=0$", line)]
    return "\n".join(lines[-40:])


@pytest.mark.parametrize("routing", ["sticky", "by_prefix", "roundrobin"])
def test_a_killed_instance_loses_no_call_of_a_live_session(fleet: tuple[str, dict[str, Gateway]], routing: str) -> None:
    url, live = fleet
    victim = Gateway(instance_env(url, VICTIM))
    try:
        victim.wait_ready()
        with recipe_front({**live, VICTIM: victim}, routing) as lb:
            callers = anyio.run(under_load, lb, victim)
        owners = {caller.owner for caller in callers if not caller.modern}
        assert VICTIM in owners and set(LIVE) <= owners, owners  # round-robin initializes reached every instance
        lost = {caller.index: caller.failures for caller in callers if caller.owner != VICTIM and caller.failures}
        answered = sum(caller.answered for caller in callers)
        assert not lost, f"{routing}: calls lost on live sessions (of {answered} answered): {lost}\n{unusual(lb)}"
        taken = [caller for caller in callers if caller.owner == VICTIM]  # taken over: they go on
        went_on = all(not c.ended and c.answered_after >= CALLS_AFTER for c in taken)
        assert went_on, f"{routing}: {[(c.index, c.answered_after, c.failures) for c in taken]}\n{unusual(lb)}"
        restarted_only = all("restarted" in failure for c in taken for failure in c.failures)
        assert restarted_only, f"{routing}: {[c.failures for c in taken]}\n{unusual(lb)}"
    finally:
        victim.stop()
