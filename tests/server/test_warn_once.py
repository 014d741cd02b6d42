"""A warning said once per engine is said to every engine.

Bug: the two "once per engine" warnings, a grammar whose family is not the engine's chat
format (`Engine.reading`) and constraints the engine does not enforce (`_prepare.py`), were
remembered by `id(engine)` in module-level sets that never forgot one. An id is an address, and
CPython gives a collected object's address to the next object of its size: an engine built
after another was dropped (a test's, a reloaded server's) often gets its id, and was never
warned. The engines are made here to reuse a dead engine's id, checked with `id()` rather than
hoped for, and must each get their own warning; two equal engines (an `Engine` compares by
value) are two engines and get one each too.
"""

from __future__ import annotations

import gc
import logging
import sys
from collections.abc import Callable
from typing import Any

import anyio
import attrs
import pytest

from streamfold.adapters.registry import Engine, ReplayEngine, bundled_traces_dir
from streamfold.adapters.server import MemoryEventStore, ResponseService
from streamfold.specs.strategies_thinktags import small_vocabulary
from streamfold.statemachine import ThinkTagGrammar

pytestmark = pytest.mark.skipif(
    sys.implementation.name != "cpython", reason="reusing a dead object's id is CPython's"
)

THINKTAGS = ThinkTagGrammar(small_vocabulary())
MISMATCH = "prompts it in its chat format"
UNENFORCED = "does not enforce"
FORMAT = {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}


def _said(caplog: pytest.LogCaptureFixture, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records)


def _ask_for_format(engine: Engine) -> None:
    """Prepare a request with a `text.format` on `engine` (nothing kept of the service)."""
    service = ResponseService(engine, MemoryEventStore())
    try:
        anyio.run(service.prepare, {"model": "hello", "input": "hi", "text": FORMAT})
    finally:
        service.renderer.close()


def _read_a_model(engine: Engine) -> None:
    engine.reading("qwenish")


def _the_id_of_a_dead_one(base: Engine, warn: Callable[[Engine], None]) -> tuple[Engine, Any]:
    """An engine equal to `base` that gets the id of another such engine, which was warned and
    then collected; returns it and the engines made on the way (kept alive, so that each new
    engine is made where no live one is)."""
    first = attrs.evolve(base)
    warn(first)
    dead = id(first)
    del first
    gc.collect()
    made = []
    for _ in range(10_000):
        engine = attrs.evolve(base)
        if id(engine) == dead:
            return engine, made
        made.append(engine)
    raise AssertionError("no new engine got the collected engine's id in 10000 tries")


@pytest.mark.parametrize(
    ("warn", "text"),
    [(_read_a_model, MISMATCH), (_ask_for_format, UNENFORCED)],
    ids=["grammar-family", "unenforced-constraints"],
)
def test_an_engine_with_a_collected_engines_id_is_warned(
    warn: Callable[[Engine], None], text: str, caplog: pytest.LogCaptureFixture
) -> None:
    base = _base(text)
    caplog.set_level(logging.WARNING, logger="streamfold.server")
    engine, _made = _the_id_of_a_dead_one(base, warn)
    assert _said(caplog, text) == 1  # the first engine's warning
    warn(engine)
    warn(engine)
    assert _said(caplog, text) == 2, "the engine that reused a dead engine's id was not warned"
    # Logged from where it was said, as before the two sites shared `warn_once`.
    where = {"_engine.py" if text == MISMATCH else "_prepare.py"}
    assert {r.filename for r in caplog.records if text in r.getMessage()} == where


@pytest.mark.parametrize(
    ("warn", "text"),
    [(_read_a_model, MISMATCH), (_ask_for_format, UNENFORCED)],
    ids=["grammar-family", "unenforced-constraints"],
)
def test_two_equal_engines_are_each_warned_once(
    warn: Callable[[Engine], None], text: str, caplog: pytest.LogCaptureFixture
) -> None:
    base = _base(text)
    one, other = attrs.evolve(base), attrs.evolve(base)
    assert one == other and one is not other
    caplog.set_level(logging.WARNING, logger="streamfold.server")
    for engine in (one, other, one, other):
        warn(engine)
    assert _said(caplog, text) == 2


def _base(text: str) -> Engine:
    replay = ReplayEngine(bundled_traces_dir())
    if text == MISMATCH:  # a think-tag grammar, the format left at harmony
        return Engine(source=replay, grammar=lambda model: THINKTAGS)
    return replay.engine()  # replay enforces no constraint
