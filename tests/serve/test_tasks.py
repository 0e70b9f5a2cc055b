"""The tasks extension (SEP-2663) through the pool and the fleet (serve/modern/tasks.py), over raw HTTP against
gunicorn wrapping tests/fixtures/tasks_server.py (its tasks live in the process that created them; every task's
statusMessage names that process's pid).

- 4 pooled children taking one request each: tasks created on 4 different children are polled, updated and
  cancelled on their own child while the pool's free child (the one an untargeted request takes) is another;
- a task whose child has ended is lost at once (-32602 saying so), another principal's task id is unknown;
- a child holding a task is not reaped as idle while its task is held, and is once the hold
  (MCPGATE_TASK_HOLD) has passed;
- without the extension declared: -32021 naming it; tasks/result and tasks/list: -32601; a legacy child: its
  2025-11-25 task-only tool is -32021 for a client without the extension;
- three instances on one Redis behind HAProxy (round-robin): a task's requests reach the instance holding it from
  any instance; once that instance has gone, the task is lost (-32602), at once.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpgate.core import tasks as core_tasks
from tests.support import (
    FIXTURES,
    Gateway,
    Reply,
    modern_body,
    modern_headers,
    reply_message,
    wait_dead,
    wait_for,
)
from tests.support.fleet import balancer_config, haproxy, instances
from tests.support.oauth import principal_tokens, resource_server_env

CHILD = f"{sys.executable} {FIXTURES / 'tasks_server.py'}"
POOL = {"MCPGATE_COMMAND": CHILD, "MCPGATE_POOL_CHILDREN": "4", "MCPGATE_POOL_CHILD_REQUESTS": "1"}
TASKS = {"extensions": {core_tasks.EXTENSION: {}}}
SECRET = "tasks-fleet-secret-0123456789abcdef"
PID = re.compile(r"pid (\d+)")
Target = Gateway | Any  # a Gateway or a Balancer: both have request()


class Client:
    """2026-07-28 requests by raw HTTP, the request-metadata headers mirrored as a client must (Mcp-Name: the tool's
    name, or a task method's taskId)."""

    def __init__(self, target: Target, token: str | None = None) -> None:
        self.target, self.token, self.ids = target, token, 0

    def post(self, method: str, params: dict[str, Any], caps: dict[str, Any] | None = None) -> Reply:
        self.ids += 1
        body = modern_body(self.ids, method, params, caps=TASKS if caps is None else caps)
        name = params.get("taskId" if method in core_tasks.METHODS else "name")
        headers = modern_headers(method, name if isinstance(name, str) else None)
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        return self.target.request("POST", body=body, headers=headers)  # type: ignore[no-any-return]

    def result(self, method: str, params: dict[str, Any], caps: dict[str, Any] | None = None) -> dict[str, Any]:
        reply = self.post(method, params, caps)
        message = reply_message(reply)
        assert reply.status == 200 and "result" in message, reply
        return dict(message["result"])

    def error(
        self, method: str, params: dict[str, Any], caps: dict[str, Any] | None = None
    ) -> tuple[int, dict[str, Any]]:
        reply = self.post(method, params, caps)
        message = reply_message(reply)
        assert "error" in message, reply
        return reply.status, dict(message["error"])

    def create(self, tool: str, **arguments: Any) -> tuple[str, int]:
        """A task of `tool`: its (wrapped) id and the pid of the child holding it."""
        created = self.result("tools/call", {"name": tool, "arguments": arguments})
        assert created["resultType"] == "task" and created["taskId"], created
        return created["taskId"], pid_of(created)

    def get(self, task: str) -> dict[str, Any]:
        got = self.result("tasks/get", {"taskId": task})
        assert got["taskId"] == task, got  # the client's id, as it sent it
        return got

    def settled(self, task: str, status: str) -> dict[str, Any]:
        """tasks/get until the task reaches `status` (or another terminal one)."""
        seen: list[dict[str, Any]] = []
        wait_for(lambda: seen.append(self.get(task)) or seen[-1]["status"] in (status, *core_tasks.TERMINAL))
        assert seen and seen[-1]["status"] == status, seen[-1:]
        return seen[-1]


def pid_of(task: dict[str, Any]) -> int:
    found = PID.search(str(task.get("statusMessage")))
    assert found, task
    return int(found.group(1))


def whoami(client: Client) -> int:
    return int(client.result("tools/call", {"name": "whoami", "arguments": {}})["content"][0]["text"])


@pytest.fixture
def pool(gateway_factory: Callable[..., Gateway]) -> Gateway:
    return gateway_factory(POOL)


class Holds:
    """Calls of the fixture's `hold` tool keeping children busy (one each) until released."""

    def __init__(self, client: Client, directory: Path) -> None:
        self.client, self.release_path = client, directory / "release"
        self.threads: list[threading.Thread] = []

    def hold_one(self) -> None:
        """Take the child the pool gives the next request (the free one first in its list) until release()."""
        before = len(list(self.release_path.parent.glob("release.held-*")))
        args = {"name": "hold", "arguments": {"path": str(self.release_path)}}
        thread = threading.Thread(target=self.client.result, args=("tools/call", args), daemon=True)
        thread.start()
        self.threads.append(thread)
        assert wait_for(lambda: len(list(self.release_path.parent.glob("release.held-*"))) > before)

    def release(self) -> None:
        self.release_path.touch()
        for thread in self.threads:
            thread.join(30)


def tasks_on_four_children(client: Client, tmp_path: Path) -> list[tuple[str, int]]:
    """slow_compute(60), confirm_delete, slow_compute(0) and multi_input, each created while the children before it
    were held: four tasks on four children (by pid)."""
    holds = Holds(client, tmp_path)
    created = []
    try:
        for tool, arguments in (
            ("slow_compute", {"seconds": 60}),
            ("confirm_delete", {"filename": "a.txt"}),
            ("slow_compute", {"seconds": 0}),
            ("multi_input", {}),
        ):
            created.append(client.create(tool, **arguments))
            if len(created) < 4:
                holds.hold_one()
    finally:
        holds.release()
    return created


def test_each_task_is_served_by_the_child_that_holds_it(pool: Gateway, tmp_path: Path) -> None:
    client = Client(pool)
    created = tasks_on_four_children(client, tmp_path)
    pids = [pid for _task, pid in created]
    assert len(set(pids)) == 4, pids
    assert whoami(client) == pids[0]  # an untargeted request takes the first free child: none of the others
    (slow, slow_pid), (confirm, confirm_pid), (quick, quick_pid), (multi, multi_pid) = created
    # polled, from the last created to the first: each on its own child
    assert pid_of(client.settled(quick, "completed")) == quick_pid
    asked = client.settled(multi, "input_required")
    assert pid_of(asked) == multi_pid and set(asked["inputRequests"]) == {"first", "second"}
    update = client.result("tasks/update", {"taskId": multi, "inputResponses": {"first": answer("Ada")}})
    assert update == {"resultType": "complete"} or set(update) <= {"resultType", "_meta"}, update
    assert set(client.settled(multi, "input_required")["inputRequests"]) == {"second"}
    client.result("tasks/update", {"taskId": multi, "inputResponses": {"second": answer("Grace")}})
    assert "Grace" in client.settled(multi, "completed")["result"]["content"][0]["text"]
    client.settled(confirm, "input_required")
    client.result("tasks/update", {"taskId": confirm, "inputResponses": {"confirm": answer("yes")}})
    assert pid_of(client.settled(confirm, "completed")) == confirm_pid
    assert client.get(slow)["status"] == "working"
    client.result("tasks/cancel", {"taskId": slow})
    assert pid_of(client.settled(slow, "cancelled")) == slow_pid


def answer(value: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"name": value, "confirm": value}}


