"""vLLM's `AsyncLLM` as a token source.

`AsyncLLM.generate(prompt, sampling_params, request_id)` is an async generator of
`RequestOutput`s (vllm/v1/engine/async_llm.py). The adapter feeds the prompt as token ids, asks
for DELTA outputs and turns each `RequestOutput` into one `TokenChunk`. What it must not assume:

* one token per output. Speculative decoding accepts several tokens per step,
  `--stream-interval` batches steps, and `RequestOutputCollector` merges queued DELTA outputs
  when the consumer lags (`RequestOutput.add(aggregate=True)`), so an output routinely carries
  many tokens, possibly from different harmony channels. Every one is passed on, in order.
* DELTA outputs. A source built with `output_kind="cumulative"` reads CUMULATIVE outputs, where
  `token_ids` is everything so far (a live reference to the detokenizer's list) and a lagging
  consumer only sees the newest one; the adapter passes on what it has not passed yet.
* `len(logprobs) == len(token_ids)`. vLLM before 0.33 sliced DELTA logprobs with
  `logprobs[-len(token_ids):]`, so the abort output, which has no tokens, carried the *whole*
  logprob list (`[-0:]`); merged into a lagging DELTA output it made the list longer than the
  tokens (0.33 slices `logprobs[:0]` there). Logprobs always end at the newest token, so the
  adapter takes the last `len(new tokens)` positions, which is right for both.

The prompt goes in as `vllm.inputs.tokens_input(ids)`, the rendered input vLLM 0.33 takes
directly (the raw `{"prompt_token_ids": ...}` dict of older vLLMs is deprecated there and
re-rendered in a worker thread). `max_output_tokens` is clamped to what the context
(`model_config.max_model_len`) leaves after the prompt, as the SGLang adapter does: vLLM would
end such a request "length" at the context anyway, and the two engines then agree.

Finish reasons (vllm/v1/engine/__init__.py `FINISH_REASON_STRINGS`, "stop", "length", "abort",
"error", "repetition"): "stop", "length" and "abort" map to themselves, with `stop_reason` (the
stop token id or stop string; None for the model's EOS) kept on "stop"; every other reason ends
the stream as `"error"` with a message naming it. Engine exceptions become a final error chunk
(see `streamfold.engines._engine_stream`). Closing the chunk stream early aborts the request with
`engine.abort(request_id)`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol

import attrs

from streamfold.engines import GenerationRequest, TokenChunk

from ._engine_stream import (
    EngineNotInstalledError,
    EngineOutputError,
    clamp_to_context,
    stream_chunks,
)

__all__ = [
    "VLLMApi",
    "VLLMTokenSource",
    "build_vllm_engine",
    "load_vllm_api",
    "raw_token_prompt",
]

_ENGINE = "vLLM"
OutputKind = Literal["delta", "cumulative"]


class _AsyncLLMLike(Protocol):
    def generate(
        self, prompt: Any, sampling_params: Any, request_id: str
    ) -> AsyncIterator[Any]: ...

    async def abort(self, request_id: str) -> None: ...


def raw_token_prompt(prompt_token_ids: list[int]) -> dict[str, Any]:
    """The prompt of a vLLM without `vllm.inputs.tokens_input`: a `TokensPrompt` TypedDict,
    which at runtime is exactly this dict. vLLM 0.33 still takes it, through a deprecated path
    that renders it again and logs "Passing raw prompts ... is deprecated"."""
    return {"prompt_token_ids": prompt_token_ids}


@attrs.frozen(kw_only=True)
class VLLMApi:
    """The vLLM names the adapter builds requests with, so tests can pass faithful stand-ins.

    `sampling_params` is `vllm.SamplingParams`; `output_kinds` maps "delta" and "cumulative" to
    `vllm.sampling_params.RequestOutputKind.DELTA` and `.CUMULATIVE`; `token_prompt` makes the
    prompt from token ids: `vllm.inputs.tokens_input` (`{"type": "token", ...}`, the rendered
    input vLLM 0.33 takes directly), or `raw_token_prompt` where vLLM predates it.
    """

    sampling_params: Callable[..., Any]
    output_kinds: Mapping[OutputKind, Any]
    token_prompt: Callable[[list[int]], Any] = raw_token_prompt
    #: `vllm.sampling_params.StructuredOutputsParams`: a request's grammar goes as
    #: `structured_outputs=StructuredOutputsParams(grammar=...)` (llguidance Lark).
    structured_outputs: Callable[..., Any] | None = None


def load_vllm_api() -> VLLMApi:
    """Import vLLM's request types; raises `EngineNotInstalledError` where vLLM is missing."""
    try:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind
    except ImportError as exc:
        raise EngineNotInstalledError(engine="vllm", extra="vllm", cause=exc) from exc
    structured: Callable[..., Any] | None
    try:
        from vllm.sampling_params import StructuredOutputsParams
    except ImportError:  # before vLLM 0.11 (guided decoding's old names): nothing to pass
        structured = None
    else:
        structured = StructuredOutputsParams
    try:
        from vllm.inputs import tokens_input
    except ImportError:  # a vLLM from before `tokens_input`: the raw TokensPrompt dict
        token_prompt: Callable[[list[int]], Any] = raw_token_prompt
    else:
        token_prompt = tokens_input
    return VLLMApi(
        sampling_params=SamplingParams,
        output_kinds={
            "delta": RequestOutputKind.DELTA,
            "cumulative": RequestOutputKind.CUMULATIVE,
        },
        token_prompt=token_prompt,
        structured_outputs=structured,
    )


