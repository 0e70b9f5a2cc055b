"""The child process: its supervisor on gevent (process.py; its bounded stdin writer: stdin.py), pipes, how it is
spawned (spawn.py), its resource limits (limits.py), the boundary it must not cross (boundary.py) and no orphans
(orphans.py)."""
