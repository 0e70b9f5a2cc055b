"""The gateway's worker puts msgspec's decoder in front of json's (mcpgate/fast_json.py, from the app factory).
The decode itself is held to json's, text by text, in tests/core/test_json_codec.py; here, that the factory
installs it (each check in a fresh interpreter, so no test's state decides it). The relay keeps json's alone:
msgspec brings decimal and typing_extensions into a process kept small (tests/test_lazy_imports.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

INSTALLED = "from mcpgate.core import jsonrpc; assert jsonrpc._FAST is not None, 'json alone'; print('installed')"

CASES = {
    "json alone until a process installs it": ("import mcpgate.core.jsonrpc", False),
    "the gateway's app factory": (
        "from mcpgate.config.settings import Settings; from mcpgate.serve.front.app import create_app; "
        "create_app(Settings.from_env({}))",
        True,
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_decoder_installed_by(case: str, tmp_path: Path) -> None:
    code, installed = CASES[case]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCPGATE_", "REDIS_URL"))}
    env.update(HOME=str(tmp_path), XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"))
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\n{INSTALLED}"], env=env, capture_output=True, text=True, timeout=60
    )
    assert (done.returncode == 0 and done.stdout.strip().endswith("installed")) is installed, done.stderr[-2000:]
    if not installed:
        assert "json alone" in done.stderr


def test_installed_decoder_keeps_json_verdicts() -> None:
    """Through the process's installation, what msgspec refuses is still json's to decide (a lone surrogate kept,
    NaN refused with json's message)."""
    code = (
        "from mcpgate import fast_json; from mcpgate.core import jsonrpc; fast_json.install(); "
        'm = jsonrpc.parse(b\'{"jsonrpc":"2.0","id":1,"method":"x","params":{"s":"\\\\ud800"}}\'); '
        "assert m.params == {'s': '\\ud800'}, m; "
        'bad = jsonrpc.parse(b\'{"jsonrpc":"2.0","id":1,"method":"x","params":{"n":NaN}}\'); '
        "assert bad.reason == 'Parse error: NaN is not JSON', bad; print('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


LOADS = {  # a msgspec's own import: what it needs of typing_extensions -> loaded, and typing_extensions with it
    "tolerates its absence (msgspec's own way)": (
        "try:\n    import typing_extensions\nexcept ImportError:\n    pass\n",
        False,
    ),
    "needs it (a later release, say)": ("import typing_extensions\n", True),
}


@pytest.mark.parametrize("case", LOADS)
def test_msgspec_loads_with_or_without_typing_extensions(case: str, tmp_path: Path) -> None:
    """fast_json holds typing_extensions out of msgspec's import; a msgspec that cannot load without it is loaded
    again with it, so the gateway starts either way (a stand-in package on the path first plays msgspec)."""
    source, kept = LOADS[case]
    package = tmp_path / "msgspec"
    package.mkdir()
    (package / "__init__.py").write_text(f"{source}from msgspec import json\n")
    (package / "json.py").write_text("LOADED = True\n")
    code = (
        "import sys; from mcpgate import fast_json; assert fast_json.msgspec.json.LOADED; "
        "print('typing_extensions' in sys.modules and sys.modules['typing_extensions'] is not None)"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(kept)
