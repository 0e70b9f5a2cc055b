"""`python -m mcpgate`: the `mcpgate` command (mcpgate/cli.py)."""

import sys

from mcpgate.cli import main

sys.exit(main())
