"""Per-user credentials: slots declared in MCPGATE_CONFIG, filled by each signed-in user on a page of the gateway,
kept encrypted per principal, and given only to that principal's children (README: Per-user credentials)."""
