"""mcpgate's benchmark: serve and relay against the peers, in one run, gateways interleaved in rounds.

    python bench/run.py --install-peers   # install the peers into bench/.peers (npm + a separate venv), then exit
    python bench/run.py                   # full run (~15 min): bench/out/results.md, plot.png, results.json
    python bench/run.py --publish         # full run that also rewrites the tracked bench/results.md and plot.png
    python bench/run.py --quick           # ~2-3 min, fewer calls and rounds
    python bench/run.py --quick --only mcpgate,floor --phases speed    # iterate on one figure
    python bench/run.py --quick --only mcpgate,mcpgate-modern,mcpgate-modern-child --phases speed   # the eras
    python bench/run.py --profile         # py-spy profiles of the serve worker (bench/out/serve-*.txt, .svg)
    python bench/run.py --profile --only mcpgate-modern   # the same for 2026-07-28 requests (serve-modern-*)
    python bench/run.py --profile --only mcpgate-relay    # py-spy on the relay process (bench/out/relay-*.txt)
    python bench/run.py --snapshot        # measure a copy of mcpgate/ taken at the start (edits may go on)
    python bench/run.py --phases relay --only mcpgate-relay,mcpgate-relay-modern   # the relay's two host eras
    python bench/run.py --phases relay --only mcpgate-relay,mcpgate-relay-baseline --relay-baseline /tmp/old
                                          # A/B: today's relay and an older tree's, one upstream, same rounds
    python bench/run.py --worker-classes gateway,gevent_pywsgi,gevent,gevent+fast --rounds 5   # see workers.py

Run it with the venv that has mcpgate installed (`/work/venv/bin/python bench/run.py`). Phases: memory (fresh
gateway, 1/20/1000 idle sessions), capacity (sessions with open GET streams one mcpgate worker holds), speed
(sequential latency, 1/4/16/64 client processes, big results; reference rows: the child over direct pipes and
the floor; mcpgate-modern and mcpgate-modern-child: mcpgate again, spoken to in MCP 2026-07-28 requests with no
session, in front of the legacy-only child and of the child run with --modern), relay (mcpgate-relay and the
peer relays against one mcpgate upstream; mcpgate-relay-modern: a stdio host sending 2026-07-28 requests through
`mcpgate-relay --protocol-era modern` to the same upstream). Medians over rounds.

Only --publish (or --out DIR) writes outside bench/out/ (git-ignored); the README's Performance section is
rewritten only by `python bench/report.py --readme`. SIGTERM or SIGINT ends every gateway, relay and client
process the bench started before it exits (bench/procs.py).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gateways
import measure
import peers
import procs
import report
import workers
from blob_stage import SIZES, BlobSessions
from mcpclient import CLIENTS, PIPE_CLIENTS, PipeSession

BENCH = gateways.BENCH
PHASES = ("memory", "capacity", "speed", "relay")
FULL = {
    "rounds": 3,
    "seq_calls": 1000,
    "seq_cap_s": 10.0,
    "levels": [1, 4, 16, 64],
    "duration_s": 2.0,
    "blob_reps": 4,
    "memory_counts": [1, 20, 1000],
    "capacity_cap": 2000,
    "capacity_step": 200,
    "relay_calls": 1000,
    "relay_inflight": 16,
}
QUICK = {
    "rounds": 1,
    "seq_calls": 300,
    "seq_cap_s": 6.0,
    "levels": [1, 4, 16, 64],
    "duration_s": 1.0,
    "blob_reps": 2,
    "memory_counts": [1, 20, 100],
    "capacity_cap": 200,
    "capacity_step": 100,
    "relay_calls": 300,
    "relay_inflight": 16,
}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def rotate(items: list[str], by: int) -> list[str]:
    by %= max(1, len(items))
    return items[by:] + items[:by]


def median(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def raise_nofile() -> dict[str, int]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # children (the gateways) inherit it
    return {"soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0], "hard": hard}


def machine() -> dict:
    mem_kb = gateways.kb("/proc/meminfo", b"MemTotal:")
    cpu = ""
    try:
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    return {
        "nproc": os.cpu_count(),
        "ram_gib": round(mem_kb / 1024 / 1024, 1),
        "cpu": cpu,
        "kernel": platform.release(),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "load_avg_at_start": os.getloadavg(),
        **gateways.tool_versions(),
    }


# -- phases ----------------------------------------------------------------------------------------------


def phase_memory(specs: list[gateways.Spec], cfg: dict, log_dir: Path) -> dict:
    out = {}
    for spec in specs:
        if not spec.blobs or spec.client != "legacy":  # the floor and 2026-07-28 requests hold no sessions
            continue
        log(f"memory: {spec.name} with {cfg['memory_counts']} idle sessions")
        try:
            running = gateways.start(spec, log_dir)
        except Exception as exc:  # noqa: BLE001
            out[spec.name] = {"error": str(exc)[:400]}
            continue
        try:
            time.sleep(1.0)
            out[spec.name] = {
                "rows": measure.memory_with_sessions(
                    running.port, spec.path, running.proc.pid, cfg["memory_counts"], gateways.tree_memory
                ),
                "startup_s": round(running.startup_s, 2),
            }
        except Exception as exc:  # noqa: BLE001
            out[spec.name] = {"error": repr(exc)[:400]}
        finally:
            gateways.stop(running)
        log(f"  {out[spec.name]}")
    return out


def phase_capacity(specs: list[gateways.Spec], cfg: dict, log_dir: Path) -> dict:
    spec = next((s for s in specs if s.name == "mcpgate"), None)
    if spec is None:
        return {}
    log(f"capacity: mcpgate sessions with GET streams, step {cfg['capacity_step']} up to {cfg['capacity_cap']}")
    running = gateways.start(spec, log_dir)
    try:
        result = measure.capacity(
            running.port,
            spec.path,
            cfg["capacity_cap"],
            cfg["capacity_step"],
            health=lambda: measure.healthz(running.port),
            memory=lambda: gateways.tree_memory(running.proc.pid),
        )
    finally:
        gateways.stop(running)
    log(f"  held {result['held_sessions_with_get_streams']}, first error: {result['first_error']}")
    return {"mcpgate": result}


def attempt(store: dict, key: str, fn, *args):  # type: ignore[no-untyped-def]
    try:
        value = fn(*args)
    except Exception as exc:  # noqa: BLE001 - one failed measurement must not end the run
        value = {"error": repr(exc)[:400]}
    store.setdefault(key, []).append(value)
    return value


def phase_speed(specs: list[gateways.Spec], cfg: dict, log_dir: Path, running: dict) -> dict:
    raw: dict[str, dict[str, list]] = {}
    for spec in specs:
        try:
            running[spec.name] = gateways.start(spec, log_dir)
        except Exception as exc:  # noqa: BLE001
            raw[spec.name] = {"start_error": [str(exc)[:400]]}
            log(f"speed: {spec.name} did not start: {exc}")
    direct = PipeSession(gateways.CHILD).initialize()
    blob_sessions = BlobSessions()
    names = list(running)
    by_name = {s.name: s for s in specs}
    try:
        for rnd in range(cfg["rounds"]):
            order = rotate([*names, "direct"], rnd)
            log(f"speed round {rnd + 1}/{cfg['rounds']}: order {order}")
            for name in order:
                store = raw.setdefault(name, {})
                if name == "direct":
                    value = attempt(store, "seq", measure.timed_loop, direct.echo, cfg["seq_calls"], cfg["seq_cap_s"])
                else:
                    run = running[name]
                    value = attempt(
                        store,
                        "seq",
                        measure.sequential_http,
                        run.port,
                        by_name[name].path,
                        cfg["seq_calls"],
                        cfg["seq_cap_s"],
                        cpu_of(run),
                        client_of(by_name[name]),
                    )
                log(f"  seq {name}: {fmt(value)}")
            for level in cfg["levels"]:
                for name in rotate(names, rnd):
                    run = running[name]
                    value = attempt(
                        raw[name],
                        f"c{level}",
                        measure.concurrent_http,
                        run.port,
                        by_name[name].path,
                        level,
                        cfg["duration_s"],
                        cpu_of(run),
                        client_of(by_name[name]),
                        servers_cpu_of(run),
                    )
                    log(f"  c{level} {name}: {fmt(value)}")
            for name in order:
                if name != "direct" and not by_name[name].blobs:
                    continue
                if name == "direct":
                    value = attempt(raw[name], "blob", measure.blob_times, direct, SIZES, cfg["blob_reps"])
                else:  # on the session kept from the last round (blob_stage.py: its child as warm as direct's)
                    value = blob_sessions.times(
                        name,
                        lambda name=name: client_of(by_name[name])(running[name].port, by_name[name].path),
                        lambda session: measure.blob_times(session, SIZES, cfg["blob_reps"]),
                    )
                    raw[name].setdefault("blob", []).append(value)
                log(f"  blob {name}: {fmt_blob(value)}")
        for name, run in running.items():
            raw[name]["memory_after_load"] = [gateways.tree_memory(run.proc.pid)]
    finally:
        blob_sessions.close()
        direct.close()
    return raw


SECOND_UPSTREAM = "supergateway"  # issue 24: the relay against mcp-stdio's over a peer's upstream as well
SECOND_UPSTREAM_RELAYS = ("mcpgate-relay", "mcp-stdio")  # the two the goal compares


def phase_relay(
    cfg: dict,
    log_dir: Path,
    running: dict,
    specs: list[gateways.Spec],
    only: set[str] | frozenset[str] = frozenset(),
    upstream_name: str = "mcpgate",
) -> dict:
    """Each relay (all, or those named in `only`) and the upstream directly, interleaved in rounds, against the
    serve gateway `upstream_name` (started here unless the speed stage left it running)."""
    upstream = running.get(upstream_name)
    spec = next(s for s in gateways.serve_specs() if s.name == upstream_name)
    if spec.missing:
        return {
            "_missing": dict.fromkeys(
                only or [r.name for r in gateways.relay_specs()], f"upstream {upstream_name}: {spec.missing}"
            )
        }
    if upstream is None:
        upstream = running[upstream_name] = gateways.start(spec, log_dir)
    url = f"http://127.0.0.1:{upstream.port}{spec.path}"
    relays = {r.name: r for r in gateways.relay_specs() if not only or r.name in only}
    raw: dict[str, dict] = {"_missing": {n: r.missing for n, r in relays.items() if r.missing}}
    for name, why in raw["_missing"].items():
        print(f"NOTE: relay {name} skipped: {why}", flush=True)
    names = ["upstream-direct"] + [n for n, r in relays.items() if not r.missing]
    for rnd in range(cfg["rounds"]):
        log(
            f"relay round {rnd + 1}/{cfg['rounds']}"
            + (f", upstream {upstream_name}" if upstream_name != "mcpgate" else "")
        )
        for name in rotate(names, rnd):
            store = raw.setdefault(name, {})
            if name == "upstream-direct":
                value = attempt(
                    store,
                    "seq",
                    measure.sequential_http,
                    upstream.port,
                    spec.path,
                    cfg["relay_calls"],
                    cfg["seq_cap_s"],
                )
                value2 = attempt(
                    store,
                    "inflight",
                    measure.concurrent_http,
                    upstream.port,
                    spec.path,
                    cfg["relay_inflight"],
                    cfg["duration_s"],
                )
                log(f"  {name}: seq {fmt(value)}; {cfg['relay_inflight']} processes {fmt(value2)}")
                continue
            try:
                began = time.monotonic()
                relay = PIPE_CLIENTS[relays[name].client](
                    relays[name].argv(url), env=relays[name].env or None, cwd=str(relays[name].cwd or gateways.ROOT)
                )
            except Exception as exc:  # noqa: BLE001
                store.setdefault("seq", []).append({"error": repr(exc)[:300]})
                continue
            try:
                attempt(store, "startup_s", lambda r=relay, t=began: r.initialize(60.0) and time.monotonic() - t)
                cpu = cpu_of(relay)
                value = attempt(
                    store, "seq", measure.timed_loop, relay.echo, cfg["relay_calls"], cfg["seq_cap_s"], 50, cpu
                )
                value2 = attempt(
                    store, "inflight", measure.pipe_in_flight, relay, cfg["relay_inflight"], cfg["duration_s"], cpu
                )
                store.setdefault("memory", []).append(gateways.tree_memory(relay.proc.pid))
                log(
                    f"  {name}: seq {fmt(value)}; {cfg['relay_inflight']} in flight {fmt(value2)}; "
                    f"rss {store['memory'][-1]['rss_kb'] // 1024} MB"
                )
            finally:
                relay.close()
    return raw


def client_of(spec: gateways.Spec) -> measure.Client:
    return CLIENTS[spec.client]


def cpu_of(running) -> measure.CpuClock:  # type: ignore[no-untyped-def]
    """The CPU clock of a started gateway or relay (its own processes, child servers excluded)."""
    pid = running.proc.pid
    return lambda: gateways.tree_cpu_ns(pid)


def servers_cpu_of(running) -> measure.CpuByPid:  # type: ignore[no-untyped-def]
    """The CPU clock of a started gateway's child servers."""
    pid = running.proc.pid
    return lambda: gateways.servers_cpu_ns(pid)


