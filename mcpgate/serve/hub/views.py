"""Views per identity on a group (or the aggregate): the caller's view decides per member.

A HubChild is made for one view (`HubSpec.process(..., view=...)`): a member the view does not give is not
started for it (its names do not exist there: a call of one is an unknown tool, as any name of no member), and
the tools the view hides of a member it gives are filtered out of the merged lists and their calls answered as
unknown tools, with the member's own `tools_allow` / `tools_deny` and pins (`member_tools`).

A 2025 session's HubChild is made with its caller's view when the session opens. The 2026-07-28 pool keys its
children by a string: a group's pool key is the principal and the view's token together (`pool_key`), so two
callers with different views never share a HubChild, and the pool's spawn reads both back (`Resolver`). A key
that names no view of the views in force (views reloaded since, or none given) gets the view that shows nothing:
never a guess, never everything.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mcpgate.core import views as core
from mcpgate.core.tool_filter import ToolFilter, pinned
from mcpgate.core.views import View, Views

if TYPE_CHECKING:
    from mcpgate.serve.servers.views_file import ViewTable

MARK = "#view:"  # between a principal and its view's token in a group's pool key (a token holds no "#")
NOTHING = View(Views((), default=core.DENY_ALL), core.DEFAULT)  # the view that shows no server at all


def member_tools(name: str, own: ToolFilter | None, view: View) -> ToolFilter | None:
    """What `view` shows of member `name`'s tools, its own lists and pins (`own`) kept (its own names)."""
    allow = tuple(sorted(own.allow)) if own is not None else ()
    deny = tuple(sorted(own.deny)) if own is not None else ()
    shown = ToolFilter.of(*core.combined(view.grant(name), allow, deny))
    return pinned(shown, own.pins if own is not None else None)


def pool_key(principal: str, token: str) -> str:
    """The pool's key of a principal's children under the view whose token this is."""
    return f"{principal}{MARK}{token}"


class Resolver:
    """What the pool of a group reads back from a key: the principal and its view (NOTHING when the key names no
    view of the views in force); views off: the key itself, no view."""

    def __init__(self, table: Callable[[], ViewTable | None]) -> None:
        self.table = table

    def __call__(self, key: str) -> tuple[str, View | None]:
        table = self.table()
        principal, mark, token = key.rpartition(MARK)
        if table is None:
            return (principal, NOTHING) if mark else (key, None)
        if not mark:
            return key, NOTHING
        index = table.key_of(token)
        return principal, (View(table.views, index) if index is not None else NOTHING)
