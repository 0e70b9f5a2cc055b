"""The 2026-07-28 era: stateless requests (stateless.py) on a pool of children (pool.py, pooled_child.py,
calls.py, era_probe.py, tool_notes.py), the MRTR bridge for legacy children (bridge.py), a modern child's
requestState (child_state.py), subscriptions/listen (listen.py) and tasks (tasks.py)."""
