"""Small helpers for a child's pipes on the gevent hub: chunked reads, quiet closes, exit descriptions."""

from __future__ import annotations

import fcntl
import os
import signal
from collections.abc import Iterator
from typing import IO

from gevent.hub import get_hub

CHUNK = 64 * 1024


def describe_exit(returncode: int) -> str:
    """ "exited with code N" or "killed by signal NAME"."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        return f"killed by signal {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def close_quietly(stream: IO[bytes] | None) -> None:
    if stream is not None:
        try:
            stream.close()
        except OSError:
            pass


def read_chunks(fd: int) -> Iterator[bytes]:
    """Chunks from a non-blocking fd until EOF, waiting on the hub in between."""
    hub = get_hub()
    watcher = hub.loop.io(fd, 1)
    try:
        more = False
        while True:
            if not more:
                hub.wait(watcher)
            try:
                chunk = os.read(fd, CHUNK)
            except BlockingIOError:
                more = False
                continue
            if not chunk:
                return
            more = len(chunk) == CHUNK
            yield chunk
    finally:
        watcher.close()


GROWN = 1024 * 1024  # a stdout pipe's capacity while a long line is read (Linux's pipe-max-size by default)
_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", None)  # Linux only
_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", None)


def grow_pipe(fd: int) -> int | None:
    """Raise the pipe's capacity to GROWN; its capacity before, or None when it was not raised (not Linux, as
    large already, or past the user's pipe limits: the pipe stays as it was)."""
    if _SETPIPE_SZ is None or _GETPIPE_SZ is None:
        return None
    try:
        before: int = fcntl.fcntl(fd, _GETPIPE_SZ)
        if before >= GROWN:
            return None
        fcntl.fcntl(fd, _SETPIPE_SZ, GROWN)
    except OSError:
        return None
    return before


def shrink_pipe(fd: int, size: int) -> bool:
    """Set the pipe's capacity back to `size`; False when it cannot be now (it holds more than that)."""
    try:
        fcntl.fcntl(fd, _SETPIPE_SZ, size)  # type: ignore[arg-type]  # set whenever grow_pipe returned a size
    except OSError:
        return False
    return True
