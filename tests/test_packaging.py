"""The sdist and wheel build cleanly, and the wheel alone, in a fresh virtual environment, runs both commands and
serves the demo with gunicorn from that environment (the end user's route: `python -m build`, then
`pipx install dist/mcpgate-*.whl` or `pip install dist/mcpgate-*.whl`).

pyproject.toml is the one source of metadata; setup.py (a shim) and setup.cfg (no section) stay for the tools that
look for them. `pip install .`, `pip install -e .` (each into a throwaway virtual environment, without the
dependencies: what is checked is what the build takes from pyproject.toml) and `pip wheel` all get the name,
version, scripts and the sign-in pages' templates from it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import venv
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

import mcpgate
from tests.support import ROOT, assert_serves_the_demo, init_body

SCRIPTS = {  # [project.scripts]
    "mcpgate": "mcpgate.cli:main",
    "mcpgate-relay": "mcpgate.relay.cli:main",
    "mcpgate-demo-server": "mcpgate.demo_server:main",
}
TEMPLATES = "mcpgate/serve/oauth/templates"  # [tool.setuptools.package-data]: the sign-in and consent pages
# what the installed distribution says about itself, printed by its own Python
DESCRIBE = """
import importlib.metadata as m, importlib.util as u, json, os
d = m.distribution("mcpgate")
root = os.path.dirname(u.find_spec("mcpgate").origin)
print(json.dumps({
    "name": d.metadata["Name"], "version": d.version, "requires_python": d.metadata["Requires-Python"],
    "scripts": {e.name: e.value for e in d.entry_points if e.group == "console_scripts"},
    "templates": sorted(os.listdir(os.path.join(root, "serve", "oauth", "templates"))),
    "package": root,
}))
"""

# setuptools' "WARNING `project.license` ..." with its "!!" banner, "SetuptoolsDeprecationWarning: ...",
# distutils' "warning: ..."
WARNING = re.compile(r"warning\b|^!!$", re.IGNORECASE | re.MULTILINE)


@dataclass
class Dist:
    sdist: Path
    wheel: Path
    log: str


@dataclass
class Installed:
    python: Path
    bin: Path
    cwd: Path  # outside the checkout, so `import mcpgate` finds the installed package only


def _run(
    args: list[str | Path], cwd: Path, timeout: float = 120, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(arg) for arg in args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """`python -m build`: the sdist from the checkout, then the wheel from the unpacked sdist."""
    out = tmp_path_factory.mktemp("dist")
    # with bytecode writing off, setuptools warns that it skips byte-compiling: not the project's warning
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    result = _run([sys.executable, "-m", "build", "--outdir", out, ROOT], cwd=ROOT, timeout=600, env=env)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    sdists, wheels = list(out.glob("mcpgate-*.tar.gz")), list(out.glob("mcpgate-*-py3-none-any.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, log
    return Dist(sdists[0], wheels[0], log)


@pytest.fixture(scope="module")
def installed(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    home = tmp_path_factory.mktemp("wheel-venv")
    venv.create(home / "venv", with_pip=True)
    python = home / "venv" / "bin" / "python"
    result = _run([python, "-m", "pip", "install", "--quiet", dist.wheel], cwd=home, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    (home / "work").mkdir()
    return Installed(python, python.parent, home / "work")


def test_build_prints_no_warning(dist: Dist) -> None:
    assert not WARNING.findall(dist.log), dist.log


def test_sdist_carries_what_a_build_needs_and_no_tests(dist: Dist) -> None:
    with tarfile.open(dist.sdist) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"pyproject.toml", "README.md", "LICENSE", "PKG-INFO", "setup.py", "setup.cfg"} <= names
    package = {str(path.relative_to(ROOT)) for path in (ROOT / "mcpgate").rglob("*.py")}
    assert package <= names, package - names
    assert not [name for name in names if name.startswith("tests/")]


def test_wheel_holds_the_package_and_its_metadata(dist: Dist) -> None:
    with zipfile.ZipFile(dist.wheel) as wheel:
        names = wheel.namelist()
        info = next(name.split("/")[0] for name in names if name.endswith(".dist-info/METADATA"))
        metadata = wheel.read(f"{info}/METADATA").decode()
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()
    assert {name.split("/")[0] for name in names} == {"mcpgate", info}
    assert f"{info}/licenses/LICENSE" in names
    assert "License-Expression: MIT" in metadata and "License ::" not in metadata
    assert "Requires-Python: >=3.10" in metadata
    requires = re.findall(r"^Requires-Dist: ([^;\n]+)$", metadata, re.MULTILINE)  # runtime ones: no marker
    assert sorted(requires) == [
        "authlib>=1.9.0",
        "cryptography>=47.0.0",
        "flask>=3.1.3",
        "gevent>=23.9",
        "gunicorn[gevent]>=23.0",
        "jinja2>=3.1.6",
        "joserfc>=1.7.6",
        "msgspec>=0.21",
        "prometheus-client>=0.20",
        "redis>=5",
        "requests>=2.33.0",
        "urllib3>=2.7.0",
        "werkzeug>=3.1.6",
    ]
    assert "mcpgate-relay = mcpgate.relay.cli:main" in entry_points
    assert "mcpgate-demo-server = mcpgate.demo_server:main" in entry_points


def test_the_installed_package_is_the_wheel_not_the_checkout(installed: Installed) -> None:
    result = _run([installed.python, "-c", "import mcpgate; print(mcpgate.__file__)"], cwd=installed.cwd)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).is_relative_to(installed.python.parent.parent), result.stdout


def test_relay_help_from_the_script_and_the_module(installed: Installed) -> None:
    commands: list[list[str | Path]] = [
        [installed.bin / "mcpgate-relay", "--help"],
        [installed.python, "-m", "mcpgate.relay", "--help"],
    ]
    for args in commands:
        result = _run(args, cwd=installed.cwd)
        assert result.returncode == 0 and "usage:" in result.stdout, result.stdout + result.stderr


def test_mcpgate_and_demo_server_scripts_print_their_help(installed: Installed) -> None:
    shown = _run([installed.bin / "mcpgate", "--help"], cwd=installed.cwd)
    assert shown.returncode == 0 and "gunicorn mcpgate.wsgi" in shown.stdout, shown.stdout + shown.stderr
    listed = _run([installed.bin / "mcpgate", "settings"], cwd=installed.cwd)
    assert listed.returncode == 0 and "| `MCPGATE_COMMAND` |" in listed.stdout, listed.stdout + listed.stderr
    demo = _run([installed.bin / "mcpgate-demo-server", "--help"], cwd=installed.cwd, stdin="")
    assert demo.returncode == 0 and "usage: mcpgate-demo-server" in demo.stdout, demo.stdout + demo.stderr


def test_demo_server_script_answers_initialize(installed: Installed) -> None:
    result = _run([installed.bin / "mcpgate-demo-server"], cwd=installed.cwd, stdin=json.dumps(init_body()) + "\n")
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout.splitlines()[0])
    assert reply["id"] == 1 and reply["result"]["serverInfo"]["name"] == "mcpgate-demo", result.stdout


def test_gunicorn_from_the_wheel_venv_serves_the_demo(installed: Installed) -> None:
    # outside the checkout there is no gunicorn.conf.py: the settings are named, as the README says
    assert_serves_the_demo(str(installed.python), installed.cwd, config="python:mcpgate.gunicorn_config")


def templates_in_the_tree() -> list[str]:
    return sorted(path.name for path in (ROOT / TEMPLATES).glob("*.html"))


@pytest.mark.parametrize("editable", [False, True], ids=["pip install .", "pip install -e ."])
def test_pip_install_takes_everything_from_pyproject(tmp_path: Path, editable: bool) -> None:
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    args: list[str | Path] = [python, "-m", "pip", "install", "--quiet", "--no-deps", *(["-e"] if editable else [])]
    result = _run([*args, ROOT], cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    described = _run([python, "-c", DESCRIBE], cwd=tmp_path)
    assert described.returncode == 0, described.stderr
    got = json.loads(described.stdout)
    assert (got["name"], got["version"], got["requires_python"]) == ("mcpgate", mcpgate.__version__, ">=3.10")
    assert got["scripts"] == SCRIPTS and all((python.parent / name).is_file() for name in SCRIPTS)
    assert got["templates"] == templates_in_the_tree() and "login.html" in got["templates"]
    in_checkout = Path(got["package"]).resolve() == (ROOT / "mcpgate").resolve()
    assert in_checkout == editable, got["package"]  # -e: the checkout itself; otherwise a copy in the venv


def test_pip_wheel_takes_everything_from_pyproject(tmp_path: Path) -> None:
    result = _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", tmp_path, ROOT], ROOT, 600)
    assert result.returncode == 0, result.stdout + result.stderr
    [wheel_path] = tmp_path.glob("mcpgate-*-py3-none-any.whl")
    assert wheel_path.name.startswith(f"mcpgate-{mcpgate.__version__}-"), wheel_path.name
    with zipfile.ZipFile(wheel_path) as wheel:
        names = wheel.namelist()
        info = next(name.split("/")[0] for name in names if name.endswith(".dist-info/METADATA"))
        metadata = wheel.read(f"{info}/METADATA").decode()
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()
    assert f"Name: mcpgate\nVersion: {mcpgate.__version__}\n" in metadata
    scripts = dict(line.split(" = ", 1) for line in entry_points.splitlines() if " = " in line)
    assert scripts == SCRIPTS, entry_points
    shipped = sorted(name.rsplit("/", 1)[1] for name in names if name.startswith(TEMPLATES + "/"))
    assert shipped == templates_in_the_tree(), shipped


def test_setup_py_and_setup_cfg_hold_no_metadata_of_their_own() -> None:
    """pyproject.toml stays the one source: the shim only calls setup(), and setup.cfg has no section."""
    shim = (ROOT / "setup.py").read_text()
    assert "setup()" in shim and "setup(" not in shim.replace("setup()", ""), shim
    config = (ROOT / "setup.cfg").read_text()
    assert not [line for line in config.splitlines() if line.strip() and not line.lstrip().startswith("#")], config
