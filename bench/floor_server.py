"""The floor: a trivial keep-alive HTTP server that answers every POST with a canned JSON-RPC reply.

`python floor_server.py PORT`. One thread, one selector, no framework: what is left of a call is the
client loop, the kernel's loopback and the least work an HTTP server can do. The reply carries the
request's id (spliced in, not parsed) and an Mcp-Session-Id, so the bench's client runs unchanged.
"""

import selectors
import socket
import sys

RESULT = b'"result":{"content":[{"type":"text","text":"hello"}],"isError":false}}'
INIT_RESULT = (
    b'"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},'
    b'"serverInfo":{"name":"floor","version":"1.0"}}}'
)


def reply_for(head: bytes, body: bytes) -> bytes:
    if not head.startswith(b"POST"):
        return b"HTTP/1.1 204 No Content\r\n\r\n"
    start = body.find(b'"id":')
    if start < 0:
        return b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n"
    end = start + 5
    while end < len(body) and body[end : end + 1] not in (b",", b"}"):
        end += 1
    result = INIT_RESULT if b'"initialize"' in body else RESULT
    payload = b'{"jsonrpc":"2.0","id":' + body[start + 5 : end].strip() + b"," + result
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: floor\r\n"
        b"Content-Length: %d\r\n\r\n" % len(payload)
    ) + payload


def content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def main() -> None:
    port = int(sys.argv[1])
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(1024)
    listener.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    buffers: dict[socket.socket, bytearray] = {}
    while True:
        for key, _ in sel.select():
            if key.data is None:
                conn, _ = listener.accept()
                conn.setblocking(False)
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                buffers[conn] = bytearray()
                sel.register(conn, selectors.EVENT_READ, True)
                continue
            conn = key.fileobj
            try:
                chunk = conn.recv(65536)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                chunk = b""
            if not chunk:
                sel.unregister(conn)
                buffers.pop(conn, None)
                conn.close()
                continue
            buf = buffers[conn]
            buf += chunk
            while True:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                head = bytes(buf[:end])
                total = end + 4 + content_length(head)
                if len(buf) < total:
                    break
                body = bytes(buf[end + 4 : total])
                del buf[:total]
                conn.setblocking(True)
                conn.sendall(reply_for(head, body))
                conn.setblocking(False)


if __name__ == "__main__":
    main()
