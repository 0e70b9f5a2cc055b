"""Traces (issue 28): the gateway's and the relay's spans, exported by OTLP/HTTP to a receiver of the tests' own
(tests/support/otlp.py decodes the protobuf), continue the W3C context a client sends (the official SDK's
`_meta.traceparent`, or an HTTP traceparent header) and pass it on: into the child's request `_meta` (a child
written with the SDK exports its own span under the gateway's), to the instance a request is forwarded to, and
upstream from the relay. No argument value and no token appears in any exported span."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from opentelemetry.sdk.trace import TracerProvider

from tests.support import FIXTURES, HANG_GUARD, HEADERS, call, init_body, on_elicit, reply_message, serving, wait_for
from tests.support.fleet import instances
from tests.support.otlp import Receiver, Span, receiver
from tests.support.relay import run_host

SECRET_ARGUMENT = "argument-value-never-exported-4711"
TOKEN = "token-never-exported-" + "x" * 24
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def sink() -> Iterator[Receiver]:
    with receiver() as got:
        yield got


def traced_env(sink: Receiver, **more: str) -> dict[str, str]:
    return {
        "MCPGATE_TRACING": "true",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": sink.url,
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        "MCPGATE_COMMAND": f"{sys.executable} {FIXTURES / 'traced_server.py'} {sink.url}",
        **more,
    }


def one(sink: Receiver, name: str, service: str, trace_id: str, kind: str | None = None) -> Span:
    """The span of that name, service (and kind) in the trace, once exported."""

    def found() -> list[Span]:
        return [
            s for s in sink.of_trace(trace_id) if s.name == name and s.service == service and kind in (None, s.kind)
        ]

    wait_for(lambda: len(found()) == 1, timeout=30, what=f"{service} {kind or ''} span {name!r} in {trace_id}")
    return found()[0]


def below(sink: Receiver, parent: Span, name: str) -> list[Span]:
    """The spans of that name whose parent is `parent` (exported with it: they end first)."""
    return [s for s in sink.of_trace(parent.trace_id) if s.name == name and s.parent_id == parent.span_id]


def assert_nothing_secret(sink: Receiver) -> None:
    for body in sink.bodies:
        assert SECRET_ARGUMENT.encode() not in body and TOKEN.encode() not in body


def sdk_call(url: str, mode: str) -> tuple[str, str, str]:
    """The SDK client's call of `traced` inside a span of the test's own (its context is what the SDK puts in
    `_meta`): (trace id, the test's span id, the traceparent the child received)."""
    tracer = TracerProvider().get_tracer("tests")

    async def main() -> tuple[str, str, str]:
        with anyio.fail_after(HANG_GUARD), tracer.start_as_current_span("host") as root:
            async with Client(url, mode=mode) as client:
                result = await client.call_tool("traced", {"secret": SECRET_ARGUMENT})
        context = root.get_span_context()
        return f"{context.trace_id:032x}", f"{context.span_id:016x}", result.content[0].text  # type: ignore[union-attr]

    return anyio.run(main)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_an_sdk_clients_trace_goes_through_the_gateway_into_an_sdk_child(sink: Receiver, mode: str) -> None:
    with serving(traced_env(sink)) as gw:
        trace_id, host_span, received = sdk_call(gw.url, mode)
        server = one(sink, "tools/call traced", "mcpgate", trace_id, "SERVER")
        assert server.parent_id == host_span  # the SDK's _meta.traceparent
        assert server.attributes["mcp.method.name"] == "tools/call"
        assert server.attributes["gen_ai.tool.name"] == "traced"
        assert server.attributes["mcpgate.server"] == "default"
        wait = one(sink, "tools/call traced", "mcpgate", trace_id, "CLIENT")
        assert wait.parent_id == server.span_id
        assert received.startswith(f"00-{trace_id}-{wait.span_id}-")  # what the child's request carried
        child = one(sink, "tools/call traced", "traced-fixture", trace_id, "SERVER")
        assert child.parent_id == wait.span_id  # the SDK-written child continues the same trace
        (guard,) = below(sink, server, "mcpgate.guard")
        assert server.start <= guard.start <= guard.end <= server.end
        assert below(sink, server, "mcpgate.session" if mode == "legacy" else "mcpgate.pool")
        assert_nothing_secret(sink)


def test_a_traceparent_header_and_a_forward_to_the_sessions_owner(sink: Receiver) -> None:
    """A request for a session another instance owns is forwarded: the forward's span context goes in the
    traceparent header, and the owner's SERVER span is its child, in the client's trace."""
    env = traced_env(sink, MCPGATE_AUTH_TOKEN=TOKEN)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with instances("tracing-secret-" + "s" * 24, **env) as (_, start):
        owner, other = start("a"), start("b")
        headers = {**open_session_with(owner, auth), "traceparent": TRACEPARENT}
        reply = other.request("POST", body=call("traced", {"secret": SECRET_ARGUMENT}), headers=headers)
        message = reply_message(reply)
        trace_id = TRACEPARENT.split("-")[1]
        assert message["result"]["content"][0]["text"].split("-")[1] == trace_id, message
        wait_for(lambda: len(sink.named("mcpgate.forward")) == 1, timeout=30, what="the forward's span")
        forward = sink.named("mcpgate.forward")[0]
        front = [s for s in sink.of_trace(trace_id) if s.span_id == forward.parent_id]
        assert front and front[0].parent_id == TRACEPARENT.split("-")[2] and front[0].kind == "SERVER"
        assert forward.attributes["mcpgate.instance"] == "a"

        def owners() -> list[Span]:
            return [s for s in sink.of_trace(trace_id) if s.kind == "SERVER" and s.parent_id == forward.span_id]

        wait_for(lambda: len(owners()) == 1, timeout=30, what="the owner's span under the forward's")
        assert owners()[0].name == "tools/call traced" and owners()[0].attributes["mcp.session.id"].startswith("a.")
        child = one(sink, "tools/call traced", "traced-fixture", trace_id, "SERVER")
        wait = next(s for s in sink.of_trace(trace_id) if s.span_id == child.parent_id)
        assert wait.kind == "CLIENT" and wait.parent_id == owners()[0].span_id
        assert_nothing_secret(sink)


def open_session_with(gw: Any, auth: dict[str, str]) -> dict[str, str]:
    reply = gw.request("POST", body=init_body(), headers={**HEADERS, **auth})
    assert reply.status == 200, reply
    session = {
        **HEADERS,
        **auth,
        "Mcp-Session-Id": reply.headers["mcp-session-id"],
        "MCP-Protocol-Version": "2025-11-25",
    }
    assert (
        gw.request("POST", body={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session).status
        == 202
    )
    return session


def test_the_relay_passes_its_hosts_trace_upstream(sink: Receiver, tmp_path: Path) -> None:
    """An SDK host's request through the relay: the relay's span (CLIENT) continues the host's _meta.traceparent
    and its context goes upstream in the traceparent header, where the gateway's SERVER span continues it."""
    tracer = TracerProvider().get_tracer("tests")
    relay_env = {**{k: v for k, v in traced_env(sink).items() if k != "MCPGATE_COMMAND"}, "OTEL_SERVICE_NAME": "relay"}

    async def scenario(client: Client) -> tuple[str, str]:
        with tracer.start_as_current_span("host") as root:
            await client.call_tool("traced", {"secret": SECRET_ARGUMENT})
        context = root.get_span_context()
        return f"{context.trace_id:032x}", f"{context.span_id:016x}"

    with serving(traced_env(sink)) as gw:
        trace_id, host_span = run_host(gw.url, scenario, env=relay_env, stderr=tmp_path / "relay.err")
        relayed = one(sink, "tools/call traced", "relay", trace_id, "CLIENT")
        assert relayed.parent_id == host_span and relayed.attributes["gen_ai.tool.name"] == "traced"
        upstream = one(sink, "tools/call traced", "mcpgate", trace_id, "SERVER")
        assert upstream.parent_id == relayed.span_id  # the relay's traceparent header
        one(sink, "tools/call traced", "traced-fixture", trace_id, "SERVER")
        assert_nothing_secret(sink)


def test_off_the_sdk_is_not_imported() -> None:
    """Tracing off (the default): an app built and the relay's client loaded leave opentelemetry unimported."""
    code = (
        "import sys\n"
        "from mcpgate.serve.front.app import create_app\n"
        "import mcpgate.relay.http_client\n"
        "create_app()\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCPGATE_", "OTEL_"))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_sessions_opened_together_while_tracing_are_all_answered(sink: Receiver) -> None:
    """Each child is forked from the traced worker: nothing of the SDK may run in the fork before the exec (its
    batch processor's after-fork thread start ran the parent's greenlets there, which closed other clients'
    connections unanswered)."""
    env = {k: v for k, v in traced_env(sink).items() if k != "MCPGATE_COMMAND"}  # the bundled demo child
    with serving(env) as gw:
        statuses: list[int | str] = []

        def open_one() -> None:
            try:
                statuses.append(gw.request("POST", body=init_body(), headers=HEADERS).status)
            except OSError as exc:
                statuses.append(repr(exc))

        clients = [threading.Thread(target=open_one) for _ in range(12)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(HANG_GUARD)
        assert statuses == [200] * 12, statuses
        assert "Traceback" not in gw.log()


def test_an_unsampled_context_is_passed_on_and_nothing_is_exported(sink: Receiver) -> None:
    """A traceparent whose flags say "not sampled" (the default sampler follows the parent): the child's request
    carries the same trace, unsampled, and no span of it is exported (a sampled request after it is)."""
    with serving(traced_env(sink)) as gw:
        session = open_session_with(gw, {})
        unsampled = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
        reply = gw.request("POST", body=call("traced", {"secret": "a"}), headers={**session, "traceparent": unsampled})
        received = reply_message(reply)["result"]["content"][0]["text"]
        assert received.startswith("00-0af7651916cd43dd8448eb211c80319c-") and received.endswith("-00"), received
        reply = gw.request(
            "POST", body=call("traced", {"secret": "b"}, 3), headers={**session, "traceparent": TRACEPARENT}
        )
        assert reply.status == 200
        one(sink, "tools/call traced", "mcpgate", TRACEPARENT.split("-")[1], "SERVER")
        assert sink.of_trace("0af7651916cd43dd8448eb211c80319c") == []


def test_an_export_stuck_on_its_receiver_blocks_no_request() -> None:
    """The export runs in a greenlet on the worker's patched sockets: a receiver that takes the export's
    connection and never answers (the exporter would wait 60 s) leaves every request served meanwhile."""
    listener = socket.create_server(("127.0.0.1", 0))
    taken: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                taken.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    env = {
        "MCPGATE_TRACING": "true",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{listener.getsockname()[1]}/v1/traces",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "60",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }
    try:
        with serving(env) as gw:
            session = open_session_with(gw, {})
            wait_for(lambda: taken, timeout=30, what="the export's connection to the receiver")
            for n in range(10):  # each within the client's own timeout (20 s), the export still stuck
                reply = gw.request("POST", body=call("echo", {"message": "x"}, 10 + n), headers=session, timeout=20)
                assert reply_message(reply)["result"]["content"][0]["text"] == "x"
    finally:
        listener.close()
        for conn in taken:
            conn.close()


def test_an_mrtr_round_is_a_span_of_the_retry(sink: Receiver) -> None:
    """A 2026-07-28 client's call of a 2025 child's tool that elicits: the gateway answers input-required, the
    SDK client retries with the answer, and the retry's SERVER span has an `mcpgate.mrtr` child (the bundled demo
    child speaks 2025 only: the bridge)."""
    env = {k: v for k, v in traced_env(sink).items() if k != "MCPGATE_COMMAND"}
    tracer = TracerProvider().get_tracer("tests")

    async def main() -> tuple[str, str]:
        with anyio.fail_after(HANG_GUARD), tracer.start_as_current_span("host") as root:
            async with Client(gw.url, mode="2026-07-28", elicitation_callback=on_elicit) as client:
                result = await client.call_tool("ask_name", {})
        return f"{root.get_span_context().trace_id:032x}", result.content[0].text  # type: ignore[union-attr]

    with serving(env) as gw:
        trace_id, greeting = anyio.run(main)
        assert greeting == "Hello, Grace"

        def calls() -> list[Span]:
            return [s for s in sink.of_trace(trace_id) if s.name == "tools/call ask_name" and s.kind == "SERVER"]

        wait_for(lambda: len(calls()) == 2, timeout=30, what="the call's two SERVER spans")
        first, retry = sorted(calls(), key=lambda s: s.start)
        wait_for(lambda: below(sink, retry, "mcpgate.mrtr"), timeout=30, what="the retry's mcpgate.mrtr span")
        assert below(sink, first, "mcpgate.pool") and not below(sink, first, "mcpgate.mrtr")
