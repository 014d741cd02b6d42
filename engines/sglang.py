"""SGLang's offline `Engine` as a token source.

`await engine.async_generate(input_ids=..., sampling_params={...}, stream=True, rid=...)`
returns an async generator of dicts (python/sglang/srt/entrypoints/engine.py); each dict has
`output_ids`, usually `text`, and `meta_info` with `id`, `finish_reason` (None, or a dict
`{"type": "stop", "matched": id_or_str}`, `{"type": "length", "length": n}`,
`{"type": "abort", "message": ..., "status_code": ..., "err_type": ...}`), `prompt_tokens`,
`completion_tokens` and, with `return_logprob=True`, `output_token_logprobs` (one
`(logprob, token_id, text_or_None)` per token) and `output_top_logprobs`.

What the adapter must not assume:

* incremental `output_ids`. Under `--incremental-streaming-output` each dict carries only the new
  ids (queued dicts are coalesced by concatenation when the consumer lags); without it every
  dict carries all ids so far (a live reference to the request state's list) and a lagging
  consumer only sees the newest dict. `meta_info["completion_tokens"]` is the total in both
  modes, so each dict says which it is: ids of length `completion_tokens` are cumulative, ids
  that complete the count from what was already passed are incremental (at the first dict the
  two readings agree). The logprob lists follow the same mode.
* that `abort_request(rid)` aborts exactly `rid`. The scheduler matches
  `req.rid.startswith(rid)`, so aborting "req-1" also aborts "req-12". The adapter sends SGLang
  the prefix-free rid `f"{len(request_id)}:{request_id}"`.
* that closing the stream aborts the request. `generate_request` drops the rid's state on any
  exception, `GeneratorExit` included, without telling the scheduler, and `abort_request` then
  ignores the rid. The adapter aborts first, then closes. (If the consumer is cancelled while
  waiting inside SGLang's generator, SGLang drops the state before the adapter runs, and an
  SGLang without the upstream fix keeps decoding that request to its token limit.)

Finish reasons: "stop" (with the matched id or string as `stop_reason`) and "length" map to
themselves; "abort" without a status code is a client abort and maps to "abort"; "abort" with a
status code (400 for a rejected request, 500/503 for server errors) and anything else end the
stream as "error" with SGLang's message. Engine exceptions become a final error chunk (see
`streamfold.engines._engine_stream`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol

import attrs

from streamfold.engines import GenerationRequest, TokenChunk

from ._engine_stream import (
    EngineNotInstalledError,
    EngineOutputError,
    stream_chunks,
)

__all__ = ["SGLangTokenSource", "build_sglang_engine", "sglang_rid"]

_ENGINE = "SGLang"


class _TokenizerManagerLike(Protocol):
    def abort_request(self, rid: str = "", abort_all: bool = False) -> object: ...


class _SGLangEngineLike(Protocol):
    tokenizer_manager: _TokenizerManagerLike

    async def async_generate(self, **kwargs: Any) -> Any: ...


def sglang_rid(request_id: str) -> str:
    """The rid the adapter gives SGLang for `request_id`: no such rid is a prefix of another."""
    return f"{len(request_id)}:{request_id}"


def build_sglang_engine(model: str, **server_args: Any) -> SGLangTokenSource:
    """Start a real `sglang.Engine(model_path=model, **server_args)`; needs SGLang and a GPU."""
    try:
        import sglang
    except ImportError as exc:
        raise EngineNotInstalledError(engine="sglang", extra="sglang", cause=exc) from exc
    return SGLangTokenSource(sglang.Engine(model_path=model, **server_args))


class SGLangTokenSource:
    """A `TokenSource` over SGLang's `Engine` (anything with `async_generate` and
    `tokenizer_manager.abort_request`)."""

    def __init__(self, engine: _SGLangEngineLike) -> None:
        self._engine = engine

    @staticmethod
    def sampling_params(request: GenerationRequest) -> dict[str, Any]:
        """The `sampling_params` dict for `request`, keyed as SGLang's `SamplingParams`."""
        sampling = request.sampling
        params: dict[str, Any] = {
            # Always passed: SGLang's default is 128; None means "up to the context length".
            "max_new_tokens": request.max_output_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            # SGLang rejects top_k=0 ("must be -1 (disable) or at least 1").
            "top_k": sampling.top_k if sampling.top_k > 0 else -1,
            "stop_token_ids": list(request.stop_token_ids),
        }
        if sampling.seed is not None:
            # Only when set: SGLang versions without per-request seeds reject the key.
            params["sampling_seed"] = sampling.seed
        return params

    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        """Stream `request` from the engine as token chunks; the last one has `finish_reason`."""
        rid = sglang_rid(request.request_id)
        wants_logprobs = request.sampling.logprobs or request.sampling.top_logprobs > 0
        reader = _OutputReader(logprobs=wants_logprobs, top_logprobs=request.sampling.top_logprobs)

        async def open_outputs() -> AsyncIterator[dict[str, Any]]:
            # Built here, inside the shared loop's error handling, as the engine call is.
            kwargs: dict[str, Any] = {
                "input_ids": list(request.prompt_token_ids),
                "sampling_params": self.sampling_params(request),
                "stream": True,
                "rid": rid,
                "return_logprob": wants_logprobs,
            }
            if request.sampling.top_logprobs > 0:
                kwargs["top_logprobs_num"] = request.sampling.top_logprobs
            return await self._engine.async_generate(**kwargs)  # type: ignore[no-any-return]

        # Returned, not iterated here: closing it closes the engine stream at once.
        return stream_chunks(
            _ENGINE,
            request.request_id,
            open_outputs,
            reader.chunk,
            lambda: self._engine.tokenizer_manager.abort_request(rid=rid),
            "SGLang's stream ended without a finish_reason",
        )


