"""What compiling the request path with mypyc would buy: instructions per call of this checkout's worker, pure
Python against the same source with its hot modules compiled by mypyc (mypy's compiler, installed with the test
extra), under callgrind (bench/instructions.py). A measurement of an option, not a way mcpgate is built or shipped.

    python bench/compiled.py                            # the 2025 and 2026-07-28 paths' default modules
    python bench/compiled.py --kinds 2025 --modules mcpgate/core/framing.py,mcpgate/serve/sessions/session.py

Both trees are copies of this checkout's mcpgate/ taken at the start. A module mypyc refuses (its errors name the
file) is left out and the rest compiled again; what was compiled and what was left out is printed. Modules left
out of the default list, and why: front/connection.py, reading.py and writing.py subclass gevent's pywsgi
classes (a native class cannot; mypyc fails on reading.Body); front/http.py makes an HttpResponse with
object.__new__, which a native class refuses at run time (the gateway answers 500); core/sessions.py subclasses
RuntimeError with an __init__ (unimplemented for a native class); serve/modern/pooled_child.py hands a method of
its own to weakref.WeakMethod, which refuses a native class's method (found on 2026-12-04; other pooled-path
modules compiled with it then failed at run time, not looked into). Each would need `mypyc_attr(native_class=False)`
on those classes, a runtime dependency on mypy_extensions. The modules are compiled with MYPYC_OPT_LEVEL=3, and
`--ignore-missing-imports` (mypy's own configuration in pyproject.toml is not read: its build step would read
the project's metadata too).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The modules a 2025 session's tools/call runs (python bench/walk.py), and the pooled path's own.
DEFAULT_MODULES = (
    "mcpgate/child/process.py",
    "mcpgate/child/stdin.py",
    "mcpgate/child/stdout.py",
    "mcpgate/core/framing.py",
    "mcpgate/core/jsonrpc.py",
    "mcpgate/core/modern.py",
    "mcpgate/core/routing.py",
    "mcpgate/serve/errors.py",
    "mcpgate/serve/front/app.py",
    "mcpgate/serve/front/auth.py",
    "mcpgate/serve/front/bare.py",
    "mcpgate/serve/front/context.py",
    "mcpgate/serve/front/heads.py",
    "mcpgate/serve/front/reply.py",
    "mcpgate/serve/servers/published.py",
    "mcpgate/serve/servers/server.py",
    "mcpgate/serve/sessions/inbound.py",
    "mcpgate/serve/sessions/session.py",
    "mcpgate/serve/sessions/stream.py",
    "mcpgate/serve/sessions/streamable.py",
)

REFUSED = re.compile(r"^(mcpgate/[\w/]+\.py):\d+: error:", re.MULTILINE)


def copy_tree(dest: Path) -> Path:
    shutil.copytree(ROOT / "mcpgate", dest / "mcpgate", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return dest


def compile_modules(tree: Path, modules: list[str]) -> tuple[list[str], list[str]]:
    """Compiles `modules` in `tree` with mypyc; returns (compiled, left out). A module whose source mypyc reports
    an error in is left out and the rest tried again."""
    mypyc = Path(sys.executable).with_name("mypyc")
    if not mypyc.exists():
        raise SystemExit(f"no mypyc beside {sys.executable}: pip install '.[test]' (mypy brings it)")
    left_out: list[str] = []
    todo = list(modules)
    env = dict(os.environ, MYPYC_OPT_LEVEL="3")
    while todo:
        done = subprocess.run(
            [str(mypyc), "--ignore-missing-imports", *todo],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if done.returncode == 0:
            return todo, left_out
        refused = sorted(set(REFUSED.findall(done.stdout + done.stderr)) & set(todo))
        if not refused:
            sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
            raise SystemExit("mypyc failed without naming a module (above)")
        for path in refused:
            print(f"mypyc refused {path}: left out", flush=True)
            todo.remove(path)
            left_out.append(path)
        shutil.rmtree(tree / "build", ignore_errors=True)
    return todo, left_out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modules", help="comma list of paths under the checkout (default: the request path's)")
    parser.add_argument("--kinds", default="2025,2026")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep both trees and print their paths")
    args = parser.parse_args()
    modules = args.modules.split(",") if args.modules else list(DEFAULT_MODULES)
    for path in modules:
        if not (ROOT / path).is_file():
            raise SystemExit(f"no such module: {path}")
    work = Path(tempfile.mkdtemp(prefix="mcpgate-compiled-"))
    try:
        base = copy_tree(work / "base")
        compiled_tree = copy_tree(work / "compiled")
        compiled, left_out = compile_modules(compiled_tree, modules)
        print(f"compiled {len(compiled)} modules; left out: {', '.join(left_out) or 'none'}", flush=True)
        command = [
            sys.executable,
            str(ROOT / "bench" / "instructions.py"),
            "--base",
            str(base),
            "--new",
            str(compiled_tree),
            "--kinds",
            args.kinds,
            "--calls",
            str(args.calls),
            "--rounds",
            str(args.rounds),
            "--pause",
            "0.01",
        ]
        print("$ " + " ".join(command), flush=True)
        return subprocess.run(command, cwd=ROOT, timeout=3600).returncode
    finally:
        if args.keep:
            print(f"trees kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
