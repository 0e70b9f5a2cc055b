"""One published server's pinned tool definitions in force (MCPGATE_TOOL_PINS warn or block): what its
ToolFilter (core/tool_filter.py) asks of every tools/list result and every tools/call on every path (2025
sessions, the 2026-07-28 pool, bridged children), and what the management API approves or rejects.

A listing (a page of one) is reviewed against the store's state (core/pins.py `review`): tools first seen are
pinned; a changed definition, or a tool that appears after the server's first complete listing, is recorded as a
pending change (once per new fingerprint), logged (WARNING, the fields that changed) and counted
(mcpgate_tool_definition_changes_total{server}). Under block, those tools are left out of the listing, and a
call of a tool with a pending (or rejected) change, or of a tool without a pin once the server is sealed, is
answered as a call of a hidden tool. Approving pins the new fingerprint (the tool is shown again); rejecting
keeps the old pin and the tool hidden.

Calls read the state as last loaded, loaded again at most every REFRESH seconds (an approval in another worker
or instance is seen within it); a listing always loads it. When the store fails, the state last loaded is used
(logged). Off (the default): no ServerPins, and ToolFilter.of returns None as before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcpgate.config import paths
from mcpgate.core.pins import Finding, Verdict, canonical, definition, review
from mcpgate.serve.pins.store import DirPins, MemoryPins, Pending, PinStore, RedisPins, State

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from mcpgate.config.settings import Settings
    from mcpgate.serve.cluster.instances import Cluster

log = logging.getLogger("mcpgate.pins")

REFRESH = 1.0  # seconds a call trusts the state last loaded
SHOWN_NAME = 120  # characters of a tool's name in a log line
COUNTS: dict[str, int] = {}  # changes recorded, by server (read by /metrics)


def shown(name: str) -> str:
    return repr(name if len(name) <= SHOWN_NAME else name[:SHOWN_NAME] + "...")


class ServerPins:
    def __init__(
        self,
        server: str,
        block: bool,
        store: PinStore,
        settings: Settings,
        errors: tuple[type[BaseException], ...] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server, self.block, self.store = server, block, store
        self.max_tools, self.max_pending = settings.pins_max_tools, settings.pins_max_pending
        self.definition_bytes = settings.pins_definition_bytes
        self.errors: tuple[type[BaseException], ...] = (*errors, OSError)
        self.clock = clock
        self.state = State()
        self.loaded = -REFRESH - 1.0

    @property
    def policy(self) -> str:
        return "block" if self.block else "warn"

    def _load(self, force: bool = False) -> State:
        now = self.clock()
        if force or now - self.loaded > REFRESH:
            try:
                self.state = self.store.load()
            except self.errors as exc:
                log.warning(
                    "server %s: pinned tool definitions could not be read (%s); the last read used", self.server, exc
                )
            self.loaded = now
        return self.state

    # -- what the ToolFilter asks (core/tool_filter.py PinGuard) --

    def listed(self, tools: list[Any], complete: bool) -> frozenset[str]:
        """Review a page of a tools/list result: the names to leave out of it (none under warn)."""
        state = self._load(force=True)
        pending_prints = {name: change.new for name, change in state.pending.items()}
        verdict = review(tools, state.pins, pending_prints, state.sealed, max(0, self.max_tools - len(state.pins)))
        recorded = self._recorded(verdict.fresh, tools, state)
        if verdict.unpinnable:
            log.warning(
                "server %s: %d tool(s) could not be pinned (MCPGATE_PINS_MAX_TOOLS %d, or no fingerprint)%s",
                self.server,
                len(verdict.unpinnable),
                self.max_tools,
                ": hidden" if self.block else "",
            )
        seal = complete and not state.sealed
        if verdict.pin or recorded or verdict.settled or seal:
            try:
                self.store.update(verdict.pin, recorded, verdict.settled, seal)
            except self.errors as exc:
                log.warning("server %s: pinned tool definitions could not be written (%s)", self.server, exc)
            self._load(force=True)
        return verdict.blocked if self.block else frozenset()

    def blocks(self, name: str) -> bool:
        """Whether a tools/call of `name` is refused: under block, a pending or rejected change, or no pin once
        the server's first complete listing was seen."""
        if not self.block:
            return False
        state = self._load()
        return name in state.pending or (state.sealed and name not in state.pins)

    def _recorded(self, fresh: list[Finding], tools: list[Any], state: State) -> dict[str, Pending]:
        recorded: dict[str, Pending] = {}
        left_out = 0
        for finding in fresh:
            if finding.new is None or finding.pin is None:
                continue
            if finding.name not in state.pending and len(state.pending) + len(recorded) >= self.max_pending:
                left_out += 1
                continue
            verdict = "new" if finding.verdict is Verdict.NEW else "changed"
            recorded[finding.name] = Pending(
                finding.name,
                verdict,
                finding.old,
                finding.new,
                list(finding.fields),
                time.time(),
                finding.pin.encode(),
                self._kept_definition(finding, tools),
            )
            COUNTS[self.server] = COUNTS.get(self.server, 0) + 1
            what = (
                f"changed ({', '.join(finding.fields)})" if verdict == "changed" else "appeared after the first listing"
            )
            log.warning(
                "server %s: tool %s %s; %s until approved",
                self.server,
                shown(finding.name),
                what,
                "hidden" if self.block else "the change is served (warn)",
            )
        if left_out:  # one line per listing, however many
            log.warning(
                "server %s: %d tool change(s) not recorded: MCPGATE_PINS_MAX_PENDING (%d) changes already wait%s",
                self.server,
                left_out,
                self.max_pending,
                " (hidden)" if self.block else "",
            )
        return recorded

    def _kept_definition(self, finding: Finding, tools: list[Any]) -> dict[str, Any] | None:
        for tool in tools:
            if isinstance(tool, dict) and tool.get("name") == finding.name:
                whole = definition(tool)
                try:
                    if len(canonical(whole)) <= self.definition_bytes:
                        return whole
                except (ValueError, RecursionError):
                    return None
        return None

    # -- what the management API asks --

    def pending(self) -> list[dict[str, Any]]:
        state = self._load(force=True)
        return [
            {**vars(change), "status": "rejected" if change.rejected else "pending"}
            for change in state.pending.values()
        ]

    def decide(self, name: str, fingerprint: str, approve: bool) -> Pending | None:
        change = self.store.decide(name, fingerprint, approve)
        self._load(force=True)
        if change is not None:
            log.info(
                "server %s: the change of tool %s %s", self.server, shown(name), "approved" if approve else "rejected"
            )
        return change


def pins_for(settings: Settings, server: str, cluster: Cluster | None) -> ServerPins | None:
    """The server's pins in force, or None with MCPGATE_TOOL_PINS off (its ToolFilter is then as before)."""
    if settings.tool_pins not in ("warn", "block"):
        return None
    block = settings.tool_pins == "block"
    if cluster is not None:
        return ServerPins(server, block, RedisPins(cluster.redis, server), settings, cluster.directory.errors)
    where = Path(settings.state_dir or paths.default_state_dir()) / "pins"
    try:
        return ServerPins(server, block, DirPins(where, server), settings)
    except OSError as exc:
        log.error("server %s: %s cannot be used (%s): its pins are kept in this process only", server, where, exc)
        return ServerPins(server, block, MemoryPins(), settings)


def changes() -> Metric:
    """The changes recorded in this worker, by server (/metrics)."""
    from prometheus_client.core import CounterMetricFamily

    family = CounterMetricFamily(
        "mcpgate_tool_definition_changes",
        "Tool definitions that changed from their pin (or tools that appeared after the first listing), by server.",
        labels=["server"],
    )
    for server, count in COUNTS.items():
        family.add_metric([server], count)
    return family
