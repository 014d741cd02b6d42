# The compiled hot path of `step` (statemachine/_speedups.c); see statemachine/_accel.py.
from collections.abc import Callable, Sequence
from typing import Any

def step(
    state: Any, token: int, logprob: float | None = None, top_logprobs: Any = None
) -> tuple[Any, list[Any]]: ...
def configure(
    python_step: Callable[..., Any],
    state_type: type,
    item_type: type,
    grammar_type: type,
    content_phase: object,
    reasoning_kind: str,
    delta_specs: dict[str, Any],
    state_positions: tuple[int, ...],
    item_positions: tuple[int, ...],
    /,
) -> None: ...
def step_ready(
    state: Any, chunks: list[Any], start: int, pending: list[Any], /
) -> tuple[Any, int]: ...
def sse_event(event: Any, /) -> bytes: ...
def configure_sse(
    python_sse_event: Callable[..., Any], frame_specs: dict[type, Any], /
) -> None: ...
def json_line(event: Any, /) -> bytes: ...
def configure_json_line(
    python_json_line: Callable[..., Any], line_specs: dict[type, Any], /
) -> None: ...
def event_rows(
    events: Sequence[Any], row_type: type[Any], text_of: Callable[[Any], str], /
) -> list[Any]: ...
def row_frames(rows: list[Any], /) -> bytes: ...
def row_socket_frames(rows: list[Any], suffix: str, /) -> bytes: ...
