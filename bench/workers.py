"""mcpgate serve under different gunicorn worker classes: sequential latency and 16-client throughput.

    python bench/run.py --worker-classes gateway,gevent_pywsgi,gevent,gevent+fast --rounds 5

gateway        mcpgate's own worker (mcpgate.serve.front.worker.GatewayWorker, the configured default)
gevent_pywsgi  gunicorn's stock gevent_pywsgi worker (gevent.pywsgi and the standard library's header parser)
gevent         gunicorn's stock gevent worker with gunicorn's Python HTTP parser (--http-parser python)
baseline       mcpgate's own worker from the mcpgate package in --baseline DIR (an older tree, say)
gevent+fast    the same with gunicorn's C parser (--http-parser fast): gunicorn_h1c from the venv, or else
               from bench/.peers/h1c (`pip install --target bench/.peers/h1c gunicorn_h1c`), which only
               this variant's PYTHONPATH sees, so the venv and mcpgate's dependencies stay as they are

Every variant runs at once on its own port; rounds interleave them in a rotating order, and each figure is
also given as a ratio to `gateway` within the same round (median over rounds), which is what compares
on a shared machine.
"""

from __future__ import annotations

import importlib.util
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gateways
import measure
import peers

BASE = "gateway"
EXTRA_ARGS = {
    "gateway": [],
    "gevent_pywsgi": ["-k", "gevent_pywsgi"],
    "gevent": ["-k", "gevent", "--http-parser", "python"],
    "gevent+fast": ["-k", "gevent", "--http-parser", "fast"],
}
CONCURRENCY = 16
H1C_DIR = peers.PEERS / "h1c"


def _with_args(argv: Callable[[int], list[str]], extra: list[str]) -> Callable[[int], list[str]]:
    def build(port: int) -> list[str]:
        base = argv(port)
        return base[:-1] + extra + base[-1:]  # options before the app (mcpgate.wsgi)

    return build


def specs(names: list[str], baseline: Path | None = None) -> list[gateways.Spec]:
    unknown = [n for n in names if n not in EXTRA_ARGS]
    if unknown:
        raise SystemExit(f"unknown worker classes {unknown}; known: {', '.join(EXTRA_ARGS)}")
    base = next(s for s in gateways.serve_specs() if s.name == "mcpgate")
    found = [
        gateways.Spec(
            name,
            f"mcpgate serve, worker {name}",
            _with_args(base.argv, EXTRA_ARGS[name]),
            cwd=base.cwd,
            **_fast(base.env) if name.endswith("+fast") else {"env": base.env},
        )
        for name in names
    ]
    if baseline is not None:
        found.append(
            gateways.Spec(
                "baseline",
                f"mcpgate serve from {baseline}",
                base.argv,
                cwd=baseline,
                env={**base.env, "PYTHONPATH": str(baseline)},
            )
        )
    return found


def _fast(env: dict[str, str]) -> dict[str, Any]:
    """The gateway's env for the C parser variant, or why it cannot run."""
    if importlib.util.find_spec("gunicorn_h1c"):
        return {"env": env}
    if not (H1C_DIR / "gunicorn_h1c").is_dir():
        return {"env": env, "missing": f"gunicorn_h1c is in neither the venv nor {H1C_DIR}"}
    path = ":".join(p for p in (env.get("PYTHONPATH"), str(H1C_DIR)) if p)
    return {"env": {**env, "PYTHONPATH": path}}


def _ratio(values: list[float], bases: list[float]) -> float:
    pairs = [v / b for v, b in zip(values, bases, strict=False) if v == v and b == b and b]
    return statistics.median(pairs) if pairs else float("nan")


def phase(
    names: list[str], cfg: dict[str, Any], log_dir: Path, log: Callable[[str], None], baseline: Path | None = None
) -> dict[str, Any]:
    """Start every variant, then `cfg["rounds"]` interleaved rounds of sequential calls and 16 clients."""
    if BASE not in names:
        names = [BASE, *names]
    started: dict[str, gateways.Running] = {}
    raw: dict[str, dict[str, list[float]]] = {}
    try:
        for spec in specs(names, baseline):
            if spec.missing:
                log(f"workers: {spec.name} skipped: {spec.missing}")
                continue
            started[spec.name] = gateways.start(spec, log_dir)
        order = list(started)
        for rnd in range(cfg["rounds"]):
            order = order[1:] + order[:1] if rnd else order
            log(f"workers round {rnd + 1}/{cfg['rounds']}: order {order}")
            for name in order:
                run = started[name]
                cpu = _cpu(run.proc.pid)
                seq = measure.sequential_http(run.port, "/mcp", cfg["seq_calls"], cfg["seq_cap_s"], cpu)
                many = measure.concurrent_http(run.port, "/mcp", CONCURRENCY, cfg["duration_s"], cpu)
                row = raw.setdefault(name, {})
                for key, value in (
                    ("seq_p50_ms", seq["p50_ms"]),
                    ("seq_cpu_us", seq.get("cpu_us_per_call")),
                    ("c16_calls_per_s", many["calls_per_s"]),
                    ("c16_cpu_us", many.get("cpu_us_per_call")),
                    ("c16_errors", float(many["errors"])),
                ):
                    row.setdefault(key, []).append(float("nan") if value is None else float(value))
                log(
                    f"  {name}: seq p50 {seq['p50_ms']:.3f} ms, c16 {many['calls_per_s']:.0f} calls/s, "
                    f"errors {many['errors']}"
                )
    finally:
        for run in started.values():
            gateways.stop(run)
    return summarize(raw)


def _cpu(pid: int) -> measure.CpuClock:
    return lambda: gateways.tree_cpu_ns(pid)


def summarize(raw: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    base = raw.get(BASE, {})
    out: dict[str, Any] = {"raw": raw, "rows": {}}
    for name, row in raw.items():
        out["rows"][name] = {
            **{key: statistics.median(values) for key, values in row.items() if key != "c16_errors"},
            "c16_errors": sum(row["c16_errors"]),
            "seq_p50_ratio": _ratio(row["seq_p50_ms"], base.get("seq_p50_ms", [])),
            "c16_ratio": _ratio(row["c16_calls_per_s"], base.get("c16_calls_per_s", [])),
        }
    return out


def table(result: dict[str, Any]) -> str:
    lines = [
        f"| worker | seq p50 ms | vs {BASE} | seq CPU us/call | {CONCURRENCY} clients calls/s | vs {BASE} "
        f"| c16 CPU us/call | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in result["rows"].items():
        lines.append(
            f"| {name} | {r['seq_p50_ms']:.3f} | {r['seq_p50_ratio']:.3f} | {r['seq_cpu_us']:.0f} "
            f"| {r['c16_calls_per_s']:.0f} | {r['c16_ratio']:.3f} | {r['c16_cpu_us']:.0f} "
            f"| {r['c16_errors']:.0f} |"
        )
    return "\n".join(lines) + "\n"
