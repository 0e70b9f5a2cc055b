"""msgspec's JSON decoder in front of json's, for every message a process parses (core/jsonrpc.use_fast_decoder).

The core imports only the standard library, so a process puts it in at its start: the gateway's app factory
(serve/front/app.create_app). A text msgspec decodes gives json's value; whatever it refuses goes to json, whose
verdict and message stand (tests/core/test_json_codec.py). The relay does without: msgspec brings decimal and
typing_extensions (~1.4 MB) into a process kept small, whose CPU a call is well inside its goal.

msgspec is imported here without typing_extensions (310 KB of a worker's heap): its _utils takes typing's
get_type_hints, Required and NotRequired when typing_extensions cannot be imported, which on Python 3.11 are the
same names, and they only serve typed decoding (a Struct's or a TypedDict's fields), which the gateway never asks
for (its decoders and encoders are untyped, but for msgspec.Raw's, which builds no field: json_extent.sole_value's
skip of one value). typing_extensions stays importable for any other library.
"""

from __future__ import annotations

import sys
from types import ModuleType

from mcpgate.core import json_extent, jsonrpc


def _import_msgspec() -> ModuleType:
    """msgspec, loaded (if it is not yet) with typing_extensions held out of its import alone; a msgspec that
    cannot load without it (a later release) is loaded again with it, so the gateway starts either way."""
    if "msgspec" in sys.modules or "typing_extensions" in sys.modules:
        import msgspec

        return msgspec
    sys.modules["typing_extensions"] = None  # type: ignore[assignment]  # an import of it raises ImportError
    try:
        import msgspec
    except ImportError:
        for name in [name for name in sys.modules if name == "msgspec" or name.startswith("msgspec.")]:
            del sys.modules[name]
        del sys.modules["typing_extensions"]
        import msgspec
    finally:
        if sys.modules.get("typing_extensions", ModuleType("absent")) is None:
            del sys.modules["typing_extensions"]
    return msgspec


msgspec = _import_msgspec()


def install() -> None:
    """Decode messages with msgspec first from now on, in this process."""
    jsonrpc.use_fast_decoder(msgspec.json.Decoder().decode)
    json_extent.use_skip(msgspec.json.Decoder(msgspec.Raw).decode)
