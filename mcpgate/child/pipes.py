"""Small helpers for a child's pipes on the gevent hub: chunked reads, quiet closes, exit descriptions."""

from __future__ import annotations

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
