"""The published servers of one worker: by name (published.py), one published server's state (server.py),
the mcpServers file (config_file.py), and the limits' watchdog (watchdog.py)."""
