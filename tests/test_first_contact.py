"""A new user's first contact, each friction met from a fresh clone turned into a test: a mistyped setting is
reported, the start log says what is served, a child that cannot start says where its variables went, a bad
password hash stops the start before gunicorn listens, every path a client may land on answers JSON-RPC, a port
in use is named, and the commands print their help."""

from __future__ import annotations

import shlex
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcpgate.serve.oauth import passwords
from tests.support import (
    DEMO_ENTRY,
    FIXTURES,
    HEADERS,
    ROOT,
    free_port,
    gunicorn_refusal,
    init_body,
    modern_body,
    post_modern,
    reply_message,
    stop_process,
    write_config,
)
from tests.support import fleet as fleet_support

DEMO = f"{sys.executable} -m mcpgate.demo_server"
CRASHY = f"{sys.executable} {FIXTURES / 'crashy_server.py'}"  # its tool "crash" exits with code 3
# the bundled demo, run only when API_KEY reached it (a server that needs a variable from the shell)
NEEDS_KEY = shlex.join(
    ["sh", "-c", 'test -n "$API_KEY" || { echo "API_KEY is not set" >&2; exit 1; }; exec "$0" -m mcpgate.demo_server']
)
NEEDS_KEY += " " + shlex.quote(sys.executable)  # $0 of the script: this Python


# -- a child that exits during its first start ----------------------------------------------------------------


def test_a_child_exiting_at_its_first_start_points_to_mcpgate_pass_env(gateway_factory: Any) -> None:
    env = {"MCPGATE_COMMAND": NEEDS_KEY, "API_KEY": "k3y", "MCPGATE_POOL_RESTARTS": "2", "MCPGATE_POOL_SPARES": "0"}
    gw = gateway_factory(env)
    session = reply_message(gw.request("POST", body=init_body(), headers=HEADERS))
    assert "MCPGATE_PASS_ENV" in session["error"]["message"], session
    assert "exited with code 1" in session["error"]["message"], session
    pooled = reply_message(post_modern(gw, modern_body("m-1", "tools/list")))
    assert "MCPGATE_PASS_ENV" in pooled["error"]["message"], pooled
    log = gw.log()
    assert "API_KEY is not set" in log and "MCPGATE_PASS_ENV" in log, gw.log_tail()
    # what the message says to do works
    fixed = gateway_factory({**env, "MCPGATE_PASS_ENV": "API_KEY"})
    answered = reply_message(fixed.request("POST", body=init_body(), headers=HEADERS))
    assert answered["result"]["serverInfo"]["name"] == "mcpgate-demo", answered


def test_a_child_that_answered_is_not_told_about_its_environment(gateway_factory: Any) -> None:
    gw = gateway_factory({"MCPGATE_COMMAND": CRASHY, "MCPGATE_POOL_SPARES": "0"})
    reply = post_modern(gw, modern_body("c-1", "tools/call", {"name": "crash", "arguments": {}}))
    message = reply_message(reply)
    assert "exited with code 3" in message["error"]["message"], reply
    assert "MCPGATE_PASS_ENV" not in message["error"]["message"], reply


def test_a_modern_server_slower_to_start_than_the_probe_is_served_as_modern(gateway_factory: Any) -> None:
    """A server started through a launcher (npx downloading it) may answer server/discover after
    MCPGATE_PROBE_TIMEOUT: the initialize sent then is refused as a modern server refuses it, and the child is
    asked again instead of being taken for a broken legacy one."""
    modern = f"{sys.executable} {ROOT / 'tests' / 'fixtures' / 'modern_server.py'}"
    slow = shlex.join(["sh", "-c", f"sleep 2; exec {modern}"])
    gw = gateway_factory({"MCPGATE_COMMAND": slow, "MCPGATE_PROBE_TIMEOUT": "0.5", "MCPGATE_POOL_SPARES": "0"})
    reply = post_modern(gw, modern_body("s-1", "tools/list"))
    assert reply.status == 200 and "tools" in reply_message(reply)["result"], reply
    assert "speaks 2026-07-28" in gw.log(), gw.log_tail()


# -- what the start log says --------------------------------------------------------------------------------------


def test_a_mistyped_setting_is_reported_with_the_nearest_name(gateway_factory: Any) -> None:
    recipe = {"MCPGATE_I1": "127.0.0.1:1", "MCPGATE_REDIS_PORT": "1", "MCPGATE_BEARER_TOKEN": "relay's own"}
    gw = gateway_factory({"MCPGATE_COMAND": DEMO, "MCPGATE_SESION_IDLE_TTL": "5", **recipe})
    log = gw.log()
    assert "MCPGATE_COMAND is not a setting (did you mean MCPGATE_COMMAND?)" in log, log
    assert "MCPGATE_SESION_IDLE_TTL is not a setting (did you mean MCPGATE_SESSION_IDLE_TTL?)" in log, log
    # what the relay or the fleet recipe reads is known, though no gateway setting
    assert not [name for name in recipe if f"{name} is not a setting" in log], log


