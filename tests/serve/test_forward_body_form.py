"""A forwarded POST's Mcpgate-Forwarded value in its body (serve/cluster/forward.py, instances.py; issue 24).

The first request on a forwarder's connection carries its value in its head, as every request used to; the
owner's reply says it reads values in a POST's body (Mcpgate-Forwarded: body), and the connection's later POSTs
name their sender alone in the head and lead their body with the value and a line feed. Their heads are then the
same bytes call after call, which the owner's worker reads from its memo of heads, as a direct call's.

Two real instances on a real Redis; A is reached through a tap that records what B sends it. A body-form value
is checked as strictly as one in a head: replayed, on another body, naming another sender, missing, each is
refused.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mcpgate.core.wire import FORWARDED
from tests.security.test_forward_replay import Fleet, Tap, echo, session_on, tapped_fleet
from tests.support import reply_message


@pytest.fixture(scope="module")
def pair() -> Iterator[Fleet]:
    with tapped_fleet() as made:
        yield made


def recorded(tap: Tap, answers: bool = False) -> list[tuple[bytes, bytes]]:
    """Each request the tap saw (each reply, `answers`), as (head, body): messages with a Content-Length."""
    with tap.lock:
        data = bytes(tap.answered if answers else tap.sent)
    found = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            break
        fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
        length = int(fields.get(b"Content-Length", b"0"))
        found.append((head, rest[:length]))
        data = rest[length:]
    return found


def field(head: bytes, name: str) -> str | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.decode("latin-1").partition(": ")
        if key.lower() == name.lower():
            return value
    return None


def test_a_connections_later_posts_carry_their_value_in_the_body(pair: Fleet) -> None:
    session = session_on(pair.a)
    before, answered = len(recorded(pair.tap)), len(recorded(pair.tap, answers=True))
    for n in range(4):
        served = pair.b.request("POST", body=echo(f"call {n}", 10 + n), headers=session)
        assert reply_message(served)["result"]["content"][0]["text"] == f"call {n}", served
        assert FORWARDED.lower() not in served.headers, "the owner's word to the forwarder stays between them"
    sent = recorded(pair.tap)[before:]
    assert len(sent) == 4, sent
    first_value = field(sent[0][0], FORWARDED) or ""
    assert first_value.count(".") == 5, "a new connection's first request carries its value in its head"
    later = sent[1:]
    for n, (head, body) in enumerate(later, start=1):
        assert field(head, FORWARDED) == "b", head
        value, newline, rest = body.partition(b"\n")
        assert newline and value.count(b".") == 5 and value.split(b".")[1] == b"b", body
        assert rest == echo(f"call {n}", 10 + n)
        assert b"Authorization" not in head
    heads = {
        b"\r\n".join(line for line in head.split(b"\r\n") if not line.startswith(b"Content-Length"))
        for head, _ in later
    }
    assert len(heads) == 1, "the same head, call after call (but its length): the owner reads it from its memo"
    replies = recorded(pair.tap, answers=True)[answered:]
    assert len(replies) == 4, replies
    if field(sent[0][0], FORWARDED) != "b":  # a new connection: its first reply says to send values in bodies
        assert field(replies[0][0], FORWARDED) == "body", replies[0]
    for head, _ in replies[1:]:  # said once: a reply to a value in the body keeps the JSON reply's two headers
        assert field(head, FORWARDED) is None, head
    assert pair.a.request("DELETE", headers=session).status == 204


def test_a_value_in_the_body_is_checked_as_strictly(pair: Fleet) -> None:
    session = session_on(pair.a)
    for n in range(2):  # the second goes in the body form
        assert reply_message(pair.b.request("POST", body=echo(f"warm {n}", 20 + n), headers=session))["result"]
    head, body = recorded(pair.tap)[-1]
    assert field(head, FORWARDED) == "b", head
    value, _, payload = body.partition(b"\n")
    direct = {name: val for name, val in session.items() if name != "Authorization"}
    as_sent = {**direct, FORWARDED: "b"}

    replayed = pair.a.request("POST", body=body, headers=as_sent)
    assert replayed.status == 403, ("the same request once more, on another connection", replayed)
    other_body = pair.a.request("POST", body=value + b"\n" + echo("not what B sent", 22), headers=as_sent)
    assert other_body.status == 403, ("its value on another body", other_body)
    other_sender = pair.a.request("POST", body=body, headers={**direct, FORWARDED: "a"})
    assert other_sender.status == 403, ("the head naming another instance than the value", other_sender)
    unknown = pair.a.request("POST", body=body, headers={**direct, FORWARDED: "c"})
    assert unknown.status == 403, ("a sender not in the directory", unknown)
    no_value = pair.a.request("POST", body=payload, headers=as_sent)
    assert no_value.status == 403, ("a body that does not lead with a value", no_value)
    assert "was used before (a replay)" in pair.a.log()
    assert "does not lead with the Mcpgate-Forwarded value" in pair.a.log()
    again = pair.b.request("POST", body=echo("still", 23), headers=session)
    assert reply_message(again)["result"]["content"][0]["text"] == "still", "B forwards on"
    assert pair.a.request("DELETE", headers=session).status == 204
