"""The fleet's figures in README.md (the "Figures" item of its fleet section) and deploy/README.md (its "Figures"
section): both written from one run of bench/cluster.py (its bench/out/cluster.json) by
`python bench/report.py --readme` (or `python bench/fleet_docs.py`: these blocks alone), never by hand. Each
document holds them between two marker comments; the opening one names the run, so the two documents can be seen
to quote the same one (tests/test_fleet_figures.py).

They hold the fleet's scaling model (issue 24), because this machine cannot give each instance a core of its own:
N instances on N cores, every call through HAProxy, a fraction f of them landing on an instance that does not own
their session (which forwards it). Each core does 10^6 µs of work a second, so

    calls/s(N) = N · 10^6 / (c_owner + c_haproxy + f · (c_forwarded − c_direct))   [HAProxy on the same cores]
    calls/s(N) = N · 10^6 / (c_owner + f · (c_forwarded − c_direct))              [HAProxy on a core of its own]

and the scaling is calls/s(N) over N times one instance alone served directly (10^6 / c_alone): a fleet of N
scales to that fraction of N. The inputs are bench/cluster.py's CPU per call (user + system of each process): c_alone
one instance outside a fleet, c_owner an instance of the fleet fed by HAProxy, c_haproxy HAProxy's own process,
c_direct and c_forwarded a call sent to its session's owner and the same call sent to another instance (both
instances' CPU and Redis's, the forwarded request's nonce). With the recipe's sticky routing f is ~0 (a session's
calls go to its owner; calls are forwarded only when the stick table lost the session); round robin is f = (N−1)/N.

The recipe's instances also hand a connection whose first request names another instance's session to that owner
(MCPGATE_HANDOFF_DIR, serve/front/handoff.py): its later calls are then direct. `handoff` states what bench/cluster.py
measured of it beside the model (a handed connection's calls against direct ones, and one handoff's own CPU); the
model's c_forwarded stays the call forwarded over HTTP, what a balancer's connection shared by several instances'
sessions gets.

`model_table` (printed by bench/cluster.py, and by `python bench/fleet_docs.py --model` from the last run) states
the inputs and, for each routing of deploy/haproxy.cfg (ROUTING: sticky and by_prefix f = 0, roundrobin
(N−1)/N) and fleet size, f, calls/s(N), the scaling with HAProxy on the instances' cores and on cores of its own
(how many), and Redis commands per call (measured per path from Redis's INFO stats).
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Callable
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
    model = model_summary(results)
    if model is not None:
        text += " " + model
    return wrap(text, "  ")


def deploy_section(results: dict[str, Any], table: str) -> str:
    """deploy/README.md's figures, between the markers: where they come from, the tables, the per-call costs."""
    lines = [
        wrap(where(results) + " (the load clients on the same cores):"),
        "",
        table,
        "",
        wrap(per_call(results) + "."),
    ]
    model = model_text(results)
    if model is not None:
        lines += ["", wrap(model)]
    return "\n".join(lines)


# -- the model ------------------------------------------------------------------------------------------------

TARGET = 0.85  # issue 24: N instances on N cores scale to at least this fraction of N
RATIO_GOAL = 1.3  # issue 24: CPU per forwarded call at most this many times a direct one
SHARE = 0.25  # a forwarded fraction the model is also stated for (sticky routing is ~0, round robin (N-1)/N)


def inputs(results: dict[str, Any]) -> dict[str, float] | None:
    """The model's inputs (µs of CPU per call) from a run's cpu_us_per_call; None when the run has none."""
    cpu = results.get("cpu_us_per_call") or {}
    if not {"solo", "direct", "forwarded", "haproxy"} <= cpu.keys():
        return None
    direct, forwarded, by_haproxy = cpu["direct"], cpu["forwarded"], cpu["haproxy"]
    return {
        "alone": cpu["solo"]["instance"],
        "owner": by_haproxy["owner"] + by_haproxy.get("redis", 0.0),
        "haproxy": by_haproxy["haproxy"],
        "direct": direct["owner"] + direct.get("redis", 0.0),
        "forwarded": forwarded["owner"] + forwarded["forwarder"] + forwarded.get("redis", 0.0),
        "forwarder": forwarded["forwarder"],
        "redis": forwarded.get("redis", 0.0),
    }


