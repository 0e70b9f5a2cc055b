"""The relay's ModernHostBridge passes on every progress notification of a call, in order, before its result
(issue 22): the official SDK client in mode 2026-07-28 over stdio, through mcpgate-relay, to a legacy upstream
(gunicorn mcpgate.wsgi's 2025 session path over tests/fixtures/order_server.py) that asks its client for roots in
the middle of a call without waiting for the answer, and goes on writing progress while the host is asked. The
SDK gives each request its own progress token (the request id), so what comes after the retry must carry the
retry's."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, types

from tests.support import FIXTURES, Gateway, serving
from tests.support.relay import run_bridged_host

CALLS = 5


@pytest.fixture(scope="module")
def upstream() -> Iterator[Gateway]:
    with serving({"MCPGATE_COMMAND": f"{sys.executable} {FIXTURES / 'order_server.py'}"}, behind=True) as gw:
        yield gw


async def on_roots(context: Any) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[])


def run_host(gw: Gateway, scenario: Callable[[Client], Awaitable[None]], tmp_path: Path) -> None:
    """The SDK's stdio client (2026-07-28, with roots) in front of the relay's bridge to `gw`."""
    run_bridged_host(gw.url, scenario, tmp_path, list_roots_callback=on_roots)


def test_progress_written_while_the_host_is_asked_reaches_it(upstream: Gateway, tmp_path: Path) -> None:
    seen: dict[int, list[float]] = {}

    async def scenario(client: Client) -> None:
        for number in range(CALLS):
            steps: list[float] = seen.setdefault(number, [])

            async def on_progress(progress: float, total: float | None, message: str | None) -> None:
                steps.append(progress)  # noqa: B023 - awaited within this iteration

            arguments = {"tag": f"relay-{number}", "n": 4, "delay": 0.005, "ask_roots": True, "pause": 0.2}
            result = await client.call_tool("steps", arguments, progress_callback=on_progress)
            assert result.content[0].text == f"steps relay-{number} done"  # type: ignore[union-attr]

    run_host(upstream, scenario, tmp_path)
    assert seen == {number: [1.0, 2.0, 3.0, 4.0] for number in range(CALLS)}, seen
