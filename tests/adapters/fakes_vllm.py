"""A faithful stand-in for vLLM's `AsyncLLM` streaming surface, checked against vLLM's source.

Facts modelled, read from the vLLM 0.33.0 wheel (`../shared/reference/real-engine-apis.md`) and,
where older, from the file and commit of vllm-project/vllm named:

* `SamplingParams` (vllm/sampling_params.py:271-449 in 0.33.0) accepts exactly the keywords of
  `_SAMPLING_DEFAULTS`; `StructuredOutputsParams` (:101-141) takes exactly one constraint of
  `json | regex | choice | grammar | json_object | structural_tag`, else `VLLMValidationError`.
  `AsyncLLM.generate` takes the keyword-only arguments of `GENERATE_KEYWORDS` (v1/engine/
  async_llm.py:726-745). `tests/adapters/test_standin_signatures.py` compares all three with the
  real classes where vLLM is installed.
* `vllm.inputs.tokens_input(ids)` (inputs/engine.py:47-63) gives `{"type": "token",
  "prompt_token_ids": ids}`; a prompt dict without `"type"` takes the deprecated raw-prompt
  path, which logs "Passing raw prompts to InputProcessor is deprecated" once
  (v1/engine/input_processor.py:402-427): recorded here in `raw_prompts`. `API_BEFORE_TOKENS_INPUT`
  is the API of a vLLM that predates `tokens_input`.
* `AsyncLLM.model_config.max_model_len` (async_llm.py:145): `max_tokens=None` means up to the
  context (input_processor.py:476-480), and a request that reaches the context or `max_tokens`
  finishes "length" (v1/core/sched/utils.py:114-119).
* `AsyncLLM.shutdown(timeout=None)` (async_llm.py:305).

* `CompletionOutput` fields and `RequestOutput.add(next, aggregate)`: vllm/outputs.py @003d3ee2.
  With `aggregate=True` (DELTA) text, token_ids and logprobs are concatenated and the finish
  and stop reasons are taken from the newer output; otherwise the newer output replaces it.
* `RequestOutputCollector.put/get` (vllm/v1/engine/output_processor.py @d0782260): one slot per
  request; outputs that arrive before the consumer reads are merged with `add(aggregate=DELTA)`.
* `RequestState.make_request_output/_new_completion_output` (same file): DELTA outputs carry the
  step's new token ids and `logprobs[-n:] if n else logprobs[:0]` (0.33.0,
  output_processor.py:493-498: an output with no tokens carries no logprobs); CUMULATIVE
  outputs carry `detokenizer.output_token_ids` and the logprob list themselves, live references
  that keep growing. With `stream_interval > 1` an output is made only when finished, at the
  first token, or once `stream_interval` tokens are pending; in DELTA mode it then carries
  every token since the last one sent.
* `OutputProcessor.abort_requests` (same file) makes a final output with no new tokens and
  `finish_reason="abort"`; aborting an unknown or finished id does nothing.
* `AsyncLLM.generate` (vllm/v1/engine/async_llm.py @00080ee1): on `CancelledError` or
  `GeneratorExit` it awaits `abort(request_id, internal=True)` and re-raises (inside a
  cancelled anyio scope that await is itself cancelled: anyio re-delivers cancellation at every
  await); on any other error it aborts and raises `EngineGenerateError() from e`;
  `EngineDeadError` is re-raised as is.
* `Logprob(logprob, rank, decoded_token)` and `FlatLogprobs` (vllm/logprobs.py @578b601c; an
  empty slice is an empty `FlatLogprobs` in 0.33.0, logprobs.py:120-125): one dict per
  position, the sampled token first with its own rank, then the top-k with ranks 1..k (a
  sampled token inside the top-k is the same key, overwritten with its top-k rank).
* `SamplingParams` defaults (vllm/sampling_params.py @00388f65): `max_tokens=16`, `top_k=0`,
  `logprobs=None`, `output_kind=RequestOutputKind.CUMULATIVE`; unknown keywords are a TypeError
  (msgspec struct).
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel

from streamfold.adapters import VLLMApi


class RequestOutputKind(enum.Enum):
    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


# Every public field of vLLM 0.33.0's `SamplingParams` (vllm/sampling_params.py:285-449).
_SAMPLING_DEFAULTS: dict[str, Any] = {
    "n": 1,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
    "temperature": 1.0,
    "watermarking": None,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "seed": None,
    "stop": None,
    "stop_token_ids": None,
    "ignore_eos": False,
    "max_tokens": 16,
    "min_tokens": 0,
    "logprobs": None,
    "prompt_logprobs": None,
    "prompt_logprob_token_ids": None,
    "prompt_logprob_start": None,
    "logprob_token_ids": None,
    "flat_logprobs": False,
    "detokenize": True,
    "skip_special_tokens": True,
    "spaces_between_special_tokens": True,
    "include_stop_str_in_output": False,
    "output_kind": RequestOutputKind.CUMULATIVE,
    "stream_interval": None,
    "skip_clone": False,
    "output_text_buffer_length": 0,
    "structured_outputs": None,
    "logit_bias": None,
    "allowed_token_ids": None,
    "extra_args": None,
    "bad_words": None,
    "skip_reading_prefix_cache": None,
    "thinking_token_budget": None,
    "repetition_detection": None,
    "routed_experts_prompt_start": 0,
    "trace_decode_token_ids": None,
}

# The keyword-only arguments of `AsyncLLM.generate` (v1/engine/async_llm.py:726-745).
GENERATE_KEYWORDS = frozenset(
    {
        "prompt_text",
        "lora_request",
        "tokenization_kwargs",
        "trace_headers",
        "priority",
        "data_parallel_rank",
        "session_id",
        "kv_hints",
        "reasoning_ended",
        "reasoning_parser_kwargs",
    }
)


class VLLMValidationError(ValueError):
    """vllm/exceptions.py: a request vLLM refuses (a `VLLMClientError`, itself a ValueError)."""


_CONSTRAINTS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


@dataclass
class StructuredOutputsParams:
    """vllm/sampling_params.py:101-141: exactly one constraint, plus per-request options."""

    json: str | dict[str, Any] | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None
    structural_tag: str | None = None

    def __post_init__(self) -> None:
        count = sum(getattr(self, name) is not None for name in _CONSTRAINTS)
        if count > 1:
            raise VLLMValidationError(
                "You can only use one kind of structured outputs constraint "
                f"but multiple are specified: {self.__dict__}"
            )
        if count < 1:
            raise VLLMValidationError(
                "You must use one kind of structured outputs constraint "
                f"but none are specified: {self.__dict__}"
            )


class SamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        unknown = set(kwargs) - set(_SAMPLING_DEFAULTS)
        if unknown:
            raise TypeError(f"Unexpected keyword argument(s) {sorted(unknown)}")
        for name, default in _SAMPLING_DEFAULTS.items():
            setattr(self, name, kwargs.get(name, default))
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}.")
        if self.temperature < 0:
            raise ValueError(f"temperature must be non-negative, got {self.temperature}.")
        if self.structured_outputs is not None and not isinstance(
            self.structured_outputs, StructuredOutputsParams
        ):
            raise TypeError("structured_outputs must be a StructuredOutputsParams")


def tokens_input(
    prompt_token_ids: list[int], *, prompt: str | None = None, cache_salt: str | None = None
) -> dict[str, Any]:
    """vllm/inputs/engine.py:47-63 (`vllm.inputs.tokens_input`)."""
    inputs: dict[str, Any] = {"type": "token", "prompt_token_ids": prompt_token_ids}
    if prompt is not None:
        inputs["prompt"] = prompt
    if cache_salt is not None:
        inputs["cache_salt"] = cache_salt
    return inputs


_OUTPUT_KINDS = {"delta": RequestOutputKind.DELTA, "cumulative": RequestOutputKind.CUMULATIVE}
API = VLLMApi(
    sampling_params=SamplingParams,
    output_kinds=_OUTPUT_KINDS,
    token_prompt=tokens_input,
    structured_outputs=StructuredOutputsParams,
)
#: A vLLM from before `vllm.inputs.tokens_input`: the adapter passes the raw TokensPrompt dict.
API_BEFORE_TOKENS_INPUT = VLLMApi(sampling_params=SamplingParams, output_kinds=_OUTPUT_KINDS)


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


class FlatLogprobs:
    """vLLM's flat logprob container: integer indexing gives a dict, a slice a FlatLogprobs
    (an empty one for an empty slice, as in 0.33.0)."""

    def __init__(self) -> None:
        self._positions: list[dict[int, Logprob]] = []

    def append(self, position: dict[int, Logprob]) -> None:
        self._positions.append(position)

    def extend(self, positions: Sequence[dict[int, Logprob]]) -> None:
        self._positions.extend(positions)

    def __len__(self) -> int:
        return len(self._positions)

    def __bool__(self) -> bool:
        return bool(self._positions)

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            picked = self._positions[index]
            flat = FlatLogprobs()
            flat.extend(picked)
            return flat
        return dict(self._positions[index])


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: Sequence[int]
    cumulative_logprob: float | None
    logprobs: Any
    routed_experts: Any = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    lora_request: Any = None
    kv_transfer_params: Any = None

    def finished(self) -> bool:
        return self.finish_reason is not None


class RequestOutput:
    def __init__(
        self,
        request_id: str,
        prompt: str | None,
        prompt_token_ids: list[int] | None,
        prompt_logprobs: Any,
        outputs: list[CompletionOutput],
        finished: bool,
        **kwargs: Any,
    ) -> None:
        self.request_id = request_id
        self.prompt = prompt
        self.prompt_token_ids = prompt_token_ids
        self.prompt_logprobs = prompt_logprobs
        self.outputs = outputs
        self.finished = finished
        self.num_cached_tokens: int | None = kwargs.get("num_cached_tokens")

    def add(self, next_output: RequestOutput, aggregate: bool) -> None:
        self.finished |= next_output.finished
        for next_completion in next_output.outputs:
            for i, completion in enumerate(self.outputs):
                if completion.index == next_completion.index:
                    if aggregate:
                        completion.text += next_completion.text
                        completion.token_ids = list(completion.token_ids)
                        completion.token_ids.extend(next_completion.token_ids)
                        if next_completion.logprobs:
                            completion.logprobs.extend(next_completion.logprobs)
                        completion.cumulative_logprob = next_completion.cumulative_logprob
                        completion.finish_reason = next_completion.finish_reason
                        completion.stop_reason = next_completion.stop_reason
                    else:
                        self.outputs[i] = next_completion
                    break
            else:
                self.outputs.append(next_completion)


class EngineGenerateError(Exception):
    """vllm/v1/engine/exceptions.py: raised by `generate` for an unexpected per-request error."""


class EngineDeadError(Exception):
    """vllm/v1/engine/exceptions.py: the engine core died."""


def alternative_ids(position: int, token_id: int, k: int) -> list[int]:
    """k token ids other than the sampled one, inside the o200k vocabulary."""
    ids: list[int] = []
    candidate = 50_000 + position * 10
    while len(ids) < k:
        if candidate != token_id:
            ids.append(candidate)
        candidate += 1
    return ids


def ranked_alternatives(position: int, token_id: int, k: int) -> list[tuple[int, float]]:
    """The sampled token and k alternatives at `position`, most likely first.

    At even positions the sampled token is the most likely one (so it is also in the top-k);
    at odd positions it ranks below every top-k alternative.
    """
    sampled_lp = -0.05 - 0.001 * position if position % 2 == 0 else -3.0 - 0.001 * position
    ids = alternative_ids(position, token_id, k)
    alternatives = [(tid, -0.5 - 0.1 * j) for j, tid in enumerate(ids)]
    return sorted([(token_id, sampled_lp), *alternatives], key=lambda item: -item[1])


def position_logprobs(position: int, token_id: int, k: int) -> dict[int, Logprob]:
    """One position's logprob dict as vLLM builds it: sampled token first, then ranks 1..k."""
    ranked = ranked_alternatives(position, token_id, k)
    rank_of = {tid: r for r, (tid, _) in enumerate(ranked, start=1)}
    entries = {token_id: Logprob(dict(ranked)[token_id], rank_of[token_id], None)}
    for tid, lp in ranked[:k]:
        entries[tid] = Logprob(lp, rank_of[tid], None)
    return entries


