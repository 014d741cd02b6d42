"""A faithful stand-in for vLLM's `AsyncLLM` streaming surface, checked against vLLM's source.

Facts modelled, with the file and the commit of vllm-project/vllm they were read from:

* `CompletionOutput` fields and `RequestOutput.add(next, aggregate)`: vllm/outputs.py @003d3ee2.
  With `aggregate=True` (DELTA) text, token_ids and logprobs are concatenated and the finish
  and stop reasons are taken from the newer output; otherwise the newer output replaces it.
* `RequestOutputCollector.put/get` (vllm/v1/engine/output_processor.py @d0782260): one slot per
  request; outputs that arrive before the consumer reads are merged with `add(aggregate=DELTA)`.
* `RequestState.make_request_output/_new_completion_output` (same file): DELTA outputs carry the
  step's new token ids and `logprobs[-len(token_ids):]` (so an output with no tokens carries the
  whole list); CUMULATIVE outputs carry `detokenizer.output_token_ids` and the logprob list
  themselves, live references that keep growing. With `stream_interval > 1` an output is made
  only when finished, at the first token, or once `stream_interval` tokens are pending; in DELTA
  mode it then carries every token since the last one sent.
* `OutputProcessor.abort_requests` (same file) makes a final output with no new tokens and
  `finish_reason="abort"`; aborting an unknown or finished id does nothing.
* `AsyncLLM.generate` (vllm/v1/engine/async_llm.py @00080ee1): on `CancelledError` or
  `GeneratorExit` it awaits `abort(request_id, internal=True)` and re-raises (inside a
  cancelled anyio scope that await is itself cancelled: anyio re-delivers cancellation at every
  await); on any other error it aborts and raises `EngineGenerateError() from e`;
  `EngineDeadError` is re-raised as is.
* `Logprob(logprob, rank, decoded_token)` and `FlatLogprobs` (vllm/logprobs.py @578b601c): one
  dict per position, the sampled token first with its own rank, then the top-k with ranks 1..k
  (a sampled token inside the top-k is the same key, overwritten with its top-k rank).
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


_SAMPLING_DEFAULTS: dict[str, Any] = {
    "n": 1,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": 0,
    "seed": None,
    "stop": None,
    "stop_token_ids": None,
    "ignore_eos": False,
    "max_tokens": 16,
    "logprobs": None,
    "detokenize": True,
    "skip_special_tokens": True,
    "output_kind": RequestOutputKind.CUMULATIVE,
    "stream_interval": None,
}


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


API = VLLMApi(
    sampling_params=SamplingParams,
    output_kinds={"delta": RequestOutputKind.DELTA, "cumulative": RequestOutputKind.CUMULATIVE},
)


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


class FlatLogprobs:
    """vLLM's flat logprob container: integer indexing gives a dict; an empty slice raises."""

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
            if not picked:  # vLLM reads `start_indices[index][0]`, an IndexError when empty
                raise IndexError("list index out of range")
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


@dataclass
class FakeAsyncLLM:
    """`AsyncLLM.generate/abort` over scripted steps; records prompts, params and aborts."""

    scripts: dict[str, Script]
    prompts: dict[str, Any] = field(default_factory=dict)
    params: dict[str, SamplingParams] = field(default_factory=dict)
    abort_calls: list[tuple[str, bool]] = field(default_factory=list)
    running: set[str] = field(default_factory=set)

    async def abort(self, request_id: str, internal: bool = False) -> None:
        self.abort_calls.append((request_id, internal))
        # `engine_core.abort_requests_async`: a message to the engine core, an await that a
        # cancelled anyio scope interrupts; only then are the request's KV blocks freed.
        await anyio.lowlevel.checkpoint()
        self.running.discard(request_id)

    async def generate(
        self, prompt: Any, sampling_params: SamplingParams, request_id: str, **kwargs: Any
    ) -> AsyncIterator[RequestOutput]:
        script = self.scripts[request_id]
        self.prompts[request_id] = prompt
        self.params[request_id] = sampling_params
        self.running.add(request_id)
        cancelled = anyio.get_cancelled_exc_class()
        try:
            reads = 0
            for out in _collector_reads(script, sampling_params, request_id):
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
    script: Script, params: SamplingParams, request_id: str
) -> Iterator[RequestOutput]:
    """Yield what the consumer reads: processor outputs merged per `script.reads` group."""
    delta = params.output_kind == RequestOutputKind.DELTA
    outputs = _processor_outputs(script, params, request_id)
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


def _processor_outputs(
    script: Script, params: SamplingParams, request_id: str
) -> Iterator[RequestOutput]:
    delta = params.output_kind == RequestOutputKind.DELTA
    k = params.logprobs
    output_ids: list[int] = []  # the detokenizer's list: cumulative outputs share it
    logprobs: Any = None
    if k is not None:
        logprobs = FlatLogprobs() if script.flat_logprobs else []
    sent_offset = 0

    def make(new_ids: list[int], finish: str | None, stop: int | str | None) -> RequestOutput:
        token_ids = list(new_ids) if delta else output_ids
        lps = logprobs
        if delta and lps:
            lps = lps[-len(token_ids) :]
        completion = CompletionOutput(
            index=0,
            text="",
            token_ids=token_ids,
            cumulative_logprob=None,
            logprobs=lps,
            finish_reason=finish,
            stop_reason=stop if finish is not None else None,
        )
        return RequestOutput(request_id, None, [], None, [completion], finish is not None)

    last = len(script.steps) - 1
    for index, step in enumerate(script.steps):
        for token_id in step:
            if logprobs is not None:
                logprobs.append(position_logprobs(len(output_ids), token_id, k))
            output_ids.append(token_id)
        finish = script.finish_reason if index == last and script.finish_reason != "abort" else None
        new = list(step)
        if script.stream_interval > 1:
            pending = len(output_ids) - sent_offset
            if not (finish or sent_offset == 0 or pending >= script.stream_interval):
                continue
            if delta:
                new = output_ids[sent_offset:]
                sent_offset = len(output_ids)
        yield make(new, finish, script.stop_reason)
    if script.finish_reason == "abort":
        yield make([], "abort", None)
