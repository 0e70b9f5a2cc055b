"""Credential slots in MCPGATE_CONFIG: what a server needs from each user, and where it goes in its child.

An entry names a slot in its `env` (`"GITHUB_TOKEN": {"user_secret": "github_token"}`) or in an argument
(`"--token=${user_secret:github_token}"`), and declares every slot it names under `user_secrets`:

    "user_secrets": {"github_token": {"label": "GitHub token", "help": "https://github.com/settings/tokens"}}

    split(raw, where) -> (plain env, Slots | None)   # ConfigError naming the entry and the field
    slots.fill(argv, env, values) -> (argv, env)     # the child's command with this principal's values in
    slots.names                                      # every slot the server uses, sorted

Pure: no I/O, no vault. The values come from mcpgate.serve.vault.vault.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from mcpgate.config.declarations import SettingsError

SLOT = re.compile(r"[a-z][a-z0-9_]{0,63}")
PLACEHOLDER = re.compile(r"\$\{user_secret:([^}]*)\}")
ENTRY_KEY = "user_secrets"
MAX_LABEL = 200
MAX_SLOTS = 32  # slots one server may declare


class SlotConfigError(SettingsError):
    """An entry's slots are malformed: the message names the entry and the field."""


@dataclass(frozen=True)
class SlotInfo:
    """What a slot is for (shown on the page): a label and where to obtain a value."""

    name: str
    label: str
    help: str = ""


@dataclass(frozen=True)
class Slots:
    """A server's slots: env variables filled from a slot, arguments with placeholders, the declarations."""

    env: tuple[tuple[str, str], ...]  # (variable, slot)
    args: tuple[int, ...]  # the argv indices holding a placeholder
    info: tuple[SlotInfo, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(info.name for info in self.info))

    def fill(
        self, argv: Sequence[str], env: Mapping[str, str] | None, values: Mapping[str, str]
    ) -> tuple[list[str], dict[str, str]]:
        """The argv and env of a child of this principal: every slot replaced by its value (KeyError: missing)."""
        filled_argv = list(argv)
        for index in self.args:
            filled_argv[index] = PLACEHOLDER.sub(lambda m: values[m.group(1)], filled_argv[index])
        filled_env = dict(env or {})
        for variable, slot in self.env:
            filled_env[variable] = values[slot]
        return filled_argv, filled_env


def _slot_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not SLOT.fullmatch(value):
        raise SlotConfigError(f"{where}: a slot name must be 1 to 64 lowercase letters, digits or _ (got {value!r})")
    return value


def _declarations(raw: Any, where: str) -> dict[str, SlotInfo]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or len(raw) > MAX_SLOTS:
        raise SlotConfigError(f"{where}: {ENTRY_KEY} must be a JSON object of at most {MAX_SLOTS} slots")
    out = {}
    for name, declared in raw.items():
        at = f"{where}: {ENTRY_KEY}.{name}"
        _slot_name(name, at)
        if not isinstance(declared, dict) or set(declared) - {"label", "help"}:
            raise SlotConfigError(f'{at} must be an object with "label" and optionally "help"')
        label, help_url = declared.get("label", name), declared.get("help", "")
        if not isinstance(label, str) or not 0 < len(label) <= MAX_LABEL:
            raise SlotConfigError(f"{at}.label must be a string of 1 to {MAX_LABEL} characters")
        if not isinstance(help_url, str) or (help_url and urlsplit(help_url).scheme not in ("https", "http")):
            raise SlotConfigError(f"{at}.help must be an http(s) URL")
        out[name] = SlotInfo(name, label, help_url)
    return out


def split(raw: dict[str, Any], where: str) -> tuple[Any, Slots | None]:
    """The entry's env without its slot objects (checked by the caller as before), and its slots (None: none)."""
    env = raw.get("env", {})
    declared = _declarations(raw.get(ENTRY_KEY), where)
    used: set[str] = set()
    env_slots: list[tuple[str, str]] = []
    plain: Any = env
    if isinstance(env, dict):
        plain = {}
        for variable, value in env.items():
            if isinstance(value, dict):
                if set(value) != {"user_secret"}:
                    raise SlotConfigError(f'{where}: env {variable!r} must be a string or {{"user_secret": "<slot>"}}')
                env_slots.append((variable, _slot_name(value["user_secret"], f"{where}: env {variable!r}")))
            else:
                plain[variable] = value
    used.update(slot for _variable, slot in env_slots)
    indices = []
    args = raw.get("args", [])
    for index, arg in enumerate(args if isinstance(args, list) else []):
        found = PLACEHOLDER.findall(arg) if isinstance(arg, str) else []
        for slot in found:
            used.add(_slot_name(slot, f"{where}: args[{index}]"))
        if found:
            indices.append(index + 1)  # argv[0] is the command
    undeclared = sorted(used - set(declared))
    if undeclared:
        raise SlotConfigError(f"{where}: slot(s) {', '.join(undeclared)} used but not declared in {ENTRY_KEY}")
    unused = sorted(set(declared) - used)
    if unused:
        raise SlotConfigError(f"{where}: {ENTRY_KEY} declares {', '.join(unused)}, used in no env or args")
    if not used:
        return plain, None
    info = tuple(declared[name] for name in sorted(declared))
    return plain, Slots(tuple(env_slots), tuple(indices), info)
