"""Issue 20, finding 19: the dependency floors are past the known advisories, and CI installs exact versions.

pyproject.toml's floors allowed Werkzeug, requests and Authlib releases with published advisories (and other
runtime dependencies too); nothing pinned what CI installed. Now each floor is at or past the release that fixed
the advisories known for it (the table below), constraints.txt pins every package '.[test]' pulls in, each pin
satisfies the floors, and .ci/run installs with it.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.support import ROOT


def load_generator() -> ModuleType:
    """scripts/constraints.py, which writes constraints.txt (a script, not a package: loaded from its file)."""
    spec = importlib.util.spec_from_file_location("mcpgate_constraints_script", ROOT / "scripts" / "constraints.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generator = load_generator()

CONSTRAINTS = ROOT / "constraints.txt"
PIN = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!-]+)")

# The release that fixed the last advisory known for each runtime dependency (pyproject.toml says which).
FIXED = {
    "gevent": "23.9.0",
    "gunicorn": "23.0.0",
    "flask": "3.1.3",
    "werkzeug": "3.1.6",
    "jinja2": "3.1.6",
    "requests": "2.33.0",
    "urllib3": "2.7.0",
    "authlib": "1.9.0",
    "joserfc": "1.7.6",
    "cryptography": "47.0.0",
}


def requirements() -> dict[str, Requirement]:
    return {canonicalize_name(r.name): r for r in generator.roots(ROOT / "pyproject.toml")}


def pins() -> dict[str, Version]:
    found: dict[str, Version] = {}
    for number, line in enumerate(CONSTRAINTS.read_text().splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        match = PIN.fullmatch(text)
        assert match, f"constraints.txt:{number}: not an exact pin: {line!r}"
        name = canonicalize_name(match["name"])
        assert name not in found, f"constraints.txt:{number}: {name} pinned twice"
        found[name] = Version(match["version"])
    return found


def floor(requirement: Requirement) -> Version | None:
    """The lowest version the requirement allows (its >= or == bound), None when it has none."""
    bounds = [Version(spec.version) for spec in requirement.specifier if spec.operator in (">=", "==", "~=")]
    return max(bounds) if bounds else None


@pytest.mark.parametrize("name", sorted(FIXED))
def test_each_floor_is_past_the_known_advisories(name: str) -> None:
    requirement = requirements().get(name)
    assert requirement is not None, f"{name} is a runtime dependency: pyproject.toml must set its floor"
    lowest = floor(requirement)
    assert lowest is not None and lowest >= Version(FIXED[name]), f"{requirement} allows releases before {FIXED[name]}"


def test_every_requirement_is_pinned_and_every_pin_satisfies_its_floor() -> None:
    pinned = pins()
    for name, requirement in requirements().items():
        assert name in pinned, f"{name} has no pin in constraints.txt (python scripts/constraints.py > constraints.txt)"
        satisfied = requirement.specifier.contains(pinned[name], prereleases=True)
        assert satisfied, f"constraints.txt pins {name}=={pinned[name]}, pyproject.toml asks {requirement}"


def test_the_pins_cover_everything_the_test_extra_installs() -> None:
    """What '.[test]' pulls into this environment is all pinned (names: a local upgrade is not a failure)."""
    installed = generator.closure(generator.roots(ROOT / "pyproject.toml"))
    missing = sorted(set(installed) - set(pins()))
    assert not missing, f"not in constraints.txt: {missing} (python scripts/constraints.py > constraints.txt)"


def test_ci_installs_with_the_constraints() -> None:
    script = (ROOT / ".ci" / "run").read_text()
    installs = [line for line in script.splitlines() if "pip install" in line and "[test]" in line]
    assert installs and all("-c constraints.txt" in line for line in installs), installs
    assert Path(CONSTRAINTS).is_file()
