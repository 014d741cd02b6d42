"""A faithful stand-in for SGLang's offline `Engine` streaming surface, checked against its source.

Facts modelled, read from the SGLang 0.5.23 wheel (`../shared/reference/real-engine-apis.md`;
`file:line` inside it) and, where older, from the file and commit of sgl-project/sglang named:

* `Engine.async_generate` takes exactly the arguments of `_GENERATE_KEYS`
  (entrypoints/engine.py:545-601); with `stream=True` it returns
  `tokenizer_manager.generate_request(obj, None)`, an async generator (:643-646). The engine
  has no abort method; `tokenizer_manager.abort_request(rid="", abort_all=False)` is a plain
  method that returns early for a rid without state and sends one abort per state
  (`abort_sent`, managers/tokenizer_manager.py:2241-2265). `Engine.shutdown()` (:1450).
* `SamplingParams` (sampling/sampling_params.py:140-189) is a kw-only msgspec struct with the
  fields of `_SAMPLING_KEYS` (unknown keys are a TypeError), `max_new_tokens=128`; `verify`
  rejects `top_k=0` and more than one of `json_schema | regex | ebnf | structural_tag`
  (:263-266, :320-329). `tests/adapters/test_standin_signatures.py` compares both key sets with
  the real ones where SGLang is installed.
* The first `generate_request` runs `auto_create_handle_loop` (tokenizer_manager.py:897-900,
  2440-2463): on the main thread it installs SGLang's SIGTERM and SIGQUIT handlers on the
  running loop (`SignalHandler`, :4062-4081). Its SIGTERM handler sets `gracefully_exit`, and
  `sigterm_watchdog` (:3508-3571; every 5 s, here `sigterm_watchdog_interval`) then drains the
  requests and ends the process with `sys.exit(0)`.
* Before dispatch, `_validate_one_request` (:1333-1378) raises `ValueError` for a prompt that
  fills the context, and (`validate_total_tokens`) for `prompt + max_new_tokens` past
  `context_len`; `max_new_tokens=None` runs to the context (scheduler.py:2693-2736). A request
  that reaches its limit finishes `{"type": "length", "length": n}`.
* `seed`: `sampling_seed` is accepted, but used only under `enable_deterministic_inference`
  (sampling/sampling_batch_info.py:128,157-171): `engine.server_args` carries the switch.
* When `generate_request` fails or is closed it drops the states it never dispatched and aborts
  the dispatched ones, keeping their state until the scheduler answers
  (`_release_req_states_on_failure`, :3850-3874). This scheduler answers at once; the real one
  answers after a round trip (which is why the GPU test polls).
* `_handle_abort_req` (:3577-3640): a request the scheduler aborts from its waiting queue (a
  retracted request that timed out, `abort_all`) ends with `{"type": "abort", "message": "Abort
  in waiting queue"}`, `completion_tokens = len(state.output_ids)`, the full logprob lists and,
  under `incremental_streaming_output`, `output_ids = [output_ids[-1]]`: the last token again.
* `_handle_batch_output`: `meta_info` has `id`, `finish_reason`, `prompt_tokens`,
  `completion_tokens` (the running total), `cached_tokens`; with `return_logprob`,
  `output_token_logprobs` holds `(logprob, token_id, None)` per token and, with
  `top_logprobs_num > 0`, `output_top_logprobs` a list of such tuples per token. With
  `incremental_streaming_output` each dict carries the new `output_ids`/`text` and the logprob
  lists sliced from the last offset; without it intermediate dicts carry the state's own
  `output_ids` list (a live reference) with `text: None` (filled in by `_wait_one_response`),
  and the finished dict a copy.
* `_wait_one_response`: when several dicts are queued it coalesces them (incremental: ids, text
  and logprob lists concatenated, the rest from the last; `_coalesce_streaming_chunks`
  :1854-1889) or keeps only the newest (cumulative).
* Finish reasons are `BaseFinishReason.to_json()` dicts: `{"type": "stop", "matched": ...}`,
  `{"type": "length", "length": n}`, `{"type": "abort", "message", "status_code", "err_type"}`
  (managers/schedule_batch.py:279-345).
* `Scheduler.abort_request` aborts every request whose `rid.startswith(recv_req.rid)`
  (managers/scheduler.py:5677-5812).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import sniffio

from .fakes_vllm import alternative_ids

logger = logging.getLogger("sglang.srt.managers.tokenizer_manager")

# Every field of SGLang 0.5.23's `SamplingParams` (sampling/sampling_params.py:149-189; the last
# six are set internally, but the constructor takes them).
_SAMPLING_KEYS = {
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k",
    "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens",
    "n", "beam_width", "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos",
    "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim", "stream_interval",
    "logit_bias", "sampling_seed", "custom_params", "watermark",
    "stop_strs", "stop_regex_strs", "stop_str_max_len", "stop_regex_max_len", "is_normalized",
    "ebnf_full_assistant",
}  # fmt: skip
# Every argument of `Engine.async_generate` (entrypoints/engine.py:545-601).
_GENERATE_KEYS = {
    "prompt", "sampling_params", "input_ids", "image_data", "audio_data", "video_data",
    "mm_hashes", "mm_content_hashes", "return_logprob", "logprob_start_len",
    "top_logprobs_num", "token_ids_logprob", "lora_path", "custom_logit_processor",
    "require_reasoning", "return_hidden_states", "return_routed_experts",
    "routed_experts_start_len", "stream", "bootstrap_host", "bootstrap_port",
    "bootstrap_room", "routed_dp_rank", "disagg_prefill_dp_rank", "kv_hints",
    "data_parallel_rank", "external_trace_header", "rid", "session_params", "priority",
    "session_id", "cache_salt",
}  # fmt: skip
_GRAMMARS = ("json_schema", "regex", "ebnf", "structural_tag")


def check_sampling_params(params: dict[str, Any]) -> None:
    unknown = set(params) - _SAMPLING_KEYS
    if unknown:
        raise TypeError(f"Unexpected keyword argument(s) {sorted(unknown)}")
    top_k = params.get("top_k", -1)
    if top_k == 0 or top_k < -1:
        raise ValueError(f"top_k must be -1 (disable) or at least 1, got {top_k}.")
    if sum(params.get(key) not in (None, "") for key in _GRAMMARS) > 1:
        raise ValueError("Only one of json_schema, regex, ebnf, or structural_tag can be set.")


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
    `fail_after`/`error` and `block_after`. `waiting_abort_after`: after that many steps the
    scheduler aborts the request from its waiting queue (`_handle_abort_req`'s echo)."""

    steps: list[list[int]]
    finish: dict[str, Any] = field(default_factory=lambda: {"type": "stop", "matched": 2})
    reads: list[int] | None = None
    fail_after: int | None = None
    error: BaseException | None = None
    block_after: int | None = None
    waiting_abort_after: int | None = None
    #: `meta_info["cached_tokens"]`: the prompt tokens the radix cache supplied.
    cached_tokens: int = 0