def test_a_task_whose_child_has_ended_is_lost_at_once(pool: Gateway) -> None:
    client = Client(pool)
    task, pid = client.create("slow_compute", seconds=60)
    os.kill(pid, signal.SIGKILL)
    assert wait_dead([pid]) == []
    assert wait_for(lambda: "ended holding 1 task(s): they are lost" in pool.log()), pool.log_tail()
    status, error = client.error("tasks/get", {"taskId": task})
    assert (status, error["code"]) == (400, -32602), error
    assert "the task is lost" in error["message"] and "has ended" in error["message"], error


def test_unknown_ids_missing_extension_and_removed_methods(pool: Gateway) -> None:
    client = Client(pool)
    task, _pid = client.create("slow_compute", seconds=60)
    status, error = client.error("tasks/get", {"taskId": task}, caps={})
    assert (status, error["code"]) == (400, -32021) and error["data"] == {"requiredCapabilities": TASKS}, error
    for bad in ("not-a-task", task[:-2] + ("AA" if task[-2:] != "AA" else "BA")):  # a bare id, an altered one
        status, error = client.error("tasks/get", {"taskId": bad})
        assert (status, error["code"]) == (400, -32602) and "unknown task" in error["message"], error
    for removed in ("tasks/result", "tasks/list"):
        status, error = client.error(removed, {"taskId": task})
        assert (status, error["code"]) == (404, -32601), error
    mismatched = client.target.request(
        "POST",
        body=modern_body(99, "tasks/get", {"taskId": task}, caps=TASKS),
        headers=modern_headers("tasks/get", "another-task"),
    )
    assert mismatched.status == 400 and reply_message(mismatched)["error"]["code"] == -32020, mismatched


