"""Checks that run once in the gunicorn master, before any socket is bound: a refusal stops the start, a
problem that may pass (the command's executable is not installed yet) is logged loudly and /healthz reports it.

The servers' checks (MCPGATE_CONFIG read, each command's executable), the metrics' exposure and the embedded
server's users (werkzeug's hashes) need modules the master has no other use for; they run in a process forked for
them alone, so that its modules never load in the master: the
worker imports them after its fork, and they are not counted in both processes' memory (issue 24)."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Collection

from mcpgate.child.limits import network_problem
from mcpgate.config.declarations import SettingsError
from mcpgate.config.modes import AuthMode
from mcpgate.config.settings import Settings
from mcpgate.serve.front import auth

NO_NETWORK = "\0no-network"  # the checker's answer: no refusal, but a server wants MCPGATE_CHILD_NO_NETWORK probed
ANSWER_BYTES = 65536  # a refusal is one line; the checker's answer is read up to this


def run(settings: Settings, binds: Collection[str], log: logging.Logger) -> str | None:
    """Why the gateway must not start, or None (after logging what the operator should know)."""
    authenticated = settings.auth is not AuthMode.NONE
    refusal = auth.exposure_problem(binds, authenticated, settings.allow_unauthenticated, settings.public_front)
    if refusal:
        return refusal
    exposed = [address for address in binds if not auth.bind_is_local(address)]
    exposed += [auth.PUBLIC_FRONT] if settings.public_front else []
    answer = checked_apart(settings, exposed, log)
    if answer != NO_NETWORK and answer is not None:
        return answer
    if exposed and not authenticated:
        log.warning(
            "mcpgate: serving %s WITHOUT authentication (MCPGATE_ALLOW_UNAUTHENTICATED=true): anyone "
            "who reaches it can run the MCP server",
            ", ".join(exposed),
        )
    if answer == NO_NETWORK:  # probed here, not in the checker: the worker inherits the answer
        return network_problem()
    return answer


def checked_apart(settings: Settings, exposed: list[str], log: logging.Logger) -> str | None:
    """The metrics' exposure refusal, a malformed MCPGATE_OAUTH_USERS, else servers_problem's answer, from a forked
    process of its own (it logs what it finds itself). `exposed`: the binds reachable beyond loopback, and the
    public front."""
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the checker: answers through the pipe, never returns
        status = 1
        try:
            os.close(read_end)
            answer = metrics_problem(settings, exposed) or users_problem(settings) or servers_problem(settings, log)
            os.write(write_end, (answer or "").encode()[:ANSWER_BYTES])
            status = 0
        except BaseException:  # told to the master as a failed check, with the traceback logged
            log.exception("mcpgate: the servers' check failed")
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            os._exit(status)
    os.close(write_end)
    chunks = []
    try:
        while chunk := os.read(read_end, ANSWER_BYTES):
            chunks.append(chunk)
    finally:
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return "the servers' check failed (its error is logged above)"
    return b"".join(chunks).decode(errors="replace") or None


def metrics_problem(settings: Settings, exposed: list[str]) -> str | None:
    """Why /metrics must not be served (serve/metrics.py), or None."""
    if not settings.metrics:
        return None
    from mcpgate.serve import metrics

    return metrics.exposure_problem(exposed, settings.metrics_token)


def users_problem(settings: Settings) -> str | None:
    """Why MCPGATE_OAUTH_USERS is refused (serve/oauth/users.py: the message names the user, never the hash), or
    None."""
    if not settings.oauth_users:
        return None
    from mcpgate.serve.oauth import users

    try:
        users.parse(settings.oauth_users)
    except SettingsError as exc:
        return f"invalid setting: {exc}"
    return None


def servers_problem(settings: Settings, log: logging.Logger) -> str | None:
    """MCPGATE_CONFIG read and checked (nothing is spawned), each server's command looked up: the refusal,
    NO_NETWORK when a server's children need a private network namespace, or None."""
    from mcpgate.serve.servers.config_file import ConfigError
    from mcpgate.serve.servers.published import PublishedServers

    try:
        servers = PublishedServers(settings)
    except ConfigError as exc:
        return str(exc)
    for name, server in servers.items():
        problem = server.command_problem()
        if problem and not servers.named:
            log.error(
                "mcpgate: MCPGATE_COMMAND cannot be started: %s. Every initialize will fail with 502 and "
                "/healthz answers 503 until it can.",
                problem,
            )
        elif problem:
            log.error(
                "mcpgate: server %s of MCPGATE_CONFIG cannot be started: %s. Its initializes will fail with 502 "
                "until it can.",
                name,
                problem,
            )
    no_network = any(server.settings.child_no_network for _, server in servers.items())
    return NO_NETWORK if no_network else None
