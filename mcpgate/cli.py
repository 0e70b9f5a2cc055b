"""`mcpgate`: what the project is, the two commands that run it, and every setting (`mcpgate settings`).

The gateway itself runs under gunicorn (`gunicorn mcpgate.wsgi`) and the relay as `mcpgate-relay`; this command
only points to them, so that `--help` has somewhere to live beside gunicorn's own, which knows no MCPGATE_ setting.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mcpgate import __version__

DESCRIPTION = """\
mcpgate: a gateway between stdio MCP servers and MCP over HTTP.

Serve a stdio MCP server over HTTP (Streamable HTTP at /mcp, both protocol eras, HTTP+SSE at /sse):
  MCPGATE_COMMAND="npx -y @modelcontextprotocol/server-filesystem /srv" gunicorn mcpgate.wsgi
  (from the project root, whose gunicorn.conf.py sets the worker; anywhere else:
   gunicorn -c python:mcpgate.gunicorn_config mcpgate.wsgi). Without MCPGATE_COMMAND it serves a demo server.

Relay a host that only starts stdio servers to a remote HTTP MCP server:
  mcpgate-relay https://mcp.example.com/mcp      (mcpgate-relay --help lists its options)

The gateway's settings are MCPGATE_* environment variables (gunicorn --help knows none of them):
`mcpgate settings` prints every one with its default and meaning, as the README's Settings section does.
"""


def print_settings() -> int:
    """Every setting of the gateway, then the relay's options (the README's two tables)."""
    from mcpgate.config import settings

    print(settings.markdown_table())
    print()
    print(settings.relay_markdown_table())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcpgate", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"mcpgate {__version__}")
    commands = parser.add_subparsers(dest="command", title="commands", metavar="COMMAND")
    commands.add_parser(
        "settings",
        help="print every setting: the gateway's variables, then the relay's options (default, meaning)",
        description="Print every setting: the gateway's MCPGATE_* variables, then mcpgate-relay's options.",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "settings":
        return print_settings()
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
