"""The relay keeps to portable APIs: desktop users run it on macOS and Windows.

The relay is run end to end in a process where the POSIX-only modules cannot be imported (as on
Windows), so an unguarded import anywhere on its path fails the run; gevent then offers no pipe
waiting either, so the relay takes the path it takes on Windows (blocking pipe calls in native
threads). What the process loaded is then checked: nothing of the gateway side (serve, child
processes, gunicorn, Flask).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.relay import INITIALIZED, ScriptedServer, explain_stderr, initialize

# Modules that exist only on POSIX systems (Linux, macOS): absent on Windows. (`posix` itself is left alone:
# it is the os module's own half here, and the standard library asks os.name before importing it.)
POSIX_ONLY = ("fcntl", "termios", "tty", "pty", "resource", "grp", "pwd", "syslog", "_posixsubprocess", "_posixshmem")
# Modules that belong to the gateway (or Linux-only machinery) and have no business in the relay.
NOT_THE_RELAYS = (
    "mcpgate.child.orphans",
    "mcpgate.child.process",
    "mcpgate.child.pipes",
    "mcpgate.child.spawn",
    "mcpgate.serve",
    "mcpgate.wsgi",
    "mcpgate.gunicorn_config",
    "gunicorn",
    "flask",
    "werkzeug",
)

# argv: the file to write the loaded module names to, then the relay's arguments.
RELAY_WITHOUT_POSIX = f"""\
import json, sys
for name in {POSIX_ONLY!r}:
    sys.modules[name] = None  # importing it now raises ImportError, as on Windows
from mcpgate.relay.cli import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as out:
    json.dump(sorted(name for name, module in sys.modules.items() if module is not None), out)
sys.exit(code)
"""


def test_the_relay_runs_without_posix_only_modules(raw_relay: Any, tmp_path: Path) -> None:
    loaded_file = tmp_path / "modules.json"
    with ScriptedServer() as server:
        relay = raw_relay(server.url, "--log-level", "debug", launch=("-c", RELAY_WITHOUT_POSIX, str(loaded_file)))
        relay.send(initialize(1))
        assert relay.read_reply(1)["result"]["serverInfo"]["name"] == "scripted"
        relay.send(INITIALIZED, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert relay.read_reply(2)["result"] == {"echo": "tools/list"}
        code, rest, stderr = relay.finish()
    assert code == 0 and rest == [], explain_stderr(stderr)
    assert "read and written in native threads" in stderr, explain_stderr(stderr)  # the Windows path was taken
    loaded = json.loads(loaded_file.read_text())
    assert [name for name in loaded if name in POSIX_ONLY] == []
    strays = [name for name in loaded if any(name == bad or name.startswith(bad + ".") for bad in NOT_THE_RELAYS)]
    assert strays == [], strays
