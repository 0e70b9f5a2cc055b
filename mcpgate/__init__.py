"""mcpgate: publish stdio MCP servers over HTTP, and relay stdio hosts to HTTP MCP servers."""

__version__ = "0.1.0"
