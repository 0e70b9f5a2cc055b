"""core/views: the first rule matching a caller decides which servers and tools it sees; `combined` gives the
ToolFilter lists of a server's own lists and a grant together; `visible` answers the aggregate per tool."""

from __future__ import annotations

import pytest

from mcpgate.core.tool_filter import ToolFilter
from mcpgate.core.views import (
    ALLOW_ALL,
    DEFAULT,
    DENY_ALL,
    EVERY_TOOL,
    NOTHING,
    Caller,
    Grant,
    Rule,
    View,
    Views,
    claim_values,
    combined,
    visible,
    visible_namespaced,
)

OPS = Rule("ops", {"*": EVERY_TOOL}, groups=frozenset({"ops"}))
ALICE = Rule("alice", {"files": Grant(deny=frozenset({"delete_file"}))}, subjects=frozenset({"alice"}))
READERS = Rule(
    "readers",
    {"files": Grant(allow=frozenset({"read_file", "list_directory"})), "search": EVERY_TOOL},
    scopes=frozenset({"files:read"}),
)
BOTH = Rule("ops-readers", {"search": EVERY_TOOL}, groups=frozenset({"ops"}), scopes=frozenset({"files:read"}))
CATCH_ALL = Rule("everyone", {"search": Grant(deny=frozenset({"reindex"}))})
VIEWS = Views((BOTH, OPS, ALICE, READERS))


def caller(subject: str | None = None, groups: tuple[str, ...] = (), scopes: tuple[str, ...] = ()) -> Caller:
    principal = f"https://issuer#{subject}" if subject else "static"
    return Caller(principal, subject, frozenset(groups), frozenset(scopes))


@pytest.mark.parametrize(
    ("who", "rule"),
    [
        (caller("bob", groups=("ops",)), "ops"),
        (caller("bob", groups=("dev", "ops")), "ops"),  # any one of the rule's groups
        (caller("bob", groups=("ops",), scopes=("files:read",)), "ops-readers"),  # every condition, first match
        (caller("alice"), "alice"),
        (caller("alice", groups=("ops",)), "ops"),  # the earlier rule wins: no union
        (caller("carol", scopes=("files:read", "x")), "readers"),
        (caller("carol", scopes=("files:write",)), "default (deny)"),
        (caller(), "default (deny)"),  # without OAuth: one principal, no subject, groups or scopes
    ],
)
def test_the_first_matching_rule_decides(who: Caller, rule: str) -> None:
    assert VIEWS.view(who).name == rule


def test_a_subject_matches_its_bare_sub_or_its_whole_principal() -> None:
    by_principal = Rule("p", {"*": EVERY_TOOL}, subjects=frozenset({"https://issuer#dave"}))
    views = Views((by_principal,))
    assert views.key(caller("dave")) == 0
    assert views.key(Caller("https://other#dave", "dave")) == DEFAULT  # another issuer's dave


def test_a_rule_with_no_condition_matches_every_caller_even_without_oauth() -> None:
    views = Views((OPS, CATCH_ALL))
    assert views.view(caller()).name == "everyone"
    assert views.view(caller("bob", groups=("ops",))).name == "ops"


@pytest.mark.parametrize(
    ("default", "sees"),
    [(DENY_ALL, False), (ALLOW_ALL, True)],
)
def test_the_default_when_no_rule_matches(default: Rule, sees: bool) -> None:
    view = Views((OPS,), default=default).view(caller("nobody"))
    assert view.key == DEFAULT
    assert view.sees("files") is sees
    assert view.shows("files", "anything") is sees


@pytest.mark.parametrize(
    ("who", "server", "tool", "shown"),
    [
        (caller("alice"), "files", "read_file", True),
        (caller("alice"), "files", "delete_file", False),  # denied by the grant
        (caller("alice"), "search", "query", False),  # a server the rule does not name is not there
        (caller("carol", scopes=("files:read",)), "files", "read_file", True),
        (caller("carol", scopes=("files:read",)), "files", "write_file", False),  # not on the allow list
        (caller("carol", scopes=("files:read",)), "search", "reindex", True),
        (caller("bob", groups=("ops",)), "anything", "at_all", True),  # "*": every server
    ],
)
def test_what_a_view_shows(who: Caller, server: str, tool: str, shown: bool) -> None:
    view = VIEWS.view(who)
    assert view.shows(server, tool) is shown
    assert visible(view, server, tool) is shown


def test_a_named_server_overrides_the_star() -> None:
    rule = Rule("r", {"*": EVERY_TOOL, "files": Grant(allow=frozenset({"read_file"}))})
    view = View(Views((rule,)), 0)
    assert view.shows("other", "write_file")
    assert not view.shows("files", "write_file")


def test_visible_without_views_is_everything() -> None:
    assert visible(None, "files", "delete_file")
    assert visible_namespaced(None, "whatever", {})


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("fs__read_file", True),
        ("fs__delete_file", False),
        ("web__query", False),  # its server is not in the view
        ("unknown__read_file", False),  # no known prefix
        ("read_file", False),  # not namespaced
        ("fs__a__b", True),  # the tool "a__b" of fs (split at the first separator)
    ],
)
def test_visible_on_the_aggregates_namespaced_names(name: str, shown: bool) -> None:
    view = VIEWS.view(caller("alice"))
    assert visible_namespaced(view, name, {"fs": "files", "web": "search"}) is shown


@pytest.mark.parametrize(
    ("grant", "allow", "deny", "lists"),
    [
        (EVERY_TOOL, (), (), ((), ())),  # nothing to filter: ToolFilter.of gives None
        (EVERY_TOOL, ("a", "b"), ("c",), (("a", "b"), ("c",))),  # the server's own lists alone
        (Grant(deny=frozenset({"x"})), (), ("c",), ((), ("c", "x"))),  # deny lists add up
        (Grant(allow=frozenset({"b", "z"})), ("a", "b"), (), (("b",), ())),  # allow lists meet
        (Grant(allow=frozenset({"z"})), ("a", "b"), (), ((NOTHING,), ())),  # nothing in common: no tool
        (Grant(allow=frozenset({"z", "y"})), (), (), (("y", "z"), ())),
        (None, ("a",), ("b",), ((NOTHING,), ())),  # the server is not there
    ],
)
def test_combined_lists(
    grant: Grant | None, allow: tuple[str, ...], deny: tuple[str, ...], lists: tuple[tuple[str, ...], ...]
) -> None:
    assert combined(grant, allow, deny) == lists


def test_a_filter_of_nothing_shows_no_real_tool() -> None:
    tools = ToolFilter.of(*combined(None, (), ()))
    assert tools is not None
    assert not any(tools.visible(name) for name in ("read_file", "", "x", "NOTHING"))


@pytest.mark.parametrize(
    ("value", "groups"),
    [
        (["a", "b", 3, "", None], {"a", "b"}),
        ("admins", {"admins"}),
        ("", set()),
        (None, set()),
        ({"a": 1}, set()),
        ([f"g{i}" for i in range(1000)], {f"g{i}" for i in range(256)}),  # bounded
    ],
)
def test_claim_values(value: object, groups: set[str]) -> None:
    assert claim_values(value) == groups