def core_us(cost: dict[str, float], share: float, own_core: bool = False) -> float:
    """µs of the instances' cores per call: the owner's work, HAProxy's (unless it has a core of its own) and the
    forwarded share's extra."""
    return cost["owner"] + (0.0 if own_core else cost["haproxy"]) + share * (cost["forwarded"] - cost["direct"])


def calls_per_s(cost: dict[str, float], instances: int, share: float, own_core: bool = False) -> float:
    """The model's throughput of `instances` instances on as many cores."""
    return instances * 1e6 / core_us(cost, share, own_core)


def scaling(cost: dict[str, float], share: float) -> float:
    """calls/s(N) over N times one instance of the fleet (which forwards nothing): the fraction of N reached."""
    return core_us(cost, 0.0) / core_us(cost, share)


def against_alone(cost: dict[str, float], share: float, own_core: bool) -> float:
    """calls/s(N) over N lone instances served directly (no HAProxy, no Redis, no forwarding)."""
    return cost["alone"] / core_us(cost, share, own_core)


def share_at_target(cost: dict[str, float]) -> float:
    """The forwarded fraction up to which the fleet scales to at least TARGET·N."""
    return core_us(cost, 0.0) * (1 / TARGET - 1) / max(cost["forwarded"] - cost["direct"], 1e-9)


# The forwarded fraction f of a 2025 session's calls among N instances, per backend of deploy/haproxy.cfg
ROUTING: dict[str, Callable[[int], float]] = {
    "sticky": lambda n: 0.0,  # each session pinned to its owner by the stick table (learnt from initialize)
    "by_prefix": lambda n: 0.0,  # each call routed on the owner its session id names
    "roundrobin": lambda n: (n - 1) / n,  # no affinity: a call lands on its owner 1 time in N
}
SIZES = (1, 2, 4, 8, 16)  # fleet sizes the model is printed for


def commands(results: dict[str, Any], path: str) -> float | None:
    """Redis commands per call on a path as measured (None: a run from before they were counted)."""
    value = (results.get("cpu_us_per_call") or {}).get(path, {}).get("redis_commands")
    return None if value is None else float(value)


