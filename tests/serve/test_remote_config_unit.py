"""MCPGATE_CONFIG's remote servers (entries with a url) without gunicorn: what an entry becomes, the refusals
(each naming the file, the server and the field, never a header value or a token), and the settings and spec a
remote server gets (serve/servers/config_file.py, remote_entry.py, serve/remote/spec.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcpgate.config.settings import Settings
from mcpgate.serve.servers import config_file
from mcpgate.serve.servers.config_file import ConfigError, ServerEntry
from mcpgate.serve.servers.remote_entry import RemoteEntry

URL = "https://mcp.example.com/mcp"
SECRET = "s3cret-header-value"
TOKEN = "t0ken-0123456789"


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAM", "blue")
    monkeypatch.setenv("API_KEY", SECRET)
    monkeypatch.setenv("UPSTREAM_TOKEN", TOKEN)
    monkeypatch.setenv("BROKEN", "a\r\nInjected: yes")
    monkeypatch.setenv("CC_SECRET", "client-secret-value")
    monkeypatch.delenv("UNSET_VARIABLE", raising=False)


def entry(raw: dict[str, Any]) -> ServerEntry:
    [server] = config_file.parse(json.dumps({"mcpServers": {"r": raw}}), "MCPGATE_CONFIG f.json").servers
    return server


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"url": URL}, RemoteEntry(URL)),
        ({"serverUrl": URL}, RemoteEntry(URL)),  # a desktop host's spelling
        ({"url": URL, "type": "sse"}, RemoteEntry(URL, "sse")),
        ({"url": URL, "transport": "sse", "type": "sse"}, RemoteEntry(URL, "sse")),
        ({"url": URL, "type": "streamableHttp"}, RemoteEntry(URL)),
        ({"url": URL, "type": "http", "transport": "streamable-http"}, RemoteEntry(URL)),
        ({"url": URL, "era": "2025"}, RemoteEntry(URL, era="2025")),
        ({"url": URL, "era": "2026-07-28"}, RemoteEntry(URL, era="2026-07-28")),
        (
            {"url": URL, "headers": {"X-Team": "team-${TEAM}", "X-Key": "${API_KEY}", "X-Plain": "$TEAM"}},
            RemoteEntry(URL, headers=(("X-Team", "team-blue"), ("X-Key", SECRET), ("X-Plain", "$TEAM"))),
        ),
        ({"url": URL, "auth": {"type": "bearer", "token_env": "UPSTREAM_TOKEN"}}, RemoteEntry(URL, bearer_token=TOKEN)),
        ({"url": "http://127.0.0.1:9000/mcp"}, RemoteEntry("http://127.0.0.1:9000/mcp")),  # loopback: the operator's
    ],
)
def test_a_remote_entry(raw: dict[str, Any], expected: RemoteEntry) -> None:
    server = entry(raw)
    assert server.remote == expected and server.argv == () and server.env == {} and server.cwd is None


def test_a_remote_entrys_eras_are_the_relays() -> None:
    assert [RemoteEntry(URL, era=era).protocol_era for era in ("auto", "2025", "2026-07-28")] == [
        "auto",
        "legacy",
        "modern",
    ]


def test_a_remote_entrys_prefix_settings_and_resurrect() -> None:
    server = entry(
        {"url": URL, "prefix": "gh", "resurrect": False, "mcpgate": {"request_timeout": 5, "tools_deny": ["x"]}}
    )
    assert server.prefix == "gh"
    assert server.overrides == {"request_timeout": 5.0, "tools_deny": ("x",), "session_resurrect": False}


def test_secrets_are_not_in_an_entrys_repr() -> None:
    server = entry(
        {"url": URL, "headers": {"X-Key": "${API_KEY}"}, "auth": {"type": "bearer", "token_env": "UPSTREAM_TOKEN"}}
    )
    assert SECRET not in repr(server) and TOKEN not in repr(server) and URL in repr(server)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"url": URL, "command": "npx"}, "server 'r': has both a url and a command"),
        ({"url": URL, "args": ["x"]}, "server 'r': unknown key(s) 'args' for a remote server"),
        ({"url": URL, "env": {"A": "1"}}, "unknown key(s) 'env' for a remote server"),
        ({"url": URL, "serverUrl": URL}, "give url or serverUrl, not both"),
        ({"url": "ftp://x/mcp"}, "server 'r': url must be an http:// or https:// URL"),
        ({"url": "mcp.example.com"}, "url must be an http:// or https:// URL"),
        ({"url": 5}, "url must be an http:// or https:// URL"),
        ({"url": "http://a b/mcp"}, "url must be an http:// or https:// URL"),
        ({"url": URL, "type": "stdio"}, 'type must be "streamable-http" or "sse"'),
        ({"url": URL, "transport": "grpc"}, 'transport must be "streamable-http" or "sse" (got \'grpc\')'),
        ({"url": URL, "type": "sse", "transport": "streamable-http"}, "type and transport name different transports"),
        ({"url": URL, "era": "2024"}, 'era must be "auto", "2025" or "2026-07-28"'),
        ({"url": URL, "headers": ["X: y"]}, "headers must be a JSON object of strings"),
        ({"url": URL, "headers": {"X": 1}}, "headers must be a JSON object of strings"),
        ({"url": URL, "headers": {"X Y": "1"}}, "headers: 'X Y' is not an HTTP header name"),
        ({"url": URL, "headers": {"Mcp-Session-Id": "1"}}, "headers: Mcp-Session-Id is mcpgate's to set"),
        ({"url": URL, "headers": {"Host": "evil"}}, "headers: Host is mcpgate's to set"),
        (
            {"url": URL, "headers": {"X-Key": "${UNSET_VARIABLE}"}},
            "server 'r': headers.X-Key names the environment variable UNSET_VARIABLE, which is not set",
        ),
        ({"url": URL, "headers": {"X-Key": "${BROKEN}"}}, "headers.X-Key: the value holds a line break or NUL"),
        ({"url": URL, "auth": "bearer"}, 'auth must be {"type": "bearer", "token_env": "NAME"} or'),
        ({"url": URL, "auth": {"type": "basic"}}, 'auth must be {"type": "bearer"'),
        ({"url": URL, "auth": {"type": "bearer", "token": TOKEN}}, "auth: unknown key(s) 'token'"),
        ({"url": URL, "auth": {"type": "bearer", "token_env": "a b"}}, "auth: token_env must name an environment"),
        (
            {"url": URL, "auth": {"type": "bearer", "token_env": "UNSET_VARIABLE"}},
            "auth.token_env names the environment variable UNSET_VARIABLE, which is not set",
        ),
        (
            {"url": URL, "auth": {"type": "bearer", "token_env": "BROKEN"}},
            "BROKEN is empty or holds characters a bearer token cannot have",
        ),
        (
            {"url": URL, "headers": {"authorization": "x"}, "auth": {"type": "bearer", "token_env": "UPSTREAM_TOKEN"}},
            "give auth or an Authorization header, not both",
        ),
        (
            {
                "url": URL,
                "auth": {"type": "client_credentials", "client_id": "c", "client_secret_env": "UNSET_VARIABLE"},
            },
            "UNSET_VARIABLE",
        ),
        ({"url": URL, "mcpgate": {"child_cpu_seconds": 5}}, "mcpgate.child_cpu_seconds: not for a remote server"),
        (
            {"url": URL, "mcpgate": {"stderr": "discard", "pass_env": ["A"]}},
            "mcpgate.pass_env, mcpgate.stderr: not for",
        ),
        ({"url": URL, "mcpgate": {"max_session": 1}}, "unknown per-server setting(s) mcpgate.max_session"),
        ({"url": URL, "prefix": "a/b"}, "prefix must be 1 to 64 letters"),
        ({"url": URL, "resurrect": "no"}, "resurrect must be true or false"),
    ],
)
def test_a_refused_remote_entry(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        entry(raw)
    text = str(refused.value)
    assert text.startswith("MCPGATE_CONFIG f.json: server 'r'"), text
    assert message in text, text
    assert SECRET not in text and TOKEN not in text and "Injected" not in text and "client-secret" not in text


def test_client_credentials_are_parsed_by_the_relays_module() -> None:
    auth = {"type": "client_credentials", "client_id": "gateway", "client_secret_env": "CC_SECRET"}
    server = entry({"url": URL, "auth": auth})
    assert server.remote is not None and server.remote.auth is not None and server.remote.bearer_token is None
    assert "client-secret-value" not in repr(server)
    assert server == entry({"url": URL, "auth": dict(auth)})  # a reload finds it unchanged


def test_a_remote_servers_spec_and_settings() -> None:
    from mcpgate.serve.remote.spec import RemoteSpec

    server = entry({"url": URL, "headers": {"X-Key": "${API_KEY}"}, "mcpgate": {"request_timeout": 2}})
    assert server.remote is not None
    settings = config_file.settings_for(Settings.from_env({}), server)
    spec = RemoteSpec.of(settings, "r", server.remote, None)
    assert spec.request_timeout == 2.0 and spec.limits is None and spec.label_prefix == "r/"
    assert dict(spec.http_options.headers) == {"X-Key": SECRET} and spec.http_options.bearer_token is None
    assert spec.argv == (URL,)  # the pool's era verdicts are kept per upstream
    http = spec.http_client()
    try:
        assert "Authorization" not in http.headers and http.headers["X-Key"] == SECRET
    finally:
        http.close()
