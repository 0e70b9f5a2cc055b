"""A legacy pooled child withdraws one of its own input requests (notifications/cancelled for its elicitation/create),
through `gunicorn mcpgate.wsgi` and a real child (tests/fixtures/withdraw_server.py): the pooled child hands the
withdrawal to the MRTR bridge, whose continuation drops the request (core/continuation.py's Withdrawn). The client
is not asked it, the call's result reaches the client, and the child is neither answered nor refused for it: no
"left over" refusal after the grace."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from mcpgate.core.continuation import WITHDRAW_GRACE
from tests.support import FIXTURES, Gateway, modern_body, post_modern, reply_message, serving

COMMAND = f"{sys.executable} {FIXTURES / 'withdraw_server.py'}"
ELICIT = {"elicitation": {}}
NEVER = 4 * WITHDRAW_GRACE  # how long "never answered" is watched for: well past the grace before a refusal


@pytest.fixture(scope="module")
def gw() -> Iterator[Gateway]:
    # one child: the report goes to the child that withdrew; no spares beside it
    env = {"MCPGATE_COMMAND": COMMAND, "MCPGATE_POOL_CHILDREN": "1", "MCPGATE_POOL_SPARES": "0"}
    with serving(env, behind=True) as gateway:
        yield gateway


def tool_text(gw: Gateway, msg_id: str, name: str, arguments: dict[str, Any], caps: dict[str, Any]) -> str:
    body = modern_body(msg_id, "tools/call", {"name": name, "arguments": arguments}, caps)
    reply = post_modern(gw, body, timeout=NEVER + 30)
    message = reply_message(reply)
    assert reply.status == 200 and message.get("id") == msg_id, reply
    result = message.get("result")
    assert isinstance(result, dict) and result.get("resultType") == "complete", reply  # never input_required
    return str(result["content"][0]["text"])


def received(text: str) -> list[Any]:
    assert text.startswith("received: "), text
    return list(json.loads(text.removeprefix("received: ")))


def test_a_withdrawn_input_request_is_never_asked_answered_or_refused(gw: Gateway) -> None:
    # the client may be asked (it declared elicitation): the call is the child's candidate, its request bridged
    assert received(tool_text(gw, "w-1", "withdraw", {}, ELICIT)) == []
    # the child watches for anything naming the withdrawn id, well past the grace before a left-over is refused
    assert received(tool_text(gw, "w-2", "report", {"wait": NEVER}, {})) == [], gw.log_tail()
