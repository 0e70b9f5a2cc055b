"""A member of the aggregate that is gone comes back (core/hub_retry.py, serve/hub/child.py), through gunicorn
mcpgate.wsgi and the official SDK client: a remote upstream (tests/fixtures/remote_upstream.py) down when the
sessions start, in both eras on the aggregate's side (a 2025 session's hub; the 2026-07-28 pool's hub children,
the spare started while it was down included), named unreachable in calls and on /healthz while the demo goes
on, back within its backoff once it listens, list_changed reaching both clients; and a stdio member killed under
a session restarted, its tools back."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest
from mcp import Client, types
from mcp.shared.exceptions import MCPError

from tests.support import DEMO_ENTRY, MODERN, Gateway, await_for, on_elicit, on_sample, serving, wait_for
from tests.support.hub import GONE, ListChanged, all_tools, every_hub_child_back, kill_member, many, member_pid, write
from tests.support.remote import SdkUpstream

HANG_GUARD = 90
UNREACHABLE = r"Server 'far' of this endpoint is not available: .*it is unreachable for now"


def run(main: Callable[[], Any]) -> Any:
    async def guarded() -> Any:
        with anyio.fail_after(HANG_GUARD):
            return await main()

    return anyio.run(guarded)


def text(result: types.CallToolResult) -> str:
    assert not result.is_error, result
    return " ".join(getattr(item, "text", "") for item in result.content)


def health(gw: Gateway) -> dict[str, Any]:
    body = gw.request("GET", "/healthz").json()
    assert isinstance(body, dict)
    return body


def test_a_remote_member_down_when_sessions_start_comes_back_to_them_in_both_eras(tmp_path: Path) -> None:
    far = SdkUpstream(tmp_path, "stateful")  # not started yet
    config = write(tmp_path / "mcp.json", {"far": {"url": far.url}, "demo": DEMO_ENTRY})
    try:
        with serving({"MCPGATE_CONFIG": config}) as gw:  # a spare pooled child starts at once: without far

            async def main() -> None:
                changed = ListChanged()
                legacy = Client(gw.url, mode="legacy", message_handler=changed.handler, elicitation_callback=on_elicit)
                modern = Client(gw.url, mode=MODERN, sampling_callback=on_sample)
                async with legacy, modern:
                    for c in (legacy, modern):
                        assert not [n for n in await all_tools(c) if n.startswith("far__")]
                        with pytest.raises(MCPError, match=UNREACHABLE):
                            await c.call_tool("far__add", {"a": 1, "b": 2})
                        assert text(await c.call_tool("demo__add", {"a": 1, "b": 2})) == "3"
                    state = health(gw)
                    assert state["servers"]["far"]["status"] == "unavailable", state
                    assert state["servers"]["demo"]["status"] == "ok", state
                    async with modern.listen(tools_list_changed=True) as events:
                        assert events.honored.tools_list_changed
                        await anyio.to_thread.run_sync(far.start)  # listening once it returns
                        with anyio.fail_after(40):  # its backoff (at most RETRY_MAX) and a start: no sleep
                            await changed.next(40)
                            await events.__anext__()
                    # the modern client's next call may reach another pooled child: each has its own far,
                    # tried at once when one hub reached it
                    await await_for(lambda: every_hub_child_back(gw.log()), "every hub child has far again", 30)
                    for c in (legacy, modern):
                        assert {"far__add", "far__whoami"} <= set(await all_tools(c))
                        assert text(await c.call_tool("far__add", {"a": 2, "b": 2})) == "4"

            run(main)
            # the session's hub and the spare pooled one (started before any call) lost far, and every hub child
            # has it again; a pooled child started later lost it only if far came back after its initialize's
            # retries, which depends on the machine's pace
            gone = set(GONE.findall(gw.log()))
            assert {h for h in gone if not h.endswith("/pool-1")} and any(h.endswith("/pool-1") for h in gone), (
                gw.log_tail()
            )
            assert every_hub_child_back(gw.log()), gw.log_tail()

            async def side_by_side() -> list[str]:
                said: list[str] = []
                async with Client(gw.url, mode=MODERN) as c:

                    async def call(n: int) -> None:
                        said.append(text(await c.call_tool("far__add", {"a": n, "b": 1})))

                    async with anyio.create_task_group() as tg:
                        for n in range(4):
                            tg.start_soon(call, n)
                return said

            assert sorted(run(side_by_side)) == ["1", "2", "3", "4"]
            assert wait_for(lambda: health(gw)["servers"]["far"]["status"] == "ok", timeout=30), health(gw)
            assert "Traceback" not in gw.log(), gw.log_tail()
    finally:
        far.stop()


def test_a_stdio_member_killed_under_a_session_is_restarted_and_its_tools_come_back(tmp_path: Path) -> None:
    """Its tools vanish (list_changed), then a new child is started for it and they are back (list_changed)."""
    config = write(tmp_path / "mcp.json", {"demo": DEMO_ENTRY, "pager": many("pager")})
    with serving({"MCPGATE_CONFIG": config}) as gw:

        async def main() -> None:
            changes: list[set[str]] = []
            changed = ListChanged()
            async with Client(gw.url, mode="legacy", message_handler=changed.handler) as c:
                assert "pager__t0" in set(await all_tools(c))
                first = kill_member(gw, "pager")
                with anyio.fail_after(40):
                    while not changes or "pager__t0" not in changes[-1]:
                        await changed.next(40)
                        changes.append(set(await all_tools(c)))
                assert text(await c.call_tool("pager__t0", {})) == "pager:t0 {}"
                assert member_pid(gw, "pager") != first

        run(main)
        assert "server 'pager' is no longer part of this endpoint: it ended" in gw.log(), gw.log_tail()
        assert "server 'pager' is part of this endpoint again" in gw.log(), gw.log_tail()


def test_a_hub_child_ending_cancels_its_retry_timers() -> None:
    """In process: a member that cannot start has its Retry armed; close() cancels it (and ends the hub once the
    other member's child is gone), so nothing is tried after the session's end."""
    import gevent

    from mcpgate.serve.hub.child import HubChild, HubMember
    from mcpgate.serve.sessions.spec import ChildSpec

    def spec(*argv: str) -> ChildSpec:
        return ChildSpec(argv, None, None, "inherit", 1 << 20, 1 << 20, 1.0, 1.0)

    ended: list[str] = []
    members = [
        HubMember("demo", "demo", spec(sys.executable, "-m", "mcpgate.demo_server")),
        HubMember("broken", "broken", spec("/nonexistent/mcp-server")),
    ]
    hub = HubChild(members, on_message=lambda _: None, on_exit=ended.append, label="t", in_flight=8, uris=8)
    hub.start()
    try:
        timer = hub._retries["broken"]  # armed: tried again after RETRY_FIRST
        assert not timer.dead
    finally:
        assert hub.stop("the test ends", timeout=30)
    gevent.sleep(0)
    assert timer.dead and not hub._retries and ended == ["the test ends"]
