"""How a child is started: the command's words, its executable, its environment, the user it runs as (no I/O
beyond PATH and user database lookups)."""

from __future__ import annotations

import grp
import os
import pwd
import shlex
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mcpgate.child.orphans import preexec_die_with_parent

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


def child_environment(
    extra: dict[str, str], parent: Mapping[str, str] = os.environ, user: ChildUser | None = None
) -> dict[str, str]:
    """The allowlisted part of parent (no exported shell functions; HOME, USER and LOGNAME those of `user` when
    the children run as another user), then extra on top."""
    env = {}
    for name in INHERITED_ENV:
        value = parent.get(name)
        if value is not None and not value.startswith("()"):
            env[name] = value
    if user is not None:
        env.update(HOME=user.home, USER=user.name, LOGNAME=user.name)
    env.update(extra)
    return env


@dataclass(frozen=True)
class ChildUser:
    """Who a child runs as when it is not the gateway's user (MCPGATE_CHILD_USER, MCPGATE_CHILD_GROUP)."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]  # the supplementary groups: the user's own (as a login would give it)
    home: str


def child_user(user: str, group: str = "") -> ChildUser | None:
    """The user (a name or uid) and group (a name or gid; empty: the user's own) the children run as; None when
    `user` is empty. ValueError naming the setting when either is unknown or is root."""
    if not user:
        return None
    try:
        entry = pwd.getpwuid(int(user)) if (user.isascii() and user.isdigit()) else pwd.getpwnam(user)
    except (KeyError, OverflowError):
        raise ValueError(f"MCPGATE_CHILD_USER names no user of this system: {user!r}") from None
    gid = entry.pw_gid
    if group:
        try:
            gid = (
                grp.getgrgid(int(group)).gr_gid if (group.isascii() and group.isdigit()) else grp.getgrnam(group).gr_gid
            )
        except (KeyError, OverflowError):
            raise ValueError(f"MCPGATE_CHILD_GROUP names no group of this system: {group!r}") from None
    if entry.pw_uid == 0 or gid == 0:
        raise ValueError("MCPGATE_CHILD_USER and MCPGATE_CHILD_GROUP must not be root: children would run as root")
    groups = tuple(g for g in os.getgrouplist(entry.pw_name, gid) if g != 0)
    return ChildUser(entry.pw_name, entry.pw_uid, gid, groups, entry.pw_dir)


def run_as(user: ChildUser | None, then: Callable[[], None], parent_pid: int) -> Callable[[], None]:
    """A preexec_fn: `then` (the limits, set while still privileged: namespaces, no_new_privs, rlimits), then
    the groups, the group and the user of `user` for good (real, effective and saved ids). A change of
    credentials clears the parent-death signal, so it is asked for again. `then` itself when `user` is None."""
    if user is None:
        return then
    die_with_parent = preexec_die_with_parent(parent_pid)
    setgroups, setresgid, setresuid = os.setgroups, os.setresgid, os.setresuid
    uid, gid, groups = user.uid, user.gid, list(user.groups)

    def preexec() -> None:  # runs in the forked child before exec: system calls only
        then()
        setgroups(groups)
        setresgid(gid, gid, gid)
        setresuid(uid, uid, uid)
        die_with_parent()

    return preexec
