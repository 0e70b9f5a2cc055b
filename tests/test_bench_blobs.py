"""The bench's big-results stage (bench/blob_stage.py): a row's session is kept from one round to the next, so its
child has carried the earlier rounds' results as the pooled child and the child over direct pipes have (issue 24);
one the gateway dropped is replaced, and `fresh` gives a new session each round (run.py's stage before)."""

from __future__ import annotations

import http.client
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import Gateway

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import mcpclient  # noqa: E402
from blob_stage import BlobSessions  # noqa: E402

CHILD = [sys.executable, "-S", str(BENCH / "child_server.py")]


class FakeSession:
    """A session as BlobSessions uses it: initialize, delete and close noted; `dropped` fails its next use."""

    made = 0

    def __init__(self) -> None:
        FakeSession.made += 1
        self.number = FakeSession.made
        self.dropped = self.ended = False

    def initialize(self) -> FakeSession:
        return self

    def delete(self) -> None:
        self.ended = True

    def close(self) -> None:
        self.ended = True


def use(session: Any) -> dict[str, Any]:
    if session.dropped:
        raise mcpclient.BenchError("HTTP 404: session not found")
    return {"session": session.number}


@pytest.mark.parametrize(
    ("fresh", "drop_after", "sessions_used", "ended"),
    [
        (False, None, [1, 1, 1], [False]),  # kept across rounds
        (False, 1, [1, 2, 2], [True, False]),  # dropped by the gateway after round 1: replaced once, then kept
        (True, None, [1, 2, 3], [True, True, True]),  # a new session each round, each ended after its round
    ],
    ids=["kept", "replaced-when-dropped", "fresh"],
)
def test_blob_sessions_keep_a_rows_session_across_rounds(
    fresh: bool, drop_after: int | None, sessions_used: list[int], ended: list[bool]
) -> None:
    FakeSession.made = 0
    made: list[FakeSession] = []

    def make() -> FakeSession:
        made.append(FakeSession())
        return made[-1]

    sessions = BlobSessions(fresh)
    used = []
    for round_number in range(1, 4):
        used.append(sessions.times("row", make, use)["session"])  # type: ignore[arg-type]
        if round_number == drop_after:
            made[-1].dropped = True
    assert used == sessions_used
    assert [s.ended for s in made] == ended
    sessions.close()
    assert all(s.ended for s in made)


def test_blob_sessions_give_an_error_when_no_session_can_be_made() -> None:
    class Refused(FakeSession):
        def initialize(self) -> FakeSession:
            raise mcpclient.BenchError("HTTP 503")

    made: list[FakeSession] = []

    def make() -> FakeSession:
        made.append(Refused())
        return made[-1]

    sessions = BlobSessions()
    value = sessions.times("row", make, use)  # type: ignore[arg-type]
    assert "HTTP 503" in value["error"]
    assert made[0].ended and sessions.kept == {}


def test_a_kept_blob_session_is_served_by_the_same_child_each_round(gateway_factory) -> None:
    gw: Gateway = gateway_factory({"MCPGATE_COMMAND": shlex.join(CHILD)})
    sessions = BlobSessions()
    seen: list[str | None] = []

    def run(session: mcpclient.HttpSession) -> dict[str, list[float]]:
        session.blob(65536)
        seen.append(session.session_id)
        return {}

    try:
        for _ in range(3):
            assert sessions.times("mcpgate", lambda: mcpclient.HttpSession(gw.port), run) == {}  # type: ignore[arg-type]
        assert len(seen) == 3 and seen[0] is not None and len(set(seen)) == 1
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
        try:
            conn.request("GET", "/healthz")
            assert json.loads(conn.getresponse().read())["sessions"] == 1
        finally:
            conn.close()
    finally:
        sessions.close()
