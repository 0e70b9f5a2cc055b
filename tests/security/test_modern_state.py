"""A 2026-07-28 child's requestState stays with the principal it was issued to (issue 20, finding 4).

The gateway hands a modern pooled child's requestState to the client inside its own sealed envelope (bound to
the principal, the request and the instance, serve/modern/child_state.py) and gives the child its own state back
untouched on the retry; another principal's state is refused like a forged one (400 / -32602), before any
child sees it.

A real gunicorn in OAuth resource-server mode (tests/fixtures/oidc_issuer.py mints Alice's and Bob's tokens)
serving tests/fixtures/confirm_server.py: a modern-only child that keeps each pending confirmation under a bare
random requestState, so whoever presents the state completes the transfer unless the gateway stops them. Then
two instances of a fleet: a retry landing on the other instance reaches the child that issued the state."""

from __future__ import annotations

import re
import secrets
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support import FIXTURES, Gateway, Reply, modern_body, modern_headers, reply_message, serving
from tests.support.fleet import instances
from tests.support.oauth import principal_tokens, resource_server_env
from tests.support.waiting import wait_for

CHILD = f"{sys.executable} {FIXTURES / 'confirm_server.py'}"
ELICIT = {"elicitation": {}}
CONFIRMED = re.compile(r"confirm-fixture: pid (\d+) confirmed (\d+) by (\w+)")


def transfer(msg_id: Any, amount: int, **retry: Any) -> dict[str, Any]:
    return modern_body(msg_id, "tools/call", {"name": "transfer", "arguments": {"amount": amount}, **retry}, ELICIT)


def confirmation(state: str, name: str) -> dict[str, Any]:
    return {"inputResponses": {"confirm": {"action": "accept", "content": {"name": name}}}, "requestState": state}


def post(gw: Gateway, body: dict[str, Any], token: str | None = None) -> Reply:
    headers = modern_headers(body["method"], body["params"].get("name"))
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return gw.request("POST", body=body, headers=headers)


def result_of(reply: Reply, msg_id: Any) -> dict[str, Any]:
    assert reply.status == 200, reply
    message = reply_message(reply)
    assert message.get("id") == msg_id and "result" in message, reply
    return dict(message["result"])


def state_of(reply: Reply, msg_id: Any) -> str:
    result = result_of(reply, msg_id)
    assert result["resultType"] == "input_required" and list(result["inputRequests"]) == ["confirm"], result
    return str(result["requestState"])


def refused(reply: Reply, msg_id: Any) -> str:
    """The message of a 400 / -32602 answer to request `msg_id`."""
    assert reply.status == 400, reply
    message = reply_message(reply)
    assert message.get("id") == msg_id and message.get("error", {}).get("code") == -32602, reply
    return str(message["error"]["message"])


def text_of(reply: Reply, msg_id: Any) -> str:
    return str(result_of(reply, msg_id)["content"][0]["text"])


# -- two principals on one gateway ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gw(issuer: str) -> Iterator[Gateway]:
    with serving(resource_server_env(issuer, MCPGATE_COMMAND=CHILD, MCPGATE_POOL_SPARES="0"), behind=True) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def tokens(issuer: str, gw: Gateway) -> dict[str, str]:
    """Alice's and Bob's access tokens for the gateway."""
    return principal_tokens(issuer, gw, ("alice", "bob"))


def confirmed_lines(gw: Gateway) -> list[tuple[str, str, str]]:
    return CONFIRMED.findall(gw.log())


def confirmed_once_logged(gw: Gateway) -> list[tuple[str, str, str]]:
    """The confirmations, once one is in the log: the child's stderr line is logged beside its answer, which may
    reach the client first."""
    wait_for(lambda: confirmed_lines(gw), what="a child's confirmation in the gateway's log")
    return confirmed_lines(gw)


def test_another_principals_state_is_refused_and_the_owner_still_completes(gw: Gateway, tokens: dict[str, str]) -> None:
    alice, bob = tokens["alice"], tokens["bob"]
    state = state_of(post(gw, transfer("a-1", 100), alice), "a-1")
    whoami = modern_body("b-0", "tools/call", {"name": "whoami", "arguments": {}})
    assert text_of(post(gw, whoami, bob), "b-0").startswith("pid ")  # Bob has a child of his own

    message = refused(post(gw, transfer("b-1", 100, **confirmation(state, "bob")), bob), "b-1")
    assert "another principal" in message, message
    assert not [line for line in confirmed_lines(gw) if line[2] == "bob"], confirmed_lines(gw)  # no child heard him

    done = text_of(post(gw, transfer("a-2", 100, **confirmation(state, "alice")), alice), "a-2")
    assert done.startswith("transferred 100, confirmed by alice"), done
    assert [line[1:] for line in confirmed_once_logged(gw)] == [("100", "alice")]


def test_the_child_gets_its_own_state_back_and_the_envelope_holds(gw: Gateway, tokens: dict[str, str]) -> None:
    alice = tokens["alice"]
    state = state_of(post(gw, transfer("s-1", 7), alice), "s-1")
    assert state.startswith("mg1."), state  # the gateway's envelope, not the child's bare token

    forged = state[:-2] + ("AA" if state[-2:] != "AA" else "BB")
    assert refused(post(gw, transfer("s-2", 7, **confirmation(forged, "alice")), alice), "s-2")
    bare = secrets.token_urlsafe(16)  # what a child's own state looks like
    assert refused(post(gw, transfer("s-3", 7, **confirmation(bare, "alice")), alice), "s-3")
    other = modern_body("s-4", "tools/call", {"name": "whoami", "arguments": {}, **confirmation(state, "alice")})
    assert "another request" in refused(post(gw, other, alice), "s-4")

    done = text_of(post(gw, transfer("s-5", 7, **confirmation(state, "alice")), alice), "s-5")
    assert done.startswith("transferred 7, confirmed by alice"), done
    again = reply_message(post(gw, transfer("s-6", 7, **confirmation(state, "alice")), alice))
    assert again["error"]["message"] == "unknown requestState", again  # the child's own answer: its state, used


# -- a fleet: the retry reaches the instance and the child that issued the state ------------------------------


@pytest.fixture
def fleet() -> Iterator[Callable[[str], Gateway]]:
    with instances("test-cluster-secret-0123456789abcdef", MCPGATE_COMMAND=CHILD) as (_, start):
        yield start


def test_a_retry_on_another_instance_reaches_the_child_that_asked(fleet: Callable[[str], Gateway]) -> None:
    a, b = fleet("a"), fleet("b")
    state = state_of(post(a, transfer("f-1", 5)), "f-1")
    done = text_of(post(b, transfer("f-2", 5, **confirmation(state, "ada"))), "f-2")
    assert done.startswith("transferred 5, confirmed by ada"), done
    assert confirmed_once_logged(a) and not confirmed_lines(b)
