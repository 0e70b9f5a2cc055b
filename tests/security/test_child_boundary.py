"""Issue 20, finding 3: a child must not read the gateway's secrets. A tool that reads files returned
/proc/<worker>/environ (the auth token, the users, the cluster secret, ...) and the state directory's signing key.

Each deployment is tested as it runs, with a real gunicorn and a real child (a probe server whose one tool reads
the paths it is given and reports its ids):
- same user, no root: the gateway and its child run as a throwaway user; the worker and the master are not
  dumpable, so the child gets EACCES, and the worker's own environment block holds no secret any more; a worker
  the master starts again (after a crash, after a HUP) still has its settings;
- root with MCPGATE_CHILD_USER: the child runs as the throwaway user and reads neither process nor the state
  directory;
- the start refuses, in one line, what would not hold (MCPGATE_CHILD_USER without root, as root, unknown; a
  state directory others may read).
Needs root (useradd, setpriv): skipped otherwise."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mcpgate.serve.oauth import passwords
from tests.support import HEADERS, ROOT, Gateway, call, direct_children, init_body, reply_message, serving, wait_for
from tests.support.oauth import embedded_env, sign_in
from tests.support.security import refused_start

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("useradd") or not shutil.which("setpriv"),
    reason="needs root with useradd and setpriv: it makes a throwaway user and runs the gateway or its children as it",
)

SECRETS = {
    "MCPGATE_AUTH_TOKEN": "tok-" + secrets.token_hex(16),
    "MCPGATE_METRICS_TOKEN": "met-" + secrets.token_hex(16),
    "MCPGATE_CLUSTER_SECRET": "clu-" + secrets.token_hex(16),
    "MCPGATE_OAUTH_CLIENT_SECRET": "ocs-" + secrets.token_hex(16),
    "MCPGATE_STATE_KEY": "key-" + secrets.token_hex(16),
}
PASSWORD = "correct horse battery staple"

PROBE = r"""
import errno, json, os, sys

def answer(msg_id, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}) + "\n")
    sys.stdout.flush()

def read(path):
    try:
        if path.endswith("/"):
            return "listed:" + ",".join(sorted(os.listdir(path)))
        with open(path, "rb") as f:
            return f.read().decode("latin-1")
    except OSError as exc:
        return "errno:" + errno.errorcode.get(exc.errno, str(exc.errno))

for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg.get("method") == "initialize":
        info = {"name": "probe", "version": "1"}
        answer(msg["id"], {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                           "serverInfo": info})
    elif msg.get("method") == "tools/call":
        paths = [p.replace("{ppid}", str(os.getppid())) for p in msg["params"]["arguments"]["paths"]]
        found = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "ppid": os.getppid(),
                 "home": os.environ.get("HOME"), "reads": {p: read(p) for p in paths}}
        answer(msg["id"], {"content": [{"type": "text", "text": json.dumps(found)}]})
    else:
        answer(msg["id"], {})
