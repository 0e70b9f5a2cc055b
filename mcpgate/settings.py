"""Every setting of the gateway, declared once: name, environment variable, type, default, doc, validator.

The README's settings table is generated from SETTINGS (`python -m mcpgate.settings`)
and a test fails when the two disagree.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Mapping

MiB = 1024 * 1024


class SettingsError(ValueError):
    """A setting's value is invalid; the message names the environment variable."""


@dataclass(frozen=True)
class Setting:
    name: str
    type: str  # str, int, float, list, json, choice
    default: Any
    doc: str
    validate: Callable[[Any], str | None] | None = None

    @property
    def env(self) -> str:
        return "MCPGATE_" + self.name.upper()


def _positive(value: Any) -> str | None:
    return None if value > 0 else "must be greater than 0"


def _non_negative(value: Any) -> str | None:
    return None if value >= 0 else "must be 0 or more"


def _command(value: str) -> str | None:
    if not value:
        return None
    try:
        return None if shlex.split(value) else "must name a program"
    except ValueError as exc:
        return f"is not valid shell-word syntax ({exc})"


def _path(value: str) -> str | None:
    return None if value.startswith("/") and value != "/" and " " not in value else "must start with / (for example /mcp)"


def _stderr(value: str) -> str | None:
    return None if value in ("inherit", "discard") or value.startswith("/") else \
        'must be "inherit", "discard" or an absolute file path'


def _env_object(value: Any) -> str | None:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return 'must be a JSON object of strings, for example {"API_URL": "https://..."}'
    return None


def _log_level(value: str) -> str | None:
    return None if value.upper() in ("DEBUG", "INFO", "WARNING", "ERROR") else "must be DEBUG, INFO, WARNING or ERROR"


SETTINGS: tuple[Setting, ...] = (
    Setting("command", "str", "", "The stdio MCP server to run, split with POSIX shell-word rules and run without a "
            "shell. Empty: the bundled demo server.", _command),
    Setting("cwd", "str", "", "Working directory of the child. Empty: the gateway's own."),
    Setting("child_env", "json", {}, "Extra environment variables for the child, as a JSON object. Only HOME, "
            "LOGNAME, PATH, SHELL, TERM and USER are inherited otherwise.", _env_object),
    Setting("pass_env", "list", [], "Comma-separated names of the gateway's environment variables to pass to the "
            "child (for secrets the child needs)."),
    Setting("stderr", "str", "inherit", 'Child stderr: "inherit" (logged line by line with the session id), '
            '"discard", or an absolute file path to append to.', _stderr),
    Setting("path", "str", "/mcp", "The Streamable HTTP endpoint path.", _path),
    Setting("allowed_hosts", "list", [], "Comma-separated Host values accepted besides loopback names (for example "
            "myapp.herokuapp.com); * accepts any Host."),
    Setting("allowed_origins", "list", [], "Comma-separated Origin values accepted besides loopback origins (for "
            "example https://claude.ai); * accepts any Origin."),
    Setting("auth_token", "str", "", "When set, every request to the MCP endpoint must carry Authorization: Bearer "
            "<this token> (401 otherwise). Never logged, never passed to the child."),
    Setting("max_sessions", "int", 100, "Most concurrent sessions (each is one child process); past it, 503.",
            _positive),
    Setting("session_idle_ttl", "float", 1800.0, "Seconds a session may stay idle before its child is stopped.",
            _positive),
    Setting("max_body_bytes", "int", 8 * MiB, "Largest POST body accepted (413 past it).", _positive),
    Setting("max_message_bytes", "int", 8 * MiB, "Largest message line a child may write; past it the session "
            "closes.", _positive),
    Setting("write_queue_bytes", "int", 16 * MiB, "Most unwritten bytes queued for one child's stdin; past it the "
            "session closes.", _positive),
    Setting("buffer_messages", "int", 1000, "Messages held per session for a client with no stream open (oldest "
            "dropped past it).", _positive),
    Setting("stream_queue", "int", 1000, "Messages queued for one open HTTP stream before the gateway waits for "
            "the client to read.", _positive),
    Setting("sse_after", "float", 10.0, "Seconds a request may go unanswered before its reply switches to SSE "
            "with keepalives.", _non_negative),
    Setting("keepalive", "float", 15.0, "Seconds between SSE keepalive comments.", _positive),
    Setting("close_timeout", "float", 2.0, "Seconds to wait after closing a child's stdin before SIGTERM.",
            _non_negative),
    Setting("term_timeout", "float", 2.0, "Seconds to wait after SIGTERM before SIGKILL.", _non_negative),
    Setting("log_level", "str", "INFO", "Log level: DEBUG logs each message's direction, session, method and id.",
            _log_level),
)

BY_NAME = {setting.name: setting for setting in SETTINGS}


def _convert(setting: Setting, text: str) -> Any:
    if setting.type == "int":
        return int(text.strip())
    if setting.type == "float":
        return float(text.strip())
    if setting.type == "list":
        return [item.strip() for item in text.split(",") if item.strip()]
    if setting.type == "json":
        return json.loads(text)
    return text.strip()


class Settings:
    """Validated values, read from the environment or given as keyword overrides (tests)."""

    def __init__(self, environ: Mapping[str, str] | None = None, **overrides: Any) -> None:
        environ = os.environ if environ is None else environ
        unknown = set(overrides) - set(BY_NAME)
        if unknown:
            raise SettingsError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        for setting in SETTINGS:
            if setting.name in overrides:
                value = overrides[setting.name]
            elif setting.env in environ:
                try:
                    value = _convert(setting, environ[setting.env])
                except ValueError as exc:
                    raise SettingsError(f"{setting.env}: expected {setting.type}, got "
                                        f"{environ[setting.env]!r} ({exc})") from None
            else:
                value = setting.default
            problem = setting.validate(value) if setting.validate else None
            if problem:
                raise SettingsError(f"{setting.env} {problem} (got {value!r})")
            setattr(self, setting.name, value)

    def __getattr__(self, name: str) -> Any:  # typed access for the linters; values are set in __init__
        raise AttributeError(name)


def markdown_table() -> str:
    """The README's settings table."""
    rows = ["| Variable | Default | Meaning |", "| --- | --- | --- |"]
    for setting in SETTINGS:
        default = setting.default
        shown = "(empty)" if default in ("", [], {}) else f"`{default}`"
        rows.append(f"| `{setting.env}` | {shown} | {setting.doc} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
