"""Issue 27: the state kept for a session's takeover never lets another principal take it over.

Two instances on one Redis (real gunicorns, the fixture child tests/fixtures/kept_server.py). A session is opened
on i1 by the static principal; i1 is SIGKILLed, so the session is orphaned and its kept state (principal,
initialize, level, subscriptions) is all that is left of it. A request for it that reaches i2 authenticated as
another principal ("mallory": a request as another instance forwards it, signed with the cluster key, which is
how a principal other than the static one reaches a session here) is answered 404 exactly like an unknown
session, and nothing is taken over; the owner's own next request is served under the same id.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from mcpgate.core import session_ids
from tests.serve.test_takeover import SECRET, call_body, instance_env, opened_on
from tests.support import Gateway, crash
from tests.support.fleet import redis_server
from tests.support.http import HEADERS


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as url:
        yield url


def forwarded(gw: Gateway, session_id: str, principal: str, body: bytes) -> Any:
    """The request as another instance of the fleet would forward it for `principal` (signed with the cluster
    key): how a request authenticated as that principal reaches a session."""
    request = session_ids.ForwardedRequest("POST", "/mcp", "", session_id, body)
    value = session_ids.forwarded(principal, "i2", time.time(), request, SECRET.encode())
    return gw.request("POST", body=body, headers={**HEADERS, "Mcp-Session-Id": session_id, "Mcpgate-Forwarded": value})


def test_another_principal_cannot_take_a_session_over(redis_url: str) -> None:
    owner = Gateway(instance_env(redis_url, "i1"))
    other = Gateway(instance_env(redis_url, "i2"))
    try:
        owner.wait_ready()
        other.wait_ready()
        session_id = opened_on(owner)
        crash(owner)
        mallory = forwarded(other, session_id, "mallory", call_body(3, "echo", message="x"))
        assert mallory.status == 404, mallory
        assert "taken over" not in other.log(), other.log_tail()
        owner_again = other.request(
            "POST", body=call_body(4, "echo", message="y"), headers={**HEADERS, "Mcp-Session-Id": session_id}
        )
        assert owner_again.status == 200 and "y" in owner_again.body.decode(), owner_again
    finally:
        owner.stop()
        other.stop()
