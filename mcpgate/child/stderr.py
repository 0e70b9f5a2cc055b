"""Where a child's stderr goes: the gateway's log (MCPGATE_CHILD_STDERR=inherit), nowhere (discard), or a file.

Contract: `open_target(mode)` is what Popen's stderr is (a pipe, or DEVNULL) and the file opened for it (None
but for a file path; the caller closes it once the child is gone), or ChildSpawnError when that file cannot be
opened. `lines(fd)` reads the pipe until EOF and yields its lines a read at a time, a line past
STDERR_LINE_CAP cut there (a child never holds the reader's memory with one endless line). `emit` writes them
to the file, each prefixed with the child's label, or logs each (at INFO, cut to LOG_TEXT characters). What the
lines mean (an allocation failure past a memory limit) is the supervisor's to decide (child/limits.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import IO, Any

import gevent.subprocess

from mcpgate.child.pipes import read_chunks
from mcpgate.child.spawn import ChildSpawnError

STDERR_LINE_CAP = 64 * 1024
LOG_TEXT = 1000  # stderr characters per log line


def open_target(mode: str) -> tuple[Any, IO[bytes] | None]:
    """Popen's stderr for `mode` ("inherit", "discard" or a file path) and the file opened for it."""
    if mode == "inherit":
        return gevent.subprocess.PIPE, None
    if mode == "discard":
        return gevent.subprocess.DEVNULL, None
    try:
        file = open(mode, "ab", buffering=0)  # noqa: SIM115 - open for the child's life, closed when it is gone
    except OSError as exc:
        raise ChildSpawnError(f"cannot open stderr log file {mode!r}: {exc.strerror or exc}") from exc
    return gevent.subprocess.PIPE, file


def lines(fd: int) -> Iterator[list[bytes]]:
    """The pipe's lines, those of each read together, until EOF (a last line without its newline too)."""
    pending = b""
    for chunk in read_chunks(fd):
        *complete, pending = (pending + chunk).split(b"\n")
        if len(pending) > STDERR_LINE_CAP:
            complete.append(pending)
            pending = b""
        yield complete
    if pending:
        yield [pending]


def emit(lines: list[bytes], file: IO[bytes] | None, log: logging.Logger, label: str) -> None:
    """Lines of the child's stderr to its file (prefixed with its label) or to the log."""
    if file is not None:
        prefix = f"[{label}] ".encode("utf-8", "replace")
        data = b"".join(prefix + line.rstrip(b"\r") + b"\n" for line in lines)
        try:
            file.write(data)
        except OSError as exc:
            log.warning("child[%s] cannot write stderr log: %s", label, exc)
        return
    if not log.isEnabledFor(logging.INFO):
        return
    for line in lines:
        text = line[: LOG_TEXT * 4].decode("utf-8", "replace").rstrip("\r")[:LOG_TEXT]
        log.info("child[%s] stderr: %s", label, text)