@dataclass
class ReqState:
    dispatched: bool = False
    abort_sent: bool = False


@dataclass
class FakeServerArgs:
    enable_deterministic_inference: bool = False


@dataclass
class FakeTokenizerManager:
    incremental_streaming_output: bool = False
    context_len: int = 131_072
    num_reserved_tokens: int = 0
    validate_total_tokens: bool = True
    sigterm_watchdog_interval: float | None = None
    rid_to_state: dict[str, ReqState] = field(default_factory=dict)
    scheduler_running: set[str] = field(default_factory=set)
    scheduler_aborted: set[str] = field(default_factory=set)
    abort_calls: list[str] = field(default_factory=list)
    ignored_aborts: list[str] = field(default_factory=list)
    event_loop: Any = None
    gracefully_exit: bool = False
    handler_threads: list[str] = field(default_factory=list)

    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        self.abort_calls.append(rid)
        self._abort(rid, abort_all)

    def _abort(self, rid: str, abort_all: bool = False) -> None:
        if not abort_all and not rid:
            return
        state = None if abort_all else self.rid_to_state.get(rid)
        if not abort_all:
            if state is None:
                self.ignored_aborts.append(rid)
                return
            if state.abort_sent:
                return
            state.abort_sent = True
        for running in list(self.scheduler_running):
            if abort_all or running.startswith(rid):  # the scheduler's prefix match
                self.scheduler_running.discard(running)
                self.scheduler_aborted.add(running)

    def auto_create_handle_loop(self) -> None:
        if self.event_loop is not None:
            return
        # SGLang takes the running asyncio loop (`get_or_create_event_loop`); under trio
        # there is none, and the stand-in only records that.
        if sniffio.current_async_library() != "asyncio":
            self.event_loop = "not asyncio"
            return
        loop = asyncio.get_running_loop()
        self.event_loop = loop
        if threading.current_thread() is threading.main_thread():
            self.handler_threads.append("main")
            loop.add_signal_handler(signal.SIGTERM, self._sigterm_handler)
            loop.add_signal_handler(signal.SIGQUIT, self._sigquit_handler)
        if self.sigterm_watchdog_interval is not None:
            self._watchdog = loop.create_task(self._sigterm_watchdog())

    def _sigterm_handler(self) -> None:
        logger.warning("SIGTERM received. Draining requests and shutting down...")
        self.gracefully_exit = True

    def _sigquit_handler(self) -> None:
        logger.error("SIGQUIT received. It usually means one child failed.")

    async def _sigterm_watchdog(self) -> None:
        assert self.sigterm_watchdog_interval is not None
        while not self.gracefully_exit:
            await asyncio.sleep(self.sigterm_watchdog_interval)
        while self.rid_to_state:
            await asyncio.sleep(self.sigterm_watchdog_interval)
        logger.warning("SGLang drained its requests: sys.exit(0)")
        sys.exit(0)

    def validate(self, input_ids: list[int], max_new_tokens: int | None) -> None:
        """`_validate_one_request`'s length checks (tokenizer_manager.py:1333-1378)."""
        input_token_num = len(input_ids) + self.num_reserved_tokens
        if input_token_num >= self.context_len:
            raise ValueError(
                f"The input ({input_token_num} tokens) is longer than the "
                f"model's context length ({self.context_len} tokens)."
            )
        if (
            self.validate_total_tokens
            and max_new_tokens is not None
            and (max_new_tokens + input_token_num) > self.context_len
        ):
            raise ValueError(
                "Requested token count exceeds the model's maximum context length of"
                f" {self.context_len} tokens. You requested a total of"
                f" {max_new_tokens + input_token_num} tokens: {input_token_num} tokens from"
                f" the input messages and {max_new_tokens} tokens for the completion. Please"
                " reduce the number of tokens in the input messages or the completion to fit"
                " within the limit."
            )

    def release_on_failure(self, rid: str, state: ReqState) -> None:
        """`_release_req_states_on_failure`: drop an undelivered state, abort a dispatched one
        (its state goes when the scheduler answers: here at once, once it is aborted)."""
        if self.rid_to_state.get(rid) is not state:
            return
        if state.dispatched:
            self._abort(rid)
            if rid not in self.scheduler_running:
                del self.rid_to_state[rid]
        else:
            del self.rid_to_state[rid]


