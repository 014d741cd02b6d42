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
  One dict breaks both readings: the echo of an abort SGLang made itself (from its waiting
  queue: a retracted request that timed out, `abort_all`) re-sends, under incremental
  streaming, the last token with the full count (`_handle_abort_req`). It ends the stream as
  the abort it is, and the repeated token is not passed twice.
* that `abort_request(rid)` aborts exactly `rid`. The scheduler matches
  `req.rid.startswith(rid)`, so aborting "req-1" also aborts "req-12". The adapter sends SGLang
  the prefix-free rid `f"{len(request_id)}:{request_id}"`.
* that closing the stream aborts the request. Before 0.5.23 `generate_request` dropped the rid's
  state on any exception, `GeneratorExit` included, without telling the scheduler, and
  `abort_request` then ignored the rid; 0.5.23 aborts what it dispatched. The adapter aborts
  first, then closes, which is right for both (0.5.23 sends one abort per rid).
* that a seed makes a request reproducible. SGLang takes `sampling_seed` but reads it only when
  the engine was started with `enable_deterministic_inference`; without it a seeded request
  logs one warning per source (the switch costs speed for every request, so it is the
  operator's to set: `--engine-arg enable_deterministic_inference=true`).
* that any `max_new_tokens` is taken. SGLang refuses `prompt + max_new_tokens` past the context
  with a ValueError before the first token; the adapter clamps it to what the context leaves,
  so such a response ends "length" (incomplete), as on vLLM.
* that the server keeps its signal handlers. SGLang's first request installs SIGTERM and
  SIGQUIT handlers on the serving loop (`TokenizerManager.auto_create_handle_loop`, main
  thread only); SIGTERM then drains and `sys.exit`s past the server's graceful shutdown. The
  adapter runs that step itself before its first request and puts the SIGTERM handler it found
  back; SGLang keeps SIGQUIT, which its child processes send when one of them fails.

Finish reasons: "stop" (with the matched id or string as `stop_reason`) and "length" map to
themselves; "abort" without a status code is a client abort and maps to "abort"; "abort" with a
status code (400 for a rejected request, 500/503 for server errors) and anything else end the
stream as "error" with SGLang's message. Engine exceptions become a final error chunk (see
`streamfold.engines._engine_stream`).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

import attrs

from streamfold.engines import GenerationRequest, TokenChunk

from ._engine_stream import (
    EngineNotInstalledError,
    EngineOutputError,
    clamp_to_context,
    stream_chunks,
)

__all__ = ["SGLangTokenSource", "build_sglang_engine", "sglang_rid"]

_ENGINE = "SGLang"

logger = logging.getLogger("streamfold.adapters")


class _TokenizerManagerLike(Protocol):
    def abort_request(self, rid: str = "", abort_all: bool = False) -> object: ...


class _SGLangEngineLike(Protocol):
    tokenizer_manager: _TokenizerManagerLike

    async def async_generate(self, **kwargs: Any) -> Any: ...


def sglang_rid(request_id: str) -> str:
    """The rid the adapter gives SGLang for `request_id`: no such rid is a prefix of another."""
    return f"{len(request_id)}:{request_id}"


def build_sglang_engine(model: str, **server_args: Any) -> SGLangTokenSource:
    """Start a real `sglang.Engine(model_path=model, **server_args)`; needs SGLang and a GPU.

    It blocks for the whole model load; `streamfold serve` calls it in a worker thread, where
    SGLang leaves the process's signal handlers alone (entrypoints/engine.py:1971-1992).

    The grammar backend is llguidance unless `server_args` names another: the grammars this
    source sends as `ebnf` are llguidance Lark (token references, `%json`), which SGLang's
    default backend (xgrammar) cannot compile."""
    try:
        import sglang
    except ImportError as exc:
        raise EngineNotInstalledError(engine="sglang", extra="sglang", cause=exc) from exc
    server_args.setdefault("grammar_backend", "llguidance")
    return SGLangTokenSource(sglang.Engine(model_path=model, **server_args))


