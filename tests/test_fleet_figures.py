"""The fleet's figures come from one run, written into both documents (issue 27): README.md and deploy/README.md
each hold one generated block naming the same bench/cluster.py run, every figure the README quotes is in
deploy/README.md's block, and bench/fleet_docs.py writes both blocks from one results file."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))  # the bench's own modules, as bench/report.py imports them

import cluster  # noqa: E402
import fleet_docs  # noqa: E402

DOCS = (ROOT / "README.md", ROOT / "deploy" / "README.md")
FIGURE = re.compile(r"\d[\d,]*\.\d+|\d{1,3}(?:,\d{3})+")  # 0.044, 6,756: the figures, not the dates or counts


def block_of(text: str) -> str:
    [match] = fleet_docs.BLOCK.finditer(text)
    return match.group(0)


def check_agree(readme: str, deploy: str) -> None:
    runs = {doc: fleet_docs.runs_quoted(text) for doc, text in (("README.md", readme), ("deploy/README.md", deploy))}
    assert all(len(found) == 1 for found in runs.values()), runs
    assert runs["README.md"] == runs["deploy/README.md"], runs
    quoted = set(FIGURE.findall(block_of(readme)))
    assert quoted, block_of(readme)
    assert quoted <= set(FIGURE.findall(block_of(deploy))), (quoted, block_of(deploy))


def test_both_documents_quote_one_run() -> None:
    readme, deploy = (doc.read_text() for doc in DOCS)
    check_agree(readme, deploy)
    assert "0.078" not in readme + deploy and "3,140" not in readme + deploy  # the second, older run is gone


def test_one_results_file_writes_both_blocks(tmp_path: Path) -> None:
    (tmp_path / "deploy").mkdir()
    for doc in DOCS:
        shutil.copy(doc, tmp_path / doc.relative_to(ROOT))
    results = {
        "when": "2030-01-02T03:04:05+00:00",
        "machine": {"cpus": 8, "load_average": 0.25},
        "throughput": {
            "1 instance, direct": {"16": 9001.0, "64": 9100.0},
            "1 instance, HAProxy": {"16": 8000.0, "64": 8100.0},
            "2 instances, HAProxy": {"16": 12000.0, "64": 15000.0},
            "4 instances, HAProxy": {"16": 20000.0, "64": 26000.0},
        },
        "errors": {},
        "latency_p50_ms": {"direct": 0.2, "haproxy": 0.25, "owner": 0.21, "forwarded": 0.5},
    }
    fleet_docs.update(tmp_path, results, cluster.table(results))
    readme, deploy = ((tmp_path / doc.relative_to(ROOT)).read_text() for doc in DOCS)
    check_agree(readme, deploy)
    assert fleet_docs.runs_quoted(readme) == ["2030-01-02T03:04:05+00:00"]
    assert "9,001" in block_of(readme) and "+0.050" in block_of(deploy) and "load average 0.2" in block_of(deploy)
    outside = readme.replace(block_of(readme), ""), deploy.replace(block_of(deploy), "")
    assert outside == tuple(doc.read_text().replace(block_of(doc.read_text()), "") for doc in DOCS)
