"""The 2025 eras: Streamable HTTP sessions (streamable.py) and the HTTP+SSE transport (legacy_sse.py), what both
take in (inbound.py), a session with its child and streams (session.py, stream.py), and a 2025 session on a
2026-07-28-only child (modern_bridge.py, modern_listen.py)."""