@attrs.define
class _OutputReader:
    """Turns successive stream dicts of one request into chunks of not-yet-passed tokens."""

    logprobs: bool
    top_logprobs: int
    passed: int = 0

    def chunk(self, output: Mapping[str, Any]) -> TokenChunk | None:
        meta = output["meta_info"]
        ids = [int(t) for t in output.get("output_ids") or ()]
        total = int(meta["completion_tokens"])
        if len(ids) == total and total >= self.passed:
            start = self.passed  # cumulative (or the first incremental dict: same reading)
        elif self.passed + len(ids) == total:
            start = 0  # incremental
        else:
            raise EngineOutputError(
                f"SGLang dict for rid {meta.get('id')!r} has {len(ids)} output_ids and"
                f" completion_tokens={total} after {self.passed} tokens were passed on;"
                " it is neither cumulative nor incremental"
            )
        new = ids[start:]
        self.passed = total
        finish = meta.get("finish_reason")
        if not new and finish is None:
            return None
        logprobs, top = self._logprobs(meta, start, new)
        fields: dict[str, Any] = {
            "token_ids": tuple(new),
            "logprobs": logprobs,
            "top_logprobs": top,
        }
        if finish is not None:
            fields.update(_finish(finish))
        return TokenChunk(**fields)

    def _logprobs(
        self, meta: Mapping[str, Any], start: int, new: list[int]
    ) -> tuple[tuple[float, ...] | None, tuple[tuple[tuple[int, float], ...], ...] | None]:
        if not self.logprobs:
            return None, None
        sampled = _positions(meta, "output_token_logprobs", start, len(new))
        values = []
        for token_id, (logprob, logprob_token_id, *_text) in zip(new, sampled, strict=True):
            if int(logprob_token_id) != token_id:
                raise EngineOutputError(
                    f"SGLang output_token_logprobs entry for token {token_id} names token"
                    f" {logprob_token_id}; logprobs and output_ids are misaligned"
                )
            values.append(float(logprob))
        if self.top_logprobs <= 0:
            return tuple(values), None
        top = []
        for position in _positions(meta, "output_top_logprobs", start, len(new)):
            ranked = sorted(position or (), key=lambda entry: -entry[0])
            top.append(tuple((int(e[1]), float(e[0])) for e in ranked[: self.top_logprobs]))
        return tuple(values), tuple(top)


def _positions(meta: Mapping[str, Any], key: str, start: int, count: int) -> Sequence[Any]:
    positions = meta.get(key)
    if positions is None or len(positions) < start + count:
        have = "none" if positions is None else str(len(positions))
        raise EngineOutputError(
            f"SGLang meta_info[{key!r}] has {have} positions, needs {start + count}"
            " (logprobs were requested for every token)"
        )
    return list(positions[start : start + count])


def _finish(finish: object) -> dict[str, Any]:
    if not isinstance(finish, Mapping):
        return {
            "finish_reason": "error",
            "error": f"SGLang reported finish_reason {finish!r}, which is not a dict",
        }
    kind = finish.get("type")
    if kind == "stop":
        matched = finish.get("matched")
        if isinstance(matched, list):  # FINISH_MATCHED_TOKEN takes `int | list[int]`
            matched = matched[0] if len(matched) == 1 else str(matched)
        return {"finish_reason": "stop", "stop_reason": matched}
    if kind == "length":
        return {"finish_reason": "length"}
    if kind == "abort" and finish.get("status_code") is None:
        return {"finish_reason": "abort"}
    status = finish.get("status_code")
    return {
        "finish_reason": "error",
        "error": f"SGLang ended the request: {finish.get('message') or kind!s}"
        + (f" (status {int(status)})" if status is not None else ""),
    }
