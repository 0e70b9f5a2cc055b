"""The published servers of one worker, by name: MCPGATE_COMMAND's one ("default", at MCPGATE_PATH), or every
stdio server of MCPGATE_CONFIG (at /servers/<name>/...).

Reloading the file (a greenlet polls its mtime, size and inode every MCPGATE_CONFIG_POLL seconds, or
`reload()`): the new file is read and checked first, and an invalid one is logged and ignored (every server
goes on). Then a server whose entry changed is replaced (the old gateway is shut down: its sessions end), a
removed one is shut down, a new one starts, and an unchanged one is not touched: its sessions go on.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gevent

from mcpgate.config.settings import Settings
from mcpgate.core import jsonrpc
from mcpgate.core.sessions import new_session_id
from mcpgate.serve.front.http import HttpRequest, HttpResponse, Refusal, json_response
from mcpgate.serve.kinds import EndCause, RouteKind
from mcpgate.serve.servers.server import DEFAULT_NAME, PublishedServer

if TYPE_CHECKING:  # MCPGATE_CONFIG's modules (its reader, groups, views, the vault): only a worker serving it
    from mcpgate.serve.cluster.instances import Cluster
    from mcpgate.serve.hub.groups import Groups
    from mcpgate.serve.servers.config_file import ServerEntry
    from mcpgate.serve.servers.views_file import ViewTable
    from mcpgate.serve.vault.vault import SlotFill, Vault

log = logging.getLogger("mcpgate.servers")

# config_file.PREFIX (tests/test_lazy_imports.py checks they agree): a worker without MCPGATE_CONFIG serves GET
# /servers too, and does not load the file's reader for it
PREFIX = "/servers"
KINDS = {kind.value: kind for kind in RouteKind}  # a server's paths: Streamable HTTP, HTTP+SSE stream and messages
LISTING = (PREFIX, PREFIX + "/")  # GET: the servers and their endpoints
Stamp = tuple[int, int, int]  # the file's (mtime_ns, size, inode)
CLOSE_GRACE = 1.0  # seconds beyond the children's stop ladder a closed gateway is waited for


@dataclass(frozen=True)
class ReloadReport:
    added: tuple[str, ...] = ()
    replaced: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    error: str | None = None  # the new file was refused: nothing changed

    @property
    def changed(self) -> bool:
        return bool(self.added or self.replaced or self.removed)


class PublishedServers:
    """The gateways by name. `named` is False for MCPGATE_COMMAND's single server. `cluster`: the fleet's
    instances when this worker is one of them (REDIS_URL); `minter`: what every server's sessions get their ids
    from (the cluster's self-routing ids, else plain random ones)."""

    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], float] = time.monotonic,
        *,
        cluster: Cluster | None = None,
        minter: Callable[[], str] = new_session_id,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.cluster, self.minter = cluster, minter
        self.named = bool(settings.config)
        self._gateways: dict[str, PublishedServer] = {}
        self._entries: dict[str, ServerEntry] = {}
        self.vault: Vault | None = None  # per-user credentials, opened for the first server with slots (serve/vault)
        self._stamp: Stamp | None = None
        self._watcher: gevent.Greenlet | None = None
        self._fixed: dict[str, tuple[str, RouteKind]] = {}  # MCPGATE_COMMAND's paths, each also with "/"
        self.views: ViewTable | None = None  # MCPGATE_CONFIG's "views" (serve/servers/views_file.py)
        self.hub: Groups | None = None  # MCPGATE_CONFIG's groups (serve/hub/groups.py); None: no file
        if not self.named:
            self._gateways[DEFAULT_NAME] = PublishedServer(settings, clock, cluster=cluster, minter=minter)
            served = {
                settings.path: RouteKind.MCP,
                settings.sse_path: RouteKind.SSE,
                settings.messages_path: RouteKind.MESSAGES,
            }
            self._fixed = {p: (DEFAULT_NAME, kind) for path, kind in served.items() for p in (path, path + "/")}
            return
        from mcpgate.serve.hub import groups as hub_groups
        from mcpgate.serve.servers import config_file, views_file

        if settings.command:
            raise config_file.ConfigError(
                "MCPGATE_CONFIG and MCPGATE_COMMAND are both set: list the command as a server of the file, "
                "or unset MCPGATE_CONFIG"
            )
        self._stamp = stamp(settings.config)
        config = config_file.load(settings.config)
        for warning in config.skipped:
            log.warning("%s", warning)
        for entry in config.servers:
            self._entries[entry.name] = entry
            self._gateways[entry.name] = self._gateway(entry)
        self.hub = hub_groups.Groups(settings, clock, cluster=cluster, minter=minter)
        self.hub.apply(hub_groups.plan(settings, config.servers), self._entries, self._gateways)
        self._show(views_file.load(settings.config))

    def _gateway(self, entry: ServerEntry) -> PublishedServer:
        from mcpgate.serve.servers import config_file

        return PublishedServer(
            config_file.settings_for(self.settings, entry),
            self.clock,
            name=entry.name,
            argv=entry.argv,
            env=entry.env,
            cwd=entry.cwd,
            cluster=self.cluster,
            minter=self.minter,
            slots=self._slots(entry),
            remote=entry.remote,
        )

    def _slots(self, entry: ServerEntry) -> SlotFill | None:
        from mcpgate.serve.vault.vault import SlotFill, open_vault  # (no vault unless an entry needs it)

        if entry.remote is not None and getattr(entry.remote.auth, "per_user", False):  # user_oauth: its tokens
            self.vault = self.vault or open_vault(self.settings, self.cluster)
            entry.remote.auth.attach(self.vault)  # (serve/vault/upstream_oauth.py)
        if entry.slots is None:
            return None
        self.vault = self.vault or open_vault(self.settings, self.cluster)  # SettingsError: key missing or wrong
        return SlotFill(entry.slots, self.vault)

    def _show(self, views: ViewTable | None) -> None:
        """The views (MCPGATE_CONFIG's, None: none) every server answers its callers by."""
        self.views = views
        if views is not None and self.hub is not None:  # a group is there for a caller whose view gives one of its
            # servers (serve/hub/views.py)
            views.groups = {name: tuple(m.name for m in group.members) for name, group in self.hub.items()}
        for _name, gateway in self.items():
            gateway.views = views

    # -- lookups (cheap: on every request) --

    def get(self, name: str) -> PublishedServer | None:
        gateway = self._gateways.get(name)
        if gateway is not None or self.hub is None:
            return gateway
        return self.hub.get(name)  # a group's (serve/hub/groups.py)

    def items(self) -> list[tuple[str, PublishedServer]]:
        """The servers, then the groups (sessions, draining, metrics); `names()` and GET /servers: the servers."""
        return [*self._gateways.items(), *(self.hub.items() if self.hub is not None else ())]

    def names(self) -> list[str]:
        return list(self._gateways)

    def settings_of(self, name: str) -> Settings | None:
        """A published server's settings (its OAuth resource and scopes), or None."""
        gateway = self._gateways.get(name)
        return gateway.settings if gateway is not None else None

    def server_settings(self) -> list[Settings]:
        return [gateway.settings for gateway in self._gateways.values()]

    def group_settings(self) -> list[Settings]:
        """The groups' (and the aggregate's) settings: each is its own OAuth resource, at its own path."""
        return [group.settings for _key, group in self.hub.items()] if self.hub is not None else []

    def group_of(self, key: str) -> Settings | None:
        group = self.hub.get(key) if self.hub is not None else None
        return group.settings if group is not None else None

    # -- routing --

    def route(self, path: str) -> tuple[str, RouteKind] | None:
        """(server name, kind) of a request path, or None when it is none of the servers' paths. A named
        server's path is routed whether or not the name is known (`unknown` answers it)."""
        if self.hub is None:  # not named
            return self._fixed.get(path)
        if not path.startswith(PREFIX + "/"):
            return self.hub.route(path)  # a group's, or the aggregate's
        name, _, kind = path[len(PREFIX) + 1 :].partition("/")
        route_kind = KINDS.get(kind[:-1] if kind.endswith("/") else kind)
        return (name, route_kind) if name and route_kind is not None else None

    def unknown(self, name: str, environ: dict[str, Any] | None = None) -> Refusal:
        """404 for a server name the file does not list (or the caller's view hides), naming those it does
        (those the view of the caller of `environ` shows)."""
        names = self.visible(environ)
        known = ", ".join(names) or "(none)"
        from mcpgate.serve.servers.config_file import NAME

        shown = repr(name) if NAME.fullmatch(name) else "by that name"
        return Refusal(
            404,
            jsonrpc.INVALID_REQUEST,
            f"Not Found: no server {shown}; the servers here are: {known}",
            data={"servers": names},
        )

    def visible(self, environ: dict[str, Any] | None) -> list[str]:
        """The servers' names, those the views hide from the caller of `environ` left out."""
        if self.views is None or environ is None:
            return self.names()
        view = self.views.view(environ)
        return [name for name in self._gateways if view.sees(name)]

    def listing(self, request: HttpRequest) -> HttpResponse:
        """GET /servers: each server's name, Streamable HTTP endpoint and HTTP+SSE endpoint (absolute paths)."""
        if request.method not in ("GET", "HEAD"):
            raise Refusal(405, jsonrpc.INVALID_REQUEST, "Method Not Allowed", headers={"Allow": "GET"})
        root = request.environ.get("SCRIPT_NAME", "").rstrip("/")
        listed = [
            {"name": name, "endpoint": root + gateway.settings.path, "sse": root + gateway.settings.sse_path}
            for name, gateway in self._gateways.items()
            if self.views is None or self.views.sees(name, request.environ)
        ]
        return json_response(jsonrpc.encode({"servers": listed}))

    def seen_health(self, body: dict[str, Any], environ: dict[str, Any]) -> dict[str, Any]:
        """/healthz's body as the caller of `environ` may see it: only the servers its view shows (the error
        then names none)."""
        states = body.get("servers")
        if self.views is None or not isinstance(states, dict):
            return body
        shown = {name: state for name, state in states.items() if self.views.sees(name, environ)}
        if len(shown) == len(states):
            return body
        seen = {**body, "servers": shown}
        if "error" in seen:
            seen["error"] = "some servers cannot be started; the gateway's log says why"
        return seen

    def health(self) -> tuple[int, dict[str, Any]]:
        """/healthz: sessions and children, and whether the commands can be started (503 when none can; with
        several servers, "degraded" when some cannot). The reasons are in the log, not for every caller."""
        states: dict[str, dict[str, Any]] = {}
        for name, gateway in self._gateways.items():  # the servers; the groups' sessions count in the totals
            state = "unavailable" if gateway.command_problem() else "ok"
            states[name] = {"status": state, "sessions": len(gateway.sessions), "children": gateway.live_children()}
        broken = [name for name, state in states.items() if state["status"] != "ok"]
        status = "unavailable" if len(broken) == len(states) else "degraded" if broken else "ok"
        groups = self.hub.items() if self.hub is not None else []
        body: dict[str, Any] = {
            "status": status,
            "sessions": sum(state["sessions"] for state in states.values()) + sum(len(g.sessions) for _, g in groups),
            "children": sum(state["children"] for state in states.values()) + sum(g.live_children() for _, g in groups),
        }
        if self.named:
            body["servers"] = states
        if broken:
            what = "the MCP server command" if not self.named else f"the servers {', '.join(broken)}"
            body["error"] = f"{what} cannot be started or reached; the gateway's log says why"
        return (503 if status == "unavailable" else 200), body

    # -- reload --

    def reload(self) -> ReloadReport:
        """Read the file again and apply what changed (see the module's docstring)."""
        if self.hub is None:  # not named
            return ReloadReport(unchanged=tuple(self._gateways))
        from mcpgate.serve.hub import groups as hub_groups
        from mcpgate.serve.servers import config_file, views_file

        self._stamp = stamp(self.settings.config)
        try:
            config = config_file.load(self.settings.config)
            views = views_file.load(self.settings.config)
            groups = hub_groups.plan(self.settings, config.servers)
        except config_file.ConfigError as exc:
            log.error("%s; the servers already running go on unchanged", exc)
            return ReloadReport(unchanged=tuple(self._gateways), error=str(exc))
        for warning in config.skipped:
            log.warning("%s", warning)
        new = {entry.name: entry for entry in config.servers}
        added = [name for name in new if name not in self._entries]
        removed = [name for name in self._entries if name not in new]
        replaced = [name for name in new if name in self._entries and new[name] != self._entries[name]]
        unchanged = [name for name in new if name in self._entries and new[name] == self._entries[name]]
        gateways = {name: self._gateways[name] if name in unchanged else self._gateway(new[name]) for name in new}
        old = [self._gateways[name] for name in (*replaced, *removed)]
        old += self.hub.apply(groups, new, gateways)[1]  # a group whose servers changed is replaced
        self._gateways, self._entries = gateways, new  # swapped at once: a request finds the old or the new
        self._show(views)
        for name in added:
            log.info("server %s added at %s", name, config_file.paths(name)[0])
        for name in replaced:
            log.info("server %s replaced (its entry changed): its sessions end", name)
        for name in removed:
            log.info("server %s removed: its sessions end", name)
        for gateway in old:
            gateway.closing = True  # at once: a request that found it before the swap starts nothing new
            gevent.spawn(self._close_one, gateway)
        return ReloadReport(tuple(added), tuple(replaced), tuple(removed), tuple(unchanged))

    def watch(self) -> None:
        """Poll the file every MCPGATE_CONFIG_POLL seconds (0: never) on a greenlet of its own."""
        if self.named and self.settings.config_poll > 0 and self._watcher is None:
            self._watcher = gevent.spawn(self._watch_forever)

    def _watch_forever(self) -> None:
        while True:
            gevent.sleep(self.settings.config_poll)
            try:
                if stamp(self.settings.config) != self._stamp:
                    self.reload()
            except Exception:  # the watcher must outlive any one bad reload
                log.exception("reloading MCPGATE_CONFIG failed; the servers already running go on unchanged")

    # -- shutdown --

    def _close_one(self, gateway: PublishedServer) -> None:
        settings = gateway.settings
        gateway.shutdown(settings.close_timeout + settings.term_timeout + CLOSE_GRACE, EndCause.SERVER_REPLACED)

    def close(self, timeout: float) -> None:
        """Shut every server down at once and wait (bounded) for their children."""
        if self._watcher is not None:
            self._watcher.kill(block=False)
        greenlets = [gevent.spawn(gateway.shutdown, timeout) for _name, gateway in self.items()]
        gevent.joinall(greenlets, timeout=timeout + CLOSE_GRACE)


def stamp(path: str) -> Stamp | None:
    """What tells a changed file: (mtime_ns, size, inode); None when it cannot be read."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_mtime_ns, info.st_size, info.st_ino)
