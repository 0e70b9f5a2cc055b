"""A 2026-07-28 request whose pooled child cannot be started, through `gunicorn mcpgate.wsgi`: the pool lets the
spawn error through and serve/errors.py's table answers it, as it answers a 2025 session's (tests/serve/test_http.py):
502, -32603, the generic message with the request's own id, the details in the log only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mcpgate.serve import errors
from tests.support import Gateway, modern_body, post_modern, reply_message, serving


@pytest.fixture(scope="module")
def missing() -> Iterator[Gateway]:
    with serving({"MCPGATE_COMMAND": "no-such-program-mcpgate --flag", "MCPGATE_POOL_WAIT": "2"}, behind=True) as gw:
        yield gw


@pytest.mark.parametrize("method", ["tools/list", "server/discover"])
def test_a_pooled_child_that_cannot_start_is_a_generic_502_with_the_request_id(missing: Gateway, method: str) -> None:
    msg_id = f"c-{method}"
    reply = post_modern(missing, modern_body(msg_id, method))
    message = reply_message(reply)
    assert reply.status == 502, reply
    assert message["error"] == {"code": -32603, "message": errors.CANNOT_START}, reply
    assert message["id"] == msg_id, reply
    assert b"no-such-program-mcpgate" not in reply.body and b"PATH" not in reply.body, reply
    logged = [line for line in missing.log().splitlines() if "cannot start the MCP server" in line]
    assert logged and " ERROR " in logged[0] and "no-such-program-mcpgate" in logged[0], missing.log_tail()
