"""A real browser (Debian's Chromium) and a page of another origin for it."""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest


def chromium() -> str:
    """Chromium's path; missing, the test is skipped naming the package (or fails under CI: .ci/run installs it)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (.ci/run installs Debian's chromium package)")
        pytest.skip("needs Debian's chromium package (apt-get install chromium)")
    return found


@contextlib.contextmanager
def static_site(directory: Path) -> Iterator[int]:
    """A static file server of `directory` on a free loopback port (another origin, for a browser's page) for a
    `with` block: yields its port."""
    handler = lambda *args: http.server.SimpleHTTPRequestHandler(*args, directory=str(directory))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
