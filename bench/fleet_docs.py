"""The fleet's figures in README.md (the "Figures" item of its fleet section) and deploy/README.md (its "Figures"
section): both written from one run of bench/cluster.py (its bench/out/cluster.json) by
`python bench/report.py --readme`, never by hand. Each document holds them between two marker comments; the
opening one names the run, so the two documents can be seen to quote the same one (tests/test_fleet_figures.py).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

BEGIN = "<!-- fleet figures of the bench/cluster.py run of {when}: written by `python bench/report.py --readme` -->"
END = "<!-- end of the fleet figures -->"
BLOCK = re.compile(
    r"<!-- fleet figures of the bench/cluster\.py run of (?P<when>\S+): written by .*?"
    r"<!-- end of the fleet figures -->",
    re.S,
)
WIDTH = 115  # the documents' line length


def wrap(text: str, indent: str = "") -> str:
    return textwrap.fill(text, WIDTH, subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)


def where(results: dict[str, Any]) -> str:
    machine = results["machine"]
    load = machine.get("load_average")
    under = f", load average {load:.1f} at its start" if load is not None else ""
    return f"`python bench/cluster.py` on a {machine['cpus']}-CPU machine, {results['when'][:10]}{under}"


def per_call(results: dict[str, Any]) -> str:
    lat = results["latency_p50_ms"]
    return (
        f"HAProxy adds {lat['haproxy'] - lat['direct']:.3f} ms per call "
        f"({lat['haproxy']:.3f} vs {lat['direct']:.3f} ms sequential p50); "
        "a call sent to an instance that does not own its session, which forwards it, costs "
        f"{lat['forwarded'] - lat['owner']:.3f} ms more ({lat['forwarded']:.3f} vs {lat['owner']:.3f} ms)"
    )


def calls_at(results: dict[str, Any], label: str, level: int) -> str:
    by = results["throughput"].get(label, {})
    value = by.get(level, by.get(str(level)))
    return "–" if value is None else f"{value:,.0f}"


def readme_item(results: dict[str, Any]) -> str:
    """README.md's "Figures" item, between the markers."""
    at = 16
    labels = ["1 instance, direct", "1 instance, HAProxy", "2 instances, HAProxy", "4 instances, HAProxy"]
    direct, one, two, four = (calls_at(results, label, at) for label in labels)
    text = (
        f"- **Figures** ({where(results)}; every figure in deploy/README.md): {per_call(results)}. Throughput at "
        f"{at} clients: one instance direct {direct} calls/s, behind HAProxy {one}; two instances {two}, four {four}."
    )
    return wrap(text, "  ")


def deploy_section(results: dict[str, Any], table: str) -> str:
    """deploy/README.md's figures, between the markers: where they come from, the tables, the per-call costs."""
    return "\n".join(
        [wrap(where(results) + " (the load clients on the same cores):"), "", table, "", wrap(per_call(results) + ".")]
    )


def block(results: dict[str, Any], body: str) -> str:
    return "\n".join([BEGIN.format(when=results["when"]), body, END])


def replace(text: str, new: str, name: str) -> str:
    if len(BLOCK.findall(text)) != 1:
        raise SystemExit(f"{name}: no single fleet figures block (its markers: {END})")
    return BLOCK.sub(lambda _match: new, text)


def update(root: Path, results: dict[str, Any], table: str) -> list[Path]:
    """Rewrite both documents' blocks from `results` (bench/out/cluster.json); `table`: bench/cluster.py's."""
    written = []
    for path, body in (
        (root / "README.md", readme_item(results)),
        (root / "deploy" / "README.md", deploy_section(results, table)),
    ):
        path.write_text(replace(path.read_text(), block(results, body), str(path)))
        written.append(path)
    return written


def runs_quoted(text: str) -> list[str]:
    """The runs a document's fleet figures blocks name (one, when it is as generated)."""
    return [match.group("when") for match in BLOCK.finditer(text)]
