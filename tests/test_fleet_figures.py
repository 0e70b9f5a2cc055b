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


# µs per call as bench/cluster.py measures them: the forwarded call 100 (owner) + 60 (forwarder) + 0 (Redis)
CPU = {
    "solo": {"instance": 90.0},
    "direct": {"owner": 100.0, "forwarder": 2.0, "redis": 0.0},
    "forwarded": {"owner": 100.0, "forwarder": 60.0, "redis": 1.0},
    "haproxy": {"owner": 100.0, "haproxy": 20.0, "redis": 0.0},
}


def test_the_model_from_the_measured_inputs() -> None:
    cost = fleet_docs.inputs({"cpu_us_per_call": CPU})
    assert cost is not None and cost["forwarded"] == 161.0 and cost["direct"] == 100.0
    assert fleet_docs.core_us(cost, 0.0) == 120.0  # the owner's work and HAProxy's, on the instances' cores
    assert fleet_docs.scaling(cost, 0.0) == 1.0  # nothing forwarded: N instances do N times one's calls
    assert abs(fleet_docs.scaling(cost, 0.5) - 120 / 150.5) < 1e-9  # half forwarded: 61 µs more on half the calls
    assert abs(fleet_docs.scaling(cost, fleet_docs.share_at_target(cost)) - fleet_docs.TARGET) < 1e-9
    assert fleet_docs.against_alone(cost, 0.0, own_core=True) == 0.9  # a lone instance's 90 µs against 100
    assert fleet_docs.calls_per_s(cost, 8, 0.0) == 8e6 / 120
    assert fleet_docs.model_text({"latency_p50_ms": {}}) is None  # a run without CPU figures: no model stated


def test_both_documents_quote_one_run() -> None:
    readme, deploy = (doc.read_text() for doc in DOCS)
    check_agree(readme, deploy)
    # the second, older run (+0.078 / +0.341 ms, 3,140 calls/s) is gone; a new run may measure 0.078 again
    assert "0.341" not in readme + deploy and "3,140" not in readme + deploy


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
        "cpu_us_per_call": CPU,
    }
    fleet_docs.update(tmp_path, results, cluster.table(results))
    readme, deploy = ((tmp_path / doc.relative_to(ROOT)).read_text() for doc in DOCS)
    check_agree(readme, deploy)
    assert fleet_docs.runs_quoted(readme) == ["2030-01-02T03:04:05+00:00"]
    assert "9,001" in block_of(readme) and "+0.050" in block_of(deploy) and "load average 0.2" in block_of(deploy)
    flat = " ".join(block_of(readme).split()), " ".join(block_of(deploy).split())
    assert "1.61× the CPU of a direct one" in flat[0]  # the model's summary, its figures in deploy's block
    assert "c_forwarded 161" in flat[1] and "| 60.0 | – | 1.0 | 161.0 |" in block_of(deploy)
    outside = readme.replace(block_of(readme), ""), deploy.replace(block_of(deploy), "")
    assert outside == tuple(doc.read_text().replace(block_of(doc.read_text()), "") for doc in DOCS)


def test_the_model_per_routing_and_fleet_size() -> None:
    cpu = {**CPU, "haproxy": {**CPU["haproxy"], "redis_commands": 0.01}}
    cpu["forwarded"] = {**CPU["forwarded"], "redis_commands": 0.02}
    rows = {(row["routing"], row["instances"]): row for row in fleet_docs.model_rows({"cpu_us_per_call": cpu})}
    spread = rows[("roundrobin", 4)]
    assert rows[("sticky", 4)]["forwarded"] == 0.0 and rows[("by_prefix", 4)]["forwarded"] == 0.0
    assert rows[("sticky", 4)]["calls_per_s"] == 4e6 / 120  # c_owner 100 + c_haproxy 20 on each core
    assert rows[("sticky", 4)]["scaling"] == 90 / 120 and rows[("sticky", 4)]["scaling_own_core"] == 0.9
    assert rows[("sticky", 4)]["haproxy_cores"] == 4 * 20 / 100
    assert spread["forwarded"] == 0.75 and spread["scaling"] == 90 / (120 + 0.75 * 61)
    assert spread["redis_commands"] == 0.01 + 0.75 * 0.02  # the forwarded share's commands on top
    assert rows[("roundrobin", 1)]["forwarded"] == 0.0  # one instance owns every session
    table = fleet_docs.model_table({"cpu_us_per_call": cpu, "latency_p50_ms": {"direct": 0.2, "haproxy": 0.25}})
    assert "| roundrobin | 4 | 0.75 |" in table and "| 50 µs |" in table and "1.61×" in table


def test_the_handoff_figures_beside_the_model() -> None:
    """bench/cluster.py's handoff paths: a handed connection's calls against direct ones, and one handoff's own CPU
    (a new connection each call, handed, less one to the owner); a run without them states none."""
    cpu = {
        **CPU,
        "handed": {"owner": 99.0, "forwarder": 1.0, "redis": 2.0},
        "connection each": {"owner": 180.0, "forwarder": 1.0, "redis": 1.0},
        "handed each": {"owner": 300.0, "forwarder": 180.0, "redis": 2.0},
    }
    results = {"cpu_us_per_call": cpu, "latency_p50_ms": {"haproxy": 0.3, "direct": 0.2}}
    assert fleet_docs.handoff(results) == {"kept": 1.0, "each": 300.0, "connection": 80.0}
    table = fleet_docs.model_table(results)
    assert "connection handed to its owner (MCPGATE_HANDOFF_DIR) / c_direct | 1.00× |" in table, table
    assert "one handoff's own CPU" in table and "| 300.0 |" in table, table
    assert "less than forwarding every call once the connection carries 5 calls" in fleet_docs.handoff_text(results)
    assert fleet_docs.handoff({"cpu_us_per_call": CPU}) is None
    assert fleet_docs.handoff_rows({"cpu_us_per_call": CPU}) == [] and fleet_docs.handoff_text({}) == ""