"""


@pytest.fixture(scope="module")
def stranger() -> Iterator[pwd.struct_passwd]:
    """A throwaway system user (and its group), deleted at the end."""
    name = "mcpgt" + secrets.token_hex(3)
    subprocess.run(
        ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent", name], check=True
    )
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False)


def python_for(user: pwd.struct_passwd) -> tuple[str, str]:
    """A Python `user` may run that finds the gateway's packages, and the PYTHONPATH it needs (this test's Python
    may live where only root goes: then the system's Python of the same version, given this one's packages)."""
    path = f"{ROOT}:{sysconfig.get_paths()['purelib']}"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for python in (sys.executable, f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"):
        code = (
            "import os, sys, gevent, gunicorn, mcpgate.serve.front.app; sys.exit(not os.access(sys.argv[1], os.X_OK))"
        )
        check = [*as_user(user), python, "-c", code, python]  # the gateway looks its command up as the user
        if subprocess.run(check, env={**os.environ, "PYTHONPATH": path}, capture_output=True).returncode == 0:
            return python, path
    pytest.skip(f"no Python {version} that user {user.pw_name} may run finds the gateway's packages")


def as_user(user: pwd.struct_passwd) -> list[str]:
    return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups"]


@pytest.fixture(scope="module")
def tools(stranger: pwd.struct_passwd) -> Iterator[Path]:
    """A directory anyone may read: the probe server (`probe` is its command), and `as-stranger`, a Python that
    runs as the user."""
    where = Path(tempfile.mkdtemp(prefix="mcpgate-boundary-"))
    try:
        where.chmod(0o755)
        python, path = python_for(stranger)
        (where / "probe.py").write_text(PROBE)
        (where / "probe").write_text(f"{python} {where / 'probe.py'}")
        runner = where / "as-stranger"
        runner.write_text(f'#!/bin/sh\nPYTHONPATH={path} exec {shlex.join(as_user(stranger))} {python} "$@"\n')
        runner.chmod(0o755)
        yield where
    finally:
        shutil.rmtree(where)


def probe(gw: Gateway, headers: dict[str, str], paths: list[str]) -> dict[str, Any]:
    """A session on `gw` with `headers` (its credentials), the probe's read of `paths` ({ppid}: the worker)."""
    reply = gw.request("POST", body=init_body(), headers={**HEADERS, **headers})
    assert reply.status == 200, reply
    session = {**HEADERS, **headers, "Mcp-Session-Id": reply.headers["mcp-session-id"]}
    session["MCP-Protocol-Version"] = "2025-11-25"
    assert (
        gw.request("POST", body={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session).status
        == 202
    )
    answer = reply_message(gw.request("POST", body=call("read", {"paths": paths}), headers=session))
    return dict(json.loads(answer["result"]["content"][0]["text"]))


def assert_nothing_secret(reads: dict[str, str], *secret_values: str) -> None:
    for path, text in reads.items():
        leaked = [value[:4] for value in secret_values if value in text]
        assert not leaked, f"{path} gave the child {leaked} (read: {text[:80]!r})"


# -- same user, no root: non-dumpable processes, secrets out of the worker's environment ------------------------


@pytest.fixture(scope="module")
def same_user(tools: Path) -> Iterator[Gateway]:
    env = {**SECRETS, "MCPGATE_COMMAND": (tools / "probe").read_text()}
    with serving(env, python=str(tools / "as-stranger"), behind=True) as gw:
        yield gw


TOKEN = {"Authorization": f"Bearer {SECRETS['MCPGATE_AUTH_TOKEN']}"}


def test_a_same_user_child_reads_nothing_secret_of_the_worker_or_the_master(
    same_user: Gateway, stranger: pwd.struct_passwd
) -> None:
    master = same_user.proc.pid
    found = probe(same_user, TOKEN, ["/proc/{ppid}/environ", f"/proc/{master}/environ", "/proc/{ppid}/maps"])
    assert found["uid"] == stranger.pw_uid  # the child is the gateway's user: only the processes' own guard holds
    assert_nothing_secret(found["reads"], *SECRETS.values())
    assert all(text == "errno:EACCES" for text in found["reads"].values()), found["reads"]


def test_the_worker_keeps_no_secret_in_its_environment(same_user: Gateway) -> None:
    found = probe(same_user, TOKEN, [])
    worker = found["ppid"]
    environ = Path(f"/proc/{worker}/environ").read_bytes().decode("latin-1")  # read as root: what is there
    assert "MCPGATE_COMMAND=" in environ  # a setting that is not secret stays
    assert_nothing_secret({f"/proc/{worker}/environ": environ}, *SECRETS.values())


def test_a_worker_started_again_by_the_master_still_has_its_settings(same_user: Gateway) -> None:
    master = same_user.proc.pid
    for how in ("the worker killed", "a HUP"):
        (worker,) = direct_children(master)
        if how == "a HUP":
            os.kill(master, signal.SIGHUP)
        else:
            os.kill(worker, signal.SIGKILL)
        assert wait_for(
            lambda old=worker: len(set(direct_children(master)) - {old}) == 1 == len(direct_children(master)), 30
        ), how
        same_user.wait_ready()
        assert same_user.request("POST", body=init_body(), headers=HEADERS).status == 401, how
        found = probe(same_user, TOKEN, ["/proc/{ppid}/environ"])  # the token still opens a session
        assert found["ppid"] != worker and found["reads"] == {f"/proc/{found['ppid']}/environ": "errno:EACCES"}, how


# -- root with MCPGATE_CHILD_USER ------------------------------------------------------------------------------


def test_children_run_as_the_child_user_and_read_neither_process_nor_the_state(
    tools: Path, stranger: pwd.struct_passwd, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    env = {
        **SECRETS,
        **embedded_env(state, f"alice:{passwords.make_hash(PASSWORD)}", MCPGATE_AUTH_TOKEN=""),
        "MCPGATE_COMMAND": (tools / "probe").read_text(),
        "MCPGATE_CHILD_USER": stranger.pw_name,
        "MCPGATE_CHILD_NO_NETWORK": "true",  # the namespace is made as root, before the user changes
    }
    with serving(env) as gw:
        token = sign_in(gw.base, "alice", PASSWORD)["access_token"]
        paths = ["/proc/{ppid}/environ", f"/proc/{gw.proc.pid}/environ", f"{state}/oauth.sqlite3", f"{state}/"]
        found = probe(gw, {"Authorization": f"Bearer {token}"}, [*paths, "/proc/self/net/dev"])
    assert (found["uid"], found["gid"]) == (stranger.pw_uid, stranger.pw_gid)
    assert 0 not in found["groups"] and found["home"] == stranger.pw_dir
    interfaces = [line.split(":")[0].strip() for line in found["reads"].pop("/proc/self/net/dev").splitlines()[2:]]
    assert interfaces == ["lo"]
    assert all(text == "errno:EACCES" for text in found["reads"].values()), found["reads"]
    assert oct(state.stat().st_mode & 0o777) == oct(0o700)


# -- what the start refuses ------------------------------------------------------------------------------------


def test_the_start_refuses_a_child_user_it_cannot_honour(
    tools: Path, stranger: pwd.struct_passwd, tmp_path: Path
) -> None:
    cases = [
        ({"MCPGATE_CHILD_USER": stranger.pw_name}, str(tools / "as-stranger"), "needs the gateway to run as root"),
        ({"MCPGATE_CHILD_USER": "root"}, sys.executable, "must not be root"),
        ({"MCPGATE_CHILD_USER": "no-such-user-here"}, sys.executable, "names no user"),
        (
            {"MCPGATE_CHILD_USER": stranger.pw_name, "MCPGATE_CHILD_GROUP": "no-such-group"},
            sys.executable,
            "names no group",
        ),
    ]
    for extra, python, words in cases:
        log = refused_start(extra, python)
        lines = [line for line in log.splitlines() if words in line]
        assert len(lines) == 1 and "MCPGATE_CHILD_" in lines[0] and "Traceback" not in log, log


def test_the_start_refuses_a_state_directory_others_may_read(stranger: pwd.struct_passwd, tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    env = embedded_env(state, f"alice:{passwords.make_hash(PASSWORD)}", MCPGATE_CHILD_USER=stranger.pw_name)
    log = refused_start(env)
    assert f"chmod 700 {state}" in log and "Traceback" not in log, log
