"""The pool of children behind MCP 2026-07-28 requests, through `gunicorn mcpgate.wsgi` and real children: the
era probe, load spreading and waiting, the MRTR bridge's one-candidate rule, requestState refusals, a client
without the capability, cancellation by closing the stream, crashes and restarts, the idle TTL, identical ids
on one child, and a graceful shutdown with an open subscriptions/listen stream."""

from __future__ import annotations

import http.client
import json
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support import (
    FIXTURES,
    Gateway,
    Reply,
    children,
    direct_children,
    lazy_gateways,
    modern_body,
    modern_headers,
    post_modern,
    reply_message,
    sse_messages,
    wait_dead,
    wait_for,
)

SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
SERVER_INFO = "io.modelcontextprotocol/serverInfo"
STARTED = re.compile(r"child\[pool-\d+\] started pid=(\d+)")
CRASHY = f"{sys.executable} {FIXTURES / 'crashy_server.py'}"
SILENT = f"{sys.executable} {FIXTURES / 'silent_server.py'}"
CANCELLED = "cancelled; no response sent"  # the demo child's stderr line for a cancelled tools/call
ELICIT = {"elicitation": {}}
NO_SPARES = {"MCPGATE_POOL_SPARES": "0"}  # children only on demand: tests that count them

ENVS = {
    "demo": {},  # the pool's defaults, the bundled (legacy-only) demo child
    "one": {"MCPGATE_POOL_CHILDREN": "1", "MCPGATE_POOL_WAIT": "1.5"},
    "ttl": {"MCPGATE_POOL_CHILDREN": "1", "MCPGATE_INPUT_TTL": "1.5"},
}


@pytest.fixture(scope="module")
def gateways() -> Iterator[Callable[[str], Gateway]]:
    """One gateway per settings kind for the whole module, started on first use."""
    with lazy_gateways(ENVS) as get:
        yield get


def pids(gw: Gateway) -> list[int]:
    """The pids of the pooled children this gateway started so far (from its log)."""
    return [int(pid) for pid in STARTED.findall(gw.log())]


