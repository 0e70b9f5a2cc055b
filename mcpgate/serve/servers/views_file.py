"""The "views" of MCPGATE_CONFIG (core/views.py: which servers and tools each caller may see and call), read from
the same JSON document as its `mcpServers`, and the table a worker answers them from.

The format, a top-level key beside `mcpServers`:

    "views": {
      "claim": "groups",            # the token claim holding the caller's groups (default "groups")
      "default": "deny",            # when no rule matches: "deny" (no server; the default) or "allow"
      "rules": [                    # in order: the first rule matching the caller decides
        {"name": "ops", "groups": ["ops"], "servers": {"*": "*"}},
        {"name": "readers", "scopes": ["files:read"],
         "servers": {"files": {"allow": ["read_file", "list_directory"]}, "search": "*"}},
        {"name": "everyone", "servers": {"search": {"deny": ["reindex"]}}}
      ]
    }

A rule's conditions (`subjects`, `groups`, `scopes`: lists of strings) must all hold, each by any one value; a rule
with none matches every caller. `servers` maps a server name (or "*": every server it does not name) to "*" (every
tool) or {"allow": [...], "deny": [...]}. Without the key (or without MCPGATE_CONFIG: MCPGATE_COMMAND's single
server) there are no views: nothing is checked and nothing costs. Without OAuth every caller is one principal
with no subject, group or scope, so only catch-all rules (and the default) apply to it.

Every message names the file and the rule.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from mcpgate.core import jsonrpc
from mcpgate.core import views as core
from mcpgate.core.tool_filter import ToolFilter
from mcpgate.core.views import Caller, Grant, Rule, View, Views
from mcpgate.serve.front import auth
from mcpgate.serve.front.context import context
from mcpgate.serve.front.http import Refusal
from mcpgate.serve.servers.config_file import MAX_FILE_BYTES, NAME, ConfigError

if TYPE_CHECKING:
    from mcpgate.config.settings import Settings

KEY = "views"
KEYS = ("claim", "default", "rules")
RULE_KEYS = ("name", "subjects", "groups", "scopes", "servers")
GRANT_KEYS = ("allow", "deny")
MAX_RULES = 256  # a file's rules (each is tried in turn for every new session or stateless call)
MAX_CACHED = 4096  # (server, rule) filters kept: servers x (rules + 1) fits unless a file is huge


class ViewTable:
    """A worker's views, and the ToolFilter each (server, rule) comes to, computed once and kept.

    `fingerprint` names the views as configured (a digest of their JSON): a rule's index means the same rule
    only between instances whose fingerprints agree. A request's view travels as the token
    `<index>~<fingerprint>`: signed in a forwarded request (core/session_ids.py), and kept with a 2025 session
    for its takeover (serve/sessions/kept.py)."""

    def __init__(self, views: Views, fingerprint: str = "") -> None:
        self.views = views
        self.fingerprint = fingerprint
        self._filters: dict[tuple[str, int], ToolFilter | None] = {}
        # the hub's groups (and its aggregate) by name: their servers' names (serve/servers/published.py sets it)
        self.groups: Mapping[str, tuple[str, ...]] = {}

    def caller(self, environ: dict[str, Any]) -> Caller:
        """Who the request is from, as the views see it (never asked of a forwarded request: its view came signed)."""
        found = context(environ)
        identity = found.identity
        principal = found.principal if found.principal is not None else auth.STATIC_PRINCIPAL
        if identity is None:
            return Caller(principal)
        groups = core.claim_values(identity.claims.get(self.views.group_claim))
        return Caller(principal, identity.subject, groups, identity.scopes)

    def key(self, environ: dict[str, Any]) -> int:
        """The index of the rule deciding the request's view, chosen once per request from the verified identity
        (noted in its context as a token, which a forward signs); a forwarded request's is the one its forwarder
        signed, which means the same rule here only when both have the same views (else 503, never a guess)."""
        found = context(environ)
        token = found.view
        known = self.key_of(token) if token is not None else None
        if known is not None:
            return known
        if found.forwarded:
            raise mismatch(token or "", self.fingerprint)
        key = self.views.key(self.caller(environ))  # first asked, or the views were reloaded since
        found.view = f"{key}~{self.fingerprint}"
        return key

    def token(self, key: int) -> str:
        return f"{key}~{self.fingerprint}"

    def key_of(self, token: str) -> int | None:
        """The rule a view's token names, None when it was chosen under other views (another fingerprint)."""
        index, sep, fingerprint = token.partition("~")
        if not sep or fingerprint != self.fingerprint or not index.lstrip("-").isdigit():
            return None
        key = int(index)
        return key if key == core.DEFAULT or 0 <= key < len(self.views.rules) else None

    def view(self, environ: dict[str, Any]) -> View:
        """The request's caller's view (what the aggregate gives `core.views.visible` for each member's tool)."""
        return View(self.views, self.key(environ))

    def sees(self, server: str, environ: dict[str, Any]) -> bool:
        """Whether the server is there at all for the request's caller (else its paths answer as unknown)."""
        return self.grant(self.key(environ), server) is not None

    def grant(self, key: int, server: str) -> Grant | None:
        """What the rule `key` gives of `server`. A group of the hub (or its aggregate) is there when the rule gives
        one of its servers at least: the group's children are made per view, each member's tools as the rule gives
        them and the members it does not give left out (serve/hub/views.py), so the group itself is given whole."""
        rule = self.views.rule(key)
        members = self.groups.get(server)
        if members is None:
            return rule.grant(server)
        return core.EVERY_TOOL if any(rule.grant(name) is not None for name in members) else None

    def tools(self, server: str, settings: Settings, environ: dict[str, Any]) -> ToolFilter | None:
        """The filter of what the caller may see of `server`: its own lists and the view's grant together."""
        return self.tools_of(self.key(environ), server, settings)

    def tools_of(self, key: int, server: str, settings: Settings) -> ToolFilter | None:
        """The filter of what rule `key` shows of `server` (a takeover's: the rule kept with its session)."""
        try:
            return self._filters[(server, key)]
        except KeyError:
            pass
        grant = self.grant(key, server)
        tools = ToolFilter.of(*core.combined(grant, settings.tools_allow, settings.tools_deny))
        if len(self._filters) < MAX_CACHED:
            self._filters[(server, key)] = tools
        return tools


