"""The MRTR continuation machine (core/continuation.py, ~15 frozen dataclasses: ~200 KB of a worker's heap) is
imported where a pooled call first asks its client for input (serve/modern/bridge.py), not with the pool: a worker
whose calls never ask holds none of it. Each case imports what a worker serving the 2026-07-28 path imports, in a
fresh interpreter, and lists which of the machine's modules it holds; the last one asks the bridge for a machine
the way a legacy child's input request does (tests/serve/test_modern_child_2025.py has the whole round over HTTP).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.fast

MACHINE = "mcpgate.core.continuation"

_ASKS = """
from mcpgate.core.jsonrpc import Request
from mcpgate.serve.modern.bridge import Bridge

class Child:  # the bridge's view of a pooled child with no candidate call: the request is refused
    candidate = None
    refused = []
    def refuse(self, *args):
        self.refused.append(args)

child = Child()
Bridge(None, lambda principal: None, 30.0, lambda: 0.0).on_input_request(
    child, Request(method="elicitation/create", id=1, params={}, obj={}))
assert child.refused, "no refusal"
"""

CASES = [
    ("the endpoint and the pool", "import mcpgate.serve.front.app, mcpgate.serve.modern.stateless", False),
    ("the bridge itself", "import mcpgate.serve.modern.bridge, mcpgate.serve.modern.pool", False),
    ("a child's input request", _ASKS, True),
]


@pytest.mark.parametrize(("what", "code", "held"), CASES, ids=[case[0] for case in CASES])
def test_the_machine_is_imported_when_a_call_asks(what: str, code: str, held: bool) -> None:
    script = f"{code}\nimport json, sys\nprint(json.dumps({MACHINE!r} in sys.modules))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) is held, what