def build_vllm_engine(model: str, **engine_args: Any) -> VLLMTokenSource:
    """Start a real `AsyncLLM` for `model` (`AsyncEngineArgs(model=model, **engine_args)`).

    Needs vLLM and a CUDA GPU. It blocks for the whole model load, so a server calls it in a
    worker thread (`streamfold serve` does): `AsyncLLM` then starts its output handler on the
    first request, in the loop that serves it (vllm/v1/engine/async_llm.py:218-224, 523-526).
    """
    try:
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM
    except ImportError as exc:
        raise EngineNotInstalledError(engine="vllm", extra="vllm", cause=exc) from exc
    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(model=model, **engine_args))
    return VLLMTokenSource(engine)


class VLLMTokenSource:
    """A `TokenSource` over a vLLM `AsyncLLM` (or anything with its `generate`/`abort`).

    `close()` shuts the engine down (`AsyncLLM.shutdown()`): call it when done with both.
    """

    def __init__(
        self,
        engine: _AsyncLLMLike,
        *,
        api: VLLMApi | None = None,
        output_kind: OutputKind = "delta",
        detokenize: bool = False,
    ) -> None:
        if output_kind not in ("delta", "cumulative"):
            raise ValueError(
                f"output_kind must be 'delta' or 'cumulative', got {output_kind!r};"
                " FINAL_ONLY outputs cannot stream"
            )
        self._engine = engine
        self._api = api if api is not None else load_vllm_api()
        self._output_kind: OutputKind = output_kind
        # streamfold reads token ids only, so by default vLLM's API process is spared the
        # per-token detokenization; turn it on to get `text` (or stop strings) from vLLM too.
        self._detokenize = detokenize
        context = getattr(getattr(engine, "model_config", None), "max_model_len", None)
        self._context: int | None = context if isinstance(context, int) else None

    def close(self) -> None:
        """Shut the engine down (its engine-core processes and GPU memory)."""
        shutdown = getattr(self._engine, "shutdown", None)
        if callable(shutdown):
            shutdown()

    def sampling_params(self, request: GenerationRequest) -> Any:
        """The `vllm.SamplingParams` for `request`."""
        sampling = request.sampling
        constraint: dict[str, Any] = {}
        if request.decoding is not None:
            if self._api.structured_outputs is None:
                raise ValueError(
                    "this vLLM has no StructuredOutputsParams: structured outputs and "
                    "tool_choice need vLLM 0.11 or newer"
                )
            # The grammar covers the whole completion, reasoning included, so it applies from
            # the first token, as vLLM's gpt-oss reasoning parser has it; llguidance's Lark
            # needs the guidance backend (`--structured-outputs-config '{"backend":
            # "guidance"}'`; under "auto" vLLM falls back to it when xgrammar refuses).
            constraint["structured_outputs"] = self._api.structured_outputs(
                grammar=request.decoding.grammar
            )
        return self._api.sampling_params(
            **constraint,
            n=1,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,  # 0 means "no top-k cut" in both vLLM and streamfold
            seed=sampling.seed,
            # Always passed: vLLM's default is max_tokens=16, and None means "up to the
            # context length", which is what an unset max_output_tokens means here.
            max_tokens=clamp_to_context(request, self._context),
            # vLLM returns the sampled token's logprob plus the top k; 0 gives the sampled one.
            logprobs=sampling.top_logprobs if _wants_logprobs(request) else None,
            stop_token_ids=list(request.stop_token_ids),
            output_kind=self._api.output_kinds[self._output_kind],
            detokenize=self._detokenize,
        )

    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        """Stream `request` from the engine as token chunks; the last one has `finish_reason`."""
        reader = _OutputReader(
            cumulative=self._output_kind == "cumulative",
            logprobs=_wants_logprobs(request),
            top_logprobs=request.sampling.top_logprobs,
        )

        async def open_outputs() -> AsyncIterator[Any]:
            prompt = self._api.token_prompt(list(request.prompt_token_ids))
            return self._engine.generate(prompt, self.sampling_params(request), request.request_id)

        # Returned, not iterated here: closing it closes the engine stream at once.
        return stream_chunks(
            _ENGINE,
            request.request_id,
            open_outputs,
            reader.chunk,
            lambda: self._engine.abort(request.request_id),
            "vLLM's output stream ended without a finished RequestOutput",
        )