@dataclass
class Script:
    """What the engine does for one request.

    `steps` are engine-core steps, each the tokens it accepted (several under speculative
    decoding). `finish_reason` finishes the last step ("stop", "length", "error", ...) or, for
    "abort", comes after the steps as vLLM's abort output. `reads` groups the processor's
    outputs that the collector merges before the consumer reads them (lag). `fail_after` raises
    `error` after that many reads; `block_after` waits forever after that many reads.
    """

    steps: list[list[int]]
    finish_reason: str = "stop"
    stop_reason: int | str | None = None
    stream_interval: int = 1
    reads: list[int] | None = None
    fail_after: int | None = None
    error: BaseException | None = None
    block_after: int | None = None
    flat_logprobs: bool = False
    #: `RequestOutput.num_cached_tokens`: the prompt tokens the prefix cache supplied.
    num_cached_tokens: int | None = None


@dataclass
class ModelConfig:
    """The one field of vLLM's `ModelConfig` the adapter reads (`AsyncLLM.model_config`)."""

    max_model_len: int = 131_072


@dataclass
class FakeAsyncLLM:
    """`AsyncLLM.generate/abort/shutdown` over scripted steps; records prompts, params, aborts.

    `default` scripts a request id that `scripts` does not name (a served request's id is made
    by the server)."""

    scripts: dict[str, Script]
    default: Script | None = None
    model_config: ModelConfig = field(default_factory=ModelConfig)
    prompts: dict[str, Any] = field(default_factory=dict)
    params: dict[str, SamplingParams] = field(default_factory=dict)
    abort_calls: list[tuple[str, bool]] = field(default_factory=list)
    running: set[str] = field(default_factory=set)
    raw_prompts: list[str] = field(default_factory=list)
    shutdown_calls: int = 0

    async def abort(self, request_id: str, internal: bool = False) -> None:
        self.abort_calls.append((request_id, internal))
        # `engine_core.abort_requests_async`: a message to the engine core, an await that a
        # cancelled anyio scope interrupts; only then are the request's KV blocks freed.
        await anyio.lowlevel.checkpoint()
        self.running.discard(request_id)

    def shutdown(self, timeout: float | None = None) -> None:
        self.shutdown_calls += 1

    async def generate(
        self,
        prompt: Any,
        sampling_params: SamplingParams,
        request_id: str,
        **kwargs: Any,
    ) -> AsyncIterator[RequestOutput]:
        unknown = set(kwargs) - GENERATE_KEYWORDS
        if unknown:
            raise TypeError(f"generate() got unexpected keyword argument(s) {sorted(unknown)}")
        script = self.scripts.get(request_id, self.default)
        if script is None:
            raise KeyError(f"no script for request {request_id!r}")
        self.prompts[request_id] = prompt
        self.params[request_id] = sampling_params
        if not (isinstance(prompt, dict) and "type" in prompt):
            self.raw_prompts.append(request_id)  # the deprecated raw-prompt path
        prompt_len = len(prompt["prompt_token_ids"])
        if prompt_len >= self.model_config.max_model_len:
            raise VLLMValidationError(
                f"The decoder prompt (length {prompt_len}) is longer than the maximum model"
                f" length of {self.model_config.max_model_len}."
            )
        self.running.add(request_id)
        cancelled = anyio.get_cancelled_exc_class()
        room = self.model_config.max_model_len - prompt_len
        try:
            reads = 0
            for out in _collector_reads(script, sampling_params, request_id, room):
                await anyio.lowlevel.checkpoint()
                if script.fail_after is not None and reads == script.fail_after:
                    assert script.error is not None
                    raise script.error
                if script.block_after is not None and reads == script.block_after:
                    await anyio.Event().wait()
                reads += 1
                if out.finished:
                    self.running.discard(request_id)
                yield out
        except (cancelled, GeneratorExit):
            await self.abort(request_id, internal=True)
            raise
        except EngineDeadError:
            raise
        except Exception as exc:
            await self.abort(request_id, internal=True)
            raise EngineGenerateError() from exc


