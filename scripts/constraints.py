"""Print constraints.txt: an exact pin for every package that '.[test]' pulls in, at the version installed here.

Run it in the virtual environment the project was installed into with its test extra, after upgrading what
should be upgraded, and write its output over constraints.txt:

    python -m pip install --upgrade -e '.[test]' && python scripts/constraints.py > constraints.txt

The closure is read from the installed packages' metadata (their Requires-Dist, markers evaluated for this
interpreter and the extras asked for), starting from pyproject.toml's dependencies and its test extra. CI
installs with `pip install -c constraints.txt '.[test]'`; tests/security/test_dependency_floors.py checks that
every pin satisfies pyproject.toml's floors and that no dependency is left unpinned.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest's own dependency
    import tomli as tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
HEADER = (
    "# Exact versions CI installs (.ci/run: pip install -c constraints.txt '.[test]'); every one satisfies the\n"
    "# floors of pyproject.toml. Regenerate with: python scripts/constraints.py > constraints.txt\n"
)


def roots(pyproject: Path = ROOT / "pyproject.toml") -> list[Requirement]:
    """pyproject.toml's dependencies and its test extra."""
    project = tomllib.loads(pyproject.read_text())["project"]
    return [Requirement(text) for text in (*project["dependencies"], *project["optional-dependencies"]["test"])]


def closure(start: list[Requirement]) -> dict[str, str]:
    """Every installed distribution `start` needs, by canonical name, with its installed version."""
    found: dict[str, tuple[str, set[str]]] = {}
    todo = list(start)
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        version, extras = found.get(name, ("", set()))
        if version and set(requirement.extras) <= extras:
            continue
        try:
            distribution = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            raise SystemExit(f"{requirement.name} is not installed: install the project with its test extra") from None
        extras = extras | set(requirement.extras)
        found[name] = (distribution.version, extras)
        environments = [{"extra": extra} for extra in ("", *extras)]
        for text in distribution.requires or ():
            needed = Requirement(text)
            if needed.marker is None or any(needed.marker.evaluate(env) for env in environments):
                todo.append(needed)
    return {name: version for name, (version, _) in found.items()}


def main() -> int:
    pins = closure(roots())
    sys.stdout.write(HEADER + "".join(f"{name}=={version}\n" for name, version in sorted(pins.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
