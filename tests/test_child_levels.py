"""ChildProcess asks whether DEBUG is on for every message it sends and takes (child/process.py levels_known): a
False in the logger's own memo of isEnabledFor's answers stands for isEnabledFor's call. Against that call, for a
table of level changes (the logger's, its parent's, logging.disable, a disabled logger) read in turn, and for
loggers whose answers the memo does not hold."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

import pytest

from mcpgate.child.process import DEBUG, levels_known

Step = Callable[[logging.Logger, logging.Logger], None]
Pair = tuple[logging.Logger, logging.Logger]


def level(value: int) -> Step:
    return lambda log, _parent: log.setLevel(value)


def parent_level(value: int) -> Step:
    return lambda _log, parent: parent.setLevel(value)


def disable(value: int) -> Step:
    return lambda _log, _parent: logging.disable(value)


def disabled(flag: bool) -> Step:
    def step(log: logging.Logger, _parent: logging.Logger) -> None:
        log.disabled = flag

    return step


STEPS: list[list[Step]] = [
    [],
    [level(logging.INFO)],
    [level(logging.DEBUG)],
    [level(logging.INFO), level(logging.DEBUG), level(logging.WARNING)],
    [parent_level(logging.DEBUG)],
    [parent_level(logging.DEBUG), parent_level(logging.ERROR)],
    [level(logging.NOTSET), parent_level(logging.DEBUG), level(logging.INFO)],
    [level(logging.DEBUG), disable(logging.DEBUG), disable(logging.NOTSET)],
    [level(logging.DEBUG), disable(logging.CRITICAL)],
    [level(logging.DEBUG), disabled(True), disabled(False)],
]


@pytest.fixture
def loggers(request: pytest.FixtureRequest) -> Iterator[Pair]:
    parent = logging.getLogger(f"mcpgate.test_levels.{request.node.name}")
    log = logging.getLogger(f"{parent.name}.child")
    try:
        yield log, parent
    finally:
        logging.disable(logging.NOTSET)
        for each in (log, parent):
            each.setLevel(logging.NOTSET)
            each.disabled = False


@pytest.mark.parametrize("steps", STEPS)
def test_a_false_known_is_isenabledfors_answer(
    steps: list[Step], loggers: tuple[logging.Logger, logging.Logger]
) -> None:
    log, parent = loggers
    known = levels_known(log)
    assert known is log._cache  # type: ignore[attr-defined]  # the logger's own, cleared in place
    for step in [*steps, *steps]:  # each change, then asked twice (answered, then remembered)
        step(log, parent)
        for _ in range(2):
            shortcut = known.get(DEBUG) is not False and log.isEnabledFor(DEBUG)
            assert shortcut == log.isEnabledFor(DEBUG)
            assert known.get(DEBUG) is not False or not log.isEnabledFor(DEBUG)


class OwnAnswer(logging.Logger):
    def isEnabledFor(self, level: int) -> bool:  # logging's name
        return True


def test_a_logger_answering_otherwise_is_always_asked() -> None:
    own = OwnAnswer("mcpgate.test_levels.own", logging.CRITICAL)
    own._cache[DEBUG] = False  # type: ignore[attr-defined]  # what the base class would have remembered
    known = levels_known(own)
    assert known.get(DEBUG) is None and not known
    assert (known.get(DEBUG) is not False and own.isEnabledFor(DEBUG)) is True
    adapter = logging.LoggerAdapter(logging.getLogger("mcpgate.test_levels.adapted"), {})
    assert levels_known(adapter) == {}  # type: ignore[arg-type]
