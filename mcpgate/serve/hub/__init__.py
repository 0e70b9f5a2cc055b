"""The hub: several published servers behind one MCP endpoint (a group, and by default all of them).

spec.py: the group's ChildSpec and its members; child.py: HubChild, the in-process child that drives
mcpgate/core/hub.py over one member child per member server; member.py: a member child as the hub holds it (2025,
through the legacy/modern bridge when its server speaks only 2026-07-28); server.py: the group as a published server;
groups.py: MCPGATE_CONFIG's "groups" and the default aggregate at MCPGATE_PATH.
"""
