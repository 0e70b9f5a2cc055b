"""The cyclic garbage collector held off for a test that asks what reference counting alone frees."""

from __future__ import annotations

import gc
from collections.abc import Iterator


def collector_off() -> Iterator[None]:
    """Collect what is pending, then keep the collector off until the generator is closed (a fixture's body)."""
    gc.collect()
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
