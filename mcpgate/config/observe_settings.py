"""The settings of what an operator sees of the gateway beyond /metrics (mcpgate.observe): the log lines' format
and the audit log of tool calls, resource reads, prompt gets and sign-ins.

Declarations only (how one works: mcpgate.config.declarations). mcpgate.config.settings assembles `Settings`
from this area and the others, and every reader takes the values from there; the fields' order here is their
order in the README's settings table.
"""

from __future__ import annotations

from dataclasses import dataclass

from mcpgate.config import validators
from mcpgate.config.declarations import declare, positive


@dataclass(frozen=True, init=False, repr=False, eq=False)
class ObserveSettings:
    """The log format and the audit log."""

    log_format: str = declare(
        "plain",
        "plain: one text line per log event; json: one JSON object per line (time, level, logger, message, and "
        "the session, principal and server when known), gunicorn's error and access lines included.",
        choices=("plain", "json"),
    )
    audit_log: str = declare(
        "",
        'The audit log: one JSON line per tool call, resource read, prompt get and sign-in; "-" for stderr or '
        "an absolute file path (each instance of a fleet its own). Empty: none.",
        validate=validators.access_log,
    )
    audit_arguments: bool = declare(
        False,
        "true: audit lines carry the calls' arguments themselves (else only their SHA-256 digest).",
    )
    audit_queue: int = declare(
        10000,
        "Audit lines waiting to be written, and audited calls awaiting their answer, each at most; past it a "
        "line is dropped (counted in the log).",
        validate=positive,
    )