def load(path: str) -> ViewTable | None:
    """The views of the file at `path` (ConfigError), None when it has none. A rule names the file's servers
    (`mcpServers`); a group of the hub is there for a rule's callers when the rule gives all its servers whole."""
    source = f"MCPGATE_CONFIG {path}"
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
        document = json.loads(data[:MAX_FILE_BYTES].decode("utf-8-sig"))
    except (OSError, ValueError) as exc:  # config_file.load read it first and says why in detail
        raise ConfigError(f"{source}: cannot read its views ({exc})") from None
    servers = _names(document, "mcpServers")
    views = parse(document, source, servers)
    return ViewTable(views, fingerprint(document[KEY])) if views is not None else None


def fingerprint(raw: Any) -> str:
    """The views' fingerprint: 16 hex digits of the SHA-256 of their canonical JSON (keys sorted, no spaces)."""
    canonical = json.dumps(raw, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def mismatch(token: str, ours: str) -> Refusal:
    """A forwarded request whose view was chosen under other views than this instance's (a reload that reached
    one instance and not yet the other): refused, not guessed (a rule's index may name another rule here)."""
    theirs = token.partition("~")[2] or "none"
    return Refusal(
        503,
        jsonrpc.INTERNAL_ERROR,
        f"Service Unavailable: the instances of the fleet have different views (fingerprint {theirs} where the "
        f"request was received, {ours or 'none'} here): reload MCPGATE_CONFIG on every instance",
        headers={"Retry-After": "1"},
    )


def parse(document: Any, source: str, servers: Collection[str] = ()) -> Views | None:
    """The views of a parsed config document (None without a "views" key). `servers`: the names a rule may
    give besides "*" (empty: any well-formed name)."""
    if not isinstance(document, dict) or KEY not in document:
        return None
    raw = document[KEY]
    where = f"{source}: views"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a JSON object")
    _known(raw, KEYS, where)
    claim = raw.get("claim", "groups")
    if not isinstance(claim, str) or not claim:
        raise ConfigError(f"{where}: claim must name the token claim holding the caller's groups (got {claim!r})")
    default = raw.get("default", "deny")
    if default not in ("deny", "allow"):
        raise ConfigError(f'{where}: default must be "deny" or "allow" (got {default!r})')
    rules = raw.get("rules", [])
    if not isinstance(rules, list) or len(rules) > MAX_RULES:
        raise ConfigError(f"{where}: rules must be a list of at most {MAX_RULES} rule objects")
    parsed = tuple(_rule(index, rule, where, servers) for index, rule in enumerate(rules))
    names = [rule.name for rule in parsed]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ConfigError(f"{where}: two rules are named {twice[0]!r} (a rule's name says which one decided)")
    return Views(parsed, claim, core.ALLOW_ALL if default == "allow" else core.DENY_ALL)


def _rule(index: int, raw: Any, where: str, servers: Collection[str]) -> Rule:
    name = raw.get("name", f"#{index + 1}") if isinstance(raw, dict) else f"#{index + 1}"
    where = f"{where}: rule {name!r}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a JSON object")
    _known(raw, RULE_KEYS, where)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}: name must be a non-empty string")
    if not isinstance(raw.get("servers"), dict):
        raise ConfigError(f'{where}: servers must be an object of server names ("*": any other) to "*" or a grant')
    grants = {server: _grant(value, f"{where}: server {server!r}") for server, value in raw["servers"].items()}
    for server in grants:
        if server != core.EVERY_SERVER and (not NAME.fullmatch(server) or (servers and server not in servers)):
            known = ", ".join(servers) if servers else "a server's name"
            raise ConfigError(f"{where}: no server {server!r} is published (the servers: {known}; or *)")
    return Rule(
        name,
        grants,
        subjects=_strings(raw, "subjects", where),
        groups=_strings(raw, "groups", where),
        scopes=_strings(raw, "scopes", where),
    )


def _grant(raw: Any, where: str) -> Grant:
    if raw == "*":
        return core.EVERY_TOOL
    if not isinstance(raw, dict):
        raise ConfigError(f'{where}: must be "*" (every tool) or {{"allow": [...], "deny": [...]}}')
    _known(raw, GRANT_KEYS, where)
    grant = Grant(_strings(raw, "allow", where), _strings(raw, "deny", where))
    if any("\x00" in name for name in grant.allow | grant.deny):
        raise ConfigError(f"{where}: a tool name may not hold a NUL character")
    return grant


def _strings(raw: dict[str, Any], key: str, where: str) -> frozenset[str]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ConfigError(f"{where}: {key} must be a list of non-empty strings")
    return frozenset(value)


def _names(document: Any, key: str) -> list[str]:
    found = document.get(key) if isinstance(document, dict) else None
    return [name for name in found if isinstance(name, str)] if isinstance(found, dict) else []


def _known(raw: dict[str, Any], keys: tuple[str, ...], where: str) -> None:
    unknown = sorted(set(raw) - set(keys))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} (allowed: {', '.join(keys)})")
