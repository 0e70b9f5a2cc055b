"""MRTR across instances (issue 15): the gateway's sealed requestState names the instance holding the child's
pending input request; a retry landing on another instance is forwarded to it, and when that instance has
left the directory the retry is served as the original request, started afresh (its input asked anew).

Two gunicorn instances on one private Redis, the bundled (legacy) demo server bridged by the pool."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from mcpgate.core.request_state import Opened, StateSealer
from mcpgate.serve.cluster.issuer import where
from mcpgate.serve.modern.bridge import state_key
from tests.support import Gateway, Reply, crash, modern_body, post_modern, reply_message, wait_dead
from tests.support.fleet import instances

SECRET = "test-cluster-secret-0123456789abcdef"
ELICIT = {"elicitation": {}}
PRINCIPAL = "static"  # the no-auth case's one principal (serve/auth.STATIC_PRINCIPAL)


# -- the decision, in isolation --


@pytest.mark.parametrize(
    ("issuer", "directory", "home"),
    [
        pytest.param("a", {}, "here", id="this-instance"),
        pytest.param("", {}, "here", id="none-named-no-cluster"),
        pytest.param("b", {"b": "http://127.0.0.1:1"}, "forward", id="another-live-instance"),
        pytest.param("b", {}, "restart", id="another-instance-gone"),
        pytest.param("", {"b": "http://127.0.0.1:1"}, "restart", id="unnamed-state-in-a-cluster"),
    ],
)
def test_where_a_continuation_is(issuer: str, directory: dict[str, str], home: str) -> None:
    here = "" if issuer == "" and not directory else "a"
    assert where(issuer, here, directory.get) == home


def test_the_state_key_is_derived_from_the_cluster_key() -> None:
    key = SECRET.encode()
    assert state_key(key) == state_key(key) and state_key(key) != key and len(state_key(key)) == 32
    assert state_key(key) != state_key(b"another cluster secret")


# -- two instances --


@pytest.fixture
def fleet() -> Iterator[tuple[str, Callable[[str], Gateway]]]:
    """A Redis URL and a starter of instances on it (same cluster secret, the instance id given)."""
    with instances(SECRET) as fleet:
        yield fleet


def ask_name(msg_id: Any, **retry: Any) -> dict[str, Any]:
    return modern_body(msg_id, "tools/call", {"name": "ask_name", "arguments": {}, **retry}, caps=ELICIT)


def result_of(reply: Reply, msg_id: Any) -> dict[str, Any]:
    assert reply.status == 200, reply
    message = reply_message(reply)
    assert message.get("id") == msg_id and "result" in message, reply
    return dict(message["result"])


def input_required(reply: Reply, msg_id: Any) -> tuple[str, str]:
    result = result_of(reply, msg_id)
    assert result["resultType"] == "input_required", reply
    ((key, request),) = result["inputRequests"].items()
    assert request["method"] == "elicitation/create", result
    return key, result["requestState"]


def answered(key: str, state: str, name: str) -> dict[str, Any]:
    return {"inputResponses": {key: {"action": "accept", "content": {"name": name}}}, "requestState": state}


def greeting(reply: Reply, msg_id: Any) -> str:
    result = result_of(reply, msg_id)
    assert result.get("resultType", "complete") == "complete", result
    return str(result["content"][0]["text"])


def issuer(state: str) -> str:
    opened = StateSealer(state_key(SECRET.encode())).open(state, PRINCIPAL)
    assert isinstance(opened, Opened), opened
    return opened.instance


def test_a_retry_on_another_instance_is_answered_by_the_owner(
    fleet: tuple[str, Callable[[str], Gateway]],
) -> None:
    _, start = fleet
    a, b = start("inst-a"), start("inst-b")
    key, state = input_required(post_modern(a, ask_name("q-1")), "q-1")
    assert issuer(state) == "inst-a"
    reply = post_modern(b, ask_name("q-2", **answered(key, state, "Ada")))
    assert "Ada" in greeting(reply, "q-2")  # only A holds the call: B alone would have asked again
    # the state is spent: presented again (anywhere) it is refused, by the owner
    again = post_modern(b, ask_name("q-3", **answered(key, state, "Ada")))
    assert again.status == 400 and b"answered or has ended" in again.body, again


def test_a_retry_whose_instance_is_gone_starts_the_call_again(
    fleet: tuple[str, Callable[[str], Gateway]],
) -> None:
    url, start = fleet
    a, b = start("inst-a"), start("inst-b")
    key, state = input_required(post_modern(a, ask_name("g-1")), "g-1")
    assert wait_dead(crash(a)) == []  # the master and its worker die at once: no graceful withdrawal
    redis.Redis.from_url(url).delete("mcpgate:instance:inst-a")  # what its heartbeat's expiry does, sooner
    reply = post_modern(b, ask_name("g-2", **answered(key, state, "Ada")))
    new_key, new_state = input_required(reply, "g-2")  # asked again, by B's own child
    assert issuer(new_state) == "inst-b"
    assert "held by instance inst-a, gone: starting it again" in b.log(), b.log_tail()
    done = post_modern(b, ask_name("g-3", **answered(new_key, new_state, "Grace")))
    assert "Grace" in greeting(done, "g-3")


def test_a_tampered_state_is_refused_before_any_forwarding(
    fleet: tuple[str, Callable[[str], Gateway]],
) -> None:
    _, start = fleet
    a, b = start("inst-a"), start("inst-b")
    key, state = input_required(post_modern(a, ask_name("t-1")), "t-1")
    forged = state[:-2] + ("AA" if state[-2:] != "AA" else "BA")
    reply = post_modern(b, ask_name("t-2", **answered(key, forged, "Eve")))
    assert reply.status == 400 and b"Invalid requestState" in reply.body, reply
