"""The official SDK client's side of the tests: its answers to a server's requests (elicitation: a name;
sampling: the prompt, loud), the demo server's round trips, and a slow call cancelled once it is working."""

from __future__ import annotations

from typing import Any

from mcp import types


async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"name": "Grace"})


async def on_sample(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    text = params.messages[0].content.text  # type: ignore[union-attr]
    return types.CreateMessageResult(
        role="assistant", model="stub", content=types.TextContent(type="text", text=text.upper())
    )


async def demo_round_trips(client: Any) -> None:
    """The demo server's progress, elicitation and sampling round trips through an SDK client (one that
    answers with on_elicit and on_sample)."""
    updates: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append(progress)

    slow = await client.call_tool("slow", {"seconds": 0.3, "steps": 3}, progress_callback=on_progress)
    assert slow.content[0].text.startswith("done") and updates == [1, 2, 3]
    asked = await client.call_tool("ask_name", {})
    assert asked.content[0].text == "Hello, Grace"
    sampled = await client.call_tool("sample", {"prompt": "shout this"})
    assert sampled.content[0].text == "SHOUT THIS"


async def cancel_a_slow_call(client: Any) -> None:
    """Start the fixture's `slow` tool, cancel the call once its first progress arrives (the child is working on
    it: the SDK then tells the server, as its era does), and check the session still answers the next call."""
    import anyio  # the SDK's event loop; only the async tests need it

    started = anyio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        started.set()

    async with anyio.create_task_group() as tg:

        async def call() -> None:
            await client.call_tool("slow", {"seconds": 30, "steps": 60}, progress_callback=on_progress)

        tg.start_soon(call)
        await started.wait()
        tg.cancel_scope.cancel()
    assert (await client.call_tool("echo", {"message": "next"})).content[0].text == "next"
