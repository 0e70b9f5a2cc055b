"""MCPGATE_CONFIG's groups, and the aggregate of every server, published as servers of their own.

The file's top-level `"groups"` object (config_file.py leaves it alone): `{"groups": {"<name>": {"servers":
["a", "b"]}}}` publishes each group at /groups/<name>/mcp (and /sse, /messages as a named server has);
`"tool_search": true` (or false) puts the search view on (off) on that group's path, whatever MCPGATE_TOOL_SEARCH.
A group's name is a server name's shape and no server's name; it lists one server at least, each of the file's,
once.
Every member's names are namespaced by its prefix (its `prefix`, or its name: core/hub_lists.py), and a prefix
that cannot namespace, or two members with one prefix, refuse the file with the group and the server named.

By default (MCPGATE_HUB true) a file of two servers or more also publishes all of them at MCPGATE_PATH (and its
HTTP+SSE paths), under the key "*"; there a server whose prefix cannot namespace, or repeats another's, is left
out with a warning instead.

On a reload a group whose definition (its members, their entries, their servers) is unchanged goes on; any
other is replaced (its sessions end), like a server whose entry changed.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcpgate.config.settings import Settings
from mcpgate.core import hub_lists
from mcpgate.core.sessions import new_session_id
from mcpgate.core.tool_filter import ToolFilter
from mcpgate.serve.kinds import RouteKind
from mcpgate.serve.servers import config_file
from mcpgate.serve.servers.config_file import ConfigError, ServerEntry

if TYPE_CHECKING:  # the hub's machinery (its children, core/hub.py) is imported when a group is published
    from mcpgate.serve.cluster.instances import Cluster
    from mcpgate.serve.hub.child import HubMember
    from mcpgate.serve.hub.server import HubServer
    from mcpgate.serve.servers.server import PublishedServer

log = logging.getLogger("mcpgate.hub")

PREFIX = "/groups"
AGGREGATE = "*"  # the key of the aggregate of every server (no server's or group's name can be it)
GROUP_KEYS = ("servers", "tool_search")


@dataclass(frozen=True)
class Group:
    key: str  # its name; AGGREGATE for the default aggregate
    servers: tuple[str, ...]
    paths: tuple[str, str, str]  # Streamable HTTP, HTTP+SSE, messages
    tool_search: bool | None = None  # its "tool_search" (None: the gateway's MCPGATE_TOOL_SEARCH)


def prefix_of(entry: ServerEntry) -> str:
    return entry.prefix or entry.name


def paths(name: str) -> tuple[str, str, str]:
    base = f"{PREFIX}/{name}"
    return f"{base}/mcp", f"{base}/sse", f"{base}/messages"


def plan(settings: Settings, entries: Sequence[ServerEntry], source: str | None = None) -> list[Group]:
    """The groups to publish for these servers (ConfigError naming the group and the server)."""
    source = source or f"MCPGATE_CONFIG {settings.config}"
    raw = _document(settings.config, source).get("groups", {})
    if not isinstance(raw, dict):
        raise ConfigError(f'{source}: "groups" must be a JSON object of groups by name')
    by_name = {entry.name: entry for entry in entries}
    groups = [_group(name, value, by_name, f"{source}: group {name!r}") for name, value in raw.items()]
    if settings.hub and len(entries) >= 2:
        groups.append(_aggregate(settings, entries, source))
    return groups


def _document(path: str, source: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as file:
            data = file.read(config_file.MAX_FILE_BYTES + 1)
        document = json.loads(data.decode("utf-8-sig"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{source}: cannot read its groups ({exc})") from None
    return document if isinstance(document, dict) else {}


def _group(name: object, value: object, servers: Mapping[str, ServerEntry], where: str) -> Group:
    if not isinstance(name, str) or not config_file.NAME.fullmatch(name):
        raise ConfigError(f"{where}: a group's name has a server name's shape (1 to 64 letters, digits, . _ -)")
    if name in servers:
        raise ConfigError(f"{where}: a server has that name already; give the group another")
    if not isinstance(value, dict) or set(value) - set(GROUP_KEYS):
        raise ConfigError(
            f'{where}: must be an object {{"servers": ["<server>", ...], "tool_search": bool}} (no other key)'
        )
    tool_search = value.get("tool_search")
    if tool_search is not None and not isinstance(tool_search, bool):
        raise ConfigError(f"{where}: tool_search must be true or false (the search view on the group's path)")
    members = value.get("servers")
    if not isinstance(members, list) or not members or not all(isinstance(m, str) for m in members):
        raise ConfigError(f"{where}: servers must be a non-empty list of the file's server names")
    if len(set(members)) != len(members):
        raise ConfigError(f"{where}: servers lists a server twice")
    prefixes: dict[str, str] = {}
    for member in members:
        entry = servers.get(member)
        if entry is None:
            raise ConfigError(f"{where}: {member!r} is no server of mcpServers (known: {', '.join(servers)})")
        prefix = prefix_of(entry)
        problem = hub_lists.prefix_problem(prefix)
        if problem:
            raise ConfigError(
                f"{where}: server {member!r} cannot be namespaced by {prefix!r}: {problem}; give it a prefix"
            )
        if prefix in prefixes:
            raise ConfigError(f"{where}: servers {prefixes[prefix]!r} and {member!r} share the prefix {prefix!r}")
        prefixes[prefix] = member
    return Group(name, tuple(members), paths(name), tool_search)


def _aggregate(settings: Settings, entries: Sequence[ServerEntry], source: str) -> Group:
    taken: dict[str, str] = {}
    for entry in entries:
        prefix = prefix_of(entry)
        problem = hub_lists.prefix_problem(prefix) or (
            f"{taken[prefix]!r} has that prefix already" if prefix in taken else None
        )
        if problem:
            log.warning("%s: server %r left out of the aggregate at %s: %s", source, entry.name, settings.path, problem)
            continue
        taken[prefix] = entry.name
    return Group(AGGREGATE, tuple(taken.values()), (settings.path, settings.sse_path, settings.messages_path))


class Groups:
    """The published groups of one worker: built from a plan, routed by path, kept across reloads when unchanged."""

    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], float] = time.monotonic,
        *,
        cluster: Cluster | None = None,
        minter: Callable[[], str] = new_session_id,
    ) -> None:
        self.settings, self.clock, self.cluster, self.minter = settings, clock, cluster, minter
        self._servers: dict[str, HubServer] = {}
        self._definitions: dict[str, tuple[Any, ...]] = {}
        self._paths: dict[str, tuple[str, RouteKind]] = {}

    def route(self, path: str) -> tuple[str, RouteKind] | None:
        return self._paths.get(path) if self._paths else None

    def get(self, key: str) -> HubServer | None:
        return self._servers.get(key)

    def items(self) -> list[tuple[str, HubServer]]:
        return list(self._servers.items())

    def apply(
        self, groups: Sequence[Group], entries: Mapping[str, ServerEntry], servers: Mapping[str, PublishedServer]
    ) -> tuple[dict[str, HubServer], list[HubServer]]:
        """The group servers for `groups` over these servers (unchanged ones kept), and those retired."""
        built: dict[str, HubServer] = {}
        definitions: dict[str, tuple[Any, ...]] = {}
        for group in groups:
            definition = (group, tuple((entries[n], id(servers[n])) for n in group.servers))
            definitions[group.key] = definition
            kept = self._servers.get(group.key)
            if kept is not None and self._definitions.get(group.key) == definition:
                built[group.key] = kept
            else:
                built[group.key] = self._server(group, entries, servers)
                log.info("group %s of %s published at %s", group.key, ", ".join(group.servers), group.paths[0])
        retired = [server for key, server in self._servers.items() if built.get(key) is not server]
        self._servers, self._definitions = built, definitions
        kinds = (RouteKind.MCP, RouteKind.SSE, RouteKind.MESSAGES)
        self._paths = {
            p: (group.key, kind)
            for group in groups
            for path, kind in zip(group.paths, kinds, strict=True)
            for p in (path, path + "/")
        }
        return built, retired

    @staticmethod
    def _member(entry: ServerEntry, server: PublishedServer) -> HubMember:
        from mcpgate.serve.hub.child import HubMember

        # hidden here too; and its pinned definitions (serve/pins) hold here, in its own store, by its own names
        tools = ToolFilter.of(server.settings.tools_allow, server.settings.tools_deny, pins=server.pins)
        return HubMember(entry.name, prefix_of(entry), server.child_spec, server.command_problem, tools)

    def _server(
        self, group: Group, entries: Mapping[str, ServerEntry], servers: Mapping[str, PublishedServer]
    ) -> HubServer:
        from mcpgate.serve.hub.server import HubServer

        members = tuple(self._member(entries[name], servers[name]) for name in group.servers)
        mcp, sse, messages = group.paths
        # the group pins and filters nothing of its own: each member's pins and tool lists act on its part
        # (`_member`), on its own names (the gateway's MCPGATE_TOOLS_* would never match "<prefix>__<name>")
        settings = dataclasses.replace(
            self.settings,
            path=mcp,
            sse_path=sse,
            messages_path=messages,
            tool_pins="off",
            tools_allow=(),
            tools_deny=(),
            tool_search=self.settings.tool_search if group.tool_search is None else group.tool_search,
            # OAuth: every member's own required scopes (a token for the group opens no member its own path refuses)
            oauth_scopes=tuple(dict.fromkeys(s for n in group.servers for s in servers[n].settings.oauth_scopes)),
        )
        return HubServer(
            settings, self.clock, name=group.key, members=members, cluster=self.cluster, minter=self.minter
        )
