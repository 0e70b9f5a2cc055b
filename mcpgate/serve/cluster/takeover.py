"""Taking over a 2025 session whose server process is gone: its instance died (SIGKILL, OOM), was redeployed, or
this instance restarted (a deploy, `kill -HUP`, a crash of the worker).

A request names a session this process does not hold. When something is kept of it (serve/sessions/kept.py) and
the request's principal is the one that opened it (else: the session is unknown to it, 404 as any), the holder
is read: another live instance holds it (the request goes there: Forward, or, when this request was itself
forwarded, a 503 naming the holder that the forwarding instance follows); nobody does (released by a graceful
stop), or its holder is gone from the directory, or is this instance's earlier life: the session is claimed (one
claimant wins: kept.Store.claim), a child started under the same session id, and the client's initialize,
notifications/initialized, log level and subscriptions are sent to it again. The new child must answer the same
protocol version as the first (else the session ends: 404, as a changed server's sessions did before). Then the
request is served as in any session. Concurrent requests for one session in this process wait for the one
takeover.

What a client observes: its next request answered as usual, under the same session id (the first one later by
the child's start and the replay); a request that was in flight on the process that died is answered with a
JSON-RPC error saying the server restarted (when it came through another instance; behind HAProxy's retry-on it
is sent again instead); its GET stream ends and is opened again; a Last-Event-ID from before the takeover is
answered "Cannot resume" saying so, never with events that no longer exist.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import gevent
from gevent.event import AsyncResult

from mcpgate.core import jsonrpc, replay
from mcpgate.core.jsonrpc import Request
from mcpgate.core.replay import CannotResume
from mcpgate.core.session_ids import short
from mcpgate.core.sessions import SessionLimitReached
from mcpgate.core.tool_filter import ToolFilter, pinned
from mcpgate.serve.cluster.forwarding import Forward
from mcpgate.serve.cluster.moved import HELD_BY
from mcpgate.serve.front import auth
from mcpgate.serve.front.context import context
from mcpgate.serve.front.http import HttpRequest, Refusal
from mcpgate.serve.kinds import EndCause
from mcpgate.serve.servers.server import PublishedServer
from mcpgate.serve.sessions.kept import DYING, HELD, TAGS, Keeper, Kept, runs_here
from mcpgate.serve.sessions.session import Delivery, Session

log = logging.getLogger("mcpgate.session")


class HeldElsewhere(Refusal):
    """To the instance that forwarded a request here: the session is held by `holder` ("" nobody: take it)."""

    def __init__(self, holder: str) -> None:
        super().__init__(
            503, jsonrpc.INTERNAL_ERROR, "Service Unavailable: the session moved", headers={HELD_BY: holder}
        )


CLAIMS = 3  # claims one request makes: a holder may change between the read and the claim (its graceful stop
# releasing the session, another instance taking it over); each lost claim reads the holder again


def revive(gw: PublishedServer, request: HttpRequest, session_id: str) -> Session | None:
    """The session taken over by this process, or None (nothing kept, another principal's, not compatible)."""
    keeper = gw.keeper
    if keeper is None:
        return None
    principal = auth.principal(request.environ)
    forwarded = context(request.environ).forwarded
    for _ in range(CLAIMS):
        found = keeper.load(session_id)
        if found is None or found[0].principal != principal:
            return None
        kept, holder = found
        elsewhere = held_elsewhere(gw, keeper, holder)
        if elsewhere == LOCAL:  # another live process of this machine holds it: nowhere to send the request
            return None
        if elsewhere is not None:
            if forwarded:
                raise HeldElsewhere(elsewhere)
            raise Forward(elsewhere)
        if gw.closing and forwarded:  # a stopping instance leaves it to the live one that forwarded the request
            if session_id not in gw.reviving:  # its hold let go first: the session may have ended here a moment
                keeper.release(session_id)  # ago, its release still on the way to the store, which the claim reads
            raise HeldElsewhere("")
        waiting = gw.reviving.get(session_id)
        if waiting is not None:  # another request of this process is taking it over
            waiting.wait(gw.settings.session_resurrect_timeout)
            return gw.get(session_id, principal)
        # taken over by another request of this process while this one read the store (no yield from here to the
        # guard below: a takeover registers its session before it names this process the holder)
        if (here := gw.get(session_id, principal)) is not None:
            return here
        done: AsyncResult = AsyncResult()
        gw.reviving[session_id] = done
        try:
            if keeper.claim(session_id, holder):
                return take_over(gw, keeper, session_id, kept)
        finally:
            del gw.reviving[session_id]
            done.set(True)
        # lost: another process won it (the next read finds it there and the request goes to it), or its holder
        # changed under the claim (released by a stopping instance: claimed again)
    return None


DYING_POLL = 0.05  # seconds between looks at an orphaned holder on this machine
LOCAL = "\x00local"  # held_elsewhere: by another live process of this machine (no instance to forward to)


def held_elsewhere(gw: PublishedServer, keeper: Keeper, holder: str) -> str | None:
    """The live instance other than this one that holds the session (LOCAL: another live process of this
    machine sharing the state directory); None when it may be claimed here."""
    if not holder or holder == keeper.me:
        return None
    instance = holder.partition("/")[0]
    if gw.cluster is None or instance == gw.cluster.instance:  # this machine: another process, or an earlier life
        return LOCAL if outlives(holder, gw.settings.session_resurrect_timeout) else None
    return instance if gw.cluster.lookup(instance) is not None else None


def outlives(holder: str, timeout: float) -> bool:
    """Whether a holder on this machine goes on holding: True while it and its master run; an orphaned worker
    (its master killed) is waited for, up to `timeout`, to exit."""
    deadline = time.monotonic() + timeout
    while (state := runs_here(holder)) == DYING and time.monotonic() < deadline:
        gevent.sleep(DYING_POLL)
    return state in (HELD, DYING)


def take_over(gw: PublishedServer, keeper: Keeper, session_id: str, kept: Kept) -> Session | None:
    started = time.monotonic()
    views = gw.views
    key = views.key_of(kept.view) if views is not None else None
    if views is not None and key is None:  # opened under other views (a reload since): its view is no more
        log.warning("session %s not taken over: opened under other views than this instance's", short(session_id))
        keeper.forget(session_id)
        return None
    opened_as: dict[str, Any] = {}  # the request that opened it, as the views see it: its kept view
    context(opened_as).view = kept.view
    member = gw.member_view(opened_as) if views is not None else None  # a group's child is made per view
    session = gw.adopt_session(session_id, kept.principal, member)
    if views is None or key is None:
        session.tools = ToolFilter.of(gw.settings.tools_allow, gw.settings.tools_deny, pins=gw.pins)
    else:  # the view chosen when it opened (kept with it), never one chosen from this request
        session.tools = pinned(views.tools_of(key, gw.name, gw.settings), gw.pins)
        session.view = kept.view
    session.server = gw.name
    problem = replay_into(session, kept, gw.settings.session_resurrect_timeout)
    if problem is not None:
        log.warning("session %s could not be taken over: %s", session.label, problem)
        session.end(EndCause.INITIALIZE_FAILED)  # its kept state goes with it (404, as before)
        keeper.forget(session_id)
        return None
    try:
        gw.register(session)
    except SessionLimitReached:
        session.end(EndCause.SHUTTING_DOWN)
        keeper.release(session_id)  # held by nobody: another instance may take it
        raise
    except ValueError:  # registered meanwhile (a guard above missed a race): one session, one child
        session.end(EndCause.SHUTTING_DOWN)
        return gw.get(session_id, kept.principal)
    kept.earlier = [*kept.earlier, kept.tag][-TAGS:]
    kept.tag = session.tag
    keeper.write(session_id, kept)
    session.keeper = keeper
    log.info(
        "session %s taken over (child pid %s) in %.3f s",
        session.label,
        session.child.pid or "remote",
        time.monotonic() - started,
    )
    return session


def replay_into(session: Session, kept: Kept, timeout: float) -> str | None:
    """Send the kept handshake, level and subscriptions to the session's new child; why not, or None."""
    answers = ask(session, [request("initialize", kept.initialize, 0)], timeout)
    if answers is None:
        return "the new child did not answer initialize in time"
    if session.version is None or session.version != kept.version():
        return f"the new child answered protocol version {session.version!r}, not {kept.version()!r}"
    session.send(jsonrpc.encode({"jsonrpc": "2.0", "method": "notifications/initialized"}))
    later = [request("logging/setLevel", {"level": kept.level}, 1)] if kept.level else []
    later += [request("resources/subscribe", {"uri": uri}, n + 2) for n, uri in enumerate(kept.subscriptions)]
    if later and ask(session, later, timeout) is None:
        return "the new child did not answer the replayed log level and subscriptions in time"
    return None


def request(method: str, params: Any, number: int) -> Request:
    message = jsonrpc.parse(
        jsonrpc.encode({"jsonrpc": "2.0", "id": f"mcpgate-takeover-{number}", "method": method, "params": params})
    )
    assert isinstance(message, Request)
    return message


def ask(session: Session, requests: list[Request], timeout: float) -> list[Delivery] | None:
    """The child's answers to `requests` (what else comes meanwhile is dropped); None past `timeout`."""
    stream = session.open_stream(requests)
    try:
        for sent in requests:
            session.send_message(sent)
        deadline = time.monotonic() + timeout
        answers: list[Delivery] = []
        while stream.expected > 0:
            item = stream.next(max(0.0, deadline - time.monotonic()))
            if not isinstance(item, Delivery):
                return None
            if item.done:
                answers.append(item)
                stream.expected -= 1
        return answers
    finally:
        session.close_stream(stream)


def before_restart(session: Session, last_event_id: str) -> CannotResume | None:
    """A Last-Event-ID of an event sent before this session was taken over: those events are gone."""
    keeper = session.keeper
    kept = keeper.records.get(session.id) if keeper is not None else None
    event = replay.parse_event_id(last_event_id)
    if kept is None or event is None or event.tag not in kept.earlier:
        return None
    return CannotResume(
        "Last-Event-ID names an event sent before this session's server restarted (its gateway instance "
        "stopped): those events are gone, and a request in flight then was not answered; send it again",
        expired=True,
    )