def fmt(value) -> str:  # type: ignore[no-untyped-def]
    if not isinstance(value, dict) or "error" in value:
        return str(value)[:300]
    text = f"p50 {value['p50_ms']:.3f} ms p99 {value['p99_ms']:.3f} ms n {value['n']}"
    if "calls_per_s" in value:
        text += f" {value['calls_per_s']:.0f} calls/s"
    if "cpu_us_per_call" in value:
        text += f" cpu {value['cpu_us_per_call']:.0f} us/call"
    if value.get("errors"):
        text += f" errors {value['errors']} {value.get('error_samples')}"
    return text


def fmt_blob(value) -> str:  # type: ignore[no-untyped-def]
    if "error" in value:
        return str(value)
    return ", ".join(f"{int(k) // 1024} KiB {median(v):.1f} ms" for k, v in value.items())


# -- aggregation -------------------------------------------------------------------------------------------


CORE_SHARES = ("clients_cpu_us_per_call", "servers_cpu_us_per_call")  # CPU a call beside the gateway's


def aggregate(raw: dict, cfg: dict) -> dict:
    """Median over rounds of each per-round figure; blobs: median of every run."""
    out: dict[str, dict] = {}
    for name, metrics in raw.items():
        if name.startswith("_"):
            continue
        row: dict = {}
        for metric, values in metrics.items():
            good = [v for v in values if isinstance(v, dict) and "error" not in v]
            errors = [v["error"] for v in values if isinstance(v, dict) and "error" in v]
            if metric == "blob":
                row["blob_ms"] = {
                    size: median([t for v in good for t in v[size]]) for size in (good[0] if good else {})
                }
            elif metric in ("memory_after_load", "memory"):
                row[metric] = {
                    "rss_kb": median([v["rss_kb"] for v in good]),
                    "pss_kb": median([v["pss_kb"] for v in good]),
                }
            elif metric == "start_error":
                row["error"] = values[0]
            elif metric == "startup_s":
                row["startup_s"] = median([v for v in values if isinstance(v, float)])
            elif good:
                keys = ("p50_ms", "p99_ms", "mean_ms", "n", "cpu_us_per_call", *CORE_SHARES)
                row[metric] = {key: median([v[key] for v in good if key in v]) for key in keys if key in good[0]}
                if "calls_per_s" in good[0]:
                    row[metric]["calls_per_s"] = median([v["calls_per_s"] for v in good])
                    row[metric]["errors"] = sum(v.get("errors", 0) for v in good)
                    row[metric]["error_samples"] = [s for v in good for s in v.get("error_samples", [])][:3]
            if errors:
                row.setdefault("errors", {})[metric] = errors[:3]
        out[name] = row
    return out