def model_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The model for each routing and fleet size: f, calls/s of N instances on N cores (HAProxy on those cores),
    the scaling (calls/s over N lone instances served directly) with HAProxy on those cores and on cores of its
    own (and how many), Redis commands per call."""
    cost = inputs(results)
    if cost is None:
        return []
    direct_commands, forwarded_commands = commands(results, "haproxy"), commands(results, "forwarded")
    rows = []
    for routing, fraction in ROUTING.items():
        for size in SIZES:
            share = fraction(size)
            per_call = None
            if direct_commands is not None and forwarded_commands is not None:
                per_call = direct_commands + share * max(forwarded_commands - (commands(results, "direct") or 0), 0)
            rows.append(
                {
                    "routing": routing,
                    "instances": size,
                    "forwarded": share,
                    "calls_per_s": calls_per_s(cost, size, share),
                    "scaling": against_alone(cost, share, own_core=False),
                    "scaling_own_core": against_alone(cost, share, own_core=True),
                    "haproxy_cores": size * cost["haproxy"] / core_us(cost, share, own_core=True),
                    "redis_commands": per_call,
                }
            )
    return rows


def handoff(results: dict[str, Any]) -> dict[str, float] | None:
    """What the run measured of the handoff (µs of CPU per call, every process's): `kept`, a session's calls on a
    connection another instance handed to the owner, over a direct call; `each`, one handoff's own CPU (calls each
    on a new connection handed to the owner, less the same calls each on a new connection to the owner). None: not
    measured."""
    cpu = results.get("cpu_us_per_call") or {}
    if not {"direct", "handed", "connection each", "handed each"} <= cpu.keys():
        return None

    def total(path: str) -> float:
        return float(sum(value for name, value in cpu[path].items() if name in ("owner", "forwarder", "redis")))

    return {
        "kept": total("handed") / total("direct"),
        "each": total("handed each") - total("connection each"),
        "connection": total("connection each") - total("direct"),
    }


def handoff_rows(results: dict[str, Any]) -> list[str]:
    found = handoff(results)
    if found is None:
        return []
    return [
        f"| a session's calls on a connection handed to its owner (MCPGATE_HANDOFF_DIR) / c_direct | "
        f"{found['kept']:.2f}× |",
        f"| one handoff's own CPU (a call on a new connection, handed, less one to the owner) | {found['each']:,.1f} |",
    ]


def model_table(results: dict[str, Any]) -> str:
    """The model as bench/cluster.py prints it (and `python bench/fleet_docs.py --model`): its measured inputs,
    then per routing and fleet size the prediction ("" when the run measured no CPU)."""
    cost, rows = inputs(results), model_rows(results)
    if cost is None or not rows:
        return ""
    lat = results["latency_p50_ms"]
    lines = [
        "| model input (CPU per echo call, user + system) | µs |",
        "|---|---:|",
        f"| c_alone: one instance outside a fleet, served directly | {cost['alone']:,.1f} |",
        f"| c_owner: an instance of the fleet fed by HAProxy (with its Redis share) | {cost['owner']:,.1f} |",
        f"| c_haproxy: HAProxy's own process | {cost['haproxy']:,.1f} |",
        f"| c_direct: a call sent to its session's owner (owner + Redis) | {cost['direct']:,.1f} |",
        f"| c_forwarded: sent to another instance (owner + forwarder + Redis) | {cost['forwarded']:,.1f} |",
        f"| c_forwarded / c_direct (goal ≤ {RATIO_GOAL:.2f}) | {cost['forwarded'] / cost['direct']:.2f}× |",
        *handoff_rows(results),
        f"| HAProxy's added latency, sequential p50 | {1000 * (lat['haproxy'] - lat['direct']):,.0f} µs |",
        "",
        "| routing | N | f forwarded | calls/s, N cores | scaling, HAProxy on the N cores | scaling, HAProxy "
        "on its own cores (cores) | Redis commands per call |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        redis = "–" if row["redis_commands"] is None else f"{row['redis_commands']:.3f}"
        lines.append(
            f"| {row['routing']} | {row['instances']} | {row['forwarded']:.2f} | {row['calls_per_s']:,.0f} | "
            f"{row['scaling']:.2f}·N | {row['scaling_own_core']:.2f}·N ({row['haproxy_cores']:.2f}) | {redis} |"
        )
    lines += [
        "",
        f"calls/s(N) = N·10^6 / (c_owner + c_haproxy + f·(c_forwarded − c_direct)); scaling = calls/s(N) over N "
        f"lone instances (N·10^6 / c_alone); the goal is ≥ {TARGET:.2f}·N. Without HAProxy's share on the N cores "
        "the denominator drops c_haproxy and HAProxy needs N·c_haproxy / (c_owner + f·(c_forwarded − c_direct)) "
        "cores of its own.",
    ]
    return "\n".join(lines)


def model_text(results: dict[str, Any]) -> str | None:
    """The model's measured inputs and its prediction, in a paragraph (None: the run measured no CPU)."""
    cost = inputs(results)
    if cost is None:
        return None
    ratio = cost["forwarded"] / cost["direct"]
    lat = results["latency_p50_ms"]
    added = lat["haproxy"] - lat["direct"]
    limit = share_at_target(cost)
    met = "met" if ratio <= RATIO_GOAL else "not met"
    return (
        f"**Model** (bench/fleet_docs.py; CPU per echo call, user + system, in µs): c_alone {cost['alone']:,.0f} "
        f"on one instance outside a fleet; c_owner {cost['owner']:,.0f} on an instance of the fleet fed by HAProxy "
        f"and c_haproxy {cost['haproxy']:,.0f} in HAProxy (which adds {added:.3f} ms of latency); c_direct "
        f"{cost['direct']:,.0f} for a call sent to its session's owner, c_forwarded {cost['forwarded']:,.0f} for "
        f"the same call sent to another instance (forwarder {cost['forwarder']:,.0f}, Redis's nonce "
        f"{cost['redis']:,.0f}): {ratio:.2f}× a direct call, the goal of {RATIO_GOAL:.2f}× {met}. N instances on "
        f"N cores, a fraction f of the calls forwarded: calls/s(N) = N·10^6 / (c_owner + c_haproxy + "
        f"f·(c_forwarded − c_direct)). Against one instance of the fleet that is 1.00·N with sticky routing "
        f"(f ≈ 0), {scaling(cost, SHARE):.2f}·N at f = {SHARE:.2f} and {scaling(cost, 0.75):.2f}·N for four "
        f"instances in round robin (f = 0.75); {TARGET:.2f}·N holds up to f = {limit:.2f}. Against N lone "
        f"instances served directly, sticky routing gives {against_alone(cost, 0.0, False):.2f}·N with HAProxy "
        f"on the instances' cores, {against_alone(cost, 0.0, True):.2f}·N with HAProxy on a core of its own "
        f"(where it spends {cost['haproxy'] / cost['owner']:.2f} of a core per instance's core): eight instances "
        f"on eight cores of this machine's speed, {calls_per_s(cost, 8, 0.0):,.0f} calls/s." + handoff_text(results)
    )


