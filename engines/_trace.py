"""Traces: a recorded engine output, the unit users record, share and replay.

A trace is a JSON-lines file:

1. a header: `{"trace": 1, "grammar": "harmony", "encoding": "o200k_harmony",
   "response_id": "resp_…", "model": "…", "created_at": 1763800000, …}` (more fields allowed,
   e.g. `prompt_token_ids` and the `request`);
2. one line per engine output chunk: `{"token_ids": [..]}`, optionally with `"logprobs": [..]`
   (one float per token);
3. last, `{"finish_reason": "stop" | "length" | "abort" | "error" | "tool_limit"}` (and
   optionally `"error"`).

A trace that ends without its finish line was cut off; replay treats that as an error.

An agent run (a response whose server ran tools between generations) also records the loop: a
`"server_tools"` header field, and among the chunk lines, in the order they happened, one line
per `list_tools`, `tool_result`, `next_generation` and `approved_call` (`_trace_loop.py`).

Reading is line by line, each line at most `MAX_LINE_BYTES`, and every way a file can be wrong
(not UTF-8, not JSON, nested too deep, a wrong type, a string no UTF-8 can carry) is a
`TraceFormatError` naming the line: a trace may come from anywhere (issue 14).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import attrs

from streamfold.statemachine import LoopStep, StreamfoldError

from ._source import FINISH_REASONS, FinishReason, GenerationRequest, TokenChunk, TokenSource
from ._trace_loop import LOOP_KEYS, loop_line, loop_step, server_tools_from_header

__all__ = [
    "MAX_LINE_BYTES",
    "Trace",
    "TraceFormatError",
    "dump_trace",
    "parse_trace",
    "read_trace",
    "record_trace",
    "write_trace",
]

_REQUIRED = {"grammar": str, "response_id": str, "model": str, "created_at": int}
#: The longest line a trace may have (a chunk, or a header with a long prompt): a longer one is
#: an error rather than a memory hog (`streamfold replay /dev/zero` read 23 GB, issue 14).
MAX_LINE_BYTES = 64 * 2**20
#: `created_at` is a Unix time in seconds; past the year 9999 it is a mistake, not a date.
_LAST_CREATED_AT = 253402300799


class TraceFormatError(StreamfoldError, ValueError):
    """A trace file that does not follow the format; the message names the line and field."""


@attrs.frozen(kw_only=True)
class Trace:
    header: Mapping[str, Any]
    chunks: tuple[TokenChunk, ...]
    finish_reason: FinishReason | None = None
    error: str | None = None
    #: An agent run's loop steps, each with the number of chunks that came before it.
    loop: tuple[tuple[int, LoopStep], ...] = ()

    @property
    def token_ids(self) -> list[int]:
        return [t for chunk in self.chunks for t in chunk.token_ids]

    @property
    def entries(self) -> list[TokenChunk | LoopStep]:
        """The chunks and loop steps in the order they happened."""
        entries: list[TokenChunk | LoopStep] = []
        steps = iter(self.loop)
        pending = next(steps, None)
        for i, chunk in enumerate((*self.chunks, None)):
            while pending is not None and pending[0] == i:
                entries.append(pending[1])
                pending = next(steps, None)
            if chunk is not None:
                entries.append(chunk)
        return entries


# A chunk line exactly as `dump_trace` (and any compact JSON writer) writes it, with nothing a
# validator could object to: non-negative integers without leading zeros, no other field. Such
# lines, nearly all of a trace, skip `json.loads` and the checks (they would pass them and give
# the same chunk); every other line, good or bad, takes the general path and its errors. A line
# seen before gives the same chunk again: chunks are frozen, and most tokens recur. The line
# may end in its newline, as `read_trace` hands lines on (without `\n?` no file line matched).
_PLAIN_CHUNK = re.compile(r'\{"token_ids":\[((?:0|[1-9][0-9]*)(?:,(?:0|[1-9][0-9]*))*)\]\}\n?')


def _fail(where: str, message: str) -> TraceFormatError:
    return TraceFormatError(f"{where}: {message}")


def _check_header(header: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(header, dict) or header.get("trace") != 1:
        raise _fail(where, 'the first line must be a header object with "trace": 1')
    for key, kind in _REQUIRED.items():
        if not isinstance(header.get(key), kind) or isinstance(header.get(key), bool):
            raise _fail(where, f"header field {key!r} must be a {kind.__name__}")
    try:
        server_tools_from_header(header)
    except ValueError as exc:
        raise _fail(where, str(exc)) from exc
    if not 0 <= header["created_at"] <= _LAST_CREATED_AT:
        raise _fail(
            where,
            f'header field "created_at" must be a Unix time in seconds (0..{_LAST_CREATED_AT}),'
            f" got {header['created_at']}",
        )
    prompt = header.get("prompt_token_ids", [])
    if not isinstance(prompt, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt
    ):
        raise _fail(
            where, 'header field "prompt_token_ids" must be a list of non-negative integers'
        )
    _check_encodable(header, where, "the header")
    return header


def _check_encodable(value: Any, where: str, what: str) -> None:
    """Strings must be UTF-8: JSON's `\\ud800` escape makes a lone surrogate that no event,
    file or socket can carry later."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _fail(
            where,
            f"{what} holds a lone surrogate ({exc.object[exc.start : exc.end]!r}): "
            "strings must be valid Unicode",
        ) from None


