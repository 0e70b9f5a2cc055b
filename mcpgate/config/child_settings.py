"""The settings of the children (mcpgate.child; a named server's per-server settings override some): what runs
(MCPGATE_COMMAND, or the servers of MCPGATE_CONFIG), in which directory and environment, which of its tools the
clients see, the limits it runs under and the user it runs as, the bounds of its pipes, and how it is stopped.

Declarations only (how one works: mcpgate.config.declarations). mcpgate.config.settings assembles `Settings`
from this area and the others, and every reader takes the values from there; the fields' order here is their
order in the README's settings table.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpgate.config import validators
from mcpgate.config.declarations import MiB, declare, non_negative, positive


@dataclass(frozen=True, init=False, repr=False, eq=False)
class ChildSettings:
    """What runs as a child, how, and within which limits."""

    command: str = declare(
        "",
        "The stdio MCP server to run, split with POSIX shell-word rules and run without a "
        "shell. Empty: the bundled demo server.",
        validate=validators.command,
    )
    cwd: str = declare(
        "", "Working directory of the child; must exist. Empty: the gateway's own.", validate=validators.directory
    )
    child_env: dict[str, str] = declare(
        {},
        "Extra environment variables for the child, as a JSON object. Only "
        "HOME, LOGNAME, PATH, SHELL, TERM and USER are inherited otherwise.",
        validate=validators.env_object,
    )
    pass_env: tuple[str, ...] = declare(
        (),
        "Comma-separated names of the gateway's environment variables to pass "
        "to the child (for secrets the child needs).",
    )
    stderr: str = declare(
        "inherit",
        'Child stderr: "inherit" (logged line by line with the session id), '
        '"discard", or an absolute file path to append to.',
        validate=validators.stderr,
    )
    config: str = declare(
        "",
        'A JSON file in the format desktop hosts use ({"mcpServers": {"<name>": {"command", "args", "env", '
        '"cwd", "mcpgate": {per-server settings}}}}): each server is published at /servers/<name>/mcp. '
        "Empty: MCPGATE_COMMAND alone, at MCPGATE_PATH.",
    )
    config_poll: float = declare(
        2.0,
        "Seconds between checks of MCPGATE_CONFIG for changes; a changed file adds, replaces and removes "
        "servers without touching the sessions of unchanged ones. 0: read it only at start.",
        validate=non_negative,
    )
    tools_allow: tuple[str, ...] = declare(
        (),
        "Comma-separated tool names the clients may see and call; empty: all. Others vanish from tools/list "
        "and a call to one is refused.",
    )
    tools_deny: tuple[str, ...] = declare(
        (),
        "Comma-separated tool names hidden from clients (after MCPGATE_TOOLS_ALLOW): gone from tools/list, "
        "a call refused with a JSON-RPC error.",
    )
    child_cpu_seconds: int = declare(
        0, "CPU seconds a child may use (RLIMIT_CPU); past it, it is ended. 0: no limit.", validate=non_negative
    )
    child_memory_bytes: int = declare(
        0,
        "Address space a child may map (RLIMIT_AS), in bytes; a child past it is ended. 0: no limit.",
        validate=non_negative,
    )
    child_open_files: int = declare(
        0, "Open files a child may hold (RLIMIT_NOFILE). 0: inherited.", validate=non_negative
    )
    child_processes: int = declare(
        0,
        "Processes a child's process group may hold (itself included); past it, the child is ended. 0: no limit.",
        validate=non_negative,
    )
    child_no_network: bool = declare(
        False,
        "true: children run in a private network namespace with no network at all (refused at start where "
        "the kernel does not allow it unprivileged).",
    )
    child_user: str = declare(
        "",
        "Run every child as this user (a name or uid; not root), so it cannot read the gateway's memory, "
        "environment or state directory. Needs the gateway to run as root (checked at start); the state "
        "directory must then be 0700 and the gateway's. Empty: children run as the gateway's user.",
    )
    child_group: str = declare(
        "", "With MCPGATE_CHILD_USER: the children's group (a name or gid; not root). Empty: the user's own."
    )
    request_timeout: float = declare(
        0.0,
        "Longest a single request may run, in seconds; past it the child is ended through the stop ladder and "
        "its waiting requests are answered with an error naming the limit. 0: no limit.",
        validate=non_negative,
    )
    max_message_bytes: int = declare(
        8 * MiB, "Largest message line a child may write; past it the session closes.", validate=positive
    )
    write_queue_bytes: int = declare(
        16 * MiB, "Most unwritten bytes queued for one child's stdin; past it the session closes.", validate=positive
    )
    close_timeout: float = declare(
        2.0, "Seconds to wait after closing a child's stdin before SIGTERM.", validate=non_negative
    )
    term_timeout: float = declare(2.0, "Seconds to wait after SIGTERM before SIGKILL.", validate=non_negative)
