"""What a 2025 session takes in, on either of its transports (Streamable HTTP, HTTP+SSE): the session a request
opens, the messages a POST carries, and each of them on its way to the child.

Refusals are raised where decided; a domain exception (a session limit, a command that cannot start, a request
id in flight) is the endpoint's to answer (serve/errors.py).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from mcpgate.core import jsonrpc, versions
from mcpgate.core.jsonrpc import Batch, Message, Notification, Request
from mcpgate.core.jsonrpc import Response as RpcResponse
from mcpgate.core.tool_filter import CALL, ToolFilter, pinned
from mcpgate.serve.errors import BadRequest
from mcpgate.serve.front import auth
from mcpgate.serve.front.http import HttpRequest
from mcpgate.serve.servers.server import PublishedServer
from mcpgate.serve.sessions.kept import WATCHED
from mcpgate.serve.sessions.session import Session

log = logging.getLogger("mcpgate.http")


def open_session(gw: PublishedServer, request: HttpRequest) -> Session:
    """A new session of the caller's principal, its child started (SessionLimitReached, ChildSpawnError)."""
    view = gw.member_view(request.environ) if gw.views is not None else None  # a group's child is made per view
    session = gw.open_session(auth.principal(request.environ), view)
    if gw.views is None:
        session.tools = ToolFilter.of(gw.settings.tools_allow, gw.settings.tools_deny, pins=gw.pins)
    else:  # what the caller's view shows of this server, fixed for the session's life (and a takeover's)
        key = gw.views.key(request.environ)
        session.tools = pinned(gw.views.tools_of(key, gw.name, gw.settings), gw.pins)
        session.view = gw.views.token(key)
    if gw.search is not None:  # the search view answers tools/list and search_tools (serve/servers/search_view.py)
        owner = gw.pool_key(session.owner, request.environ) if gw.views is not None else session.owner
        session.search = functools.partial(gw.search.response, gw.pool, owner, session.tools)
    session.server = gw.name
    session.keeper = gw.keeper
    return session


def batch_items(session: Session, message: Message) -> list[Any]:
    """The messages a POST carries: a batch's members (where the session's revision allows them), or itself."""
    if not isinstance(message, Batch):
        return [message]
    if not versions.allows_batch(session.version):
        raise BadRequest(f"Invalid Request: batches are not allowed in protocol revision {session.version}")
    return message.items


def forward(session: Session, item: Request | Notification | RpcResponse) -> None:
    """One client message to the child (a hidden tool's call is answered here; a cancellation answers its POST)."""
    if session.search is not None and isinstance(item, Request) and answered_search(session, session.search, item):
        return
    if session.tools is not None and isinstance(item, Request) and answered_hidden(session, session.tools, item):
        return
    if session.keeper is not None and isinstance(item, Request) and item.method in WATCHED:  # kept for a takeover
        session.keeper.note(session.id, item.method, item.params)
    if isinstance(item, Notification) and item.method == "notifications/cancelled":
        params = item.params if isinstance(item.params, dict) else {}
        if jsonrpc.is_valid_id(params.get("requestId")):
            session.cancel(params["requestId"])
    if not session.send_message(item):
        log.warning(
            "session %s: could not forward a message to the child (%s)",
            session.label,
            session.ended or "child not accepting input",
        )


def answered_search(session: Session, search: Callable[[Request], dict[str, Any] | None], item: Request) -> bool:
    """In the search view, tools/list and a call of search_tools are answered here, never forwarded."""
    response = search(item)
    if response is not None:
        session.answer(item.id, response)
    return response is not None


def answered_hidden(session: Session, tools: ToolFilter, item: Request) -> bool:
    """A tools/call of a hidden tool is answered here as a server answers an unknown tool, never forwarded. A call
    that passes goes on encoded from what was checked, not as its bytes came: bytes naming a member twice
    ("name":"hidden","name":"shown") read as the last one here, and as the first by some children's parsers."""
    hidden = tools.hidden_call(item)
    if hidden is not None:
        session.answer(item.id, tools.refusal(item.id, hidden))
    elif item.method == CALL:
        item.raw = None
    return hidden is not None
