"""serve/remote's MemoryPipes: the relay's own lines (its errors) reach the session as messages, each with the
word that it holds no CR or LF (its bare bytes: passed on unsearched, jsonrpc.raw_bytes) when that is so."""

from __future__ import annotations

import json

import pytest

from mcpgate.core import jsonrpc
from mcpgate.serve.remote.child import MemoryPipes

ERROR = b'{"jsonrpc":"2.0","id":3,"error":{"code":-32600,"message":"m"}}'
NOTE = b'{"jsonrpc":"2.0","method":"n"}'


def delivered(write: str, data: bytes | list[bytes]) -> list[jsonrpc.Request | jsonrpc.Notification | jsonrpc.Response]:
    got: list[jsonrpc.Request | jsonrpc.Notification | jsonrpc.Response] = []
    pipes = MemoryPipes(got.append)  # type: ignore[arg-type]
    if write == "all":
        assert isinstance(data, bytes)
        pipes.write_all(data)
    else:
        assert isinstance(data, list)
        pipes.write_messages(list(data))
    return got


@pytest.mark.parametrize(
    ("write", "data", "bare"),
    [
        pytest.param("all", ERROR + b"\n" + NOTE + b"\n", [True, True], id="lines"),
        pytest.param("all", ERROR + b"\n" + NOTE.replace(b",", b",\r") + b"\n", [False, False], id="a-cr-in-a-write"),
        pytest.param("messages", [ERROR, NOTE], [True, True], id="own-lines"),
        pytest.param("messages", [ERROR, NOTE.replace(b",", b",\r")], [True, False], id="a-cr-in-one"),
    ],
)
def test_the_relay_s_lines_carry_the_word_when_they_hold_no_cr(
    write: str, data: bytes | list[bytes], bare: list[bool]
) -> None:
    messages = delivered(write, data)
    assert [message.bare is not None and message.bare is message.raw for message in messages] == bare
    for message in messages:
        out = jsonrpc.raw_bytes(message)
        assert b"\r" not in out and b"\n" not in out and json.loads(out) == message.obj
