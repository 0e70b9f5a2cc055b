"""How mcpgate declares a setting: once, as a dataclass field carrying its type, default, environment variable
or command-line flag, one-line doc and validator (gunicorn's `Setting` declares its options the same way).

From the declarations come the values (`load`: the environment, checked, one message naming the variable;
`unknown_variables`: what looks like a setting and is none), the relay's argument parser (`add_arguments`) and
the README's tables (`markdown_table`). The settings themselves are declared in the area modules
mcpgate.config.*_settings and assembled in mcpgate.config.settings.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

MiB = 1024 * 1024

Validator = Callable[[Any], "str | None"]
S = TypeVar("S")


class SettingsError(ValueError):
    """A setting's value is invalid; the message names the environment variable or flag."""


@dataclass(frozen=True)
class Setting:
    """What is declared about one setting (built from a dataclass field by `declared`)."""

    name: str
    kind: str  # str, int, float, bool, list, json
    default: Any
    doc: str
    env: str | None = None  # the environment variable that sets it
    flag: str | None = None  # the relay's command-line flag ("url" for the positional argument)
    short: str | None = None  # a one-letter alias of the flag
    validate: Validator | None = None
    item: Callable[[str], Any] | None = None  # converts one element of a list setting
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    shown_default: str | None = None  # how the README shows the default, when not the plain value
    secret: bool = False  # its value never appears in a message

    @property
    def source(self) -> str:
        """How a user sets it, as messages name it."""
        if self.env:
            return self.env
        return self.flag if self.flag and self.flag.startswith("-") else (self.flag or self.name).upper()


def declare(
    default: Any,
    doc: str,
    *,
    env: str | None = "",
    flag: str | None = None,
    short: str | None = None,
    validate: Validator | None = None,
    item: Callable[[str], Any] | None = None,
    choices: tuple[str, ...] = (),
    metavar: str | None = None,
    shown_default: str | None = None,
    secret: bool = False,
) -> Any:
    """A dataclass field carrying its declaration. env "" means MCPGATE_<NAME>; None means no variable."""
    meta = {
        "doc": doc,
        "env": env,
        "flag": flag,
        "short": short,
        "validate": validate,
        "item": item,
        "choices": choices,
        "metavar": metavar,
        "shown_default": shown_default,
        "secret": secret,
    }
    if isinstance(default, dict):
        return field(default_factory=lambda: dict(default), metadata=meta)
    return field(default=default, metadata=meta)


def _kind(default: Any) -> str:
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, (int, float, str)):
        return type(default).__name__
    return "list" if isinstance(default, tuple) else "json"


def declared(cls: type) -> tuple[Setting, ...]:
    """The declarations of a settings dataclass, in field order."""
    out = []
    for f in dataclasses.fields(cls):
        meta = dict(f.metadata)
        default = f.default_factory() if callable(f.default_factory) else f.default
        if meta["env"] == "":
            meta["env"] = "MCPGATE_" + f.name.upper()
        out.append(Setting(name=f.name, kind=_kind(default), default=default, **meta))
    return tuple(out)


def convert(setting: Setting, text: str) -> Any:
    """The typed value of a setting given as text (ValueError with the reason)."""
    if setting.kind == "int":
        return int(text.strip())
    if setting.kind == "float":
        return float(text.strip())
    if setting.kind == "bool":
        word = text.strip().lower()
        if word in ("1", "true", "yes", "on"):
            return True
        if word in ("", "0", "false", "no", "off"):
            return False
        raise ValueError("expected true or false")
    if setting.kind == "list":
        items = [part.strip() for part in text.split(",") if part.strip()]
        return tuple(setting.item(part) for part in items) if setting.item else tuple(items)
    if setting.kind == "json":
        return json.loads(text)
    return text.strip()


def check(setting: Setting, value: Any) -> None:
    """SettingsError naming the setting when its value is invalid."""
    if setting.choices and value not in setting.choices:
        raise SettingsError(f"{setting.source} must be one of {', '.join(setting.choices)} (got {value!r})")
    problem = setting.validate(value) if setting.validate else None
    if problem:
        shown = "" if setting.secret else f" (got {value!r})"
        raise SettingsError(f"{setting.source} {problem}{shown}")


