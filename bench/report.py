"""Turn bench/out/results.json into results.md (tables, targets, notes) and plot.png.

`python bench/report.py [results.json] [out_dir]` re-renders without re-measuring;
`python bench/report.py --readme` rewrites the README's closing "## Performance" section from the last full run.
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys
from collections import Counter
from pathlib import Path

NAGLE_MS = 20.0  # a sequential p50 above this on loopback is Nagle + delayed ACK, not work
MODERN = ["mcpgate-modern", "mcpgate-modern-child"]  # mcpgate again, spoken to in 2026-07-28 requests
SERVE_ORDER = ["mcpgate", *MODERN, "supergateway", "mcp-proxy-npm", "mcp-proxy-py", "mcp-stdio", "floor", "direct"]
PEERS = ["supergateway", "mcp-proxy-npm", "mcp-proxy-py", "mcp-stdio"]
RELAY_ORDER = [
    "mcpgate-relay",
    "mcpgate-relay-modern",  # a 2026-07-28 host through the relay (--protocol-era modern)
    "mcpgate-relay-baseline",  # an older tree's relay (run.py --relay-baseline)
    "mcp-proxy-py",
    "mcp-stdio",
    "supergateway",
    "upstream-direct",
]
SIZES = ["65536", "1048576", "4194304", "8388608"]


def num(value, digits: int = 2) -> str:  # type: ignore[no-untyped-def]
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, (int, float)) and abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def get(row: dict | None, *keys):  # type: ignore[no-untyped-def]
    for key in keys:
        if not isinstance(row, dict) or key not in row:
            return None
        row = row[key]
    return row


def label(results: dict, name: str) -> str:
    if name == "direct":
        return "child over direct pipes (no gateway)"
    if name == "upstream-direct":
        return "the bench's HTTP client straight to the upstream (no relay)"
    return get(results, "gateways", name, "label") or name


def fastest(rows: dict, names: list[str], key: tuple, higher: bool = False) -> tuple[str | None, float | None]:
    """The peer with the best figure under `key` (lowest, or highest when `higher`), skipping Nagle-free rules."""
    best_name, best = None, None
    for name in names:
        value = get(rows.get(name), *key)
        if value is None or value != value:
            continue
        if best is None or (value > best if higher else value < best):
            best_name, best = name, value
    return best_name, best


def memory_rows(results: dict) -> dict[str, dict]:
    out = {}
    for name, entry in (results.get("memory") or {}).items():
        rows = {r["sessions"]: r for r in entry.get("rows", []) if "rss_kb" in r}
        counts = sorted(rows)
        row: dict = {
            "by_count": rows,
            "error": entry.get("error") or next((r["error"] for r in entry.get("rows", []) if "error" in r), None),
            "startup_s": entry.get("startup_s"),
        }
        if len(counts) >= 3:
            mid, top = counts[1], counts[-1]
            row["kb_per_session"] = (rows[top]["rss_kb"] - rows[mid]["rss_kb"]) / (top - mid)
            row["pss_kb_per_session"] = (rows[top]["pss_kb"] - rows[mid]["pss_kb"]) / (top - mid)
        out[name] = row
    return out


def serve_table(results: dict) -> list[str]:
    speed = results.get("speed") or {}
    levels = results["config"]["levels"]
    base = get(speed, "mcpgate", "seq", "p50_ms")
    head = (
        ["Gateway", "seq p50 ms", "seq p99 ms"]
        + [f"{n} cl. calls/s" for n in levels]
        + ["16 cl. p50 / p99 ms", f"{levels[-1]} cl. p50 / p99 ms", "CPU µs/call seq / 16 cl.", "seq p50 vs mcpgate"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in [n for n in SERVE_ORDER if n in speed] + [n for n in speed if n not in SERVE_ORDER]:
        row = speed[name]
        if "error" in row and "seq" not in row:
            lines.append(f"| {label(results, name)} | failed: {str(row['error'])[:120]} |" + " |" * (len(head) - 2))
            continue
        seq50 = get(row, "seq", "p50_ms")
        cells = [label(results, name), num(seq50, 3), num(get(row, "seq", "p99_ms"), 3)]
        cells += [num(get(row, f"c{n}", "calls_per_s"), 0) for n in levels]
        for n in (16, levels[-1]):
            p50, p99 = get(row, f"c{n}", "p50_ms"), get(row, f"c{n}", "p99_ms")
            cells.append(f"{num(p50)} / {num(p99)}" if p50 is not None else "–")
        cpu_seq, cpu16 = get(row, "seq", "cpu_us_per_call"), get(row, "c16", "cpu_us_per_call")
        cells.append(f"{num(cpu_seq, 0)} / {num(cpu16, 0)}" if cpu_seq is not None else "–")
        cells.append(f"{seq50 / base:.2f}x" if seq50 and base else "–")
        lines.append("| " + " | ".join(cells) + " |")
    for entry in (results.get("gateways") or {}).values():
        if entry.get("missing"):
            lines.append(f"| {entry['label']} | {entry['missing']} |" + " |" * (len(head) - 2))
    return lines


def cores_at_16(results: dict) -> list[str]:
    """Where the machine's cores went at 16 clients: the gateway's CPU a call beside what the load's client
    processes and the child servers spent in the same window (empty for a run that did not measure them)."""
    speed = results.get("speed") or {}
    peer, _ = fastest(speed, PEERS, ("c16", "calls_per_s"), higher=True)
    shares = []
    for name in [n for n in ("mcpgate", "mcpgate-modern", peer) if n]:
        gateway, rate = get(speed, name, "c16", "cpu_us_per_call"), get(speed, name, "c16", "calls_per_s")
        clients = get(speed, name, "c16", "clients_cpu_us_per_call")
        servers = get(speed, name, "c16", "servers_cpu_us_per_call")
        if None in (gateway, clients, servers, rate):
            return []
        shares.append(
            f"{label(results, name)} {gateway:.0f} in the gateway, {clients:.0f} in the clients and {servers:.0f} in "
            f"the child servers ({(gateway + clients + servers) * rate / 1e6:.2f} cores busy at {rate:,.0f} calls/s)"
        )
    ours, theirs = get(speed, "mcpgate", "c16", "cpu_us_per_call"), get(speed, peer, "c16", "cpu_us_per_call")
    text = (
        "Where the cores went at 16 clients, CPU µs a call over the same window: " + "; ".join(shares) + ". "
        f"The load's clients and the child servers cost every gateway alike, so on {results['machine']['nproc']} "
        "shared cores calls/s shows a gateway's own CPU diluted: mcpgate's CPU a call at 16 clients is "
        f"{theirs / ours:.2f}x below {label(results, peer)}'s."
    )
    import textwrap

    return [textwrap.fill(text, width=115, break_on_hyphens=False, break_long_words=False)]


def memory_table(results: dict) -> list[str]:
    mem = memory_rows(results)
    counts = results["config"]["memory_counts"]
    head = (
        ["Gateway", "processes"]
        + [f"RSS MB, {c} session{'s' if c > 1 else ''}" for c in counts]
        + [f"KB/session ({counts[1]}→{counts[-1]})", f"PSS MB, {counts[1]}", "PSS KB/session", "startup s"]
    )
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in [n for n in SERVE_ORDER if n in mem]:
        row = mem[name]
        by = row["by_count"]
        procs = by[min(by)]["processes"] if by else None
        cells = [label(results, name), str(procs or "–")]
        cells += [num(by[c]["rss_kb"] / 1024, 1) if c in by else "–" for c in counts]
        cells += [
            num(row.get("kb_per_session"), 1),
            num(by[counts[1]]["pss_kb"] / 1024, 1) if counts[1] in by else "–",
            num(row.get("pss_kb_per_session"), 1),
            num(row.get("startup_s")),
        ]
        if row.get("error"):
            cells[-1] += f" (error: {str(row['error'])[:100]})"
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def blob_table(results: dict) -> list[str]:
    speed = results.get("speed") or {}
    direct = get(speed, "direct", "blob_ms") or {}
    head = ["Path", "64 KiB ms", "1 MiB ms", "4 MiB ms", "8 MiB ms", "4 MiB vs direct pipes"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in [n for n in SERVE_ORDER if get(speed, n, "blob_ms") or get(speed, n, "errors", "blob")]:
        times = get(speed, name, "blob_ms") or {}
        cells = [label(results, name)] + [num(times.get(s), 1) for s in SIZES]
        four, ref = times.get("4194304"), direct.get("4194304")
        cells.append(f"{four / ref:.2f}x" if four and ref else "–")
        if not times:
            cells[1] = f"failed: {str(get(speed, name, 'errors', 'blob'))[:100]}"
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def relay_table(results: dict, key: str = "relay") -> list[str]:
    """The relays against one upstream: run.py's `relay` stage (mcpgate's upstream) or `relay_second` (a peer's)."""
    relay = results.get(key) or {}
    n = results["config"]["relay_inflight"]
    head = [
        "Relay",
        "seq p50 ms",
        "seq p99 ms",
        f"{n} in flight calls/s",
        f"{n} in flight p50 / p99 ms",
        f"CPU µs/call seq / {n} in flight",
        "RSS MB",
        "startup s",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in [x for x in RELAY_ORDER if x in relay]:
        row = relay[name]
        rss = get(row, "memory", "rss_kb")
        cells = [
            label(results, name) if name == "upstream-direct" else relay_label(name),
            num(get(row, "seq", "p50_ms"), 3),
            num(get(row, "seq", "p99_ms"), 3),
            num(get(row, "inflight", "calls_per_s"), 0),
            f"{num(get(row, 'inflight', 'p50_ms'))} / {num(get(row, 'inflight', 'p99_ms'))}",
            f"{num(get(row, 'seq', 'cpu_us_per_call'), 0)} / {num(get(row, 'inflight', 'cpu_us_per_call'), 0)}"
            if get(row, "seq", "cpu_us_per_call") is not None
            else "–",
            num(rss / 1024, 1) if rss else "–",
            num(row.get("startup_s")),
        ]
        if name == "upstream-direct":
            cells[3] = num(get(row, "inflight", "calls_per_s"), 0) + f" ({n} processes)"
        if row.get("errors"):
            cells[-1] += f" (errors: {str(row['errors'])[:120]})"
        lines.append("| " + " | ".join(cells) + " |")
    for name, why in (results.get(f"{key}_missing") or {}).items():
        lines.append(f"| {relay_label(name)} | skipped: {why} |" + " |" * (len(head) - 2))
    return lines


def second_relay_section(results: dict, level: str) -> list[str]:
    """The relays again, against the peer gateway run.py's second relay stage put upstream (when it ran)."""
    upstream = results.get("relay_second_upstream")
    if not upstream or not (results.get("relay_second") or results.get("relay_second_missing")):
        return []
    return [
        f"{level} Relay against another upstream: {label(results, upstream)}",
        "",
        *relay_table(results, "relay_second"),
        "",
    ]


def relay_label(name: str) -> str:
    return {
        "mcpgate-relay": "mcpgate-relay",
        "mcpgate-relay-modern": "mcpgate-relay, 2026-07-28 host (--protocol-era modern)",
        "mcpgate-relay-baseline": "mcpgate-relay, baseline tree",
        "mcp-proxy-py": "mcp-proxy 0.13.0 (PyPI) client mode",
        "mcp-stdio": "mcp-stdio 0.45.2 relay (PyPI)",
        "supergateway": "supergateway 4.0.0 --streamableHttp → stdio (npm)",
    }.get(name, name)


def targets(results: dict) -> list[str]:
    """Issue 4's targets as ratios within this run."""
    speed, relay, mem = results.get("speed") or {}, results.get("relay") or {}, memory_rows(results)
    lines = ["| Target (issue 4 unless marked) | Measured in this run | Met |", "|---|---|---|"]

    def add(text: str, measured: str, ok: bool | None) -> None:
        lines.append(f"| {text} | {measured} | {'yes' if ok else 'no' if ok is not None else '–'} |")

    ours = get(speed, "mcpgate", "seq", "p50_ms")
    peer, best = fastest(speed, PEERS, ("seq", "p50_ms"))
    if ours and best:
        add(
            "serve sequential p50 ≤ 0.75x the fastest peer",
            f"{ours:.3f} ms vs {label(results, peer)} {best:.3f} ms = {ours / best:.2f}x",
            ours <= 0.75 * best,
        )
    floor, direct = get(speed, "floor", "seq", "p50_ms"), get(speed, "direct", "seq", "p50_ms")
    if ours and floor and direct:
        add(
            "stretch: serve sequential p50 ≤ 1.3x (floor + direct pipes)",
            f"{ours:.3f} ms vs {floor:.3f} + {direct:.3f} ms = {ours / (floor + direct):.2f}x",
            ours <= 1.3 * (floor + direct),
        )
    ours16 = get(speed, "mcpgate", "c16", "calls_per_s")
    peer16, best16 = fastest(speed, PEERS, ("c16", "calls_per_s"), higher=True)
    if ours16 and best16:
        add(
            "16 clients: throughput ≥ 1.5x the fastest peer",
            f"{ours16:,.0f} vs {label(results, peer16)} {best16:,.0f} calls/s = {ours16 / best16:.2f}x",
            ours16 >= 1.5 * best16,
        )
        p99, peer_p99 = get(speed, "mcpgate", "c16", "p99_ms"), get(speed, peer16, "c16", "p99_ms")
        if p99 and peer_p99:
            add(
                "16 clients: p99 ≤ 0.5x that peer's p99",
                f"{p99:.2f} vs {peer_p99:.2f} ms = {p99 / peer_p99:.2f}x",
                p99 <= 0.5 * peer_p99,
            )
    ours_mem = mem.get("mcpgate", {})
    counts = results["config"]["memory_counts"]
    at20 = get(ours_mem, "by_count", 20, "rss_kb")
    if at20:
        pss = get(ours_mem, "by_count", 20, "pss_kb")
        add(
            "memory: gunicorn master + worker ≤ 60 MB with 20 sessions",
            f"RSS {at20 / 1024:.1f} MB (PSS {pss / 1024:.1f} MB)",
            at20 / 1024 <= 60,
        )
    if ours_mem.get("kb_per_session") is not None:
        add(
            f"memory: ≤ 50 KB per extra session ({counts[1]}→{counts[-1]})",
            f"{ours_mem['kb_per_session']:.1f} KB RSS ({ours_mem['pss_kb_per_session']:.1f} KB PSS)",
            ours_mem["kb_per_session"] <= 50,
        )
    held = get(results, "capacity", "mcpgate", "held_sessions_with_get_streams")
    top = max(ours_mem.get("by_count", {}) or [0])
    if held is not None or top:
        most = max(held or 0, top)
        cap = get(results, "capacity", "mcpgate", "cap") or 0
        add(
            "1,000 concurrent sessions in one worker",
            f"{top} idle sessions; {held} sessions with GET streams (cap {cap})",
            most >= 1000 if max(cap, top) >= 1000 else None,
        )
    four, ref = get(speed, "mcpgate", "blob_ms", "4194304"), get(speed, "direct", "blob_ms", "4194304")
    if four and ref:
        add("4 MiB result ≤ 1.2x direct pipes", f"{four:.1f} vs {ref:.1f} ms = {four / ref:.2f}x", four <= 1.2 * ref)
    for name in MODERN:
        for text, measured, ok in modern_targets(speed, name):
            add(f"{text} ({label(results, name)})", measured, ok)
    peers_r = ["mcp-proxy-py", "mcp-stdio", "supergateway"]
    r_ours = get(relay, "mcpgate-relay", "seq", "p50_ms")
    rp, rbest = fastest(relay, peers_r, ("seq", "p50_ms"))
    if r_ours and rbest:
        add(
            "relay sequential p50 ≤ 0.75x the fastest peer relay",
            f"{r_ours:.3f} vs {relay_label(rp)} {rbest:.3f} ms = {r_ours / rbest:.2f}x",
            r_ours <= 0.75 * rbest,
        )
    r16 = get(relay, "mcpgate-relay", "inflight", "calls_per_s")
    rp16, rbest16 = fastest(relay, peers_r, ("inflight", "calls_per_s"), higher=True)
    if r16 and rbest16:
        add(
            "relay 16 in flight ≥ 1.5x the fastest peer relay",
            f"{r16:,.0f} vs {relay_label(rp16)} {rbest16:,.0f} calls/s = {r16 / rbest16:.2f}x",
            r16 >= 1.5 * rbest16,
        )
    rss = get(relay, "mcpgate-relay", "memory", "rss_kb")
    if rss:
        add("relay resident memory ≤ 35 MB", f"{rss / 1024:.1f} MB", rss / 1024 <= 35)
    for text, measured, ok in relay_era_targets(relay):
        add(text, measured, ok)
    for text, measured, ok in relay_upstream_targets(results):
        add(text, measured, ok)
    return lines


def relay_upstream_targets(results: dict) -> list[tuple[str, str, bool | None]]:
    """Issue 24: the relay's sequential p50 ≤ 0.75x mcp-stdio's against the same upstream (mcpgate's and the
    second one's), and its CPU per sequential call ≤ 0.3 ms."""
    out: list[tuple[str, str, bool | None]] = []
    second = results.get("relay_second_upstream") or "second"
    for key, upstream in (("relay", "mcpgate"), ("relay_second", second)):
        relay = results.get(key) or {}
        ours, peer = get(relay, "mcpgate-relay", "seq", "p50_ms"), get(relay, "mcp-stdio", "seq", "p50_ms")
        if ours and peer:
            out.append(
                (
                    f"issue 24: relay sequential p50 ≤ 0.75x mcp-stdio's, upstream {label(results, upstream)}",
                    f"{ours:.3f} vs {peer:.3f} ms = {ours / peer:.2f}x",
                    ours <= 0.75 * peer,
                )
            )
        cpu = get(relay, "mcpgate-relay", "seq", "cpu_us_per_call")
        if cpu:
            out.append(
                (
                    f"issue 24: relay CPU per sequential call ≤ 0.3 ms, upstream {label(results, upstream)}",
                    f"{cpu / 1000:.3f} ms",
                    cpu <= 300,
                )
            )
    return out


def relay_era_targets(relay: dict) -> list[tuple[str, str, bool | None]]:
    """Issue 11: the relay at least as fast as the baseline tree's (when measured: --relay-baseline), sequential
    p50 and 16 in flight; the 2026-07-28 host's row as ratios to the legacy host's (measured, no target)."""
    out: list[tuple[str, str, bool | None]] = []
    seq, seq_base = get(relay, "mcpgate-relay", "seq", "p50_ms"), get(relay, "mcpgate-relay-baseline", "seq", "p50_ms")
    if seq and seq_base:
        out.append(
            (
                "issue 11: relay sequential p50 ≤ the baseline tree's",
                f"{seq:.3f} vs {seq_base:.3f} ms = {seq / seq_base:.2f}x",
                seq <= seq_base,
            )
        )
    rate = get(relay, "mcpgate-relay", "inflight", "calls_per_s")
    rate_base = get(relay, "mcpgate-relay-baseline", "inflight", "calls_per_s")
    if rate and rate_base:
        out.append(
            (
                "issue 11: relay 16 in flight ≥ the baseline tree's",
                f"{rate:,.0f} vs {rate_base:,.0f} calls/s = {rate / rate_base:.2f}x",
                rate >= rate_base,
            )
        )
    modern, modern_rate = (
        get(relay, "mcpgate-relay-modern", "seq", "p50_ms"),
        get(relay, "mcpgate-relay-modern", "inflight", "calls_per_s"),
    )
    if modern and seq:
        out.append(
            (
                "issue 11 (measured): 2026-07-28 host's relay sequential p50 vs the 2025 host's",
                f"{modern:.3f} vs {seq:.3f} ms = {modern / seq:.2f}x",
                None,
            )
        )
    if modern_rate and rate:
        out.append(
            (
                "issue 11 (measured): 2026-07-28 host's relay 16 in flight vs the 2025 host's",
                f"{modern_rate:,.0f} vs {rate:,.0f} calls/s = {modern_rate / rate:.2f}x",
                None,
            )
        )
    return out


def modern_targets(speed: dict, name: str) -> list[tuple[str, str, bool]]:
    """Issue 9: 2026-07-28 requests on the pooled child no slower than the legacy session path (the mcpgate row,
    the same child, the same run): sequential p50 and 16-client throughput as ratios."""
    out = []
    ours, legacy = get(speed, name, "seq", "p50_ms"), get(speed, "mcpgate", "seq", "p50_ms")
    if ours and legacy:
        out.append(
            (
                "issue 9: 2026-07-28 sequential p50 ≤ the legacy session path's",
                f"{ours:.3f} vs {legacy:.3f} ms = {ours / legacy:.2f}x",
                ours <= legacy,
            )
        )
    ours16, legacy16 = get(speed, name, "c16", "calls_per_s"), get(speed, "mcpgate", "c16", "calls_per_s")
    if ours16 and legacy16:
        out.append(
            (
                "issue 9: 2026-07-28 16-client throughput ≥ the legacy session path's",
                f"{ours16:,.0f} vs {legacy16:,.0f} calls/s = {ours16 / legacy16:.2f}x",
                ours16 >= legacy16,
            )
        )
    return out


def notes(results: dict) -> list[str]:
    out = []
    for name, row in (results.get("speed") or {}).items():
        p50 = get(row, "seq", "p50_ms")
        if p50 and p50 > NAGLE_MS:
            out.append(
                f"- **{label(results, name)}**: {p50:.1f} ms per sequential call on loopback: the signature "
                "of Nagle's algorithm meeting delayed ACKs (a reply written in two pieces without "
                "TCP_NODELAY), not of work. Its throughput rows are bounded by the same stall."
            )
        for metric, errors in (row.get("errors") or {}).items():
            out.append(f"- {label(results, name)}: {metric} failed: {'; '.join(map(str, errors))[:300]}")
        for key, value in row.items():
            if isinstance(value, dict) and value.get("errors"):
                out.append(
                    f"- {label(results, name)}: {key}: {value['errors']} failed calls, e.g. "
                    f"{'; '.join(value.get('error_samples') or [])[:200]}"
                )
    for entry in (results.get("gateways") or {}).values():
        if entry.get("missing"):
            out.append(f"- {entry['label']}: {entry['missing']}.")
        if entry.get("note") and entry.get("client") == "modern":
            out.append(f"- {entry['label']}: {entry['note']}.")
        elif entry.get("note"):
            out.append(f"- {entry['label']}: {entry['note']}, so its memory per session excludes a child.")
    cap = get(results, "capacity", "mcpgate")
    if cap:
        out.append(
            f"- Capacity: one mcpgate worker held {cap['held_sessions_with_get_streams']} sessions, each "
            f"with an open GET stream and its own child (stepped by {results['config']['capacity_step']} "
            f"up to {cap['cap']}); first error: {cap['first_error'] or 'none'}."
        )
    for name, row in (results.get("relay") or {}).items():
        for metric, errors in (row.get("errors") or {}).items():
            out.append(f"- relay {name}: {metric} failed: {'; '.join(map(str, errors))[:300]}")
    if results.get("leftover_children_killed"):
        out.append(
            f"- {results['leftover_children_killed']} child servers outlived their gateway and were killed "
            "by the bench."
        )
    return out


def markdown(results: dict) -> str:
    m = results["machine"]
    cfg = results["config"]
    peers = ", ".join(f"{k} {v}" for k, v in m.items() if "(" in k)
    lines = [
        "# mcpgate benchmark results",
        "",
        f"Made by `{results['command']}` ({results['mode']} mode, {cfg['rounds']} round(s), gateways interleaved "
        f"in every round, medians over rounds) on {m['date']}: {m['nproc']} CPUs ({m.get('cpu') or 'unknown'}), "
        f"{m['ram_gib']} GiB RAM, Linux {m['kernel']}, Python {m['python']}, Node {m.get('node', '–')}; "
        f"peers: {peers or 'none installed'}. Load average at start: "
        f"{', '.join(f'{x:.2f}' for x in m['load_avg_at_start'])} (a shared machine: compare ratios, not absolute "
        f"times). Took {results.get('elapsed_s', 0) / 60:.1f} min.",
        "",
        f"mcpgate measured: `{get(results, 'source', 'mcpgate_source')}` at commit "
        f"{get(results, 'source', 'git_head')}, uncommitted changes in mcpgate/: "
        f"{get(results, 'source', 'uncommitted_in_mcpgate')}"
        + (f" ({get(results, 'source', 'snapshot')})" if get(results, "source", "snapshot") else "")
        + ".",
        "",
        "Every gateway fronts the same stdlib child (`bench/child_server.py`, run with `python -S`); the client is "
        "bench/mcpclient.py's lean HTTP/1.1 connection (one send per request, the reply's head split by hand: about "
        "15 µs of the client's CPU a call, against about 65 for http.client's), one kept-alive connection per "
        "session, one session per client process; calls are "
        f"`tools/call echo`. Sequential: {cfg['seq_calls']} calls; concurrent: {cfg['duration_s']:g} s per level. "
        "Floor: the same client against a one-thread socket server that returns a canned reply. "
        "The 2026-07-28 rows: the same mcpgate and child, each client process sending stateless requests (no "
        "initialize, no session; MCP-Protocol-Version, Mcp-Method, Mcp-Name headers and params._meta) on its own "
        "connection; the pool of children of the one principal serves them all. "
        "CPU µs/call: user + system time of the gateway's own processes (every thread, child servers excluded, "
        "from /proc schedstat) over the measured calls; unlike latency it barely moves with the machine's load.",
        "",
        "## Serve: latency and throughput",
        "",
        *serve_table(results),
        "",
        *[line for text in cores_at_16(results) for line in (text, "")],
        "## Serve: memory of the gateway's own processes (child servers excluded)",
        "",
        "RSS sums each process's resident set (gunicorn: master + worker, which share pages after the fork); "
        "PSS splits shared pages between the processes that map them. Sessions are initialized, then idle.",
        "",
        *memory_table(results),
        "",
        "## Serve: big results (tools/call returning N bytes of text)",
        "",
        *blob_table(results),
        "",
        "## Relay: a stdio client through the relay to one mcpgate upstream",
        "",
        *relay_table(results),
        "",
        *second_relay_section(results, "##"),
        "## Against the targets",
        "",
        *targets(results),
        "",
        "## Notes",
        "",
        *(notes(results) or ["- none"]),
        "",
    ]
    return "\n".join(lines)


def plot(results: dict, target: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    speed = results.get("speed") or {}
    levels = results["config"]["levels"]
    names = [n for n in SERVE_ORDER if n in speed and n != "direct"]
    colors = {
        "mcpgate": "#d62728",
        "mcpgate-modern": "#ff7f0e",
        "mcpgate-modern-child": "#e377c2",
        "supergateway": "#1f77b4",
        "mcp-proxy-npm": "#2ca02c",
        "mcp-proxy-py": "#9467bd",
        "mcp-stdio": "#8c564b",
        "floor": "#7f7f7f",
        "direct": "#000000",
    }
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    ax = axes[0][0]
    for name in names:
        p50 = [get(speed, name, f"c{n}", "p50_ms") for n in levels]
        p99 = [get(speed, name, f"c{n}", "p99_ms") for n in levels]
        if any(p50):
            ax.plot(levels, p50, "o-", color=colors.get(name), label=f"{name} p50")
            ax.plot(levels, p99, "x--", color=colors.get(name), alpha=0.5, linewidth=1)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="concurrent client processes",
        ylabel="ms per call",
        title="Latency (p50 solid, p99 dashed)",
    )
    ax.set_xticks(levels, [str(n) for n in levels])
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    ax = axes[0][1]
    for name in names:
        rate = [get(speed, name, f"c{n}", "calls_per_s") for n in levels]
        if any(rate):
            ax.plot(levels, rate, "o-", color=colors.get(name), label=name)
    ax.set(xscale="log", xlabel="concurrent client processes", ylabel="calls/s", title="Throughput")
    ax.set_xticks(levels, [str(n) for n in levels])
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    ax = axes[1][0]
    for name, row in memory_rows(results).items():
        by = row["by_count"]
        if by:
            counts = sorted(by)
            ax.plot(counts, [by[c]["rss_kb"] / 1024 for c in counts], "o-", color=colors.get(name), label=name)
    ax.set(
        xscale="log",
        xlabel="idle sessions",
        ylabel="RSS MB (gateway only, children excluded)",
        title="Memory against sessions",
    )
    ax.set_ylim(bottom=0)
    counts = results["config"]["memory_counts"]
    ax.set_xticks(counts, [str(c) for c in counts])
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    ax = axes[1][1]
    for name in [n for n in SERVE_ORDER if get(speed, n, "blob_ms")]:
        times = get(speed, name, "blob_ms")
        sizes = [int(s) for s in SIZES if times.get(s)]
        ax.plot([s / 1024 for s in sizes], [times[str(s)] for s in sizes], "o-", color=colors.get(name), label=name)
    ax.set(xscale="log", yscale="log", xlabel="result size KiB", ylabel="ms per call", title="Big results")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    m = results["machine"]
    fig.suptitle(
        f"mcpgate bench ({results['mode']}, {m['nproc']} CPUs, {m['ram_gib']} GiB, Python {m['python']}, "
        f"{m['date'][:10]})"
    )
    fig.tight_layout()
    fig.savefig(target, dpi=90)
    plt.close(fig)


def write(results: dict, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.md").write_text(markdown(results))
    try:
        plot(results, out_dir / "plot.png")
    except ImportError:
        print("matplotlib is not installed: no plot (pip install -r bench/requirements.txt)", file=sys.stderr)


IDLE_LEAVES = {  # stacks that are waits, not work: the hub blocked in its loop, a pool thread waiting for a job
    "Hub.run (gevent/hub.py)",
    "acquire_with_timeout (gevent/_threading.py)",
}


SYSCALL_LEAVES = (
    "SocketMixin.send ",
    "SocketMixin.recv_into ",
    "SocketMixin.recv ",
    "SocketMixin.getsockopt ",
    "ChildProcess._write_now ",
    "_read_chunks ",
)  # Python frames whose self time is a system call
AREAS = (
    ("mcpgate/", "mcpgate"),
    ("gevent/pywsgi", "gevent.pywsgi (HTTP parse/write)"),
    ("email/", "email header parser (via http.client.parse_headers)"),
    ("http/client", "http.client"),
    ("flask/", "flask/werkzeug"),
    ("werkzeug/", "flask/werkzeug"),
    ("json/", "json"),
    ("gunicorn/", "gunicorn"),
    ("gevent/", "gevent (hub, queues, timeouts)"),
)


def area_of(frame: str) -> str:
    if frame.startswith(SYSCALL_LEAVES):
        return "system calls (socket send/recv, pipe write/read)"
    return next((name for key, name in AREAS if key in frame), "other (stdlib, importlib...)")


def profile_summary(raw_path: Path, top: int = 25) -> str:
    """Top functions of a py-spy raw (collapsed) profile: self and inclusive share of the busy samples.

    py-spy counts a gevent hub sitting in its C loop as active; a sample whose only Python frame is Hub.run is
    mostly that wait (plus libev's C dispatch, which cannot be told apart without --native), so it is counted
    apart, as are thread-pool threads waiting for work.
    """
    self_counts: Counter[str] = Counter()
    incl_counts: Counter[str] = Counter()
    total = idle = 0
    for line in raw_path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        frames = [f for f in frames if " (" in f]  # drop process / thread labels
        total += count
        if not frames or frames[-1] in IDLE_LEAVES:
            idle += count
            continue
        self_counts[frames[-1]] += count
        for frame in set(frames):
            incl_counts[frame] += count
    busy = max(1, total - idle)
    areas: Counter[str] = Counter()
    for frame, count in self_counts.items():
        areas[area_of(frame)] += count
    lines = [
        f"{raw_path.name}: {total} samples; {idle} idle (hub loop / pool waits) left out; "
        f"percentages of the {total - idle} busy samples",
        "",
        "py-spy samples wall time: a thread descheduled inside send()/write() after waking its peer counts "
        "as busy there, so the system-call share is mostly waiting; serve-seq-perf.txt (perf, on-CPU only) "
        "shows how much of the worker's CPU is the interpreter and how much the kernel.",
        "",
        "self %  area",
    ]
    lines += [f"{100 * c / busy:6.1f}  {a}" for a, c in areas.most_common()]
    lines += ["", "self %  function"]
    lines += [f"{100 * c / busy:6.1f}  {f}" for f, c in self_counts.most_common(top)]
    lines += ["", "incl %  function"]
    lines += [f"{100 * c / busy:6.1f}  {f}" for f, c in incl_counts.most_common(top)]
    return "\n".join(lines) + "\n"


README_HEADING = "## Performance"


def readme_section(results: dict) -> str:
    """The README's closing "## Performance" section: how the figures were made, the plot, the tables."""
    import textwrap

    m, cfg = results["machine"], results["config"]
    wrap = functools.partial(textwrap.fill, width=115, break_on_hyphens=False, break_long_words=False)
    return "\n".join(
        [
            README_HEADING,
            "",
            wrap(
                f"Measured on {m['date'][:10]} by `{results['command']}` (after `python bench/run.py "
                f"--install-peers`) on a shared {m['nproc']}-CPU machine with {m['ram_gib']} GiB RAM (Linux "
                f"{m['kernel']}, Python {m['python']}, Node {m.get('node', '–')}). Every gateway fronts the same "
                "stdlib stdio child; the client is a lean HTTP/1.1 one of the bench's own (bench/mcpclient.py: "
                "about 15 µs of its CPU a call, a quarter of http.client's) on kept-alive connections, one session "
                f"per client process (the 2026-07-28 rows: stateless requests, no session, served by mcpgate's pool of "
                f"children); gateways run interleaved in {cfg['rounds']} rounds and the figures are medians. Absolute "
                "times drift with the machine's load; the ratios within one run are what compare. Every figure, the "
                "notes and the machine details: "
                "[bench/results.md](bench/results.md) (a run also writes its raw figures to `bench/out/results.json`)."
            ),
            "",
            "![Latency and throughput against concurrent clients, memory against sessions, time of big results]"
            "(bench/plot.png)",
            "",
            "### Serve (tools/call echo through each gateway)",
            "",
            *serve_table(results),
            "",
            *[line for text in cores_at_16(results) for line in (text, "")],
            "### Memory of the gateway's own processes with idle sessions (child servers excluded)",
            "",
            *memory_table(results),
            "",
            wrap(
                "Where an idle gateway's RSS goes (2026-12-04, `python bench/imports.py --only plain --sessions 20` "
                "and /proc/<pid>/smaps): gunicorn's master is about 26 MB, of which the interpreter and gunicorn's own "
                "imports are 24.5 MB (ssl's alone 5 MB) and the gateway's settings and start checks about 2 MB; the "
                "worker about 33 MB, of which 15.5 MB are the master's heap pages, mapped from the fork on and so "
                "counted in both processes' RSS (PSS shares them out). gunicorn with a gevent worker imported after "
                "the fork, serving a three-line app, takes 51.7 MB: the gateway's own part is about 7.6 MB. An idle "
                "worker runs no OpenSSL digest, whose first run maps about 1 MB of libcrypto into a process."
            ),
            "",
            "### Big results",
            "",
            *blob_table(results),
            "",
            wrap(
                "Each row's big results come from one session kept through every round (bench/blob_stage.py), as "
                "the pooled child and the child over direct pipes are kept. A 2025 session's child is its own, and "
                "one opened for the round has not yet carried a result of megabytes: its allocator maps each "
                "result's buffers afresh, about 2,000 page faults and 4 ms of the child's own CPU per 4 MiB, the same "
                "without any gateway (`python bench/blob_stage.py --fresh` measures that way). In the worker a line "
                "longer than one read is written into one buffer that becomes the line, so a result is held once: "
                "a 4 MiB result costs it about 2.5 ms of CPU and no page faults, its first one too, and a large "
                "result sent as an SSE event is copied once."
            ),
            "",
            "### Relay (stdio client → relay → one mcpgate upstream)",
            "",
            *relay_table(results),
            "",
            *second_relay_section(results, "###"),
            "### Against the targets",
            "",
            *targets(results),
            "",
            wrap(
                "Re-run: `python bench/run.py` (about 15 minutes; writes into bench/out/ only), `python bench/run.py "
                "--publish` (the same, and rewrites bench/results.md and bench/plot.png), "
                "`python bench/run.py --quick` (2-3 minutes, into bench/out/), `python bench/run.py --profile` "
                "(py-spy profiles of the serve worker), `python bench/report.py --readme` (this section from the last "
                "full run). A change's cost is told apart from the machine's noise by `python bench/instructions.py "
                "--base <tree> --new <tree>` (the worker's instructions per call under callgrind; valgrind and gcc; "
                "`--pause 0.01` paces the client so that the worker waits for every request as a native one does, "
                "the only way a change to the waits shows) and `python bench/ab.py` (CPU per call of two trees in "
                "interleaved slices). `python bench/compiled.py` measures an option mcpgate does not take: the same "
                "source with the request path's modules compiled by mypyc (2026-12-04: 0.861x the instructions of a "
                "2025 `tools/call`, 0.918x of a 2026-07-28 pooled call; CPython's own loop and object code run about "
                "85 % of a worker's instructions). The bench's own "
                "dependencies are in `bench/requirements.txt`; none is a dependency of mcpgate."
            ),
            "",
        ]
    )


def update_readme(readme: Path, section: str) -> None:
    """Replace the README's closing Performance section (or append it); nothing above it changes."""
    text = readme.read_text()
    at = text.find("\n" + README_HEADING + "\n")
    head = text[: at + 1] if at >= 0 else text.rstrip("\n") + "\n\n"
    readme.write_text(head + section)


if __name__ == "__main__":
    import argparse

    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "results",
        nargs="?",
        type=Path,
        help="results.json (default: bench/out/results-full.json with --readme, else bench/out/results.json)",
    )
    parser.add_argument("out_dir", nargs="?", type=Path, help="where results.md and plot.png go")
    parser.add_argument("--readme", action="store_true", help="rewrite README.md's closing Performance section")
    args = parser.parse_args()
    source = args.results or here / "out" / ("results-full.json" if args.readme else "results.json")
    if args.readme:
        fleet = here / "out" / "cluster.json"  # bench/cluster.py's last run: the fleet figures of both READMEs
        if fleet.exists():
            import cluster
            import fleet_docs

            fleet_results = json.loads(fleet.read_text())
            for path in fleet_docs.update(here.parent, fleet_results, cluster.table(fleet_results)):
                print(f"updated the fleet figures of {path} from {fleet}")
        if source.exists():
            update_readme(here.parent / "README.md", readme_section(json.loads(source.read_text())))
            print(f"updated {here.parent / 'README.md'} from {source}")
        else:
            print(f"{source} is missing (python bench/run.py makes it): the Performance section is left as it is")
    else:
        data = json.loads(source.read_text())
        dest = args.out_dir or source.parent
        write(data, dest)
        print(f"wrote {dest / 'results.md'} and {dest / 'plot.png'}")