def test_an_invalid_setting_beside_a_mistyped_one_names_both(tmp_path: Path) -> None:
    out = refusal({"MCPGATE_MAX_SESSIONS": "lots", "MCPGATE_MAX_SESION": "3"})
    assert "MCPGATE_MAX_SESSIONS" in out and "MCPGATE_MAX_SESION is not a setting" in out, out


def test_the_start_log_says_in_one_line_what_is_served(gateway_factory: Any, tmp_path: Path) -> None:
    gw = gateway_factory({"MCPGATE_COMMAND": ""})
    [line] = [line for line in gw.log().splitlines() if "mcpgate: serving " in line]
    assert f"the bundled demo server (MCPGATE_COMMAND is empty) at http://127.0.0.1:{gw.port}/mcp" in line, line
    assert "HTTP+SSE at /sse" in line and "eras: 2026-07-28" in line and "2025 sessions" in line, line
    assert line.endswith("auth: none"), line
    config = write_config(tmp_path / "servers.json", {"demo": DEMO_ENTRY})
    named = gateway_factory({"MCPGATE_CONFIG": config, "MCPGATE_AUTH_TOKEN": "t0ken-" + "x" * 20})
    [line] = [line for line in named.log().splitlines() if "mcpgate: serving " in line]
    assert f"the servers of MCPGATE_CONFIG={config} (demo) at http://127.0.0.1:{named.port}/servers/<name>/mcp" in line
    assert "auth: a bearer token (MCPGATE_AUTH_TOKEN)" in line and "t0ken" not in line, line
    command = gateway_factory({"MCPGATE_COMMAND": f"{DEMO} --secret-flag s3cret"})
    [line] = [line for line in command.log().splitlines() if "mcpgate: serving " in line]
    assert f"MCPGATE_COMMAND ({sys.executable} and 4 arguments)" in line and "s3cret" not in line, line


# -- OAuth: a hash the shell expanded --------------------------------------------------------------------------


def test_a_password_hash_the_shell_expanded_stops_the_start_before_listening() -> None:
    made = passwords.make_hash("correct horse")  # scrypt:32768:8:1$<salt>$<digest>
    expanded = made.split("$")[0]  # what `MCPGATE_OAUTH_USERS=alice:scrypt...$salt$digest` leaves: no $-parts
    out = refusal({"MCPGATE_OAUTH_USERS": f"alice:{expanded}", "MCPGATE_PUBLIC_URL": "http://127.0.0.1:8000"})
    assert "MCPGATE_OAUTH_USERS" in out and "'alice'" in out and "single quotes" in out, out
    assert "plain-text" not in out and "Listening at" not in out and "Booting worker" not in out, out
    plain = refusal({"MCPGATE_OAUTH_USERS": "alice:hunter2", "MCPGATE_PUBLIC_URL": "http://127.0.0.1:8000"})
    assert "plain-text password is refused" in plain and "hunter2" not in plain, plain
    assert "Listening at" not in plain, plain


def test_the_readme_local_oauth_try_starts_and_publishes_its_metadata(gateway_factory: Any) -> None:
    users = f"alice:{passwords.make_hash('correct horse')}"
    gw = gateway_factory({"MCPGATE_OAUTH_USERS": users, "MCPGATE_PUBLIC_URL": "http://127.0.0.1:{port}"})
    reply = gw.request("GET", "/.well-known/oauth-protected-resource/mcp")
    assert reply.status == 200 and reply.json()["resource"] == f"http://127.0.0.1:{gw.port}/mcp", reply
    assert gw.request("POST", body=init_body(), headers=HEADERS).status == 401


# -- JSON-RPC wherever a client lands ----------------------------------------------------------------------------


def assert_jsonrpc_error(reply: Any, status: int) -> str:
    assert reply.status == status and reply.content_type.startswith("application/json"), reply
    body = reply.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None and isinstance(body["error"]["code"], int), reply
    return str(body["error"]["message"])