def load(cls: type[S], environ: Mapping[str, str] | None = None, **overrides: Any) -> S:
    """A settings object from the environment, with keyword overrides (tests); every value checked."""
    environ = os.environ if environ is None else environ
    settings = declared(cls)
    unknown = set(overrides) - {s.name for s in settings}
    if unknown:
        raise SettingsError(f"unknown setting(s): {', '.join(sorted(unknown))}")
    values: dict[str, Any] = {}
    for setting in settings:
        if setting.name in overrides:
            value = overrides[setting.name]
        elif setting.env and setting.env in environ:
            try:
                value = convert(setting, environ[setting.env])
            except ValueError as exc:
                shown = "" if setting.secret else f", got {environ[setting.env]!r} ({exc})"
                raise SettingsError(f"{setting.env}: expected {setting.kind}{shown}") from None
        else:
            value = setting.default
        check(setting, value)
        values[setting.name] = value
    made = cls(**values)
    problem = getattr(made, "problem", lambda: None)()
    if problem:
        raise SettingsError(problem)
    return made


def unknown_variables(environ: Mapping[str, str], known: Collection[str], prefix: str) -> list[str]:
    """One line per variable named like a setting (it starts with `prefix`) that no declaration reads, with the
    nearest known name when one is close: a mistyped setting is otherwise silently ignored."""
    lines: list[str] = []
    names = sorted(name for name in environ if name.startswith(prefix) and name not in known)
    if not names:
        return lines
    import difflib  # only for a name that is no setting: every gunicorn master asks, and difflib is 140 KB

    # compared without the prefix, which every candidate shares (PORT and REDIS_URL, which lack it, as they are)
    by_stem = {name.removeprefix(prefix): name for name in known}
    for name in names:
        near = difflib.get_close_matches(name.removeprefix(prefix), sorted(by_stem), n=1)
        lines.append(f"{name} is not a setting" + (f" (did you mean {by_stem[near[0]]}?)" if near else ""))
    return lines


# -- validators ---------------------------------------------------------------------------------------------


def positive(value: Any) -> str | None:
    return None if value > 0 else "must be greater than 0"


def non_negative(value: Any) -> str | None:
    return None if value >= 0 else "must be 0 or more"


# -- the command line --------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser, cls: type) -> None:
    """One argparse argument per declared flag, converted and validated by the declaration."""
    for setting in declared(cls):
        if not setting.flag:
            continue
        names = ([setting.short] if setting.short else []) + [setting.flag]
        kwargs: dict[str, Any] = {"help": setting.doc + _default_note(setting)}
        if setting.kind == "bool":
            kwargs["action"] = "store_true"
            if setting.env:  # unset on the command line: the variable (or the default) decides
                kwargs["default"] = None
        else:
            kwargs["type"] = _argument_type(setting)
            if setting.choices:
                kwargs["choices"] = setting.choices
            if setting.metavar:
                kwargs["metavar"] = setting.metavar
        if setting.kind == "list":
            kwargs.update(action="append", default=[])
        elif setting.flag.startswith("-"):
            # a flag that also has a variable: absent (None) unless given, so the variable is read
            kwargs["default"] = None if setting.env else setting.default
        if setting.flag.startswith("-"):
            kwargs["dest"] = setting.name
        parser.add_argument(*names, **kwargs)


def _argument_type(setting: Setting) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = (
                setting.item(text)
                if setting.kind == "list" and setting.item
                else convert(dataclasses.replace(setting, kind="str" if setting.kind == "list" else setting.kind), text)
            )
            if setting.kind != "list":
                check(setting, value)
        except (ValueError, SettingsError) as exc:
            message = str(exc).removeprefix(setting.source + " ")
            raise argparse.ArgumentTypeError(message) from None
        return value

    parse.__name__ = setting.kind  # argparse names it in "invalid <type> value"
    return parse


def _default_note(setting: Setting) -> str:
    if setting.kind in ("bool", "list") or not setting.flag or not setting.flag.startswith("-"):
        return ""
    return f" (default {shown_default(setting)})"


# -- documentation ------------------------------------------------------------------------------------------


def shown_default(setting: Setting) -> str:
    if setting.shown_default is not None:
        return setting.shown_default
    default = setting.default
    if default in ("", (), {}):
        return "(empty)"
    if setting.kind == "bool":
        return "false" if not default else "true"
    if setting.kind == "int" and default >= MiB and default % MiB == 0:
        return f"{default} ({default // MiB} MiB)"
    return str(default)


def markdown_table(cls: type, first_column: str) -> str:
    """A README table of a settings class: how each is set, its default, its doc."""
    rows = [f"| {first_column} | Default | Meaning |", "| --- | --- | --- |"]
    for setting in declared(cls):
        if not setting.flag:
            name = setting.env or setting.name
        elif not setting.flag.startswith("-"):
            name = setting.source
        else:
            name = f"{setting.short}, {setting.flag}" if setting.short else setting.flag
        rows.append(f"| `{name}` | {_code(shown_default(setting))} | {setting.doc} |")
    return "\n".join(rows)


def _code(text: str) -> str:
    return text if text.startswith("(") else f"`{text}`"
