"""How a child is started: the command's words, its executable, its environment (no I/O beyond PATH lookups)."""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Mapping

INHERITED_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")


class ChildSpawnError(RuntimeError):
    """The child's executable could not be resolved or executed."""


def split_command(command: str) -> list[str]:
    """Split a command line by POSIX shell-word rules (no shell is ever run)."""
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"cannot parse command {command!r}: {exc}") from None
    if not argv:
        raise ValueError("command is empty")
    return argv


def resolve_executable(argv0: str, path: str) -> str:
    """argv0 resolved against the given PATH; ChildSpawnError when missing or not executable."""
    found = shutil.which(argv0, path=path)
    if found is not None:
        return found
    has_dir = os.sep in argv0
    for candidate in [argv0] if has_dir else [os.path.join(d or ".", argv0) for d in path.split(os.pathsep)]:
        if os.path.isfile(candidate):
            raise ChildSpawnError(f"command not executable: {argv0!r} ({candidate} lacks execute permission)")
    raise ChildSpawnError(f"command not found: {argv0!r}" + ("" if has_dir else f" (searched PATH={path})"))


def child_environment(extra: dict[str, str], parent: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The allowlisted part of parent (no exported shell functions), then extra on top."""
    env = {}
    for name in INHERITED_ENV:
        value = parent.get(name)
        if value is not None and not value.startswith("()"):
            env[name] = value
    env.update(extra)
    return env
