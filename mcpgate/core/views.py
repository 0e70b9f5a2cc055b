"""Views per identity: which published servers, and which of their tools, a caller may see and call.

A view is chosen by the first rule that matches the caller (first match, like a firewall's rules or an
nginx `location` list, not the union of every matching rule): the order of the rules is the precedence, so a
narrow rule written above a broad one is an exception to it; exactly one rule decides, so the log and the
management API can name it; and the choice is one small integer (the rule's index), so what is computed from
it (a ToolFilter per server) is cached by (server, index) in a table no larger than servers x (rules + 1).
A principal that belongs to two groups gets the view of the first rule naming either; a union is written as a
rule of its own above them.

A rule matches when each condition it states holds: `subjects` (the token's `sub`, or the whole principal
`issuer#sub`), `groups` (the values of the group claim, "groups" unless configured), `scopes`; each lists
alternatives (any one of them does). A rule stating none matches everyone (a catch-all, usually last).
When no rule matches, the default decides: deny (no server at all: the recommended default once views are
configured), or allow (every server as its own settings publish it).

What a rule grants per server: every tool ("*"), or a Grant (an allow list, a deny list, or both, as
MCPGATE_TOOLS_ALLOW/DENY); a server it does not name is not there for the caller, unless the rule names "*"
as a server (its grant goes to every server not named). A hidden tool does not exist for the caller: absent
from tools/list, its call answered as an unknown tool. The server's own allow and deny lists still apply: the
caller sees a tool only when both its server and its view show it (`combined`).

Pure: no I/O; the serve side builds a Caller from the verified token and reads rules from MCPGATE_CONFIG.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

EVERY_SERVER = "*"  # a rule's server key that stands for each server the rule does not name
DEFAULT = -1  # the key of the default view (no rule matched)
NOTHING = "\x00mcpgate:no-tool"  # an allow list naming this only: no tool is visible
MAX_CLAIM_VALUES = 256  # the values of a group claim read (a token naming more is read up to here)
SEPARATOR = "__"  # the aggregate's namespaced names: <prefix>__<tool>


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls, as views see it: the token's subject and principal, its groups and scopes. Without OAuth
    every caller is one principal with no subject, group or scope (only catch-all rules match it)."""

    principal: str
    subject: str | None = None
    groups: frozenset[str] = frozenset()
    scopes: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Grant:
    """The tools of one server a rule shows: every one not denied when `allow` is empty, else those allowed
    and not denied."""

    allow: frozenset[str] = frozenset()
    deny: frozenset[str] = frozenset()

    def shows(self, tool: str) -> bool:
        return (not self.allow or tool in self.allow) and tool not in self.deny


EVERY_TOOL = Grant()


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    servers: Mapping[str, Grant] = field(default_factory=dict)
    subjects: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    scopes: frozenset[str] = frozenset()

    def matches(self, caller: Caller) -> bool:
        if self.subjects and caller.subject not in self.subjects and caller.principal not in self.subjects:
            return False
        if self.groups and self.groups.isdisjoint(caller.groups):
            return False
        return not self.scopes or not self.scopes.isdisjoint(caller.scopes)

    def grant(self, server: str) -> Grant | None:
        """What it shows of `server`; None: the server is not there for its callers."""
        found = self.servers.get(server)
        return found if found is not None else self.servers.get(EVERY_SERVER)


ALLOW_ALL = Rule("default (allow)", {EVERY_SERVER: EVERY_TOOL})
DENY_ALL = Rule("default (deny)", {})


@dataclass(frozen=True, slots=True)
class Views:
    """The rules in order, the group claim's name, and the default rule (DENY_ALL or ALLOW_ALL)."""

    rules: tuple[Rule, ...]
    group_claim: str = "groups"
    default: Rule = DENY_ALL

    def key(self, caller: Caller) -> int:
        """The index of the first rule matching `caller` (DEFAULT: none does)."""
        for index, rule in enumerate(self.rules):
            if rule.matches(caller):
                return index
        return DEFAULT

    def rule(self, key: int) -> Rule:
        return self.default if key == DEFAULT else self.rules[key]

    def view(self, caller: Caller) -> View:
        return View(self, self.key(caller))


@dataclass(frozen=True, slots=True)
class View:
    """One caller's view: the rule chosen for it (by index) among `views`."""

    views: Views
    key: int

    @property
    def name(self) -> str:
        return self.views.rule(self.key).name

    def grant(self, server: str) -> Grant | None:
        return self.views.rule(self.key).grant(server)

    def sees(self, server: str) -> bool:
        return self.grant(server) is not None

    def shows(self, server: str, tool: str) -> bool:
        grant = self.grant(server)
        return grant is not None and grant.shows(tool)


def visible(view: View | None, server: str, tool: str) -> bool:
    """Whether `tool` (its name as `server` lists it) exists for the caller whose view this is (None: views
    are off, every tool is). The aggregate calls it for each member's tool before namespacing it."""
    return view is None or view.shows(server, tool)


def visible_namespaced(view: View | None, name: str, prefixes: Mapping[str, str], separator: str = SEPARATOR) -> bool:
    """`visible` for an aggregate's name `<prefix><separator><tool>`, `prefixes` mapping each prefix to its
    server's name. A name of no known prefix is not visible under a view (nothing can vouch for it)."""
    if view is None:
        return True
    prefix, sep, tool = name.partition(separator)
    server = prefixes.get(prefix) if sep else None
    return server is not None and view.shows(server, tool)


def combined(grant: Grant | None, allow: tuple[str, ...], deny: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """The (allow, deny) lists of a ToolFilter showing what both the server's own lists and the grant show.
    None (the server is not there) or allow lists with nothing in common: an allow list of NOTHING only."""
    if grant is None:
        return (NOTHING,), ()
    if allow and grant.allow:
        both = tuple(sorted(set(allow) & grant.allow))
        merged_allow = both or (NOTHING,)
    else:
        merged_allow = tuple(allow) or tuple(sorted(grant.allow))
    merged_deny = tuple(sorted(set(deny) | grant.deny))
    return merged_allow, merged_deny


def claim_values(value: object) -> frozenset[str]:
    """A group claim's values: a list of strings (the others in it ignored), or one string (one group); at
    most MAX_CLAIM_VALUES of them."""
    if isinstance(value, str):
        return frozenset((value,)) if value else frozenset()
    if isinstance(value, (list, tuple)):
        return frozenset(item for item in value[:MAX_CLAIM_VALUES] if isinstance(item, str) and item)
    return frozenset()
