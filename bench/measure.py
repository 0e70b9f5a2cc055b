"""The measurements: sequential latency, concurrent load from client processes, big results, memory
with idle sessions, the sessions/streams one worker holds, and relays over pipes.

Latencies are kept in milliseconds; each function returns plain dicts for results.json.
"""

from __future__ import annotations

import http.client
import json
import math
import multiprocessing
import random
import time
from array import array
from collections.abc import Callable

from mcpclient import BenchError, HttpSession, PipeSession

_fork = multiprocessing.get_context("fork")


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    if not sorted_values:
        return float("nan")
    return sorted_values[max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))]


def summary(latencies_ms: list[float]) -> dict[str, float]:
    values = sorted(latencies_ms)
    return {
        "n": len(values),
        "p50_ms": percentile(values, 0.50),
        "p99_ms": percentile(values, 0.99),
        "mean_ms": sum(values) / len(values) if values else float("nan"),
    }


CpuClock = Callable[[], int]  # the measured gateway's CPU time so far, in ns
CpuByPid = Callable[[], dict[int, int]]  # the CPU time so far of each of a set of processes, in ns


def with_cpu(result: dict, cpu_ns: int | None, calls: int) -> dict:
    """Add the gateway's own CPU time per call (user + system, all its threads, children excluded)."""
    if cpu_ns is not None and calls:
        result["cpu_us_per_call"] = cpu_ns / calls / 1000.0
    return result


def timed_loop(
    call: Callable[[], None], count: int, time_cap_s: float, warmup: int = 50, cpu: CpuClock | None = None
) -> dict[str, float]:
    """`count` sequential calls (fewer if `time_cap_s` passes first: a Nagle-bound gateway takes 40 ms each)."""
    for _ in range(warmup):
        call()
    latencies = []
    clock = time.perf_counter
    stop_at = clock() + time_cap_s
    cpu_began = cpu() if cpu else None
    for _ in range(count):
        began = clock()
        call()
        ended = clock()
        latencies.append((ended - began) * 1000.0)
        if ended > stop_at:
            break
    cpu_used = cpu() - cpu_began if cpu and cpu_began is not None else None
    return with_cpu(summary(latencies), cpu_used, len(latencies))


Client = type[HttpSession]  # HttpSession (a legacy session) or StatelessSession (2026-07-28 requests)


def sequential_http(
    port: int, path: str, count: int, time_cap_s: float, cpu: CpuClock | None = None, client: Client = HttpSession
) -> dict[str, float]:
    session = client(port, path).initialize()
    try:
        return timed_loop(session.echo, count, time_cap_s, cpu=cpu)
    finally:
        session.delete()
        session.close()


# -- concurrent client processes ---------------------------------------------------------------------


def _load_worker(port: int, path: str, duration: float, ready, go, start_at, queue, client: Client, sampled) -> None:  # type: ignore[no-untyped-def]
    session = None
    try:
        session = client(port, path).initialize()
        for _ in range(10):
            session.echo()
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        session = None
        failure = f"setup: {exc!r}"[:300]
    try:
        ready.wait(300)
        go.wait(60)
    except Exception:  # noqa: BLE001 - a broken barrier: the parent gave up
        return
    if session is None:
        queue.put(("error", failure))
        return
    # Every process measures the same window: calls completed between start_at and start_at + duration.
    latencies = array("d")
    clock = time.perf_counter
    began = start_at.value
    stop_at = began + duration
    time.sleep(max(0.0, began - clock()))
    errors = 0
    error_text = ""
    cpu_began = time.process_time_ns()  # this client's own CPU over the window (where the cores go, not a figure)
    ended = clock()
    while ended < stop_at:
        t0 = clock()
        try:
            session.echo()
        except Exception as exc:  # noqa: BLE001 - counted; the session is reopened once
            errors += 1
            error_text = repr(exc)[:300]
            try:
                session.close()
                session = client(port, path).initialize()
            except Exception:  # noqa: BLE001
                break
            ended = clock()
            continue
        ended = clock()
        if ended <= stop_at:
            latencies.append((ended - t0) * 1000.0)
    queue.put(("ok", latencies.tobytes(), errors, error_text, time.process_time_ns() - cpu_began))
    sampled.wait(60)  # the session (and a gateway's child for it) lives until the parent has read the CPU clocks
    session.delete()
    session.close()


