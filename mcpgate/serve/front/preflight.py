"""Checks that run once in the gunicorn master, before any socket is bound: a refusal stops the start, a
problem that may pass (the command's executable is not installed yet) is logged loudly and /healthz reports it."""

from __future__ import annotations

import logging
from collections.abc import Collection

from mcpgate.child.limits import network_problem
from mcpgate.config.modes import AuthMode
from mcpgate.config.settings import Settings
from mcpgate.serve import metrics
from mcpgate.serve.front import auth
from mcpgate.serve.servers.config_file import ConfigError
from mcpgate.serve.servers.published import PublishedServers


def run(settings: Settings, binds: Collection[str], log: logging.Logger) -> str | None:
    """Why the gateway must not start, or None (after logging what the operator should know)."""
    authenticated = settings.auth is not AuthMode.NONE
    refusal = auth.exposure_problem(binds, authenticated, settings.allow_unauthenticated, settings.public_front)
    if refusal:
        return refusal
    exposed = [address for address in binds if not auth.bind_is_local(address)]
    exposed += [auth.PUBLIC_FRONT] if settings.public_front else []
    if settings.metrics and (refusal := metrics.exposure_problem(exposed, settings.metrics_token)):
        return refusal
    if exposed and not authenticated:
        log.warning(
            "mcpgate: serving %s WITHOUT authentication (MCPGATE_ALLOW_UNAUTHENTICATED=true): anyone "
            "who reaches it can run the MCP server",
            ", ".join(exposed),
        )
    try:
        servers = PublishedServers(settings)  # MCPGATE_CONFIG read and checked (nothing is spawned)
    except ConfigError as exc:
        return str(exc)
    no_network = any(server.settings.child_no_network for _, server in servers.items())
    if no_network and (refusal := network_problem()):  # probed once: the worker inherits the answer
        return refusal
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
    return None
