"""An ended hub session and an ended remote upstream session leave no reference cycle of theirs behind in the
worker: a 2025 session on a group of two stdio servers or on the aggregate (serve/hub: stdio members and a remote
member), or on a remote server alone (serve/remote), opened, called and ended by DELETE, goes with its last
reference, so the worker's cyclic collector finds none of the hub's, the members', the remote child's or the
session's, nor the in-process relay's (the hub and its members, each holding the other's bound methods, and the
principal and on_revoke handed on to them; the remote child and its pipes; the session and its child's callbacks;
the relay and its admission, writer and transport, each holding the other's bound method, its GET stream and its
transport, a killed worker's or GET stream's greenlet and its GreenletExit's frames, each upstream reply holding
itself: each ended session left them, with its member children and their pipe files, until a collection).

The worker runs with gc.DEBUG_SAVEALL, as in test_cyclic_garbage.py (its hooks and helpers)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import cast

import pytest

from tests.serve.test_cyclic_garbage import Collections, gone, saving_worker
from tests.support import DEMO_ENTRY, Gateway, call, named, open_session, reply_message, wait_for, worker_children
from tests.support.http import NamedServer
from tests.support.hub import many, write
from tests.support.remote import SdkUpstream

Setup = tuple[Gateway, Collections]


@pytest.fixture(scope="module")
def saving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    """demo and pager (stdio) and far (remote), aggregated at /mcp; the group "local" of demo and pager."""
    folder = tmp_path_factory.mktemp("hub-remote-garbage")
    upstream = SdkUpstream(folder, "stateful").start()
    try:
        entries = {"demo": DEMO_ENTRY, "pager": many("pager"), "far": {"url": upstream.url}}
        config = write(folder / "mcp.json", entries, groups={"local": {"servers": ["demo", "pager"]}})
        with saving_worker(folder, {"MCPGATE_METRICS": "false", "MCPGATE_CONFIG": config}) as saved:
            yield saved
    finally:
        upstream.stop()


def ends(gw: Gateway, marker: str) -> int:
    return gw.log().count(marker)


def hubs_ended(gw: Gateway) -> int:
    return sum(1 for line in gw.log().splitlines() if "hub " in line and " ended: " in line)


def ended_hub_session(gw: Gateway, path: str, calls: list[str], remote: bool) -> None:
    """A session on a hub's endpoint opened, a tool of each member called, and ended, once the hub and its
    members are gone (its stdio members' processes exited, its remote member ended)."""
    before, hubs, remotes = set(worker_children(gw)), hubs_ended(gw), ends(gw, "remote ended")
    at = endpoint(gw, path)
    session = open_session(at)
    for n, name in enumerate(calls):
        arguments = {"a": 1, "b": 2} if name == "far__add" else {"message": "m"} if name == "demo__echo" else {}
        reply = at.request("POST", body=call(name, arguments, msg_id=n + 2), headers=session)
        assert reply.status == 200 and "result" in reply_message(reply), reply
    kids = [kid for kid in worker_children(gw) if kid not in before]
    assert len(kids) == 2, kids  # demo and pager
    assert at.request("DELETE", headers=session).status in (200, 204)
    gone(gw, kids)
    if remote:
        assert wait_for(lambda: ends(gw, "remote ended") > remotes), gw.log_tail()
    assert wait_for(lambda: hubs_ended(gw) > hubs), gw.log_tail()


def ended_local_hub_session(gw: Gateway) -> None:
    """On the group of two stdio servers."""
    ended_hub_session(gw, "/groups/local/mcp", ["demo__echo", "pager__t0"], remote=False)


def ended_mixed_hub_session(gw: Gateway) -> None:
    """On the aggregate: demo and pager (stdio) and far (remote)."""
    ended_hub_session(gw, "/mcp", ["demo__echo", "far__add"], remote=True)


def ended_remote_session(gw: Gateway) -> None:
    """A session on the remote server alone (/servers/far/mcp) opened, called and ended, once its child is gone."""
    far, remotes = named(gw, "far"), ends(gw, "remote ended")
    session = open_session(far)
    reply = far.request("POST", body=call("add", {"a": 1, "b": 2}), headers=session)
    assert reply.status == 200 and "result" in reply_message(reply), reply
    assert far.request("DELETE", headers=session).status in (200, 204)
    assert wait_for(lambda: ends(gw, "remote ended") > remotes), gw.log_tail()


def endpoint(gw: Gateway, path: str) -> Gateway:
    """Requests to `path` by default (what open_session and the helpers post to)."""
    at = NamedServer(gw, "")
    at.path = path
    return cast(Gateway, at)


@pytest.mark.parametrize(
    "session",
    [ended_local_hub_session, ended_mixed_hub_session, ended_remote_session],
    ids=["hub-of-stdio-servers", "hub-with-a-remote-member", "remote"],
)
def test_an_ended_session_leaves_no_cyclic_garbage(saving: Setup, session: Callable[[Gateway], None]) -> None:
    gw, collections = saving
    session(gw)  # first use: what is made once (imports, caches, the era verdicts) is not garbage of a session
    collections.found()
    for _ in range(3):
        session(gw)
    found = collections.found()
    assert found == [], f"{len(found) / 3:.0f} objects a session: {sorted(set(found))}"