def _collector_reads(
    script: Script, params: SamplingParams, request_id: str, room: int
) -> Iterator[RequestOutput]:
    """Yield what the consumer reads: processor outputs merged per `script.reads` group."""
    delta = params.output_kind == RequestOutputKind.DELTA
    outputs = _processor_outputs(script, params, request_id, room)
    sizes = iter(script.reads or [])
    while True:
        size = next(sizes, 1)
        held: RequestOutput | None = None
        for _ in range(size):
            out = next(outputs, None)
            if out is None:
                break
            if held is None:
                held = out
            else:
                held.add(out, aggregate=delta)
        if held is None:
            return
        yield held


def _limited(script: Script, limit: int) -> tuple[list[list[int]], str]:
    """The steps the scheduler runs before `limit` output tokens, and the finish reason: it
    ends the request "length" at the limit unless its last token stops it
    (v1/core/sched/utils.py:98-119)."""
    steps: list[list[int]] = []
    count = 0
    last = len(script.steps) - 1
    for index, step in enumerate(script.steps):
        if count + len(step) > limit or (count + len(step) == limit and index < last):
            steps.append(step[: limit - count])
            return steps, "length"
        steps.append(step)
        count += len(step)
    return steps, script.finish_reason


def _processor_outputs(
    script: Script, params: SamplingParams, request_id: str, room: int
) -> Iterator[RequestOutput]:
    delta = params.output_kind == RequestOutputKind.DELTA
    limit = room if params.max_tokens is None else min(room, params.max_tokens)
    steps, finish_reason = _limited(script, limit)
    k = params.logprobs
    output_ids: list[int] = []  # the detokenizer's list: cumulative outputs share it
    logprobs: Any = None
    if k is not None:
        logprobs = FlatLogprobs() if script.flat_logprobs else []
    sent_offset = 0

    def make(new_ids: list[int], finish: str | None, stop: int | str | None) -> RequestOutput:
        token_ids = list(new_ids) if delta else output_ids
        lps = logprobs
        if delta and lps is not None:
            n = len(token_ids)
            lps = lps[-n:] if n else lps[:0]
        completion = CompletionOutput(
            index=0,
            text="",
            token_ids=token_ids,
            cumulative_logprob=None,
            logprobs=lps,
            finish_reason=finish,
            stop_reason=stop if finish is not None else None,
        )
        return RequestOutput(
            request_id, None, [], None, [completion], finish is not None,
            num_cached_tokens=script.num_cached_tokens,
        )  # fmt: skip

    last = len(steps) - 1
    for index, step in enumerate(steps):
        for token_id in step:
            if logprobs is not None:
                logprobs.append(position_logprobs(len(output_ids), token_id, k))
            output_ids.append(token_id)
        finish = finish_reason if index == last and finish_reason != "abort" else None
        new = list(step)
        if script.stream_interval > 1:
            pending = len(output_ids) - sent_offset
            if not (finish or sent_offset == 0 or pending >= script.stream_interval):
                continue
            if delta:
                new = output_ids[sent_offset:]
                sent_offset = len(output_ids)
        yield make(new, finish, script.stop_reason)
    if finish_reason == "abort":
        yield make([], "abort", None)
