"""A faithful stand-in for SGLang's offline `Engine` streaming surface, checked against its source.

Facts modelled, with the file and the commit of sgl-project/sglang they were read from:

* `Engine.async_generate(prompt, sampling_params, input_ids, ..., return_logprob,
  logprob_start_len, top_logprobs_num, ..., stream, ..., rid, ...)` is a coroutine; with
  `stream=True` it returns `tokenizer_manager.generate_request(obj, None)`, an async generator
  (python/sglang/srt/entrypoints/engine.py @001067ff). The engine itself has no abort method;
  `tokenizer_manager.abort_request(rid="", abort_all=False)` is a plain method.
* `TokenizerManager.generate_request` drops the rid's state on *any* `BaseException`, including
  `GeneratorExit` and cancellation, without telling the scheduler; `abort_request` returns early
  for a rid that has no state (python/sglang/srt/managers/tokenizer_manager.py @001067ff).
* `_handle_batch_output` (same file): `meta_info` has `id`, `finish_reason`, `prompt_tokens`,
  `completion_tokens` (the running total), `cached_tokens`; with `return_logprob`,
  `output_token_logprobs` holds `(logprob, token_id, None)` per token and, with
  `top_logprobs_num > 0`, `output_top_logprobs` a list of such tuples per token. With
  `incremental_streaming_output` each dict carries the new `output_ids`/`text` and the logprob
  lists sliced from the last offset; without it intermediate dicts carry the state's own
  `output_ids` list (a live reference) with `text: None` (filled in by `_wait_one_response`),
  and the finished dict a copy.
* `_wait_one_response` (same file): when several dicts are queued it coalesces them
  (incremental: ids, text and logprob lists concatenated, the rest from the last) or keeps only
  the newest (cumulative).
* Finish reasons are `BaseFinishReason.to_json()` dicts: `{"type": "stop", "matched": ...}`,
  `{"type": "length", "length": n}`, `{"type": "abort", "message", "status_code", "err_type"}`
  (python/sglang/srt/managers/schedule_batch.py).
* `Scheduler.abort_request` aborts every request whose `rid.startswith(recv_req.rid)`
  (python/sglang/srt/managers/scheduler.py).
* `SamplingParams` (python/sglang/srt/sampling/sampling_params.py @00c17caf): a kw-only msgspec
  struct (unknown keys are a TypeError) with `max_new_tokens=128`; `verify` rejects `top_k=0`
  ("top_k must be -1 (disable) or at least 1").
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel

from .fakes_vllm import alternative_ids

_SAMPLING_KEYS = {
    "max_new_tokens", "stop", "stop_token_ids", "temperature", "top_p", "top_k", "min_p",
    "ignore_eos", "skip_special_tokens", "no_stop_trim", "n", "sampling_seed",
}  # fmt: skip
_GENERATE_KEYS = {
    "prompt", "sampling_params", "input_ids", "return_logprob", "logprob_start_len",
    "top_logprobs_num", "stream", "rid",
}  # fmt: skip


def check_sampling_params(params: dict[str, Any]) -> None:
    unknown = set(params) - _SAMPLING_KEYS
    if unknown:
        raise TypeError(f"Unexpected keyword argument(s) {sorted(unknown)}")
    top_k = params.get("top_k", -1)
    if top_k == 0 or top_k < -1:
        raise ValueError(f"top_k must be -1 (disable) or at least 1, got {top_k}.")


def token_logprob(position: int, token_id: int) -> tuple[float, int, None]:
    """The sampled token's entry: the most likely token at even positions, unlikely at odd."""
    logprob = -0.05 - 0.001 * position if position % 2 == 0 else -3.0 - 0.001 * position
    return (logprob, token_id, None)


def top_logprobs(position: int, token_id: int, k: int) -> list[tuple[float, int, None]]:
    """SGLang's top-k list for one position, most likely first; at odd positions the
    sampled token is not among them."""
    ids = alternative_ids(position, token_id, k)
    alternatives = [(-0.5 - 0.1 * j, tid, None) for j, tid in enumerate(ids)]
    if position % 2 == 0 and k:
        return [token_logprob(position, token_id), *alternatives[: k - 1]]
    return alternatives


@dataclass
class Script:
    """What the engine does for one request (see fakes_vllm.Script): `steps` of accepted
    tokens, a `finish` dict for the last step, `reads` grouping queued dicts per read,
    `fail_after`/`error` and `block_after`."""

    steps: list[list[int]]
    finish: dict[str, Any] = field(default_factory=lambda: {"type": "stop", "matched": 2})
    reads: list[int] | None = None
    fail_after: int | None = None
    error: BaseException | None = None
    block_after: int | None = None


