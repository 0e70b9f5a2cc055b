"""Pinned tool definitions: the store (store.py) and a server's pins in force (guard.py)."""