def _chunk(line: Any, where: str) -> TokenChunk:
    ids = line.get("token_ids")
    if not isinstance(ids, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids
    ):
        raise _fail(where, '"token_ids" must be a list of non-negative integers')
    logprobs = line.get("logprobs")
    if logprobs is not None and (
        not isinstance(logprobs, list)
        or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in logprobs)
    ):
        raise _fail(where, '"logprobs" must be a list of numbers')
    try:
        return TokenChunk(
            token_ids=tuple(ids), logprobs=None if logprobs is None else tuple(map(float, logprobs))
        )
    except ValueError as exc:
        raise _fail(where, str(exc)) from exc


def parse_trace(lines: Iterable[str], name: str = "<trace>") -> Trace:
    """Read a trace from its lines; raises `TraceFormatError` naming the line at fault."""
    header: Mapping[str, Any] | None = None
    chunks: list[TokenChunk] = []
    loop: list[tuple[int, LoopStep]] = []
    finish: FinishReason | None = None
    error: str | None = None
    plain, seen = _PLAIN_CHUNK.fullmatch, dict[str, TokenChunk]()
    for lineno, raw in enumerate(lines, 1):
        if header is not None and finish is None:
            chunk = seen.get(raw)
            if chunk is None and (match := plain(raw)) is not None:
                ids = match[1]
                token_ids = (int(ids),) if "," not in ids else tuple(map(int, ids.split(",")))
                chunk = seen[raw] = TokenChunk(token_ids=token_ids)
            if chunk is not None:
                chunks.append(chunk)
                continue
        where = f"{name}:{lineno}"
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _fail(where, f"not JSON ({exc.msg})") from exc
        except RecursionError:
            raise _fail(where, "JSON nested too deeply to be a trace line") from None
        if header is None:
            header = _check_header(line, where)
            continue
        if finish is not None:
            raise _fail(where, "nothing may follow the finish_reason line")
        if not isinstance(line, dict):
            raise _fail(where, "each line must be a JSON object")
        if "finish_reason" in line:
            if line["finish_reason"] not in FINISH_REASONS:
                raise _fail(where, f'"finish_reason" must be one of {list(FINISH_REASONS)}')
            finish, error = line["finish_reason"], line.get("error")
            if error is not None and not isinstance(error, str):
                # It becomes response.failed's error.message, a string on the wire (R7).
                raise _fail(where, f'"error" must be a message string, got {error!r}')
            _check_encodable(error, where, '"error"')
            if "token_ids" in line:
                chunks.append(_chunk(line, where))
            continue
        if LOOP_KEYS.intersection(line):
            try:
                loop.append((len(chunks), loop_step(line)))
            except ValueError as exc:
                raise _fail(where, str(exc)) from exc
            continue
        chunks.append(_chunk(line, where))
    if header is None:
        raise _fail(name, "empty trace: the first line must be the header")
    return Trace(
        header=header, chunks=tuple(chunks), finish_reason=finish, error=error, loop=tuple(loop)
    )


