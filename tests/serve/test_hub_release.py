"""An ended HubChild (serve/hub) and an ended RemoteChild (serve/remote) let go of their owner: once on_exit has run
(or the child was closed before it started), the owner's callbacks, the principal and on_revoke handed on to the
members, each member's way back to the hub and a remote child's pipes' way back to it are dropped, so the child
and its owner (a session holding it, its bound methods the callbacks) go with their last reference; and the
vault's hold on a user's remote child (user_oauth) holds its owner's end weakly. Reference
counting alone frees them here: the cyclic collector is off while each test runs (as tests/test_child_release.py
does for a stdio child)."""

from __future__ import annotations

import logging
import sys
import types
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import pytest

from mcpgate.core.jsonrpc import Notification, Request, Response
from mcpgate.serve.hub.child import HubChild, HubMember
from mcpgate.serve.remote.child import RemoteChild
from mcpgate.serve.remote.spec import RemoteSpec
from mcpgate.serve.sessions.spec import ChildSpec
from tests.serve.test_vault_unit import gh_with_one_slot
from tests.support.collector import collector_off

GUARD = 30.0  # a hang guard, never a speed assertion
DEMO = ChildSpec(
    argv=(sys.executable, "-m", "mcpgate.demo_server"),
    env=None,
    cwd=None,
    stderr="discard",
    max_line_bytes=1 << 20,
    max_write_queue_bytes=1 << 20,
    close_timeout=5.0,
    term_timeout=5.0,
)
INITIALIZE = (
    b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
    b'"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}'
)


class Owner:
    """A session's part: it holds its child, and the child's callbacks (and its on_revoke) are its bound methods."""

    def __init__(self) -> None:
        self.answered = gevent.event.Event()
        self.reasons: list[str] = []
        self.child: Any = None

    def on_message(self, message: Request | Notification | Response) -> None:
        if isinstance(message, Response):
            self.answered.set()

    def on_exit(self, reason: str) -> None:
        self.reasons.append(reason)

    def end(self, reason: str) -> None:
        self.reasons.append(reason)


@pytest.fixture(autouse=True)
def no_collector() -> Iterator[None]:
    logging.getLogger("mcpgate").setLevel(logging.WARNING)
    yield from collector_off()


def hub_of(owner: Owner, members: int) -> HubChild:
    return HubChild(
        [HubMember(f"m{n}", f"m{n}", DEMO) for n in range(members)],
        on_message=owner.on_message,
        on_exit=owner.on_exit,
        label="t",
        in_flight=16,
        uris=16,
        extra={"principal": None, "on_revoke": owner.end},
    )


def test_an_ended_hub_and_its_owner_go_with_their_last_reference() -> None:
    owner = Owner()
    hub = owner.child = hub_of(owner, members=2)
    hub.start()
    assert hub.send(INITIALIZE)
    assert owner.answered.wait(GUARD), "the hub did not answer initialize"
    members = [weakref.ref(member) for member in hub._children.values()]
    assert hub.stop("the client ended the session", timeout=GUARD)
    assert owner.reasons == ["the client ended the session"]
    gevent.idle()  # the greenlets that ran it finish
    owner_gone, hub_gone = weakref.ref(owner), weakref.ref(hub)
    del owner, hub
    assert owner_gone() is None and hub_gone() is None
    assert [member() for member in members] == [None, None]


def test_a_hub_closed_before_it_started_lets_go_of_its_owner() -> None:
    owner = Owner()
    owner.child = hub_of(owner, members=1)
    owner.child.close("never needed")
    assert owner.child.join(GUARD)
    owner_gone = weakref.ref(owner)
    del owner
    assert owner_gone() is None


def test_a_remote_child_closed_before_it_started_lets_go_of_its_owner() -> None:
    """Its pipes' way back to it is dropped with the owner's callbacks (the started child's end: through a
    gateway, tests/serve/test_hub_remote_release.py)."""
    owner = Owner()
    source = types.SimpleNamespace(
        remote=types.SimpleNamespace(url="http://127.0.0.1:9/mcp"),
        close_timeout=1.0,
        max_line_bytes=1 << 20,
        max_write_queue_bytes=1 << 20,
    )
    owner.child = RemoteChild(source, on_message=owner.on_message, on_exit=owner.on_exit, label="t")  # type: ignore[arg-type]
    owner.child.close("never needed")
    assert owner.child.join(0)
    owner_gone, child_gone = weakref.ref(owner), weakref.ref(owner.child)
    del owner
    assert owner_gone() is None and child_gone() is None


def test_the_vault_s_hold_on_a_user_s_remote_child_does_not_keep_its_owner(tmp_path: Path) -> None:
    """user_oauth: the remote child holds the principal's token, and the vault holds what stops it when the
    sign-in ends (the owner's end, given weakly as ChildSpec gives it: a session's bound method, strongly held,
    kept the session and its child alive for as long as the worker ran, the vault's key weak in vain)."""
    vault, _ = gh_with_one_slot(tmp_path)
    user_auth = types.SimpleNamespace(vault=vault, token_source=lambda principal: (None, "stamp"))
    spec = RemoteSpec(
        argv=("http://127.0.0.1:9/mcp",),
        env=None,
        cwd=None,
        stderr="discard",
        max_line_bytes=1 << 20,
        max_write_queue_bytes=1 << 20,
        close_timeout=1.0,
        term_timeout=0.0,
        server="far",
        remote=types.SimpleNamespace(url="http://127.0.0.1:9/mcp"),  # type: ignore[arg-type]
        reachability=None,  # type: ignore[arg-type]
        http_options=None,  # type: ignore[arg-type]
        pump_options=None,  # type: ignore[arg-type]
        request_timeout=1.0,
        close_grace=1.0,
        user_auth=user_auth,
    )
    owner = Owner()
    owner.child = spec.process(
        on_message=owner.on_message, on_exit=owner.on_exit, label="t", principal="iss#alice", on_revoke=owner.end
    )
    owner.child.close("never needed")
    owner_gone, child_gone = weakref.ref(owner), weakref.ref(owner.child)
    del owner
    assert owner_gone() is None and child_gone() is None