def test_with_a_config_file_post_mcp_answers_a_jsonrpc_404_naming_the_path_shape(
    gateway_factory: Any, tmp_path: Path
) -> None:
    config = write_config(tmp_path / "servers.json", {"files": DEMO_ENTRY})
    gw = gateway_factory({"MCPGATE_CONFIG": config})
    message = assert_jsonrpc_error(gw.request("POST", "/mcp", body=init_body(), headers=HEADERS), 404)
    assert "/servers/<name>/mcp" in message and "GET /servers" in message, message
    for path in ("/", "/servers/files", "/servers/files/nope"):
        assert "/servers/<name>/mcp" in assert_jsonrpc_error(gw.request("GET", path), 404)
    allow = gw.request("POST", "/healthz", body=b"{}", headers=HEADERS)
    assert "Method Not Allowed" in assert_jsonrpc_error(allow, 405) and "GET" in allow.headers["allow"], allow
    # the pointer works
    assert gw.request("POST", "/servers/files/mcp", body=init_body(), headers=HEADERS).status == 200


def test_behind_a_token_a_404_names_no_server_and_the_endpoint_only_to_the_token(
    gateway_factory: Any, tmp_path: Path
) -> None:
    token = "t0ken-" + "y" * 24
    config = write_config(tmp_path / "servers.json", {"secretname": DEMO_ENTRY})
    named = gateway_factory({"MCPGATE_CONFIG": config, "MCPGATE_AUTH_TOKEN": token})
    message = assert_jsonrpc_error(named.request("POST", "/mcp", body=init_body(), headers=HEADERS), 404)
    assert "secretname" not in message and "/servers/<name>/mcp" in message, message
    single = gateway_factory({"MCPGATE_AUTH_TOKEN": token, "MCPGATE_PATH": "/hidden-mcp"})
    anonymous = assert_jsonrpc_error(single.request("GET", "/elsewhere"), 404)
    assert "/hidden-mcp" not in anonymous, anonymous
    signed = single.request("GET", "/elsewhere", headers={"Authorization": f"Bearer {token}"})
    assert "the MCP endpoint here is /hidden-mcp" in assert_jsonrpc_error(signed, 404)


# -- the commands and their help ---------------------------------------------------------------------------------


def test_a_port_in_use_is_named_with_mcpgate_bind_at_once() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        out = refusal({"MCPGATE_BIND": f"127.0.0.1:{port}"})
    assert f"cannot listen on 127.0.0.1:{port}" in out and "MCPGATE_BIND" in out and "PORT" in out, out
    assert "Retrying in 1 second" not in out and "Connection in use" not in out, out  # gunicorn's five tries
    assert len([line for line in out.splitlines() if "cannot listen" in line]) == 1, out


def test_mcpgate_help_points_to_the_commands_and_the_settings() -> None:
    shown = run_python("-m", "mcpgate", "--help")
    assert shown.returncode == 0, shown.stderr
    for needed in ("gunicorn mcpgate.wsgi", "mcpgate-relay", "mcpgate settings", "MCPGATE_COMMAND"):
        assert needed in shown.stdout, shown.stdout
    listed = run_python("-m", "mcpgate", "settings")
    assert listed.returncode == 0, listed.stderr
    from mcpgate.config import settings

    assert listed.stdout == settings.markdown_table() + "\n\n" + settings.relay_markdown_table() + "\n"


def test_the_demo_server_prints_its_help_instead_of_waiting_for_input() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "mcpgate.demo_server", "--help"],
        stdin=subprocess.PIPE,  # left open: a server waiting on it would never end
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=30)  # (closes stdin only after the process was asked to end)
    except subprocess.TimeoutExpired:
        out, err = "", "still waiting for input"
    finally:
        stop_process(proc)
    assert proc.returncode == 0 and "usage: mcpgate-demo-server" in out and "JSON-RPC" in out, (out, err)


# -- the test suite on a machine without the fleet's servers ----------------------------------------------------


def test_a_fleet_test_without_redis_or_haproxy_is_skipped_naming_what_to_install(
    monkeypatch: Any, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing to find there
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"redis-server is not installed.*apt-get install redis-server"):
        fleet_support.installed("redis-server", "/nonexistent/redis-server")
    monkeypatch.setenv("CI", "true")  # where .ci/run installed them, a missing one fails instead
    with pytest.raises(pytest.fail.Exception, match="haproxy is not installed"):
        fleet_support.installed("haproxy", "/nonexistent/haproxy")


# -- helpers ------------------------------------------------------------------------------------------------------


def run_python(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def refusal(env: dict[str, str]) -> str:
    """What gunicorn started as a user would printed, on a free port unless `env` names one (MCPGATE_BIND); it
    must stop by itself with a non-zero status (support.gunicorn_refusal)."""
    return gunicorn_refusal({"MCPGATE_BIND": f"127.0.0.1:{free_port()}", **env})
