"""OAuth 2.1 for the gateway: the resource server's token checks, and the embedded authorization server."""
