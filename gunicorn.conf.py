# gunicorn reads this file when started from the project root: it uses the settings shipped in the package.
from mcpgate.gunicorn_config import *  # noqa: F403