def concurrent_http(
    port: int,
    path: str,
    processes: int,
    duration: float,
    cpu: CpuClock | None = None,
    client: Client = HttpSession,
    servers_cpu: CpuByPid | None = None,
) -> dict[str, float]:
    """Throughput and latency with `processes` client processes, each with its own session and connection
    (a 2026-07-28 client: its own connection, no session).

    Calls are counted when they complete inside one common window of `duration` seconds that starts once
    every process has its session (perf_counter is CLOCK_MONOTONIC on Linux: the same clock in every process).
    Besides the gateway's CPU (`cpu`), the result says what the load's client processes and the child servers
    (`servers_cpu`, their clock) spent a call over the same window: on a machine whose cores they share with
    the gateway, calls/s is bounded by the three together.
    """
    ready, go, sampled = _fork.Barrier(processes + 1), _fork.Barrier(processes + 1), _fork.Event()
    start_at = _fork.Value("d", 0.0, lock=False)
    queue = _fork.Queue()
    workers = [
        _fork.Process(
            target=_load_worker, args=(port, path, duration, ready, go, start_at, queue, client, sampled), daemon=True
        )
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    latencies: list[float] = []
    errors, setup_errors = 0, 0
    messages: list[str] = []
    cpu_used = servers_used = None
    clients_used = 0
    try:
        ready.wait(300)
        start_at.value = time.perf_counter() + 0.05 + 0.002 * processes
        go.wait(60)
        if cpu or servers_cpu:  # the gateway's (and the child servers') CPU over the window the calls are counted in
            time.sleep(max(0.0, start_at.value - time.perf_counter()))
            cpu_began = cpu() if cpu else 0
            servers_began = servers_cpu() if servers_cpu else {}
            time.sleep(max(0.0, start_at.value + duration - time.perf_counter()))
            cpu_used = cpu() - cpu_began if cpu else None
            if servers_cpu:  # a process that ended in the window is left out; one that began counts from zero
                servers_used = sum(ns - servers_began.get(pid, 0) for pid, ns in servers_cpu().items())
        sampled.set()  # (again in finally, for a window that failed)
        for _ in workers:
            item = queue.get(timeout=duration + 300)
            if item[0] == "error":
                setup_errors += 1
                messages.append(item[1])
                continue
            values = array("d")
            values.frombytes(item[1])
            latencies.extend(values)
            errors += item[2]
            clients_used += item[4]
            if item[3]:
                messages.append(item[3])
    finally:
        sampled.set()
        for worker in workers:
            worker.join(30)
            if worker.is_alive():
                worker.kill()
                worker.join(5)
    result = with_cpu(summary(latencies), cpu_used, len(latencies))
    if latencies:
        result["clients_cpu_us_per_call"] = clients_used / len(latencies) / 1000.0
        if servers_used is not None:
            result["servers_cpu_us_per_call"] = servers_used / len(latencies) / 1000.0
    result.update(
        {
            "processes": processes,
            "calls": len(latencies),
            "window_s": duration,
            "calls_per_s": len(latencies) / duration,
            "errors": errors + setup_errors,
            "error_samples": messages[:3],
        }
    )
    return result


# -- big results -------------------------------------------------------------------------------------


def blob_times(session: HttpSession | PipeSession, sizes: list[int], reps: int) -> dict[str, list[float]]:
    session.blob(65536)  # warm the path
    times: dict[str, list[float]] = {}
    for size in sizes:
        runs = []
        for _ in range(reps if size <= (1 << 20) else max(1, reps - 1)):
            began = time.perf_counter()
            session.blob(size)
            runs.append((time.perf_counter() - began) * 1000.0)
        times[str(size)] = runs
    return times


# -- memory with idle sessions ------------------------------------------------------------------------


def open_idle_sessions(port: int, path: str, count: int) -> list[str]:
    """Initialize `count` sessions over one connection and leave them idle; returns their ids."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    ids = []
    try:
        for _ in range(count):
            session = HttpSession(port, path)
            session.conn = conn
            for attempt in range(3):
                try:
                    session.initialize()
                    break
                except (OSError, http.client.HTTPException):  # the server closed an idle keep-alive connection
                    conn.close()
                    if attempt == 2:
                        raise
            ids.append(session.session_id or "")
    finally:
        conn.close()
    return ids


def memory_with_sessions(
    port: int,
    path: str,
    root_pid: int,
    counts: list[int],
    tree_memory: Callable[[int], dict[str, int]],
    settle_s: float = 1.0,
) -> list[dict]:
    """Gateway memory (its own processes, child servers excluded) with each count of idle sessions."""
    first = HttpSession(port, path).initialize()
    for _ in range(100):
        first.echo()
    first.close()
    opened = 1
    rows = []
    for count in counts:
        began = time.monotonic()
        try:
            if count > opened:
                open_idle_sessions(port, path, count - opened)
                opened = count
        except Exception as exc:  # noqa: BLE001 - a gateway that cannot hold `count` sessions: say so, stop
            rows.append({"sessions": count, "error": repr(exc)[:300]})
            break
        open_s = time.monotonic() - began
        time.sleep(settle_s)
        memory = tree_memory(root_pid)
        rows.append({"sessions": count, "open_s": round(open_s, 2), **memory})
    return rows


# -- how many sessions and GET streams one worker holds ----------------------------------------------


def capacity(
    port: int,
    path: str,
    cap: int,
    step: int,
    health: Callable[[], dict] | None = None,
    memory: Callable[[], dict] | None = None,
) -> dict:
    """Open sessions, each with its GET stream held open, `step` at a time up to `cap`; stop at the first error."""
    held: list[HttpSession] = []
    steps = []
    error = None
    probe = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        while len(held) < cap and error is None:
            began = time.monotonic()
            try:
                for _ in range(min(step, cap - len(held))):
                    session = HttpSession(port, path, timeout=60).initialize()
                    session.open_get_stream()
                    held.append(session)
                for session in [*random.sample(held, min(5, len(held))), held[0], held[-1]]:
                    check = HttpSession(port, path)
                    check.conn, check.session_id, check.version = probe, session.session_id, session.version
                    check.headers = {**session.headers}
                    check.next_id = 10_000 + len(held)
                    check.echo()
                state = health() if health else {}
                if health and state.get("sessions") != len(held):
                    raise BenchError(f"/healthz reports {state.get('sessions')} sessions, expected {len(held)}")
            except Exception as exc:  # noqa: BLE001 - the first error ends the climb
                error = f"at {len(held) + 1} sessions: {exc!r}"[:400]
                break
            steps.append(
                {"sessions": len(held), "step_s": round(time.monotonic() - began, 2), **(memory() if memory else {})}
            )
    finally:
        probe.close()
        for session in held:
            session.close()
    good = steps[-1]["sessions"] if steps else 0
    return {"held_sessions_with_get_streams": good, "cap": cap, "first_error": error, "steps": steps}


def healthz(port: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", "/healthz")
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


# -- relays (and the direct child) over pipes ----------------------------------------------------------


def pipe_in_flight(
    session: PipeSession, inflight: int, duration: float, cpu: CpuClock | None = None
) -> dict[str, float]:
    """Keep `inflight` echo calls outstanding for `duration` seconds; throughput and latency."""
    clock = time.perf_counter
    sent: dict[int, float] = {}
    latencies = []

    def send() -> None:
        msg_id = session.next_id
        session.next_id += 1
        sent[msg_id] = clock()
        session.send(session.echo_body(msg_id))

    cpu_began = cpu() if cpu else None
    began = clock()
    for _ in range(inflight):
        send()
    stop_at = began + duration
    last = began
    while sent:
        reply = session.read_any_reply(60.0)
        last = clock()
        started = sent.pop(reply["id"], None)
        if started is None:
            continue
        latencies.append((last - started) * 1000.0)
        if last < stop_at:
            send()
    cpu_used = cpu() - cpu_began if cpu and cpu_began is not None else None
    result = with_cpu(summary(latencies), cpu_used, len(latencies))
    result.update(
        {
            "in_flight": inflight,
            "calls": len(latencies),
            "window_s": last - began,
            "calls_per_s": len(latencies) / (last - began),
        }
    )
    return result
