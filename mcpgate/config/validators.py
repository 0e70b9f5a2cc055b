"""The validators of mcpgate's settings: each takes a converted value and returns None or what is wrong with it
(said after the variable's name: "MCPGATE_CWD must name an existing directory"); `header` converts one
`-H 'Name: value'` of the relay."""

from __future__ import annotations

import ipaddress
import os
import shlex
from typing import Any
from urllib.parse import urlsplit

from mcpgate.config.modes import AuthMode


def command(value: str) -> str | None:
    if not value:
        return None
    try:
        return None if shlex.split(value) else "must name a program"
    except ValueError as exc:
        return f"is not valid shell-word syntax ({exc})"


def directory(value: str) -> str | None:
    return None if not value or os.path.isdir(value) else "must name an existing directory"


def path(value: str) -> str | None:
    return (
        None if value.startswith("/") and value != "/" and " " not in value else "must start with / (for example /mcp)"
    )


def stderr(value: str) -> str | None:
    return (
        None
        if value in ("inherit", "discard") or value.startswith("/")
        else 'must be "inherit", "discard" or an absolute file path'
    )


def env_object(value: Any) -> str | None:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return 'must be a JSON object of strings, for example {"API_URL": "https://..."}'
    return None


def log_level(value: str) -> str | None:
    return None if value.upper() in ("DEBUG", "INFO", "WARNING", "ERROR") else "must be DEBUG, INFO, WARNING or ERROR"


def networks(value: tuple[str, ...]) -> str | None:
    for entry in value:
        try:
            ipaddress.ip_network(entry, strict=False)
        except ValueError:
            return f"must list IP addresses or networks (for example 10.0.0.0/8), not {entry!r}"
    return None


def bind(value: str) -> str | None:
    if not value:
        return None
    if value.startswith("unix:"):
        return None if len(value) > 5 else "must name a socket path after unix:"
    host, sep, port = value.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        return "must be HOST:PORT (for example 127.0.0.1:8000) or unix:PATH"
    return None


def port(value: int) -> str | None:
    return None if 0 <= value < 65536 else "must be a TCP port (1-65535)"


def access_log(value: str) -> str | None:
    return None if value in ("", "-") or value.startswith("/") else 'must be "-" (stderr) or an absolute file path'


def url(value: str) -> str | None:
    parts = urlsplit(value)
    return None if parts.scheme in ("http", "https") and parts.netloc else "must be an http:// or https:// URL"


def optional_url(value: str) -> str | None:
    return None if value == "" else url(value)


def auth_mode(value: str) -> str | None:
    return (
        None
        if value == "" or value in {mode.value for mode in AuthMode}
        else ("must be none, token, resource-server or embedded (empty: chosen from the other settings)")
    )


def instance_id(value: str) -> str | None:
    ok = len(value) <= 32 and all(ch.isascii() and (ch.isalnum() or ch in "-_") for ch in value)
    return None if ok else "must be at most 32 letters, digits, - or _"


def header(text: str) -> tuple[str, str]:
    name, sep, rest = text.partition(":")
    name = name.strip()
    if not sep or not name or any(ch.isspace() or ord(ch) < 0x21 or ord(ch) > 0x7E for ch in name):
        raise ValueError(f"expected 'Name: value', got {text!r}")
    rest = rest.strip()
    if "\r" in rest or "\n" in rest:
        raise ValueError("a header value must not contain CR or LF")
    return name, rest


def token(value: str) -> str | None:
    """RFC 6750 b64token characters (plus the usual visible ASCII) and nothing else."""
    return (
        None
        if all(0x21 <= ord(ch) <= 0x7E for ch in value)
        else "holds characters a bearer token cannot have (whitespace or control characters)"
    )


STATE_KEY_CHARS = 32


def state_key(value: str) -> str | None:
    """Empty, or long enough to be a key (the value itself is never shown)."""
    if not value or len(value) >= STATE_KEY_CHARS:
        return None
    return f"must be at least {STATE_KEY_CHARS} characters (secrets.token_urlsafe(32) makes one)"
