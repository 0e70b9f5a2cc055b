"""The bench's stdio MCP server: stdlib only, answers every line at once.

Every gateway in the bench runs this same child, so only the gateways differ.
Tools: `echo` {message} returns the message; `blob` {size} returns a text of
`size` bytes. Run it with `python -S child_server.py` to keep it small.

By default it is a legacy (initialize) server: `server/discover` is a method it does not know, so a
gateway serving 2026-07-28 bridges it. With `--modern` it also answers `server/discover` (2026-07-28
only) and puts `resultType` on every result, as a 2026-07-28 server does.
"""

import json
import sys

VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
TOOLS = [
    {
        "name": "echo",
        "description": "Return the message.",
        "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
    },
    {
        "name": "blob",
        "description": "Return a text of `size` bytes.",
        "inputSchema": {"type": "object", "properties": {"size": {"type": "integer"}}, "required": ["size"]},
    },
]
MODERN = "--modern" in sys.argv[1:]
SERVER_INFO = {"name": "mcpgate-bench-child", "version": "1.0"}
_blobs = {}


def _text(value):
    return {"content": [{"type": "text", "text": value}], "isError": False}


def _blob(size):
    text = _blobs.get(size)
    if text is None:
        text = ("0123456789abcdef" * (size // 16 + 1))[:size]
        if len(_blobs) < 8:
            _blobs[size] = text
    return text


def handle(message):
    method = message.get("method")
    params = message.get("params") or {}
    if method == "initialize":
        asked = params.get("protocolVersion")
        return {
            "protocolVersion": asked if asked in VERSIONS else VERSIONS[0],
            "capabilities": {"tools": {}},
            "serverInfo": SERVER_INFO,
        }
    if method == "server/discover" and MODERN:
        return {
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {}},
            "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        name = params.get("name")
        args = params.get("arguments") or {}
        if name == "echo":
            return _text(str(args.get("message", "")))
        if name == "blob":
            return _text(_blob(int(args.get("size", 0))))
        raise LookupError(f"unknown tool {name!r}")
    raise NotImplementedError(method)


def main():
    stdin = sys.stdin.buffer
    stdout = sys.stdout.buffer
    for line in stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if not isinstance(message, dict) or "id" not in message or "method" not in message:
            continue  # notifications and responses need no answer
        try:
            result = handle(message)
            if MODERN:
                result["resultType"] = "complete"
            reply = {"jsonrpc": "2.0", "id": message["id"], "result": result}
        except NotImplementedError as exc:
            reply = {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {"code": -32601, "message": f"Method not found: {exc}"},
            }
        except Exception as exc:  # noqa: BLE001 - report any tool failure as a JSON-RPC error
            reply = {"jsonrpc": "2.0", "id": message["id"], "error": {"code": -32602, "message": str(exc)}}
        stdout.write(json.dumps(reply, separators=(",", ":")).encode() + b"\n")
        stdout.flush()


if __name__ == "__main__":
    main()
