"""The management API (api.py: the routes, access.py: who may use them)."""
