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
from urllib.parse import urlsplit

TOKEN_ENV = "MCPGATE_BEARER_TOKEN"
TRANSPORTS = ("auto", "streamable-http", "sse")
LOG_LEVELS = ("debug", "info", "warning", "error")

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


def _header(value: str) -> tuple[str, str]:
    name, sep, rest = value.partition(":")
    name = name.strip()
    if not sep or not name or any(ch.isspace() or ord(ch) < 0x21 or ord(ch) > 0x7E for ch in name):
        raise argparse.ArgumentTypeError(f"expected 'Name: value', got {value!r}")
    rest = rest.strip()
    if "\r" in rest or "\n" in rest:
        raise argparse.ArgumentTypeError("a header value must not contain CR or LF")
    return name, rest


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


def _url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL, got {text!r}")
    return text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mcpgate-relay", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url", type=_url, metavar="URL",
                   help="the remote MCP endpoint, e.g. https://mcp.example.com/mcp (Streamable HTTP) "
                        "or https://host/sse (HTTP+SSE)")
    p.add_argument("-H", "--header", action="append", type=_header, default=[], metavar="'NAME: VALUE'",
                   help="an extra HTTP header sent with every request; repeatable")
    p.add_argument("--transport", choices=TRANSPORTS, default="auto",
                   help="auto (default): Streamable HTTP, falling back to HTTP+SSE when the server refuses "
                        "the initialize POST with 400/404/405; streamable-http or sse: only that one")
    p.add_argument("--connect-timeout", type=_positive_float, default=10.0, metavar="SECONDS",
                   help="limit for opening a connection (default 10)")
    p.add_argument("--read-timeout", type=_positive_float, default=300.0, metavar="SECONDS",
                   help="longest silence tolerated while waiting for reply bytes; the GET stream simply "
                        "reconnects after it (default 300)")
    p.add_argument("--log-level", choices=LOG_LEVELS, default="warning",
                   help="stderr log verbosity (default warning)")
    p.add_argument("--no-cancel-filter", action="store_true",
                   help="on notifications/cancelled, only forward it: keep the request's reply open and pass "
                        "a late reply to the host (default: close the reply and drop late replies for 60 s)")
    p.add_argument("--max-message-bytes", type=_positive_int, default=16 * 1024 * 1024, metavar="BYTES",
                   help="largest message accepted from the host or the upstream (default 16 MiB); a larger "
                        "one is answered with a JSON-RPC error")
    p.add_argument("--max-inflight", type=_positive_int, default=64, metavar="N",
                   help="requests relayed at the same time; more are refused with an error (default 64)")
    p.add_argument("--shutdown-grace", type=_positive_float, default=3.0, metavar="SECONDS",
                   help="on stdin EOF or SIGINT/SIGTERM, how long in-flight replies may still arrive (default 3)")
    return p


def main(argv: list[str] | None = None) -> int:
    from gevent import monkey

    # The relay starts no processes, and its only select-style call is urllib3's zero-timeout
    # poll of a pooled connection, which cannot block: the OS poll does that without a trip
    # round the event loop, and leaving subprocess alone keeps its module out of memory.
    monkey.patch_all(select=False, subprocess=False)
    _skip_charset_detection()

    args = build_parser().parse_args(argv)
    import logging

    from mcpgate.relay import errors
    from mcpgate.relay.http_client import HttpClient, HttpOptions
    from mcpgate.relay.pump import PumpOptions, Relay, leftovers
    from mcpgate.relay.transport import AutoTransport, Sink

    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(),
                        format="%(asctime)s mcpgate-relay %(levelname)s %(message)s")
    log = logging.getLogger("mcpgate.relay")
    headers = dict(args.header)
    token = os.environ.get(TOKEN_ENV) or None
    if token is not None and not _token_ok(token):
        log.error("%s holds characters a bearer token cannot have (whitespace or control characters)", TOKEN_ENV)
        return 2
    if token and any(name.lower() == "authorization" for name in headers):
        log.warning("both %s and an Authorization header were given; using %s", TOKEN_ENV, TOKEN_ENV)
        headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
    http = HttpClient(HttpOptions(
        connect_timeout=args.connect_timeout, read_timeout=args.read_timeout, headers=headers,
        bearer_token=token, max_message_bytes=args.max_message_bytes, pool_size=args.max_inflight + 8), args.url)
    pump = PumpOptions(max_message_bytes=args.max_message_bytes, max_inflight=args.max_inflight,
                       cancel_filter=not args.no_cancel_filter, shutdown_grace=args.shutdown_grace)

    def transport(sink: Sink) -> AutoTransport:
        return AutoTransport(args.url, http, sink, args.transport)

    out_fd = _claim_stdout()
    log.info("relaying stdio to %s (transport %s)", errors.redact(args.url), args.transport)
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


def _token_ok(token: str) -> bool:
    """RFC 6750 b64token characters (plus the usual visible ASCII) and nothing else."""
    return all(0x21 <= ord(ch) <= 0x7E for ch in token)


def _claim_stdout() -> int:
    """Keep the real stdout for the relay's writer; point fd 1 and sys.stdout at stderr."""
    sys.stdout.flush()
    out_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out_fd
