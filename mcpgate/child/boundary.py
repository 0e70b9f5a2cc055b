"""The gateway's side of the child boundary: what a child (an MCP server anyone signed in may drive) must not
reach of the gateway, whether it runs as the gateway's user or as MCPGATE_CHILD_USER.

- `undumpable()`: PR_SET_DUMPABLE 0, so no process of the same user may read this one's /proc/<pid>/environ,
  mem or maps, or ptrace it (Linux; elsewhere nothing). gunicorn_config calls it in the master when the
  configuration loads and in each worker after the fork; a child is dumpable again after its exec, which is
  fine: its environment is an allowlist (mcpgate.child.spawn).
- `scrub(environ, *copies)`: the secret settings' variables (every declaration with secret=True) taken out of
  the worker's environment once its settings are read, and blanked in the process's initial environment block
  too (what /proc/<pid>/environ shows). The master keeps them in its own, non-dumpable, environment: a worker it
  starts again (after a crash or a HUP) reads its settings from the environment it inherits.
- `start_problem(settings)`: MCPGATE_CHILD_USER needs root and a known user that is not root, and the state
  directory private to the gateway's user (0700, its own); refused at start with one line.
- `state_exposure(settings)`: the warning when the embedded authorization server's secrets are kept where the
  children can read them (MCPGATE_STATE_KEY unset).
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import MutableMapping
from urllib.parse import urlsplit

from mcpgate.child.limits import PR_SET_DUMPABLE
from mcpgate.child.orphans import _libc_prctl
from mcpgate.child.spawn import child_user
from mcpgate.config.declarations import declared
from mcpgate.config.modes import AuthMode
from mcpgate.config.settings import Settings

# /proc/<pid>/stat fields after the ")" that ends the command name, counted from 0 (field 3, the state, is 0):
# env_start and env_end are fields 50 and 51 of proc(5)'s 1-based list of 52
_ENV_START, _ENV_END = 50 - 3, 51 - 3


def undumpable() -> bool:
    """Make this process unreadable to other processes of its user; False where that is not possible."""
    prctl = _libc_prctl()
    return prctl is not None and int(prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0


def secret_variables() -> tuple[str, ...]:
    """The environment variables of the gateway's secret settings."""
    return tuple(s.env for s in declared(Settings) if s.secret and s.env)


def scrub(environ: MutableMapping[str, str], *copies: MutableMapping[str, str]) -> list[str]:
    """Take the secret settings' variables out of `environ` (os.environ: the C environment too) and of the
    other `copies` (gunicorn keeps one), and blank them in the initial environment block; the names taken."""
    names = [name for name in secret_variables() if name in environ]
    for name in names:
        del environ[name]
    for copy in copies:
        for name in secret_variables():
            copy.pop(name, None)
    _blank_initial_environment({name.encode() for name in secret_variables()})
    return names


def _blank_initial_environment(names: set[bytes]) -> None:
    """Overwrite with zeros the NAME=value strings of `names` in the block the kernel shows as
    /proc/self/environ (nothing points at them once they left the C environment). Linux only."""
    try:
        with open("/proc/self/stat", "rb") as status:
            fields = status.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[_ENV_START]), int(fields[_ENV_END])
    except (OSError, IndexError, ValueError):
        return
    if not 0 < start < end:
        return
    offset = start
    for entry in ctypes.string_at(start, end - start).split(b"\0"):
        if entry.partition(b"=")[0] in names:
            ctypes.memset(offset, 0, len(entry))
        offset += len(entry) + 1


def start_problem(settings: Settings) -> str | None:
    """Why the gateway must not start with this MCPGATE_CHILD_USER, or None."""
    if not settings.child_user:
        return None
    if os.geteuid() != 0:
        return (
            f"MCPGATE_CHILD_USER needs the gateway to run as root (it runs as uid {os.geteuid()}): start it as "
            "root, or unset MCPGATE_CHILD_USER and set MCPGATE_STATE_KEY"
        )
    try:
        child_user(settings.child_user, settings.child_group)
    except ValueError as exc:
        return str(exc)
    if settings.auth is AuthMode.EMBEDDED and not settings.redis_url:
        from mcpgate.config.paths import default_state_dir

        return private_directory_problem(settings.state_dir or default_state_dir())
    return None


def private_directory_problem(path: str) -> str | None:
    """Why `path` (made 0700 when missing) is not a directory only the gateway's user may enter, or None."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.stat(path)
    except OSError as exc:
        return f"MCPGATE_STATE_DIR {path} cannot be made: {exc.strerror or exc}"
    mode = stat.S_IMODE(info.st_mode)
    if info.st_uid == os.geteuid() and not mode & 0o077:
        return None
    return (
        f"with MCPGATE_CHILD_USER, MCPGATE_STATE_DIR {path} must be the gateway's alone (mode 0700, owner uid "
        f"{os.geteuid()}; it has mode {mode:04o}, owner uid {info.st_uid}): chmod 700 {path}"
    )


def state_exposure(settings: Settings) -> str | None:
    """The warning to log at start when the embedded authorization server keeps its signing and cookie keys in
    the clear where a child could read them, or None."""
    if settings.auth is not AuthMode.EMBEDDED or settings.state_key:
        return None
    where = "Redis" if settings.redis_url else "MCPGATE_STATE_DIR"
    if not settings.child_user:
        why = "the children run as the gateway's user"
    elif settings.redis_url and not urlsplit(settings.redis_url).password:
        why = "Redis asks no password"
    else:
        return None
    return (
        f"MCPGATE_STATE_KEY is not set, so the embedded authorization server's signing key and cookie key are not "
        f"sealed where they are kept ({where}), and {why}: a child that reads them can sign tokens for any user. "
        "Set MCPGATE_STATE_KEY (or run as root with MCPGATE_CHILD_USER)"
    )