def tool(msg_id: Any, name: str, arguments: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    return modern_body(msg_id, "tools/call", {"name": name, "arguments": arguments or {}}, **kwargs)


def slow(msg_id: Any, seconds: float, steps: int, token: Any = "p", **kwargs: Any) -> dict[str, Any]:
    body = tool(msg_id, "slow", {"seconds": seconds, "steps": steps}, **kwargs)
    body["params"]["_meta"]["progressToken"] = token
    return body


def ask_name(msg_id: Any, caps: dict[str, Any] | None = ELICIT, **retry: Any) -> dict[str, Any]:
    return modern_body(msg_id, "tools/call", {"name": "ask_name", "arguments": {}, **retry}, caps=caps)


def result_of(reply: Reply, msg_id: Any) -> dict[str, Any]:
    assert reply.status == 200, reply
    message = reply_message(reply)
    assert message.get("id") == msg_id and "result" in message, reply
    return dict(message["result"])


def error_of(reply: Reply, status: int, code: int, msg_id: Any) -> dict[str, Any]:
    assert reply.status == status, reply
    message = reply_message(reply)
    assert message.get("error", {}).get("code") == code and message.get("id") == msg_id, reply
    return dict(message["error"])


def refused(reply: Reply, status: int) -> tuple[dict[str, Any], Any]:
    """The error of a request the pool refused (HTTP status and -32603 checked) and the id it carries."""
    assert reply.status == status, reply
    message = reply_message(reply)
    assert message.get("error", {}).get("code") == -32603, reply
    return dict(message["error"]), message.get("id")


def input_required(reply: Reply, msg_id: Any) -> tuple[str, str]:
    """The (inputRequests key, requestState) of a bridged ask_name's InputRequiredResult."""
    result = result_of(reply, msg_id)
    assert result["resultType"] == "input_required", reply
    ((key, request),) = result["inputRequests"].items()
    assert request["method"] == "elicitation/create" and request["params"]["message"] == "What is your name?"
    return key, result["requestState"]


def answer(key: str, name: str) -> dict[str, Any]:
    return {key: {"action": "accept", "content": {"name": name}}}


def greeted(reply: Reply, msg_id: Any) -> str:
    result = result_of(reply, msg_id)
    assert result["resultType"] == "complete", reply
    return str(result["content"][0]["text"])


class Streamed:
    """One POST whose reply is read message by message while it is still coming (SSE or one JSON body)."""

    def __init__(self, gw: Gateway, body: dict[str, Any], timeout: float = 20.0) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=timeout)
        self.conn.request("POST", "/mcp", body=json.dumps(body).encode(), headers=self._headers(body))
        self.resp = self.conn.getresponse()
        self.status = self.resp.status
        self.sse = self.resp.getheader("content-type", "").startswith("text/event-stream")
        self.buffer = b""
        self.seen: list[dict[str, Any]] = []

    @staticmethod
    def _headers(body: dict[str, Any]) -> dict[str, str]:
        name = (body.get("params") or {}).get("name")
        return modern_headers(body["method"], name if isinstance(name, str) else None)

    def next(self) -> dict[str, Any] | None:
        """The next message; None once the reply has ended."""
        if not self.sse:
            data = self.resp.read()
            self.sse = True  # read once
            if data:
                self.seen.append(json.loads(data))
                return self.seen[-1]
            return None
        while True:
            block, found, rest = self.buffer.partition(b"\n\n")
            if found:
                self.buffer = rest
                if messages := sse_messages(block + b"\n\n"):
                    self.seen.append(messages[0])
                    return messages[0]
                continue
            chunk = self.resp.read1(65536)
            if not chunk:
                return None
            self.buffer += chunk.replace(b"\r\n", b"\n")

    def until_response(self) -> list[dict[str, Any]]:
        """Every message up to and including the response."""
        while not self.seen or "method" in self.seen[-1]:
            if self.next() is None:
                break
        return self.seen

    def close(self) -> None:
        self.conn.close()


