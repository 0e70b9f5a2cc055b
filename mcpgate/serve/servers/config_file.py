"""MCPGATE_CONFIG: the `mcpServers` file desktop hosts read, loaded and checked into one ServerEntry per server:
a stdio server (a `command`) or a remote one (a `url`).

The format: `{"mcpServers": {"<name>": {"command": str, "args": [str], "env": {str: str}, "cwd": str,
"resurrect": bool, "prefix": str, "mcpgate": {<per-server settings by field name>}}}}` ("resurrect":
MCPGATE_SESSION_RESURRECT for this server; "prefix": the hub's namespace prefix for its names, default its name,
checked like a name). Other top-level keys (a desktop host keeps its own preferences there) are left alone.

A remote server (a `url` entry): its upstream (`url`, `transport`, `headers`, `era`, `auth`) is
remote_entry.py's; this module checks the rest of it like a stdio entry's ("prefix", "resurrect", "mcpgate"),
where a per-server setting about the child process (pass_env, stderr, child_*) is an error: a remote server runs
no process. An entry of a transport mcpgate does not speak (`type` "ws" / "websocket") is reported and skipped,
never guessed at; any other unknown key is an error naming it. Each per-server setting is checked with its
declaration's validator. Every message names the file, the server and the field.

A server's settings are the gateway's own with its overrides on top (`settings_for`), so the modules that read
`gateway.settings.<field>` never know whether they serve one server or many.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mcpgate.config import validators
from mcpgate.config.declarations import Setting, SettingsError, check, convert, declared
from mcpgate.config.settings import Settings
from mcpgate.serve.servers import remote_entry
from mcpgate.serve.servers.remote_entry import TRANSPORTS, RemoteEntry
from mcpgate.serve.vault import slots as vault_slots

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
PREFIX = "/servers"
MAX_FILE_BYTES = 4 * 1024 * 1024  # a config file larger than this is refused (it is read whole)
ENTRY_KEYS = ("command", "args", "env", "cwd", "type", "resurrect", "prefix", "mcpgate", vault_slots.ENTRY_KEY)
OTHER_TRANSPORTS = ("ws", "websocket")  # reported and skipped
# The settings an entry's "mcpgate" object may set for its server alone.
PER_SERVER = (
    "max_sessions",
    "session_idle_ttl",
    "pass_env",
    "stderr",
    "tools_allow",
    "tools_deny",
    "child_cpu_seconds",
    "child_memory_bytes",
    "child_open_files",
    "child_processes",
    "child_no_network",
    "request_timeout",
    "pool_children",
    "pool_children_total",
    "pool_idle_ttl",
    "oauth_scopes",
    "session_resurrect",
    "tool_pins",
    "tool_search",
)
DECLARED: dict[str, Setting] = {s.name: s for s in declared(Settings) if s.name in PER_SERVER}
# The per-server settings about the child process: they mean nothing for a remote server.
CHILD_ONLY = (
    "pass_env",
    "stderr",
    "child_cpu_seconds",
    "child_memory_bytes",
    "child_open_files",
    "child_processes",
    "child_no_network",
)


class ConfigError(SettingsError):
    """The file cannot be served: the message names the file, and the server and field when it is one of them."""


@dataclass(frozen=True)
class ServerEntry:
    """One server of the file: what its children are started from (a command, or a remote's upstream), and its
    own settings."""

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    prefix: str | None = None  # the hub's namespace prefix for this server's names (None: its name)
    remote: RemoteEntry | None = None  # a remote server (argv is then empty)
    slots: vault_slots.Slots | None = None  # per-user credential slots in env/args (serve/vault/slots.py)


@dataclass(frozen=True)
class Config:
    servers: tuple[ServerEntry, ...]
    skipped: tuple[str, ...] = ()  # one warning per entry left out (a transport mcpgate does not speak)

    def names(self) -> list[str]:
        return [entry.name for entry in self.servers]


def paths(name: str) -> tuple[str, str, str]:
    """A server's Streamable HTTP, HTTP+SSE and messages paths."""
    base = f"{PREFIX}/{name}"
    return f"{base}/mcp", f"{base}/sse", f"{base}/messages"


def settings_for(base: Settings, entry: ServerEntry) -> Settings:
    """The server's settings: the gateway's, its overrides on top, its own paths."""
    mcp, sse, messages = paths(entry.name)
    return dataclasses.replace(base, **entry.overrides, path=mcp, sse_path=sse, messages_path=messages)


def load(path: str) -> Config:
    """The file read and checked (ConfigError)."""
    source = f"MCPGATE_CONFIG {path}"
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"{source}: larger than {MAX_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{source}: not UTF-8 text") from None
    return parse(text, source)


def parse(text: str, source: str = "MCPGATE_CONFIG") -> Config:
    """A config from the file's text (ConfigError naming `source`)."""
    try:
        document = json.loads(text, object_pairs_hook=_unique_keys)
    except DuplicateKey as exc:
        raise ConfigError(f"{source}: the key {exc.key!r} appears twice in one object") from None
    except ValueError as exc:
        raise ConfigError(f"{source}: not valid JSON ({exc})") from None
    if not isinstance(document, dict) or not isinstance(document.get("mcpServers"), dict):
        raise ConfigError(f'{source}: must be a JSON object with an "mcpServers" object')
    entries, skipped = [], []
    for name, raw in document["mcpServers"].items():
        where = f"{source}: server {name!r}"
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ConfigError(
                f"{where}: a name must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: must be a JSON object")
        other = _other_transport(raw)
        if other:
            skipped.append(f"{where} skipped: {other}; mcpgate publishes stdio (command) and HTTP (url) servers")
            continue
        remote = "url" in raw or "serverUrl" in raw
        entries.append(_remote_entry(name, raw, where) if remote else _entry(name, raw, where))
    if not entries:
        raise ConfigError(f"{source}: lists no server (an entry with a command or a url) to publish")
    return Config(tuple(entries), tuple(skipped))


class DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(key)
        out[key] = value
    return out


def _other_transport(raw: dict[str, Any]) -> str | None:
    """Why an entry is of a transport mcpgate does not speak, or None."""
    kind = raw.get("type")
    if kind in OTHER_TRANSPORTS:
        return f"its type is {kind!r}"
    return None


def _entry(name: str, raw: dict[str, Any], where: str) -> ServerEntry:
    unknown = sorted(set(raw) - set(ENTRY_KEYS))
    if unknown:
        allowed = ", ".join(ENTRY_KEYS)
        raise ConfigError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} (allowed: {allowed}, or url)")
    if raw.get("type", "stdio") != "stdio":
        if raw.get("type") in TRANSPORTS:
            raise ConfigError(f"{where}: type {raw['type']!r} names a remote server: give its url (not a command)")
        raise ConfigError(f'{where}: type must be "stdio" (got {raw["type"]!r})')
    command = raw.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ConfigError(f"{where}: command must name the program to run (a non-empty string)")
    args = raw.get("args", [])
    if not isinstance(args, list) or not all(isinstance(arg, str) for arg in args):
        raise ConfigError(f"{where}: args must be a list of strings")
    env, slots = vault_slots.split(raw, where)  # {"user_secret": "<slot>"} values taken out (serve/vault)
    problem = validators.env_object(env)
    if problem:
        raise ConfigError(f"{where}: env {problem}")
    cwd = raw.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or validators.directory(cwd)):
        raise ConfigError(f"{where}: cwd must name an existing directory (got {cwd!r})")
    overrides = _overrides(raw.get("mcpgate", {}), where)
    _resurrect(raw, where, overrides)
    return ServerEntry(name, (command, *args), dict(env), cwd or None, overrides, _prefix(raw, where), slots=slots)


def _resurrect(raw: dict[str, Any], where: str, overrides: dict[str, Any]) -> None:
    if "resurrect" in raw:  # its sessions taken over after their process is gone (serve/cluster/takeover.py)
        if not isinstance(raw["resurrect"], bool):
            raise ConfigError(f"{where}: resurrect must be true or false (got {raw['resurrect']!r})")
        overrides["session_resurrect"] = raw["resurrect"]


def _prefix(raw: dict[str, Any], where: str) -> str | None:
    """The entry's "prefix" (the hub's namespace for its names), checked like a server's name; None if absent."""
    prefix = raw.get("prefix")
    if prefix is not None and (not isinstance(prefix, str) or not NAME.fullmatch(prefix)):
        raise ConfigError(f"{where}: prefix must be 1 to 64 letters, digits, '.', '_' or '-' (got {prefix!r})")
    return prefix


def _overrides(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: mcpgate must be a JSON object of per-server settings")
    unknown = sorted(set(raw) - set(PER_SERVER))
    if unknown:
        raise ConfigError(
            f"{where}: unknown per-server setting(s) {', '.join(f'mcpgate.{key}' for key in unknown)} "
            f"(allowed: {', '.join(PER_SERVER)})"
        )
    return {key: _value(DECLARED[key], value, f"{where}: mcpgate.{key}") for key, value in raw.items()}


def _value(setting: Setting, value: Any, where: str) -> Any:
    """A per-server value typed as its setting declares, then checked by the setting's validator."""
    typed = _typed(setting, value)
    if typed is None:
        raise ConfigError(f"{where} must be {_KINDS[setting.kind]} (got {value!r})")
    try:
        check(setting, typed)
    except SettingsError as exc:
        raise ConfigError(f"{where} {str(exc).removeprefix(setting.source + ' ')}") from None
    return typed


_KINDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "str": "a string",
    "list": "a list of strings (or one comma-separated string)",
}


def _typed(setting: Setting, value: Any) -> Any:
    kind = setting.kind
    if isinstance(value, bool) or value is None:
        return value if kind == "bool" else None
    if kind == "int":
        return value if isinstance(value, int) else None
    if kind == "float":
        return float(value) if isinstance(value, (int, float)) else None
    if kind == "str":
        return value if isinstance(value, str) else None
    if kind == "list":
        if isinstance(value, str):
            return convert(setting, value)
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return tuple(item.strip() for item in value if item.strip())
    return None


# -- remote servers (a `url` entry) ---------------------------------------------------------------------------


def _remote_entry(name: str, raw: dict[str, Any], where: str) -> ServerEntry:
    """A `url` entry: a remote server, its upstream read by remote_entry.py (see the module's docstring)."""
    try:
        remote = remote_entry.parse(raw, where)
    except remote_entry.RemoteEntryError as exc:
        raise ConfigError(str(exc)) from None
    settings = raw.get("mcpgate", {})
    child_only = sorted(set(settings) & set(CHILD_ONLY)) if isinstance(settings, dict) else []
    if child_only:
        names = ", ".join(f"mcpgate.{key}" for key in child_only)
        raise ConfigError(f"{where}: {names}: not for a remote server (it runs no process)")
    overrides = _overrides(settings, where)
    _resurrect(raw, where, overrides)
    return ServerEntry(name, (), {}, None, overrides, _prefix(raw, where), remote)
