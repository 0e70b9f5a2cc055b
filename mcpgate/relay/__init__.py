"""mcpgate-relay: a stdio MCP host on one side, a remote HTTP MCP server on the other.

This is the only package that imports requests. Nothing here is imported eagerly:
the entry point (cli.main) must patch gevent before requests is loaded.
"""
