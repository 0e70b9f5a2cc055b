"""Issue 20, finding 17: the relay prints the authorization URL on the user's terminal; a malicious authorization
server's metadata must not smuggle terminal escapes into it (a hidden OSC 8 hyperlink, a cleared screen, a
rewritten line), and the browser must get the URL the user was shown.

A real relay (`python -m mcpgate.relay --oauth`) signs in against a scripted server on loopback whose
authorization server metadata names an authorization_endpoint full of escape sequences; its stderr and the URL
its BROWSER command receives are read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tests.support.relay import Scripted as ScriptedReply
from tests.support.relay import ScriptedServer, Seen, initialize, json_reply, stop_process, wait_for

HANG_GUARD = 60.0
ESCAPES = "\x1b]8;;https://evil.example/\x07\x1b[2J\x1b[1A\x1b]0;title\x07\u202e\x9b31m"
RECORDER = "import sys, pathlib\npathlib.Path(sys.argv[1]).write_text(sys.argv[2], encoding='utf-8')\n"


def route(seen: Seen, server: ScriptedServer) -> ScriptedReply:
    base = f"http://127.0.0.1:{server.port}"
    if seen.method == "POST" and seen.path == "/mcp":
        challenge = f'Bearer resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"'
        return ScriptedReply(401, {"WWW-Authenticate": challenge, "Content-Length": "0"}, [])
    if seen.path == "/.well-known/oauth-protected-resource/mcp":
        return json_reply({"resource": f"{base}/mcp", "authorization_servers": [base]})
    if seen.path == "/.well-known/oauth-authorization-server":
        return json_reply(
            {
                "issuer": base,
                "authorization_endpoint": f"{base}/authorize{ESCAPES}",
                "token_endpoint": f"{base}/token",
                "response_types_supported": ["code"],
                "code_challenge_methods_supported": ["S256"],
            }
        )
    return ScriptedReply(404, {"Content-Length": "0"}, [])


def unprintable(text: str) -> list[str]:
    return sorted({repr(ch) for ch in text if not ch.isprintable() and ch not in "\n"})


def test_the_authorization_url_reaches_the_terminal_and_the_browser_without_escapes(tmp_path: Path) -> None:
    opened = tmp_path / "opened-url"
    recorder = tmp_path / "recorder.py"
    recorder.write_text(RECORDER)
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MCPGATE_BEARER_TOKEN")}
    env["BROWSER"] = f"{sys.executable} {recorder} {opened} %s"
    with ScriptedServer(route) as server:
        args = ["--oauth", "--oauth-client-id", "relay-test", "--config-dir", str(tmp_path / "config")]
        proc = subprocess.Popen(
            [sys.executable, "-m", "mcpgate.relay", f"http://127.0.0.1:{server.port}/mcp", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        lines: list[str] = []
        reader = threading.Thread(target=read_lines, args=(proc, lines), daemon=True)
        try:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(initialize(1)).encode() + b"\n")
            proc.stdin.flush()
            reader.start()
            wait_for(lambda: opened.exists() and printed_url(lines), HANG_GUARD)
        finally:
            stop_process(proc)
            reader.join(10)
    url = printed_url(lines)
    stderr = "".join(lines)
    assert url is not None, stderr[-3000:]
    assert url.startswith(f"http://127.0.0.1:{server.port}/authorize"), url
    assert unprintable(stderr) == [], stderr[-3000:]
    assert opened.exists(), f"the BROWSER command was not run\n{stderr[-3000:]}"
    assert opened.read_text(encoding="utf-8") == url  # the browser gets the URL the user was shown


def read_lines(proc: subprocess.Popen[Any], lines: list[str]) -> None:
    """The relay's stderr into `lines` as it comes, until it closes (decoded as it is, escapes and all)."""
    assert proc.stderr is not None
    for raw in iter(proc.stderr.readline, b""):
        lines.append(raw.decode("utf-8", errors="replace"))


def printed_url(lines: list[str]) -> str | None:
    """The URL on the line after 'to sign in, open this URL in a browser:' (None until it is printed)."""
    snapshot = list(lines)
    for index, line in enumerate(snapshot[:-1]):
        if "to sign in, open this URL in a browser:" in line:
            return snapshot[index + 1].strip()
    return None