# -- profile -----------------------------------------------------------------------------------------------


def _worker_of(master: int, timeout_s: float = 30.0) -> int:
    """The gunicorn worker of `master`, waited for: on a busy machine the fork comes after the port is bound."""
    deadline = time.monotonic() + timeout_s
    while True:
        parents = gateways._ppid_map()
        found = [pid for pid, ppid in parents.items() if ppid == master and "gunicorn" in gateways._cmdline(pid)]
        if found:
            return found[0]
        if time.monotonic() > deadline:
            sys.exit(f"no gunicorn worker under the master {master} after {timeout_s:.0f} s")
        time.sleep(0.1)


def profile(cfg: dict, out_dir: Path, name: str = "mcpgate") -> None:
    """py-spy on the worker of mcpgate (or of `name`, e.g. mcpgate-modern): sequential calls (raw + svg), then
    16 client processes (raw)."""
    py_spy = Path(sys.executable).parent / "py-spy"
    if not py_spy.exists():
        sys.exit("py-spy is not installed: pip install -r bench/requirements.txt")
    spec = next((s for s in gateways.serve_specs() if s.name == name and s.name.startswith("mcpgate")), None)
    if spec is None:
        sys.exit(f"--profile measures mcpgate: {name!r} is not one of its rows")
    client = client_of(spec)
    prefix = "serve" if name == "mcpgate" else f"serve-{name.removeprefix('mcpgate-')}"
    running = gateways.start(spec, out_dir / "logs")
    try:
        worker = _worker_of(running.proc.pid)
        seconds = 12
        measure.sequential_http(running.port, spec.path, 500, 10.0, client=client)  # warm: imports, caches
        measure.concurrent_http(running.port, spec.path, 16, 1.0, client=client)
        for label, fmt_, load in (("seq", "raw", None), ("seq", "flamegraph", None), ("c16", "raw", 16)):
            suffix = "svg" if fmt_ == "flamegraph" else "txt"
            target = out_dir / f"{prefix}-{label}.{suffix}"
            spy = procs.register(
                subprocess.Popen(
                    [
                        str(py_spy),
                        "record",
                        "--pid",
                        str(worker),
                        "--rate",
                        "250",
                        "--format",
                        fmt_,
                        "--duration",
                        str(seconds),
                        "-o",
                        str(target),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
            )
            time.sleep(1.0)
            if load is None:
                figure = measure.sequential_http(running.port, spec.path, 10**9, seconds - 2, client=client)
            else:
                figure = measure.concurrent_http(running.port, spec.path, load, seconds - 3, client=client)
            spy_err = spy.communicate(timeout=60)[1].decode(errors="replace")
            procs.forget(spy)
            if spy.returncode != 0:
                sys.exit(f"py-spy failed ({spy.returncode}): {spy_err[-500:]}")
            log(f"profile {label}: {fmt(figure)} -> {target}")
            if fmt_ == "raw":
                text = report.profile_summary(target, top=25)
                (out_dir / f"{prefix}-{label}-top.txt").write_text(text)
                print(text)
        perf_split(worker, running.port, spec.path, out_dir, prefix=prefix, client=client)
    finally:
        gateways.stop(running)


def profile_relay(out_dir: Path, name: str = "mcpgate-relay", seconds: int = 12) -> None:
    """py-spy on the relay process (`name`: mcpgate-relay, -modern or -baseline) in front of mcpgate serve:
    sequential calls, then 16 in flight (raw; bench/out/relay-seq.txt, relay-c16.txt and their -top.txt)."""
    py_spy = Path(sys.executable).parent / "py-spy"
    if not py_spy.exists():
        sys.exit("py-spy is not installed: pip install -r bench/requirements.txt")
    relay_spec = next((r for r in gateways.relay_specs() if r.name == name), None)
    if relay_spec is None or relay_spec.missing:
        sys.exit(f"--profile: no relay {name!r} to profile")
    spec = next(s for s in gateways.serve_specs() if s.name == "mcpgate")
    upstream = gateways.start(spec, out_dir / "logs")
    prefix = "relay" if name == "mcpgate-relay" else f"relay-{name.removeprefix('mcpgate-relay-')}"
    try:
        url = f"http://127.0.0.1:{upstream.port}{spec.path}"
        relay = PIPE_CLIENTS[relay_spec.client](
            relay_spec.argv(url), env=relay_spec.env or None, cwd=str(relay_spec.cwd or gateways.ROOT)
        )
        try:
            relay.initialize(60.0)
            measure.timed_loop(relay.echo, 500, 10.0, 50)  # warm
            for label, load in (("seq", None), ("c16", 16)):
                target = out_dir / f"{prefix}-{label}.txt"
                argv = [str(py_spy), "record", "--pid", str(relay.proc.pid), "--rate", "500", "--format", "raw"]
                argv += ["--duration", str(seconds), "-o", str(target)]
                spy = procs.register(
                    subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
                )
                time.sleep(1.0)
                cpu = cpu_of(relay)
                if load is None:
                    figure = measure.timed_loop(relay.echo, 10**9, seconds - 2, 50, cpu)
                else:
                    figure = measure.pipe_in_flight(relay, load, seconds - 3, cpu)
                spy_err = spy.communicate(timeout=60)[1].decode(errors="replace")
                procs.forget(spy)
                if spy.returncode != 0:
                    sys.exit(f"py-spy failed ({spy.returncode}): {spy_err[-500:]}")
                log(f"profile {prefix} {label}: {fmt(figure)} -> {target}")
                text = report.profile_summary(target, top=30)
                (out_dir / f"{prefix}-{label}-top.txt").write_text(text)
                print(text)
        finally:
            relay.close()
    finally:
        gateways.stop(upstream)


def perf_split(
    worker: int,
    port: int,
    path: str,
    out_dir: Path,
    seconds: int = 8,
    prefix: str = "serve",
    client: measure.Client = measure.HttpSession,
) -> None:
    """Where the worker's CPU goes by library (python, kernel, libc, C extensions), with `perf` if present."""
    import shutil

    perf = shutil.which("perf")
    if perf is None:
        log("perf not found: no CPU split by library")
        return
    data = out_dir / f"{prefix}-seq.perf.data"
    rec = procs.register(
        subprocess.Popen(
            [perf, "record", "-F", "999", "-p", str(worker), "-o", str(data), "--", "sleep", str(seconds)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    )
    time.sleep(0.5)
    measure.sequential_http(port, path, 10**9, seconds - 1.5, client=client)
    code = rec.wait(60)
    procs.forget(rec)
    if code != 0:
        log(f"perf record failed: {rec.stderr.read().decode(errors='replace')[-300:]}")  # type: ignore[union-attr]
        return
    rep = subprocess.run(
        [perf, "report", "-i", str(data), "--no-children", "--sort", "dso", "--stdio"], capture_output=True, text=True
    )
    rows = [line for line in rep.stdout.splitlines() if line.strip() and not line.startswith("#")][:12]
    kernel = subprocess.run(
        [perf, "report", "-i", str(data), "--no-children", "--sort", "sym", "--stdio"], capture_output=True, text=True
    )
    krows = [line for line in kernel.stdout.splitlines() if "[k]" in line][:8]
    text = (
        "perf: the serve worker's on-CPU samples by library during sequential calls\n"
        + "\n".join(rows)
        + "\n\ntop kernel symbols\n"
        + "\n".join(krows)
        + "\n"
    )
    (out_dir / f"{prefix}-seq-perf.txt").write_text(text)
    print(text)


def take_snapshot(dest: Path, attempts: int = 10) -> str:
    """Copy the mcpgate package to dest/mcpgate once the copy imports (a file may be mid-edit); measure the copy.
    Its modules are compiled to bytecode first, as pip does at an install: a worker that compiled its modules
    itself would hold the compiler's leftovers in its heap (about 0.5 MB), which no installed gateway does."""
    import shutil

    origin = gateways.mcpgate_source() / "mcpgate"
    check = (
        "import compileall, sys; ok = compileall.compile_dir('mcpgate', quiet=1); "
        "import mcpgate.wsgi, mcpgate.relay.cli; sys.exit(not ok)"
    )
    for attempt_no in range(attempts):
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(origin, dest / "mcpgate", ignore=shutil.ignore_patterns("__pycache__"))
        done = subprocess.run(
            [sys.executable, "-c", check],
            cwd=dest,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(dest), "MCPGATE_COMMAND": ""},
        )
        if done.returncode == 0:
            gateways.SRC = dest
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log(f"measuring a copy of {origin} taken at {stamp}: {dest}")
            return f"copy of {origin} taken at {stamp}"
        log(f"snapshot {attempt_no + 1}: the copy does not import ({done.stderr.strip()[-200:]}); retrying")
        time.sleep(5)
    sys.exit("could not take a snapshot of mcpgate that imports")


def compare_workers(names: list[str], cfg: dict, out_dir: Path, baseline: Path | None) -> int:
    result = workers.phase([n for n in names if n], cfg, out_dir / "logs", log, baseline)
    result.update(
        {
            "machine": machine(),
            "source": gateways.source_state(),
            "config": cfg,
            "command": "python bench/run.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        }
    )
    (out_dir / "workers.json").write_text(json.dumps(result, indent=1, default=str))
    text = workers.table(result)
    (out_dir / "workers.md").write_text(f"`{result['command']}`, {cfg['rounds']} rounds\n\n{text}")
    print(text, flush=True)
    log(f"done: {out_dir / 'workers.json'}, {out_dir / 'workers.md'}")
    return 0


# -- main --------------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer calls and one round (~2-3 min)")
    parser.add_argument("--install-peers", action="store_true", help="install the peers into bench/.peers and exit")
    parser.add_argument(
        "--only",
        default="",
        help="comma-separated gateway names (mcpgate, mcpgate-modern, mcpgate-modern-child, floor, supergateway, "
        "mcp-proxy-npm, mcp-proxy-py, mcp-stdio) and relay names (mcpgate-relay, mcpgate-relay-modern, "
        "mcpgate-relay-baseline, mcp-proxy-py, mcp-stdio, supergateway); with --profile, the mcpgate row to profile",
    )
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated, of {', '.join(PHASES)}")
    parser.add_argument("--rounds", type=int, help="override the number of rounds")
    parser.add_argument("--out", type=Path, help="where results.md and plot.png go (default: bench/out/)")
    parser.add_argument(
        "--publish",
        action="store_true",
        help="a full run of every phase and gateway that also rewrites the tracked bench/results.md and plot.png",
    )
    parser.add_argument(
        "--worker-classes",
        default="",
        help="only compare mcpgate under these gunicorn worker "
        f"classes ({', '.join(workers.EXTRA_ARGS)}): "
        "bench/out/workers.json and .md",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="with --worker-classes: also mcpgate's own worker from the "
        "mcpgate package in this directory, as 'baseline'",
    )
    parser.add_argument(
        "--relay-baseline",
        type=Path,
        help="the relay phase also measures mcpgate-relay from the mcpgate package in this directory (e.g. a "
        "worktree of an older commit) as mcpgate-relay-baseline, against the same upstream in the same rounds",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="only profile the serve worker with py-spy (the --only row, default mcpgate), or the relay process "
        "(--only mcpgate-relay, mcpgate-relay-modern or mcpgate-relay-baseline)",
    )
    parser.add_argument(
        "--snapshot",
        action="store_true",
        help="copy the mcpgate package into bench/out/snapshot "
        "first and measure the copy (edits made during "
        "the run then cannot mix into it)",
    )
    parser.add_argument(
        "--src",
        type=Path,
        help="measure the mcpgate package in this directory (e.g. a copy "
        "of an older tree) instead of the installed one",
    )
    args = parser.parse_args()
    procs.install_handlers()
    try:
        return run(args)
    finally:
        procs.end_all()  # normally nothing is left; after an exception, whatever the bench started


def run(args: argparse.Namespace) -> int:
    if args.src:
        gateways.SRC = args.src.resolve()
    if args.relay_baseline:
        gateways.RELAY_BASELINE = args.relay_baseline.resolve()
    source = gateways.source_state()
    if args.snapshot:
        source["snapshot"] = take_snapshot(BENCH / "out" / "snapshot")

    out_dir = BENCH / "out"
    out_dir.mkdir(exist_ok=True)
    if args.install_peers:
        log("installing peers into bench/.peers")
        states = peers.install()
        for package, state in states.items():
            print(f"  {package}: {state}", flush=True)
        return 0 if all(state == "ok" for state in states.values()) else 1
    cfg = dict(QUICK if args.quick else FULL)
    if args.rounds:
        cfg["rounds"] = args.rounds
    nofile = raise_nofile()
    if args.profile:
        row = next((n for n in args.only.split(",") if n), "mcpgate")
        if row.startswith("mcpgate-relay"):
            profile_relay(out_dir, row)
        else:
            profile(cfg, out_dir, row)
        return 0
    if args.worker_classes:
        return compare_workers(
            args.worker_classes.split(","),
            {**cfg, "rounds": args.rounds or 5},
            out_dir,
            args.baseline.resolve() if args.baseline else None,
        )
    phases = [p for p in args.phases.split(",") if p]
    only = {n for n in args.only.split(",") if n}
    specs_all = gateways.serve_specs()
    specs = [s for s in specs_all if (not only or s.name in only) and not s.missing]
    complete = (
        not args.quick and not only and set(phases) == set(PHASES) and not args.rounds and not args.relay_baseline
    )
    if args.publish and not complete:
        sys.exit(
            "--publish rewrites the tracked results: only with a full run (no --quick, --only, --phases, --rounds)"
        )
    publish_dir = args.out or (BENCH if args.publish else out_dir)
    command = "python bench/run.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    results: dict = {
        "machine": machine(),
        "source": source,
        "command": command.strip(),
        "mode": "quick" if args.quick else "full",
        "config": cfg,
        "nofile": nofile,
        "child": gateways.CHILD,
        "gateways": {
            s.name: {"label": s.label, "missing": s.missing, "note": s.note, "client": s.client}
            for s in specs_all
            if not only or s.name in only
        },
    }
    for spec in specs_all:
        if spec.missing and (not only or spec.name in only):
            print(f"NOTE: {spec.name} skipped: {spec.missing}", flush=True)
    procs.adopt_orphans()
    before = gateways.child_server_pids()
    running: dict[str, gateways.Running] = {}
    began = time.monotonic()
    try:
        if "memory" in phases:
            results["memory"] = phase_memory(specs, cfg, out_dir / "logs")
        if "capacity" in phases:
            results["capacity"] = phase_capacity(specs, cfg, out_dir / "logs")
        if "speed" in phases:
            raw = phase_speed(specs, cfg, out_dir / "logs", running)
            results["speed_raw"] = raw
            results["speed"] = aggregate(raw, cfg)
        if "relay" in phases:
            relay_missing = gateways.relay_available()
            if relay_missing:
                print(f"NOTE: mcpgate-relay rows skipped: {relay_missing}", flush=True)
            raw = phase_relay(cfg, out_dir / "logs", running, specs, only)
            results["relay_raw"] = raw
            results["relay"] = aggregate(raw, cfg)
            results["relay_missing"] = raw["_missing"]
            second = set(SECOND_UPSTREAM_RELAYS) & (only or set(SECOND_UPSTREAM_RELAYS))
            if second:
                raw = phase_relay(cfg, out_dir / "logs", running, specs, frozenset(second), SECOND_UPSTREAM)
                results["relay_second_raw"] = raw
                results["relay_second"] = aggregate(raw, cfg)
                results["relay_second_missing"] = raw["_missing"]
                results["relay_second_upstream"] = SECOND_UPSTREAM
    finally:
        for run in running.values():
            gateways.stop(run)
        # child servers our own gateways left behind (descendants of this process only: another run's are not ours)
        leftovers = (gateways.child_server_pids() & procs.mine()) - before
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        results["leftover_children_killed"] = len(leftovers)
    results["elapsed_s"] = round(time.monotonic() - began, 1)
    (out_dir / "results.json").write_text(json.dumps(results, indent=1, default=str))
    if complete:  # kept apart so a later --quick run does not replace what the README shows
        (out_dir / "results-full.json").write_text(json.dumps(results, indent=1, default=str))
    report.write(results, publish_dir)
    log(
        f"done in {results['elapsed_s']} s: {out_dir / 'results.json'}, {publish_dir / 'results.md'}, "
        f"{publish_dir / 'plot.png'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
