"""Which grammar reads a recorded token stream: the one a trace header names (`grammar_for`);
and replaying a trace through the reducer (through the driver's one chunk-to-step loop,
`driver.fold`). A live model's grammar is its chat format's (`formats.ChatFormat.grammar`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from streamfold.engines import Trace, TraceFormatError, server_tools_from_header
from streamfold.engines.replay import CUT_OFF
from streamfold.statemachine import Event, HarmonyGrammar, Response, ServerTools
from streamfold.statemachine._grammar import Grammar

from .driver import fold

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
        from .thinktags_setup import thinktags_grammar_from_header

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
    reason, message = (
        ("error", CUT_OFF) if trace.finish_reason is None else (trace.finish_reason, trace.error)
    )
    return fold(
        grammar_for(trace.header, base_dir),
        response_for(trace.header),
        trace.entries if trace.loop else trace.chunks,  # no merged copy for a plain trace
        reason,
        message,
        input_tokens=len(trace.header.get("prompt_token_ids", ())),
        server_tools=_server_tools(trace.header),
    )


def replay_events(trace: Trace, base_dir: Path | None = None) -> list[Event]:
    return list(iter_replay(trace, base_dir))