@dataclass
class FakeTokenizerManager:
    incremental_streaming_output: bool = False
    rid_to_state: dict[str, Any] = field(default_factory=dict)
    scheduler_running: set[str] = field(default_factory=set)
    scheduler_aborted: set[str] = field(default_factory=set)
    abort_calls: list[str] = field(default_factory=list)
    ignored_aborts: list[str] = field(default_factory=list)

    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        self.abort_calls.append(rid)
        if not abort_all and rid not in self.rid_to_state:
            self.ignored_aborts.append(rid)
            return
        for running in list(self.scheduler_running):
            if abort_all or running.startswith(rid):  # the scheduler's prefix match
                self.scheduler_running.discard(running)
                self.scheduler_aborted.add(running)


@dataclass
class FakeSGLangEngine:
    scripts: dict[str, Script]
    tokenizer_manager: FakeTokenizerManager = field(default_factory=FakeTokenizerManager)
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)

    async def async_generate(self, **kwargs: Any) -> Any:
        unknown = set(kwargs) - _GENERATE_KEYS
        if unknown:
            raise TypeError(f"async_generate() got unexpected keyword(s) {sorted(unknown)}")
        rid = kwargs["rid"]
        self.calls[rid] = kwargs
        stream = self._generate_request(rid, kwargs)
        if kwargs.get("stream") is True:
            return stream
        return await stream.__anext__()

    async def _generate_request(
        self, rid: str, kwargs: dict[str, Any]
    ) -> AsyncIterator[dict[str, Any]]:
        manager = self.tokenizer_manager
        manager.rid_to_state[rid] = object()
        try:
            check_sampling_params(kwargs["sampling_params"])
            manager.scheduler_running.add(rid)
            script = self.scripts[rid]
            reads = 0
            for out in _reads(script, kwargs, manager, rid):
                await anyio.lowlevel.checkpoint()
                if script.fail_after is not None and reads == script.fail_after:
                    assert script.error is not None
                    raise script.error
                if script.block_after is not None and reads == script.block_after:
                    await anyio.Event().wait()
                reads += 1
                if out["meta_info"]["finish_reason"] is not None:
                    manager.rid_to_state.pop(rid, None)
                    manager.scheduler_running.discard(rid)
                yield out
        except BaseException:
            manager.rid_to_state.pop(rid, None)  # `_discard_pending_req_states`
            raise


def _reads(script: Script, kwargs: dict[str, Any], manager: FakeTokenizerManager, rid: str) -> Any:
    incremental = manager.incremental_streaming_output
    outputs = _batch_outputs(script, kwargs, manager, rid)
    sizes = iter(script.reads or [])
    while True:
        queued = [out for _, out in zip(range(next(sizes, 1)), outputs, strict=False)]
        if not queued:
            return
        if not incremental:
            out = queued[-1]
            if out.get("text") is None:
                out["text"] = "<text>"
            yield out
            continue
        out = dict(queued[-1])
        out["output_ids"] = [t for q in queued for t in q["output_ids"]]
        out["text"] = "".join(q["text"] for q in queued)
        meta = dict(queued[-1]["meta_info"])
        for key in ("output_token_logprobs", "output_top_logprobs"):
            if key in meta:
                meta[key] = [item for q in queued for item in q["meta_info"][key]]
        out["meta_info"] = meta
        yield out


def _batch_outputs(
    script: Script, kwargs: dict[str, Any], manager: FakeTokenizerManager, rid: str
) -> Any:
    incremental = manager.incremental_streaming_output
    k = kwargs.get("top_logprobs_num") or 0
    output_ids: list[int] = []
    token_lps: list[tuple[float, int, None]] = []
    top_lps: list[list[tuple[float, int, None]]] = []
    offset = 0
    last = len(script.steps) - 1
    for index, step in enumerate(script.steps):
        if rid in manager.scheduler_aborted:
            step, finish = [], {"type": "abort", "message": "Abort", "status_code": None}
        else:
            finish = script.finish if index == last else None
        for token_id in step:
            token_lps.append(token_logprob(len(output_ids), token_id))
            top_lps.append(top_logprobs(len(output_ids), token_id, k))
            output_ids.append(token_id)
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": finish,
            "prompt_tokens": len(kwargs["input_ids"]),
            "completion_tokens": len(output_ids),
            "cached_tokens": 0,
        }
        if kwargs.get("return_logprob"):
            meta["output_token_logprobs"] = token_lps[offset:] if incremental else token_lps
            if k:
                meta["output_top_logprobs"] = top_lps[offset:] if incremental else top_lps
        if incremental:
            out = {"text": "<delta>", "output_ids": list(step), "meta_info": meta}
            offset = len(output_ids)
        elif finish is not None:
            out = {"text": "<text>", "output_ids": output_ids.copy(), "meta_info": meta}
        else:
            out = {"text": None, "output_ids": output_ids, "meta_info": meta}
        yield out
        if finish is not None:
            return
