"""What the gunicorn master says and checks as it starts (mcpgate/gunicorn_config.py's on_starting).

`describe`: the one line saying what is served: the server (MCPGATE_COMMAND, the bundled demo, or MCPGATE_CONFIG's
servers), where, in which eras and to whom (the authentication mode). The command's arguments are left out (they
may carry a secret); at DEBUG the log shows them when a child starts.

`taken`: an address another process listens on, named with the settings that choose it, before gunicorn spends
five seconds retrying it."""

from __future__ import annotations

import errno
import socket
from collections.abc import Sequence

from mcpgate.child.spawn import split_command
from mcpgate.config.modes import AuthMode
from mcpgate.config.settings import Settings


def describe(settings: Settings, binds: Sequence[str]) -> str:
    """For example: serving MCPGATE_COMMAND (npx and 3 arguments) at http://127.0.0.1:8000/mcp; HTTP+SSE at
    /sse; eras: 2026-07-28 on a pool of up to 4 children per caller, 2025 sessions of one child each (at most
    100); auth: none."""
    bases = [address if address.startswith(("unix:", "fd:")) else f"http://{address}" for address in binds]
    if settings.config:
        from mcpgate.serve.servers import config_file  # (the file's reader: only a master serving one loads it)

        names = [entry.name for entry in config_file.load(settings.config).servers]
        what = f"the servers of MCPGATE_CONFIG={settings.config} ({', '.join(names) or 'none'})"
        paths = config_file.paths("<name>")
    else:
        what = _command(settings.command)
        paths = (settings.path, settings.sse_path, settings.messages_path)
    where = ", ".join(base + paths[0] for base in bases)
    fleet = "; in a fleet (REDIS_URL)" if settings.redis_url else ""
    return f"serving {what} at {where}; HTTP+SSE at {paths[1]}; eras: {_eras(settings)}; auth: {_auth(settings)}{fleet}"


def _command(command: str) -> str:
    if not command:
        return "the bundled demo server (MCPGATE_COMMAND is empty)"
    argv = split_command(command)
    more = len(argv) - 1
    return f"MCPGATE_COMMAND ({argv[0]}" + (f" and {more} argument{'s' if more > 1 else ''})" if more else ")")


def _eras(settings: Settings) -> str:
    pool = f"2026-07-28 on a pool of up to {settings.pool_children} children per caller"
    if settings.modern_only:
        return pool + " (MCPGATE_MODERN_ONLY: nothing else)"
    return f"{pool}, 2025 sessions of one child each (at most {settings.max_sessions})"


def _auth(settings: Settings) -> str:
    mode = settings.auth
    if mode is AuthMode.TOKEN:
        return "a bearer token (MCPGATE_AUTH_TOKEN)"
    if mode is AuthMode.EMBEDDED:
        return f"OAuth sign-in at {settings.public_url} (embedded)"
    if mode is AuthMode.RESOURCE_SERVER:
        return f"OAuth access tokens of {settings.oauth_issuer} (resource-server)"
    return "none" + (" (MCPGATE_ALLOW_UNAUTHENTICATED)" if settings.allow_unauthenticated else "")


def taken(binds: Sequence[str], reuse_port: bool = False) -> str | None:
    """Why the gateway cannot listen where it is told to (an address in use), or None. Only TCP addresses are
    tried (gunicorn replaces a stale unix socket itself), with the options gunicorn binds them with (`reuse_port`:
    its SO_REUSEPORT, which lets instances share a port on purpose)."""
    for address in binds:
        if address.startswith(("unix:", "fd:")):
            continue
        host, _, port = address.rpartition(":")
        name = host.strip("[]") or None
        try:
            # an ASCII name as bytes: a str goes through the idna codec, whose modules (stringprep, unicodedata,
            # ~0.3 MB) the master would load for this alone and every worker inherit (issue 24)
            asked = name.encode("ascii") if name is not None and name.isascii() else name
            candidates = socket.getaddrinfo(asked, int(port), type=socket.SOCK_STREAM)
        except (OSError, ValueError):
            continue  # gunicorn says what is wrong with it
        for family, kind, proto, _name, sockaddr in candidates:
            with socket.socket(family, kind, proto) as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
                if reuse_port:
                    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                try:
                    probe.bind(sockaddr)
                except OSError as exc:
                    if exc.errno == errno.EADDRINUSE:
                        return (
                            f"cannot listen on {address}: another process listens there (another gateway?). Choose "
                            "another with MCPGATE_BIND=HOST:PORT (or PORT=N, which binds 0.0.0.0:N; or gunicorn -b)"
                        )
    return None
