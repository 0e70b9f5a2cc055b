"""A rolling redeploy behind the recipe's HAProxy (deploy/README.md, "Rolling redeploy"; issue 27): Redis, three
instances, SDK sessions calling idempotent methods without a pause; each instance in turn stopped gracefully
(SIGTERM) and started again under the same MCPGATE_INSTANCE_ID and address. No call fails, and every session keeps
its id: the sessions of a replaced instance are taken over (serve/cluster/takeover.py).

A failure's report says what happened: each error answer the sessions got (its status, type and body), HAProxy's
log lines of requests not plainly answered (a status past 299, a retry, an exchange cut short), and the log of
every instance, the replaced ones too (conftest.py: a restarted Gateway logs to a file of its own)."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.serve.test_takeover import instance_env
from tests.support import Gateway, stop_process, wait_for
from tests.support.fleet import Balancer, recipe_front, redis_server

NAMES = ("i1", "i2", "i3")
SESSIONS = 4
CALLS_BETWEEN = 3  # calls every session has had answered before the first and after each replacement
HANG_GUARD = 240
ERROR_BYTES = 300  # of an error answer's body in a failure's report
REPORTED_LINES = 60  # of HAProxy's log in a failure's report (the last of those not plainly answered)
SENT_KEPT = 4  # requests of each session named in a failure's report (its last ones)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@dataclass
class Caller:
    index: int
    answered: int = 0
    ids: set[str] = field(default_factory=set)
    failures: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # each answer with an error status: method, status, type, body
    sent: list[str] = field(default_factory=list)  # the last requests sent (a hang's report: what went unanswered)


def up(lb: Balancer, name: str) -> bool:
    return lb.servers_up().get(f"sticky/{name}", False)


async def call_on(caller: Caller, url: str, stop: anyio.Event) -> None:
    async def seen(response: httpx2.Response) -> None:
        if response.status_code >= 400:  # read here (the SDK's own read then finds it read): a failure's cause
            body = await response.aread()
            kind = response.headers.get("content-type", "-")
            caller.errors.append(f"{response.request.method} {response.status_code} {kind} {body[:ERROR_BYTES]!r}")
        if "mcp-session-id" in response.headers:
            caller.ids.add(response.headers["mcp-session-id"])

    async def sending(request: httpx2.Request) -> None:
        body = request.content[:ERROR_BYTES] if request.method == "POST" else b""
        caller.sent[:] = [*caller.sent[-SENT_KEPT + 1 :], f"{anyio.current_time():.1f} {request.method} {body!r}"]

    hooks = {"request": [sending], "response": [seen]}
    http = httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=60), event_hooks=hooks)
    try:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            while not stop.is_set():
                try:
                    if caller.answered % 2:
                        listed = await client.list_tools()
                        assert {tool.name for tool in listed.tools} >= {"echo", "state"}, listed
                    else:
                        message = f"c{caller.index}-{caller.answered}"
                        echoed = await client.call_tool("echo", {"message": message})
                        assert echoed.content[0].text == message, echoed  # type: ignore[union-attr]
                    caller.answered += 1
                except Exception as exc:  # noqa: BLE001 - counted: a failed call
                    caller.failures.append(f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - the client's transport failed under it
        caller.failures.append(f"the client ended: {exc!r}")


@pytest.mark.parametrize("routing", ["sticky", "roundrobin"])
def test_a_rolling_redeploy_fails_no_call(routing: str) -> None:
    with redis_server() as url:
        envs = {name: instance_env(url, name) for name in NAMES}
        live = {name: Gateway(envs[name]) for name in NAMES}
        started = list(live.values())
        try:
            for gw in started:
                gw.wait_ready()
            with recipe_front(live, routing, wait_up=False) as lb:
                assert wait_for(lambda: all(up(lb, name) for name in NAMES), 30), lb.servers_up()

                def replace(name: str) -> None:
                    old = live[name]
                    stop_process(old.proc, signal.SIGTERM, timeout=60)  # a graceful stop: drain, release
                    new = Gateway(envs[name], port=old.port)
                    started.append(new)
                    new.wait_ready()
                    live[name] = new
                    assert wait_for(lambda: up(lb, name), 30), lb.servers_up()

                callers = [Caller(index) for index in range(SESSIONS)]

                async def conduct() -> None:
                    stop = anyio.Event()

                    async def answered_more(than: list[int]) -> bool:
                        """False when a call failed (a session lost answers 404 to every later call: the
                        failure is reported at once, not as a hang at HANG_GUARD)."""
                        while not all(c.answered >= n + CALLS_BETWEEN for c, n in zip(callers, than, strict=True)):
                            if any(c.failures for c in callers):
                                return False
                            await anyio.sleep(0.05)
                        return True

                    async def redeploy() -> bool:
                        if not await answered_more([0] * SESSIONS):
                            return False
                        for name in NAMES:
                            phase[0] = f"replacing {name}"
                            await anyio.to_thread.run_sync(replace, name)
                            phase[0] = f"calls after {name} was replaced"
                            if not await answered_more([c.answered for c in callers]):
                                return False
                        return True

                    with anyio.fail_after(HANG_GUARD):
                        async with anyio.create_task_group() as group:
                            for caller in callers:
                                group.start_soon(call_on, caller, lb.url, stop)
                            if await redeploy():
                                stop.set()
                            else:
                                group.cancel_scope.cancel()

                phase = ["the first calls"]
                try:
                    anyio.run(conduct)
                except TimeoutError:
                    counts = {c.index: c.answered for c in callers}
                    pytest.fail(f"{routing}: hung in {phase[0]} (answered {counts})\n{report(callers, lb)}")
                failed = {c.index: c.failures for c in callers if c.failures}
                assert not failed, f"{routing}: failed calls: {failed}\n{report(callers, lb)}"
                assert all(len(c.ids) == 1 for c in callers), [c.ids for c in callers]  # each kept its session
            taken = sum(gw.log().count("taken over") for gw in started)
            assert taken >= 1, "no session was taken over"
        finally:
            for gw in started:
                gw.stop()


def report(callers: list[Caller], lb: Balancer) -> str:
    """What a failure's report adds: the error answers each session got, and HAProxy's lines of the requests not
    plainly answered (the recipe's log-format: status, server, timers, termination state, retries)."""
    errors = "\n".join(f"session {c.index}: {error}" for c in callers for error in c.errors) or "none"
    failures = "\n".join(f"session {c.index}: {failure}" for c in callers for failure in c.failures) or "none"
    sent = "\n".join(f"session {c.index}: {request}" for c in callers for request in c.sent)
    unplain = [line for line in lb.log().splitlines() if not (" 200 " in line and line.endswith(" ---- retries=0"))]
    shown = "\n".join(unplain[-REPORTED_LINES:])
    heading = f"HAProxy, requests not plainly answered (last {REPORTED_LINES})"
    return f"last requests sent:\n{sent}\nfailed calls:\n{failures}\nerror answers:\n{errors}\n{heading}:\n{shown}"