def test_a_legacy_child_has_no_tasks(gateway_factory: Callable[..., Gateway]) -> None:
    gw = gateway_factory({"MCPGATE_COMMAND": f"{CHILD} --legacy"})
    client = Client(gw)
    assert client.result("tools/call", {"name": "greet", "arguments": {"name": "Ada"}}, caps={})["content"]
    discovered = client.result("server/discover", {})
    assert core_tasks.EXTENSION not in (discovered["capabilities"].get("extensions") or {}), discovered
    status, error = client.error("tools/call", {"name": "legacy_task_only", "arguments": {}}, caps={})
    assert (status, error["code"]) == (400, -32021) and error["data"] == {"requiredCapabilities": TASKS}, error
    status, error = client.error("tasks/get", {"taskId": "any"}, caps={})
    assert (status, error["code"]) == (400, -32021), error
    status, error = client.error("tasks/get", {"taskId": "any"})
    assert (status, error["code"]) == (400, -32602), error


def test_a_child_holding_a_task_is_not_reaped_until_its_hold_has_passed(
    gateway_factory: Callable[..., Gateway], tmp_path: Path
) -> None:
    gw = gateway_factory({**POOL, "MCPGATE_POOL_IDLE_TTL": "0.5", "MCPGATE_TASK_HOLD": "6"})
    client = Client(gw)
    task, holder = client.create("slow_compute", seconds=0)
    holds = Holds(client, tmp_path)
    holds.hold_one()  # the holder is busy: the next call starts a second child
    other = whoami(client)
    holds.release()
    assert other != holder
    reaped = re.compile(r"pooled child (\S+) idle for longer than MCPGATE_POOL_IDLE_TTL")
    assert wait_for(lambda: len(reaped.findall(gw.log())) >= 1), gw.log_tail()
    assert len(reaped.findall(gw.log())) == 1  # the other child went; the holder stays while it holds the task
    assert pid_of(client.settled(task, "completed")) == holder
    # once the hold has passed (6 s from its creation) the holder is idle like any other, and the task is lost
    assert wait_for(lambda: len(reaped.findall(gw.log())) >= 2, timeout=30), gw.log_tail()
    status, error = client.error("tasks/get", {"taskId": task})
    assert (status, error["code"]) == (400, -32602) and "the task is lost" in error["message"], error


def test_another_principals_task_is_unknown(gateway_factory: Callable[..., Gateway], issuer: str) -> None:
    gw = gateway_factory(resource_server_env(issuer, MCPGATE_COMMAND=CHILD))
    tokens = principal_tokens(issuer, gw, ["alice", "bob"])
    alice, bob = Client(gw, tokens["alice"]), Client(gw, tokens["bob"])
    task, _pid = alice.create("slow_compute", seconds=60)
    for method, params in (
        ("tasks/get", {"taskId": task}),
        ("tasks/cancel", {"taskId": task}),
        ("tasks/update", {"taskId": task, "inputResponses": {}}),
    ):
        status, error = bob.error(method, params)
        assert (status, error["code"]) == (400, -32602) and "unknown task" in error["message"], error
    assert alice.get(task)["status"] == "working"  # untouched by bob's cancel


# -- three instances behind HAProxy ----------------------------------------------------------------------------


@pytest.fixture
def fleet() -> Iterator[tuple[list[Gateway], Any]]:
    with instances(SECRET, **POOL) as (_url, start):
        gateways = [start(f"t{n}") for n in (1, 2, 3)]
        with haproxy(balancer_config({f"t{n}": gw.port for n, gw in enumerate(gateways, 1)})) as lb:
            yield gateways, lb


def test_a_tasks_requests_reach_its_instance_from_any_instance(fleet: tuple[list[Gateway], Any]) -> None:
    (t1, t2, t3), lb = fleet
    task, pid = Client(t1).create("confirm_delete", filename="fleet.txt")
    for gw in (t2, t3, t1):  # straight to each instance: t2 and t3 forward to t1
        assert pid_of(Client(gw).settled(task, "input_required")) == pid
    balanced = Client(lb)
    for _ in range(6):  # round-robin: every instance in turn
        assert pid_of(balanced.get(task)) == pid
    balanced.result("tasks/update", {"taskId": task, "inputResponses": {"confirm": answer("yes")}})
    assert pid_of(balanced.settled(task, "completed")) == pid
    # tasks made through the balancer land on any instance, and are found from any
    made = [balanced.create("slow_compute", seconds=0) for _ in range(3)]
    for made_task, made_pid in made:
        for _ in range(3):
            assert pid_of(balanced.settled(made_task, "completed")) == made_pid


def test_a_task_whose_instance_has_gone_is_lost_at_once(fleet: tuple[list[Gateway], Any]) -> None:
    (t1, t2, _t3), _lb = fleet
    task, _pid = Client(t1).create("slow_compute", seconds=60)
    assert Client(t2).get(task)["status"] == "working"
    t1.stop()  # a graceful stop withdraws t1 from the directory
    status, error = Client(t2).error("tasks/get", {"taskId": task})
    assert (status, error["code"]) == (400, -32602), error
    assert "the task is lost" in error["message"] and "t1" in error["message"], error