def handoff_text(results: dict[str, Any]) -> str:
    found = handoff(results)
    if found is None:
        return ""
    return (
        f" A connection whose first request lands on another instance is handed to the owner (MCPGATE_HANDOFF_DIR): "
        f"its session's later calls cost {found['kept']:.2f}× a direct call; the handoff itself "
        f"{found['each']:,.0f} µs (a new connection costs {found['connection']:,.0f} µs), less than forwarding every "
        f"call once the connection carries {max(1, math.ceil(found['each'] / max(cost_over(results), 1e-9)))} "
        "calls or more."
    )


def cost_over(results: dict[str, Any]) -> float:
    """µs a forwarded call costs over a direct one."""
    cost = inputs(results)
    return 0.0 if cost is None else cost["forwarded"] - cost["direct"]


def model_summary(results: dict[str, Any]) -> str | None:
    """The model in one sentence for README.md (each figure also in deploy/README.md's paragraph)."""
    cost = inputs(results)
    if cost is None:
        return None
    ratio = cost["forwarded"] / cost["direct"]
    return (
        f"The scaling model (deploy/README.md): a forwarded call costs {ratio:.2f}× the CPU of a direct one (goal "
        f"{RATIO_GOAL:.2f}×); with sticky routing N instances on N cores do 1.00·N one fleet instance's calls "
        f"({TARGET:.2f}·N holds up to a forwarded fraction f = {share_at_target(cost):.2f}), "
        f"{against_alone(cost, 0.0, False):.2f}·N a lone instance's ({against_alone(cost, 0.0, True):.2f}·N with "
        "HAProxy on a core of its own)."
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


if __name__ == "__main__":  # the two blocks alone, from bench/out/cluster.json (report.py --readme does more)
    import json
    import sys

    here = Path(__file__).resolve().parent
    sys.path.insert(0, str(here))
    import cluster

    run = json.loads((here / "out" / "cluster.json").read_text())
    if sys.argv[1:] == ["--model"]:  # print the model from the last run's inputs, write nothing
        print(model_table(run) or "bench/out/cluster.json has no CPU figures (bench/cluster.py --cpu-clients 0?)")
        sys.exit(0)
    for written in update(here.parent, run, cluster.table(run)):
        print(f"updated the fleet figures of {written}")