class SGLangTokenSource:
    """A `TokenSource` over SGLang's `Engine` (anything with `async_generate` and
    `tokenizer_manager.abort_request`).

    `close()` shuts the engine down (`Engine.shutdown()`): call it when done with both.
    """

    def __init__(self, engine: _SGLangEngineLike) -> None:
        self._engine = engine
        manager = engine.tokenizer_manager
        context = getattr(manager, "context_len", None)
        self._context: int | None = context if isinstance(context, int) else None
        reserved = getattr(manager, "num_reserved_tokens", 0)
        self._reserved = reserved if isinstance(reserved, int) else 0
        deterministic = getattr(
            getattr(engine, "server_args", None), "enable_deterministic_inference", None
        )
        # Warn only where the engine says it is off (an unknown engine is given the benefit).
        self._seeds_ignored = deterministic is False
        self._loop_claimed = False

    def close(self) -> None:
        """Shut the engine down (its scheduler and detokenizer processes, GPU memory)."""
        shutdown = getattr(self._engine, "shutdown", None)
        if callable(shutdown):
            shutdown()

    def sampling_params(self, request: GenerationRequest) -> dict[str, Any]:
        """The `sampling_params` dict for `request`, keyed as SGLang's `SamplingParams`."""
        sampling = request.sampling
        params: dict[str, Any] = {
            # Always passed: SGLang's default is 128; None means "up to the context length".
            "max_new_tokens": clamp_to_context(request, self._context, self._reserved),
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            # SGLang rejects top_k=0 ("must be -1 (disable) or at least 1").
            "top_k": sampling.top_k if sampling.top_k > 0 else -1,
            "stop_token_ids": list(request.stop_token_ids),
        }
        if request.decoding is not None:
            # llguidance Lark (SGLang reads it as `ebnf` under `--grammar-backend llguidance`);
            # the grammar describes the reasoning too, so it applies from the first token.
            params["ebnf"] = request.decoding.grammar
            params["custom_params"] = {"__sglang_reasoning_in_grammar": True}
        if sampling.seed is not None:
            # Only when set: SGLang versions without per-request seeds reject the key.
            params["sampling_seed"] = sampling.seed
            if self._seeds_ignored:
                self._seeds_ignored = False  # once per source
                logger.warning(
                    "SGLang ignores request seeds unless the engine is started with"
                    " enable_deterministic_inference (--engine-arg"
                    " enable_deterministic_inference=true): seeded responses are not"
                    " reproducible on this engine"
                )
        return params

    def _claim_serving_loop(self) -> None:
        """Run SGLang's once-per-loop set-up before its first request, keeping the SIGTERM
        handler the server installed (see the module docstring)."""
        self._loop_claimed = True
        create: Callable[[], object] | None = getattr(
            self._engine.tokenizer_manager, "auto_create_handle_loop", None
        )
        if create is not None:
            with _keeping_handler(signal.SIGTERM):
                create()

    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        """Stream `request` from the engine as token chunks; the last one has `finish_reason`."""
        rid = sglang_rid(request.request_id)
        wants_logprobs = request.sampling.logprobs or request.sampling.top_logprobs > 0
        reader = _OutputReader(logprobs=wants_logprobs, top_logprobs=request.sampling.top_logprobs)

        async def open_outputs() -> AsyncIterator[dict[str, Any]]:
            if not self._loop_claimed:
                self._claim_serving_loop()
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


@contextmanager
def _keeping_handler(signum: int) -> Iterator[None]:
    """Put back the handler of `signum` that the block replaced (with the running asyncio
    loop's `add_signal_handler`, or `signal.signal`)."""
    before = signal.getsignal(signum)
    try:
        yield
    finally:
        if signal.getsignal(signum) is not before:
            # Here, not at the top: asyncio (and the ssl it imports) cost every command that
            # imports the engines ~15 ms of start-up (`streamfold replay`, `check`).
            import asyncio

            try:
                asyncio.get_running_loop().remove_signal_handler(signum)
            except RuntimeError:  # no running asyncio loop: it was `signal.signal`
                pass
            signal.signal(signum, before if before is not None else signal.SIG_DFL)


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
        finish = meta.get("finish_reason")
        if len(ids) == total and total >= self.passed:
            start = self.passed  # cumulative (or the first incremental dict: same reading)
        elif self.passed + len(ids) == total:
            start = 0  # incremental
        elif _is_abort(finish) and ids and self.passed + len(ids) == total + 1:
            # The echo of an abort SGLang made itself: under incremental streaming it sends
            # the last token again (after any it coalesced), with the full count.
            ids, start = ids[:-1], 0
        else:
            raise EngineOutputError(
                f"SGLang dict for rid {meta.get('id')!r} has {len(ids)} output_ids and"
                f" completion_tokens={total} after {self.passed} tokens were passed on;"
                " it is neither cumulative nor incremental"
            )
        new = ids[start:]
        self.passed = total
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
            # The radix cache's hits for this prompt (`meta_info["cached_tokens"]`).
            fields["cached_tokens"] = int(meta.get("cached_tokens") or 0)
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


def _is_abort(finish: object) -> bool:
    return isinstance(finish, Mapping) and finish.get("type") == "abort"


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