@dataclass
class FakeSGLangEngine:
    scripts: dict[str, Script]
    tokenizer_manager: FakeTokenizerManager = field(default_factory=FakeTokenizerManager)
    calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    default: Script | None = None
    server_args: FakeServerArgs = field(default_factory=FakeServerArgs)
    shutdown_calls: int = 0

    def shutdown(self) -> None:
        self.shutdown_calls += 1

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
        manager.auto_create_handle_loop()
        state = manager.rid_to_state[rid] = ReqState()
        try:
            params = kwargs["sampling_params"]
            check_sampling_params(params)
            manager.validate(kwargs["input_ids"], params.get("max_new_tokens", 128))
            state.dispatched = True
            manager.scheduler_running.add(rid)
            script = self.scripts.get(rid, self.default)
            if script is None:
                raise KeyError(f"no script for rid {rid!r}")
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
            manager.release_on_failure(rid, state)
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
    max_new_tokens = kwargs["sampling_params"].get("max_new_tokens", 128)
    room = manager.context_len - len(kwargs["input_ids"]) - manager.num_reserved_tokens
    limit = room if max_new_tokens is None else min(room, max_new_tokens)
    steps, last_finish = _limited(script, limit)
    last = len(steps) - 1
    for index, step in enumerate(steps):
        if index == script.waiting_abort_after:
            yield _waiting_queue_echo(rid, output_ids, token_lps, top_lps, kwargs, manager)
            return
        if rid in manager.scheduler_aborted:
            step, finish = [], {"type": "abort", "message": "Abort", "status_code": None}
        else:
            finish = last_finish if index == last else None
        for token_id in step:
            token_lps.append(token_logprob(len(output_ids), token_id))
            top_lps.append(top_logprobs(len(output_ids), token_id, k))
            output_ids.append(token_id)
        meta: dict[str, Any] = {
            "id": rid,
            "finish_reason": finish,
            "prompt_tokens": len(kwargs["input_ids"]),
            "completion_tokens": len(output_ids),
            "cached_tokens": script.cached_tokens,
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


def _limited(script: Script, limit: int) -> tuple[list[list[int]], dict[str, Any]]:
    """The steps run before `limit` output tokens, and the last step's finish: "length" at the
    limit unless the script's own finish ends that very step."""
    steps: list[list[int]] = []
    count = 0
    last = len(script.steps) - 1
    for index, step in enumerate(script.steps):
        if count + len(step) > limit or (count + len(step) == limit and index < last):
            steps.append(step[: limit - count])
            return steps, {"type": "length", "length": limit}
        steps.append(step)
        count += len(step)
    return steps, script.finish


def _waiting_queue_echo(
    rid: str,
    output_ids: list[int],
    token_lps: list[tuple[float, int, None]],
    top_lps: list[list[tuple[float, int, None]]],
    kwargs: dict[str, Any],
    manager: FakeTokenizerManager,
) -> dict[str, Any]:
    """`_handle_abort_req`'s dict for a request aborted in the scheduler's waiting queue: the
    whole count, the full logprob lists, and (incremental) the last token again."""
    meta: dict[str, Any] = {
        "id": rid,
        "finish_reason": {"type": "abort", "message": "Abort in waiting queue"},
    }
    if kwargs.get("return_logprob"):
        meta["output_token_logprobs"] = list(token_lps)
        if kwargs.get("top_logprobs_num"):
            meta["output_top_logprobs"] = list(top_lps)
    meta["completion_tokens"] = len(output_ids)
    ids = output_ids.copy()
    if manager.incremental_streaming_output:
        ids = [output_ids[-1]] if output_ids else []
    return {"text": "<text>", "output_ids": ids, "meta_info": meta}
