"""`python -m mcpgate.relay URL` runs the relay (same as the mcpgate-relay console script)."""

from mcpgate.relay.cli import main

raise SystemExit(main())
