"""`mcpgate-relay URL`: connect a stdio-only MCP host to a remote HTTP MCP server.

main() patches gevent before anything imports requests, sockets or threads, so
every HTTP exchange and both pipes run on greenlets. stdout carries only the
relayed JSON-RPC lines: fd 1 is kept for the writer and then pointed at stderr,
so nothing else (a stray print, a library warning) can reach the host.
"""

from __future__ import annotations

import argparse
import os
import sys

from mcpgate import __version__
from mcpgate.config.declarations import SettingsError, add_arguments
from mcpgate.config.relay_settings import TOKEN_ENV, RelaySettings

DESCRIPTION = """\
Relay a stdio MCP host to a remote MCP server over HTTP. The host launches this
command as if it were a local stdio server; every JSON-RPC message is carried to
URL and back. Requests run concurrently; logs go to stderr only.

The bearer token is read from the environment variable MCPGATE_BEARER_TOKEN
(preferred over -H 'Authorization: ...': command lines show in `ps`) and is never
logged."""

EPILOG = """\
Example host configuration:
  {"command": "mcpgate-relay", "args": ["https://mcp.example.com/mcp"],
   "env": {"MCPGATE_BEARER_TOKEN": "..."}}"""


def build_parser() -> argparse.ArgumentParser:
    """The flags come from mcpgate.config.relay_settings.RelaySettings, where each is declared once."""
    p = argparse.ArgumentParser(
        prog="mcpgate-relay",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p, RelaySettings)
    p.add_argument("--version", action="version", version=f"mcpgate-relay {__version__}")
    return p


def main(argv: list[str] | None = None) -> int:
    import gevent
    from gevent import monkey

    # Each relayed request runs in a greenlet of its own; recording the spawning stack of each (gevent's
    # default, for debugging) cost more CPU than starting the greenlet.
    gevent.config.track_greenlet_tree = False
    # The relay starts no processes, and its only select-style call is urllib3's zero-timeout
    # poll of a pooled connection, which cannot block: the OS poll does that without a trip
    # round the event loop, and leaving subprocess alone keeps its module out of memory.
    monkey.patch_all(select=False, subprocess=False)
    _skip_charset_detection()

    parser = build_parser()
    try:
        args = RelaySettings.from_args(parser.parse_args(argv))
    except SettingsError as exc:
        parser.error(str(exc))
    if args.logout or args.auth_status:  # act on the token store and exit: nothing is relayed
        from mcpgate.relay.oauth import status

        return status.run(args)
    import logging

    from mcpgate.relay import errors
    from mcpgate.relay.eras import EraTransport
    from mcpgate.relay.http_client import HttpClient, HttpOptions
    from mcpgate.relay.pump import PumpOptions, Relay
    from mcpgate.relay.stdio import leftovers
    from mcpgate.relay.transport import Sink

    logging.basicConfig(
        stream=sys.stderr, level=args.log_level.upper(), format="%(asctime)s mcpgate-relay %(levelname)s %(message)s"
    )
    log = logging.getLogger("mcpgate.relay")
    if args.tracing:  # the SDK is imported only then
        from mcpgate.observe import tracing

        tracing.setup(True, "mcpgate-relay")
    if args.bearer_token and any(name.lower() == "authorization" for name, _ in args.header):
        log.warning("both %s and an Authorization header were given; using %s", TOKEN_ENV, TOKEN_ENV)
    http = HttpClient(HttpOptions.from_settings(args), args.url)
    if not args.bearer_token:  # a static token is the user's choice: no OAuth sign-in beside it
        from mcpgate.relay.oauth.session import OAuthSession
        from mcpgate.relay.oauth.store import TokenStore

        http.auth = OAuthSession(args, TokenStore(args.config_dir or None))
    pump = PumpOptions.from_settings(args)

    def transport(sink: Sink) -> EraTransport:
        return EraTransport(args.url, http, sink, era=args.protocol_era, transport_mode=args.transport)

    out_fd = _claim_stdout()
    log.info(
        "relaying stdio to %s (transport %s, protocol era %s)",
        errors.redact(args.url),
        args.transport,
        args.protocol_era,
    )
    try:
        return Relay(transport, pump, in_fd=0, out_fd=out_fd).run()
    finally:
        http.close()
        os.close(out_fd)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("shutdown complete: %d greenlets and %d sockets left", *leftovers())


def _skip_charset_detection() -> None:
    """Keep requests' character-set detector (charset_normalizer or chardet, 2.5 MB resident) out.

    requests uses it only to guess the text encoding of Response.text; the relay reads bytes.
    Since requests 2.32 the detector is optional: a None entry in sys.modules makes its import
    fail, and requests then only warns, which is silenced here.
    """
    import warnings

    for name in ("charset_normalizer", "chardet"):
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    warnings.filterwarnings("ignore", message="Unable to find acceptable character detection dependency")


def _claim_stdout() -> int:
    """Keep the real stdout for the relay's writer; point fd 1 and sys.stdout at stderr."""
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out_fd
