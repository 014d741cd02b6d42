"""Replaying a trace through the reducer: the grammar its header names, and its events."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from streamfold.engines import TokenChunk, Trace, TraceFormatError, server_tools_from_header
from streamfold.engines.replay import CUT_OFF
from streamfold.statemachine import (
    Event,
    HarmonyGrammar,
    Response,
    ServerTools,
    apply_loop_step,
    finish,
    start,
    step,
)
from streamfold.statemachine._grammar import Grammar

__all__ = ["grammar_for", "iter_replay", "replay_events", "response_for"]


def grammar_for(header: Mapping[str, Any], base_dir: Path | None = None) -> Grammar:
    """The grammar and vocabulary a trace header names."""
    grammar = header.get("grammar")
    if grammar == "harmony":
        encoding = header.get("encoding", "o200k_harmony")
        if encoding != "o200k_harmony":
            raise TraceFormatError(
                f'harmony traces use "encoding": "o200k_harmony", got {encoding!r}'
            )
        from streamfold.engines.vocab import load_harmony_vocabulary

        ignore = header.get("ignore_recipients_without_tools", False)
        if not isinstance(ignore, bool):
            raise TraceFormatError(
                f'"ignore_recipients_without_tools" must be true or false, got {ignore!r}'
            )
        return HarmonyGrammar(
            vocabulary=load_harmony_vocabulary(), ignore_recipients_without_tools=ignore
        )
    if grammar == "thinktags":
        try:
            from streamfold.adapters.thinktags_setup import thinktags_grammar_from_header
        except ImportError as exc:  # pragma: no cover - present once issue 4 lands
            raise TraceFormatError("this build has no think-tag grammar") from exc
        return thinktags_grammar_from_header(dict(header), base_dir=base_dir)
    raise TraceFormatError(
        f'unknown grammar {grammar!r} in trace header; use "harmony" or "thinktags"'
    )


def response_for(header: Mapping[str, Any]) -> Response:
    """The Response identity a trace header records."""
    return Response(
        id=header["response_id"],
        created_at=header["created_at"],
        model=header["model"],
        status="in_progress",
    )


def _server_tools(header: Mapping[str, Any]) -> ServerTools:
    try:
        return server_tools_from_header(header)
    except ValueError as exc:
        raise TraceFormatError(f"trace header: {exc}") from exc


def iter_replay(trace: Trace, base_dir: Path | None = None) -> Iterator[Event]:
    """The events of a trace, token by token; a cut-off trace ends in `response.failed`."""
    state, events = start(
        grammar_for(trace.header, base_dir),
        response_for(trace.header),
        input_tokens=len(trace.header.get("prompt_token_ids", ())),
        server_tools=_server_tools(trace.header),
    )
    yield from events
    for chunk in trace.entries:
        if not isinstance(chunk, TokenChunk):  # an agent run's loop step: the same call again
            state, events = apply_loop_step(state, chunk)
            yield from events
            continue
        logprobs = chunk.logprobs or (None,) * len(chunk.token_ids)
        for token, logprob in zip(chunk.token_ids, logprobs, strict=True):
            state, events = step(state, token, logprob)
            yield from events
    if trace.finish_reason is None:
        state, events = finish(state, "error", CUT_OFF)
    else:
        state, events = finish(state, trace.finish_reason, trace.error)
    yield from events


def replay_events(trace: Trace, base_dir: Path | None = None) -> list[Event]:
    return list(iter_replay(trace, base_dir))
