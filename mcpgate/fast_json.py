"""msgspec's JSON decoder in front of json's, for every message a process parses (core/jsonrpc.use_fast_decoder).

The core imports only the standard library, so a process puts it in at its start: the gateway's app factory
(serve/front/app.create_app). A text msgspec decodes gives json's value; whatever it refuses goes to json, whose
verdict and message stand (tests/core/test_json_codec.py). The relay does without: msgspec brings decimal and
typing_extensions (~1.4 MB) into a process kept small, whose CPU a call is well inside its goal.
"""

from __future__ import annotations

import msgspec

from mcpgate.core import jsonrpc


def install() -> None:
    """Decode messages with msgspec first from now on, in this process."""
    jsonrpc.use_fast_decoder(msgspec.json.Decoder().decode)