def progress_of(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"] for m in messages if m.get("method") == "notifications/progress"]


# -- 1. the era probe --


def test_a_legacy_child_is_bridged_and_discover_comes_from_its_initialize(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("demo")
    result = result_of(post_modern(gw, modern_body("d-1", "server/discover")), "d-1")
    assert result["supportedVersions"] == ["2026-07-28"] and result["resultType"] == "complete", result
    assert result["capabilities"]["tools"] == {"listChanged": True} and "logging" in result["capabilities"], result
    assert "demo server bundled with mcpgate" in result["instructions"], result
    assert result["_meta"][SERVER_INFO]["name"] == "mcpgate-demo", result
    assert "(bridged)" in gw.log(), gw.log_tail()


def test_a_child_answering_nothing_is_a_failed_start_never_taken_for_legacy(
    gateway_factory: Callable[..., Gateway],
) -> None:
    """Silence means "still starting": after MCPGATE_PROBE_TIMEOUT the child is also pinged, and with no answer
    to either within MCPGATE_START_TIMEOUT the start has failed; initialize is never sent on that connection."""
    env = {"MCPGATE_COMMAND": SILENT, "MCPGATE_PROBE_TIMEOUT": "0.3", "MCPGATE_START_TIMEOUT": "1.5"}
    gw = gateway_factory({**env, "MCPGATE_POOL_WAIT": "1"})
    reply = post_modern(gw, modern_body("s-1", "tools/list"))
    error, refused_id = refused(reply, 502)
    assert "no answer within MCPGATE_START_TIMEOUT (1.5 s)" in error["message"], reply
    log = gw.log()
    assert "silent got server/discover" in log and "silent got ping" in log, gw.log_tail()
    assert log.index("silent got server/discover") < log.index("silent got ping"), gw.log_tail()
    assert "silent got initialize" not in log, gw.log_tail()
    assert refused_id == "s-1", reply


# -- 2. load: one request per child, two children, the third waits and then 503 --


def test_load_spreads_over_children_and_a_third_request_waits_then_503(
    gateway_factory: Callable[..., Gateway],
) -> None:
    gw = gateway_factory({"MCPGATE_POOL_CHILDREN": "2", "MCPGATE_POOL_CHILD_REQUESTS": "1", "MCPGATE_POOL_WAIT": "1"})
    first, second = Streamed(gw, slow("l-1", 20, 40)), Streamed(gw, slow("l-2", 20, 40))
    try:
        for streamed in (first, second):
            message = streamed.next()
            assert message is not None and message.get("method") == "notifications/progress", streamed.seen
        assert children(gw) == 2 and len(set(pids(gw))) == 2, gw.log_tail()
        third = post_modern(gw, tool("l-3", "echo", {"message": "third"}))
        error, refused_id = refused(third, 503)
        assert refused_id == "l-3", third
        assert "MCPGATE_POOL_CHILDREN" in error["message"] and "MCPGATE_POOL_CHILD_REQUESTS" in error["message"]
        assert third.headers.get("retry-after"), third
    finally:
        first.close()
        second.close()
    # the two slots come back once the streams' cancellations reach the gateway
    assert wait_for(lambda: post_modern(gw, tool("l-4", "echo", {"message": "x"})).status == 200)


# -- 3. two clients eliciting at once --


def test_two_clients_eliciting_at_once_each_get_their_own_input_request(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("demo")
    key_a, state_a = input_required(post_modern(gw, ask_name("a-1")), "a-1")
    key_b, state_b = input_required(post_modern(gw, ask_name("b-1")), "b-1")  # while a's is pending
    assert state_a != state_b
    assert (
        greeted(post_modern(gw, ask_name("b-2", inputResponses=answer(key_b, "Grace"), requestState=state_b)), "b-2")
        == "Hello, Grace"
    )
    assert (
        greeted(post_modern(gw, ask_name("a-2", inputResponses=answer(key_a, "Ada"), requestState=state_a)), "a-2")
        == "Hello, Ada"
    )
    assert len(set(pids(gw))) >= 2, gw.log_tail()  # a candidate has a legacy child to itself


def test_on_one_child_a_second_candidate_waits_for_the_first(gateways: Callable[[str], Gateway]) -> None:
    """MCPGATE_POOL_CHILDREN=1: a candidate waits while another one's call holds the child; past a second it
    evicts a call parked for its client's input, and never gets that call's input request."""
    gw = gateways("one")
    key_a, state_a = input_required(post_modern(gw, ask_name("w-a1")), "w-a1")
    first_done = threading.Event()
    second: dict[str, Any] = {}

    def ask_second() -> None:
        second["reply"] = post_modern(gw, ask_name("w-b1"))
        second["after_first"] = first_done.is_set()

    waiter = threading.Thread(target=ask_second)
    waiter.start()
    waiter.join(0.2)  # time for the second request to reach the pool (it must wait there)
    done = post_modern(gw, ask_name("w-a2", inputResponses=answer(key_a, "Ada"), requestState=state_a))
    first_done.set()
    assert greeted(done, "w-a2") == "Hello, Ada"
    waiter.join(15)
    assert second.get("after_first") is True, second  # answered only once the first had finished
    key_b, state_b = input_required(second["reply"], "w-b1")  # its own input request, not the first one's
    assert state_b != state_a
    # a third candidate: the second stays parked for its client's input, so it is evicted to make room
    key_c, state_c = input_required(post_modern(gw, ask_name("w-c1")), "w-c1")
    assert state_c not in (state_a, state_b) and "evicting a call parked for input" in gw.log(), gw.log_tail()
    evicted = post_modern(gw, ask_name("w-b2", inputResponses=answer(key_b, "Grace"), requestState=state_b))
    error_of(evicted, 400, -32602, "w-b2")
    again = post_modern(gw, ask_name("w-c2", inputResponses=answer(key_c, "Grace"), requestState=state_c))
    assert greeted(again, "w-c2") == "Hello, Grace"
    assert len(set(pids(gw))) == 1, gw.log_tail()


def test_on_one_child_a_candidate_behind_a_running_one_gets_503(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("one")  # MCPGATE_POOL_WAIT=1.5
    running = Streamed(gw, slow("v-1", 20, 40, caps=ELICIT))  # a candidate, not parked: nothing to evict
    try:
        started = running.next()
        assert started is not None and started.get("method") == "notifications/progress", running.seen
        reply = post_modern(gw, ask_name("v-2"))
        error, refused_id = refused(reply, 503)
        assert refused_id == "v-2" and "MCPGATE_POOL_CHILDREN" in error["message"], reply
        assert reply.headers.get("retry-after"), reply
    finally:
        running.close()
    assert wait_for(lambda: post_modern(gw, tool("v-3", "echo", {"message": "x"})).status == 200)


# -- 4. requestState refusals, and an abandoned continuation --


def flipped(state: str) -> str:
    middle = len(state) // 2
    return state[:middle] + ("A" if state[middle] != "A" else "B") + state[middle + 1 :]


def test_a_tampered_misdirected_or_reused_request_state_is_invalid_params(
    gateways: Callable[[str], Gateway],
) -> None:
    gw = gateways("demo")
    key, state = input_required(post_modern(gw, ask_name("r-1")), "r-1")
    reply = answer(key, "Ada")
    error_of(post_modern(gw, ask_name("r-2", inputResponses=reply, requestState=flipped(state))), 400, -32602, "r-2")
    other = tool("r-3", "echo", {"message": "x"})
    other["params"] |= {"inputResponses": reply, "requestState": state}  # another request's state
    error_of(post_modern(gw, other), 400, -32602, "r-3")
    assert greeted(post_modern(gw, ask_name("r-4", inputResponses=reply, requestState=state)), "r-4") == "Hello, Ada"
    error_of(post_modern(gw, ask_name("r-5", inputResponses=reply, requestState=state)), 400, -32602, "r-5")


def test_an_abandoned_continuation_ends_the_childs_call_and_its_state_expires(
    gateways: Callable[[str], Gateway],
) -> None:
    gw = gateways("ttl")  # one child, MCPGATE_INPUT_TTL=1.5
    key_a, state_a = input_required(post_modern(gw, ask_name("x-a1")), "x-a1")
    # nobody answers: after MCPGATE_INPUT_TTL the call ends on the child, which the next candidate gets at once
    assert wait_for(lambda: "nobody answered its input request in time" in gw.log()), gw.log_tail()
    key_b, state_b = input_required(post_modern(gw, ask_name("x-b1")), "x-b1")
    late = post_modern(gw, ask_name("x-a2", inputResponses=answer(key_a, "Ada"), requestState=state_a))
    error_of(late, 400, -32602, "x-a2")
    done = post_modern(gw, ask_name("x-b2", inputResponses=answer(key_b, "Grace"), requestState=state_b))
    assert greeted(done, "x-b2") == "Hello, Grace"
    assert "evicting" not in gw.log() and len(set(pids(gw))) == 1, gw.log_tail()


# -- 5. a client without the capability is never asked --


@pytest.mark.parametrize("caps", [{}, {"sampling": {}}], ids=["no-capabilities", "sampling-only"])
def test_a_client_without_elicitation_never_gets_an_input_request(
    gateways: Callable[[str], Gateway], caps: dict[str, Any]
) -> None:
    reply = post_modern(gateways("demo"), ask_name("n-1", caps=caps))
    result = result_of(reply, "n-1")
    assert result["resultType"] == "complete" and "inputRequests" not in result, reply
    assert result["isError"] is True and "elicitation" in result["content"][0]["text"], reply


# -- 6. cancellation by closing the stream --


def test_closing_the_stream_cancels_the_call_and_frees_the_slot(
    gateway_factory: Callable[..., Gateway], tmp_path: Any
) -> None:
    stderr = tmp_path / "children.log"
    gw = gateway_factory(
        {
            "MCPGATE_POOL_CHILDREN": "1",
            "MCPGATE_POOL_CHILD_REQUESTS": "1",
            "MCPGATE_POOL_WAIT": "1",
            "MCPGATE_KEEPALIVE": "0.2",
            "MCPGATE_STDERR": str(stderr),
        }
    )
    streamed = Streamed(gw, slow("k-1", 30, 60))
    first = streamed.next()
    assert streamed.sse and first is not None and first["method"] == "notifications/progress", streamed.seen
    assert first["params"]["progressToken"] == "p", first
    streamed.close()
    assert wait_for(lambda: stderr.exists() and CANCELLED in stderr.read_text()), gw.log_tail()
    assert result_of(post_modern(gw, tool("k-2", "echo", {"message": "next"})), "k-2")["content"][0]["text"] == "next"


# -- 7. crashes and restarts --


def test_a_crash_mid_call_is_named_a_new_child_follows_and_too_many_crashes_503(
    gateway_factory: Callable[..., Gateway],
) -> None:
    gw = gateway_factory({"MCPGATE_COMMAND": CRASHY, "MCPGATE_POOL_RESTARTS": "2", **NO_SPARES})
    result_of(post_modern(gw, modern_body("c-0", "tools/list")), "c-0")
    [first] = pids(gw)
    crashed = error_of(post_modern(gw, tool("c-1", "crash")), 200, -32000, "c-1")
    assert "exited with code 3" in crashed["message"], crashed
    assert wait_dead([first]) == []
    result_of(post_modern(gw, modern_body("c-2", "tools/list")), "c-2")  # a new child
    assert len(set(pids(gw))) == 2, gw.log_tail()
    error_of(post_modern(gw, tool("c-3", "crash")), 200, -32000, "c-3")
    late = post_modern(gw, modern_body("c-4", "tools/list"))
    error, refused_id = refused(late, 503)
    assert refused_id == "c-4", late
    assert "crashed 2 times" in error["message"] and "exited with code 3" in error["message"], late
    assert late.headers.get("retry-after"), late
    assert len(set(pids(gw))) == 2, gw.log_tail()  # no third child was started


def test_a_child_that_exits_at_start_is_retried_then_503_names_the_exit(
    gateway_factory: Callable[..., Gateway],
) -> None:
    gw = gateway_factory({"MCPGATE_COMMAND": f"{sys.executable} -c pass", "MCPGATE_POOL_RESTARTS": "2", **NO_SPARES})
    reply = post_modern(gw, modern_body("e-1", "tools/list"))
    error, _ = refused(reply, 503)
    assert "crashed 2 times" in error["message"] and "exited with code 0" in error["message"], reply
    assert reply.headers.get("retry-after"), reply
    started = pids(gw)
    assert len(started) == 2 and wait_dead(started) == [], gw.log_tail()  # tried again once, then no more
    assert refused(post_modern(gw, modern_body("e-2", "tools/list")), 503)[0] == error
    assert len(pids(gw)) == 2, gw.log_tail()


# -- 8. the idle TTL --


def test_an_idle_child_is_stopped_and_a_later_request_starts_a_new_one(
    gateway_factory: Callable[..., Gateway],
) -> None:
    gw = gateway_factory({"MCPGATE_POOL_IDLE_TTL": "0.5", **NO_SPARES})
    result_of(post_modern(gw, tool("i-1", "echo", {"message": "x"})), "i-1")
    [first] = pids(gw)
    assert wait_dead([first]) == [], gw.log_tail()
    assert wait_for(lambda: children(gw) == 0)
    assert "idle for longer than MCPGATE_POOL_IDLE_TTL" in gw.log()
    assert result_of(post_modern(gw, tool("i-2", "echo", {"message": "y"})), "i-2")["content"][0]["text"] == "y"
    assert len(set(pids(gw))) == 2, gw.log_tail()


# -- 9. identical ids and progress tokens on one child --


def test_identical_ids_and_progress_tokens_on_one_child(gateways: Callable[[str], Gateway]) -> None:
    gw = gateways("one")
    long, short = Streamed(gw, slow(7, 4, 4)), None
    try:
        started = long.next()
        assert started is not None and started.get("method") == "notifications/progress", long.seen
        short = Streamed(gw, slow(7, 0.6, 3))  # the long one is still running on the same child
        for streamed, steps, seconds in ((short, 3, 0.6), (long, 4, 4)):
            messages = streamed.until_response()
            progress = progress_of(messages)
            assert [p["progress"] for p in progress] == list(range(1, steps + 1)), messages
            assert {p["progressToken"] for p in progress} == {"p"} and {p["total"] for p in progress} == {steps}
            assert messages[-1]["id"] == 7, messages
            assert messages[-1]["result"]["content"][0]["text"] == f"done after {seconds:g} s", messages
    finally:
        long.close()
        if short is not None:
            short.close()
    assert len(set(pids(gw))) == 1, gw.log_tail()


# -- 10. graceful shutdown with an open listen stream --


def test_shutdown_ends_a_listen_stream_with_its_final_result_and_leaves_no_child(
    gateway_factory: Callable[..., Gateway],
) -> None:
    gw = gateway_factory()
    listener = Streamed(gw, modern_body("sub-1", "subscriptions/listen", {"notifications": {"toolsListChanged": True}}))
    try:
        ack = listener.next()
        assert ack is not None and ack["method"] == "notifications/subscriptions/acknowledged", listener.seen
        result_of(post_modern(gw, tool("z-1", "echo", {"message": "x"})), "z-1")
        [worker] = direct_children(gw.proc.pid)
        started = pids(gw)
        assert started and all(pid in direct_children(worker) for pid in started), gw.log_tail()
        gw.proc.send_signal(signal.SIGTERM)
        while listener.next() is not None:
            pass
        gw.proc.wait(30)
    finally:
        listener.close()
    final = listener.seen[-1]
    assert final == {
        "jsonrpc": "2.0",
        "id": "sub-1",
        "result": {"resultType": "complete", "_meta": {SUBSCRIPTION_ID: "sub-1"}},
    }, listener.seen
    assert wait_dead([worker, *started], timeout=10) == [], gw.log_tail()


@pytest.mark.parametrize("spares", [0, 1, 2])
def test_spare_legacy_children_are_kept_started(gateway_factory: Callable[..., Gateway], spares: int) -> None:
    """Beside the child the next request takes, MCPGATE_POOL_SPARES free legacy children are started (a call
    that may ask for input needs a child to itself), and one more when a candidate call takes a child."""
    gw = gateway_factory({"MCPGATE_POOL_SPARES": str(spares)})
    result_of(post_modern(gw, modern_body("sp-1", "tools/list")), "sp-1")
    assert wait_for(lambda: len(pids(gw)) == 1 + spares), gw.log_tail()
    key, state = input_required(post_modern(gw, ask_name("sp-2")), "sp-2")  # holds a child until answered
    try:
        assert wait_for(lambda: len(pids(gw)) == 2 + spares), gw.log_tail()
    finally:
        done = post_modern(gw, ask_name("sp-3", inputResponses=answer(key, "Ada"), requestState=state))
        assert greeted(done, "sp-3") == "Hello, Ada"