def _wants_logprobs(request: GenerationRequest) -> bool:
    return bool(request.sampling.logprobs or request.sampling.top_logprobs > 0)


@attrs.define
class _OutputReader:
    """Turns successive `RequestOutput`s of one request into chunks of not-yet-passed tokens."""

    cumulative: bool
    logprobs: bool
    top_logprobs: int
    passed: int = 0

    def chunk(self, output: Any) -> TokenChunk | None:
        completions = output.outputs
        if len(completions) != 1:
            raise EngineOutputError(
                f"vLLM RequestOutput for request {output.request_id!r} has {len(completions)}"
                " CompletionOutputs; the adapter asks for n=1 and needs exactly one"
            )
        completion = completions[0]
        token_ids = [int(t) for t in completion.token_ids]
        if self.cumulative:
            if len(token_ids) < self.passed:
                raise EngineOutputError(
                    f"cumulative vLLM output has {len(token_ids)} tokens but {self.passed}"
                    " were already passed on; was the source built with the wrong output_kind?"
                )
            new = token_ids[self.passed :]
        else:
            new = token_ids
        self.passed += len(new)
        finish_reason = completion.finish_reason
        if finish_reason is None and output.finished:
            raise EngineOutputError("vLLM output is finished but has no finish_reason")
        if not new and finish_reason is None:
            return None
        logprobs, top = self._logprobs(completion.logprobs, new)
        fields: dict[str, Any] = {
            "token_ids": tuple(new),
            "logprobs": logprobs,
            "top_logprobs": top,
        }
        if finish_reason is not None:
            fields.update(_finish(str(finish_reason), completion.stop_reason))
            # vLLM's prefix-cache hits for this prompt (None where the engine keeps no count).
            fields["cached_tokens"] = int(getattr(output, "num_cached_tokens", None) or 0)
        return TokenChunk(**fields)

    def _logprobs(
        self, positions: Sequence[Mapping[int, Any]] | None, new: list[int]
    ) -> tuple[tuple[float, ...] | None, tuple[tuple[tuple[int, float], ...], ...] | None]:
        if not self.logprobs:
            return None, None
        count = len(positions) if positions is not None else 0
        if count < len(new):
            raise EngineOutputError(
                f"vLLM output has {len(new)} new tokens but {count} logprob positions;"
                " logprobs were requested for every token"
            )
        # Integer indexing works on both `list[dict]` and vLLM's `FlatLogprobs`, whose slicing
        # fails on an empty slice.
        tail = [positions[i] for i in range(count - len(new), count)] if positions else []
        sampled = []
        top = []
        for token_id, position in zip(new, tail, strict=True):
            entry = position.get(token_id)
            if entry is None:
                raise EngineOutputError(
                    f"vLLM logprobs for token {token_id} do not contain that token"
                    f" (keys {sorted(position)}); logprobs and token ids are misaligned"
                )
            sampled.append(float(entry.logprob))
            ranked = sorted(position.items(), key=lambda item: -item[1].logprob)
            top.append(
                tuple((int(tid), float(lp.logprob)) for tid, lp in ranked[: self.top_logprobs])
            )
        return tuple(sampled), (tuple(top) if self.top_logprobs > 0 else None)


def _finish(reason: str, stop_reason: int | str | None) -> dict[str, Any]:
    if reason == "stop":
        return {"finish_reason": "stop", "stop_reason": stop_reason}
    if reason in ("length", "abort"):
        return {"finish_reason": reason}
    if reason == "error":
        detail = "a request-level engine error vLLM reports as retryable, e.g. a KV load failure"
    else:
        detail = "a finish reason streamfold has no terminal state for"
    return {
        "finish_reason": "error",
        "error": f"vLLM finished the request with finish_reason {reason!r} ({detail})",
    }
