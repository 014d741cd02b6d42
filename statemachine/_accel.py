"""`step`, with its text-token hot path compiled where the C extension was built.

`_speedups.c` is the harmony hot path of `_reducer.step` in C (one token of text inside an open
item: decode, one delta event, one new item, one new state); every other call it hands to the
Python `step`, which stays the reference. Both give equal events and states
(tests/statemachine/test_speedups.py), so which one runs changes speed only.

The extension is optional: a platform without a C compiler installs the pure-Python package,
and `STREAMFOLD_PURE_PYTHON=1` in the environment chooses the Python path even where the
extension exists (to debug, or to measure the difference).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import _harmony, _items
from ._reducer import ResponseState
from ._reducer import step as python_step

__all__ = ["ACCELERATED", "step"]

_STATE_FIELDS = (
    "grammar",
    "seq",
    "open",
    "parse",
    "output_tokens",
    "reasoning_tokens",
    "finished",
)
_ITEM_FIELDS = ("kind", "item_id", "output_index", "text", "pending")


def _compiled_step() -> Callable[..., Any] | None:
    if os.environ.get("STREAMFOLD_PURE_PYTHON"):
        return None
    try:
        from . import _speedups
    except ImportError:
        return None
    specs = {kind: None if make is None else make.plan for kind, make in _items.DELTAS.items()}
    state_fields = ResponseState._fields
    item_fields = _items.OpenItem._fields
    _speedups.configure(
        python_step,
        ResponseState,
        _items.OpenItem,
        _harmony.CONTENT_PHASE,
        "reasoning",
        specs,
        (*(state_fields.index(f) for f in _STATE_FIELDS), len(state_fields)),
        (*(item_fields.index(f) for f in _ITEM_FIELDS), len(item_fields)),
    )
    return _speedups.step


_compiled = _compiled_step()
#: Whether `step` runs the compiled hot path.
ACCELERATED = _compiled is not None
if TYPE_CHECKING:
    step = python_step  # the same signature, whichever runs
else:
    step = _compiled or python_step