def _lines(file: IO[bytes], name: str, max_line_bytes: int) -> Iterator[str]:
    """The file's lines as text, one at a time, none longer than `max_line_bytes`."""
    lineno = 0
    while raw := file.readline(max_line_bytes + 1):
        lineno += 1
        if len(raw) > max_line_bytes and not raw.endswith(b"\n"):
            raise _fail(
                f"{name}:{lineno}",
                f"line longer than {max_line_bytes} bytes; a trace line is one JSON object",
            )
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _fail(
                f"{name}:{lineno}", f"not UTF-8 ({exc.reason} at byte {exc.start} of the line)"
            ) from None


def read_trace(path: str | os.PathLike[str], *, max_line_bytes: int = MAX_LINE_BYTES) -> Trace:
    """Read the trace file at `path`, line by line (see the module doc)."""
    path = Path(path)
    try:
        with path.open("rb") as file:
            return parse_trace(_lines(file, str(path), max_line_bytes), name=str(path))
    except OSError as exc:
        raise TraceFormatError(f"cannot read trace {path}: {exc.strerror or exc}") from exc


def dump_trace(
    header: Mapping[str, Any],
    chunks: Iterable[TokenChunk | LoopStep],
    finish_reason: FinishReason | None,
    error: str | None = None,
) -> str:
    """The trace as JSON-lines text (`finish_reason=None` writes a cut-off trace).

    `chunks` may hold an agent run's loop steps among the chunks, in the order they happened.
    """
    lines = [_header_line(header), *map(_chunk_line, chunks)]
    if finish_reason is not None:
        lines.append(_finish_line(finish_reason, error))
    return "".join(lines)


# The three kinds of line, written the same by `dump_trace` (a whole trace) and `record_trace`
# (line by line, as an engine makes them).
def _header_line(header: Mapping[str, Any]) -> str:
    return json.dumps({"trace": 1, **header}, separators=(",", ":")) + "\n"


def _chunk_line(chunk: TokenChunk | LoopStep) -> str:
    if not isinstance(chunk, TokenChunk):
        return json.dumps(loop_line(chunk), separators=(",", ":"), ensure_ascii=False) + "\n"
    line: dict[str, Any] = {"token_ids": list(chunk.token_ids)}
    if chunk.logprobs is not None:
        line["logprobs"] = list(chunk.logprobs)
    return json.dumps(line, separators=(",", ":")) + "\n"


def _finish_line(finish_reason: FinishReason, error: str | None) -> str:
    end: dict[str, Any] = {"finish_reason": finish_reason}
    if error:
        end["error"] = error
    return json.dumps(end) + "\n"


def write_trace(path: str | os.PathLike[str], trace: Trace) -> None:
    Path(path).write_text(
        dump_trace(trace.header, trace.entries, trace.finish_reason, trace.error), encoding="utf-8"
    )


async def record_trace(
    source: TokenSource, request: GenerationRequest, path: str | Path, header: dict[str, Any]
) -> str:
    """Run `request` on `source` and write its trace to `path`; returns the finish reason.

    Line 1 is `header` plus `prompt_token_ids`; then one `{"token_ids": [...]}` line per chunk
    (with `"logprobs"` when the chunk has them); last `{"finish_reason": ...}` (plus `"error"`
    for an error). Each line is flushed as it is made, so a cut-off run leaves a trace that
    replay can tell was cut off.
    """
    first = {k: v for k, v in header.items() if k != "request"}
    first["prompt_token_ids"] = list(request.prompt_token_ids)
    if "request" in header:
        first["request"] = header["request"]
    reason: FinishReason = "error"
    error: str | None = "the stream ended without one"
    with open(path, "w", encoding="utf-8") as out:
        out.write(_header_line(first))
        out.flush()
        stream = source.generate(request)
        try:
            async for chunk in stream:
                if chunk.token_ids:
                    out.write(_chunk_line(chunk))
                    out.flush()
                if chunk.finish_reason is not None:
                    reason, error = chunk.finish_reason, chunk.error
                    break
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        out.write(_finish_line(reason, error))
    return reason
