"""The synchronous engine: requests in, one `step()` at a time, token chunks out.

`EngineCore` ties the model, the paged KV cache, the scheduler and the sampler together and
knows nothing of threads or event loops; `NativeEngine` drives it from a background thread.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Literal

import torch

from .._source import FinishReason, GenerationRequest, LogitsConstraint, TokenChunk
from .decode_graph import DecodePlan, DecodeRow, StaticDecode
from .gptoss.model import GptOssModel
from .gptoss.weights import ExpertMode
from .paged_attention import PagedAttention, PagedKVCache, StepSequence
from .sampler import Sample, make_generator, sample_batch
from .scheduler import Scheduler, Sequence

__all__ = ["GPT_OSS_STOP_TOKEN_IDS", "EngineCore"]

# <|return|>, <|call|>, <|endoftext|>: the stops vLLM applies to gpt-oss by default.
GPT_OSS_STOP_TOKEN_IDS = (200002, 200012, 199999)
DEFAULT_KV_BYTES = 256 * 2**20


class EngineCore:
    """Continuous batching over a paged KV cache for one `GptOssModel`."""

    def __init__(
        self,
        model: GptOssModel,
        *,
        block_size: int = 16,
        kv_cache_bytes: int | None = None,
        num_blocks: int | None = None,
        max_num_seqs: int = 64,
        max_num_batched_tokens: int = 4096,
        max_model_len: int | None = None,
        default_stop_token_ids: tuple[int, ...] = GPT_OSS_STOP_TOKEN_IDS,
        decode: DecodePlan | Literal["auto"] | None = "auto",
        prefix_cache: bool = True,
    ) -> None:
        """`decode` runs decode-only steps as fixed-shape steps (`StaticDecode`; CUDA graphs
        on CUDA with "auto"); None runs them through the same path as prefills.
        `prefix_cache` reuses the K/V of full blocks a new sequence shares with earlier ones
        (see `kv_blocks`); each request's final chunk reports the prompt tokens it reused."""
        config = model.config
        if num_blocks is None:
            budget = DEFAULT_KV_BYTES if kv_cache_bytes is None else kv_cache_bytes
            num_blocks = budget // PagedKVCache.bytes_per_block(config, block_size, model.dtype)
        if num_blocks < 1:
            raise ValueError(
                f"a KV budget of {kv_cache_bytes} bytes holds no block of {block_size} tokens;"
                " raise kv_cache_bytes or lower block_size"
            )
        self.model = model
        self.cache = PagedKVCache(
            config,
            num_blocks=num_blocks,
            block_size=block_size,
            device=model.device,
            dtype=model.dtype,
            prefix_cache=prefix_cache,
        )
        self.blocks = self.cache.blocks
        windows = [model.window(i) for i in range(config.num_hidden_layers)]
        self.attention = PagedAttention(self.cache, model.sinks, windows)
        self.scheduler = Scheduler(
            self.blocks, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens
        )
        self.max_model_len = min(
            max_model_len or config.max_position_embeddings, self._lone_capacity()
        )
        self.default_stop_token_ids = frozenset(default_stop_token_ids)
        self._ids = itertools.count()
        self._by_request: dict[str, Sequence] = {}
        self._generators: dict[int, torch.Generator] = {}
        self.peak_blocks_in_use = 0
        # What the last step ran: rows, and the tokens its prefills fed (for step timelines).
        self.last_rows = self.last_prefill_tokens = 0
        self.tokens_at_peak = 0
        # The logits of a step, reused: at 64 sequences x 201k vocabulary they are 51 MB, past
        # glibc's largest mmap threshold (32 MB), so a fresh tensor each step was a fresh mmap
        # whose every page faulted in (a [64, 128] x [128, 201088] matmul: 354 ms fresh, 275
        # ms into a kept buffer, 1 thread).
        self._logits: torch.Tensor | None = None
        self._bitmask_host: torch.Tensor | None = None  # the constrained rows' (see _bitmask)
        # One thread fills a step's bitmask while this one runs its forward (see `_run`).
        self._filler: ThreadPoolExecutor | None = None
        if decode == "auto":
            decode = DecodePlan.for_device(model.device, max_num_seqs)
        self.static_decode = None
        if decode is not None:
            self.static_decode = StaticDecode(
                model, self.cache, self._logits_buffer(max_num_seqs)[:max_num_seqs],
                max_model_len=self.max_model_len, batch_buckets=decode.batch_buckets,
                pad_width=decode.pad_width, graphs=decode.graphs, moe=decode.moe,
            )  # fmt: skip

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str | Path,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        experts: ExpertMode = "dequantize",
        **options: int | tuple[int, ...] | DecodePlan | str | None,
    ) -> EngineCore:
        model = GptOssModel.from_pretrained(model_dir, device=device, dtype=dtype, experts=experts)
        return cls(model, **options)  # type: ignore[arg-type]

    def _lone_capacity(self) -> int:
        """The longest sequence the pool can hold with nothing else in it."""
        bs, total = self.blocks.block_size, self.blocks.num_blocks
        windowed = sum(-(-w // bs) + 1 for w in self.cache.windows if w is not None)
        full = sum(1 for w in self.cache.windows if w is None)
        if full == 0:
            return 2**62 if windowed <= total else 0
        return max(0, (total - windowed) // full * bs)

    def add_request(self, request: GenerationRequest) -> TokenChunk | None:
        """Queue `request`; returns a final error chunk instead when it can never run."""
        if request.request_id in self._by_request:
            raise ValueError(f"request id {request.request_id!r} is already running")
        prompt = list(request.prompt_token_ids)
        vocab = self.model.config.vocab_size
        bad = [t for t in prompt if not 0 <= t < vocab]
        if not prompt or bad:
            reason = (
                "an empty prompt" if not prompt else f"token ids {bad[:5]} outside [0, {vocab})"
            )
            return TokenChunk(
                finish_reason="error", error=f"request {request.request_id!r} has {reason}"
            )
        room = self.max_model_len - len(prompt)
        if room < 1:
            return TokenChunk(
                finish_reason="error",
                error=f"prompt of {len(prompt)} tokens leaves no room: the engine holds at most"
                f" {self.max_model_len} tokens per sequence; raise the KV cache budget",
            )
        max_tokens = (
            room if request.max_output_tokens is None else min(room, request.max_output_tokens)
        )
        seq = Sequence(
            seq_id=next(self._ids),
            request=request,
            token_ids=prompt,
            num_prompt=len(prompt),
            max_tokens=max_tokens,
            stop_ids=self.default_stop_token_ids | frozenset(request.stop_token_ids),
        )
        self._by_request[request.request_id] = seq
        self._generators[seq.seq_id] = make_generator(request.sampling, self.model.device)
        if max_tokens < 1:
            self._finish(seq)
            return TokenChunk(finish_reason="length")
        self.scheduler.add(seq)
        return None

    def abort(self, request_id: str) -> bool:
        """Drop a request and free its blocks now; False when it is not in flight."""
        seq = self._by_request.get(request_id)
        if seq is None:
            return False
        self._finish(seq)
        return True

    def has_work(self) -> bool:
        return bool(self.scheduler)

    def step(self, handoff: Callable[[], object] | None = None) -> list[tuple[str, TokenChunk]]:
        """Run one batched forward pass; returns one chunk per sequence that made a token.

        nano-vllm's shape: schedule, run (the forward and the batch's sampling), postprocess.

        `handoff` (if any) is called once, inside the step, right before the unembedding
        matmul; where the forward runs no Python (a replayed CUDA graph), after it. A served
        engine posts the previous step's tokens to its event loop there: on CPU that matmul
        and the sampling after it are most of a step and hold no GIL, so the event loop's
        Python runs beside them, where at the start of a step it stalled the layers' many small
        torch calls, each waiting for the GIL (issue 18: 64 streams). Not called when no
        sequence can run, nor when the step fails before its unembedding."""
        batch = self._schedule()
        if not batch:
            return []
        samples, failed = self._run(batch, handoff)
        return self._postprocess(batch, samples, failed)

    def _schedule(self) -> list[Sequence]:
        """The scheduler's batch, with the step's counters (rows, prefill tokens, peak KV)."""
        batch = self.scheduler.schedule()
        if not batch and self.has_work():  # would spin forever; add_request's cap prevents it
            raise RuntimeError(
                f"{len(self.scheduler.waiting)} requests wait but none fits in"
                f" {self.blocks.num_free} free blocks with nothing running"
            )
        self.last_rows = len(batch)
        self.last_prefill_tokens = sum(s.num_new for s in self.scheduler.last_prefills)
        in_use = self.blocks.blocks_in_use()
        if batch and in_use > self.peak_blocks_in_use:  # for KV-memory-per-token reports
            self.peak_blocks_in_use = in_use
            self.tokens_at_peak = sum(len(s.token_ids) for s in batch)
        return batch

    #: Constrained rows from which a CPU step fills its bitmask beside its forward, in a
    #: thread of its own; None (the default): never. Measured on 2 cores (bench_constrained,
    #: alternated runs): the stepping thread's forward took 0.1-0.2 ms more CPU a 16-row step
    #: beside the filling thread, about the fill it no longer did, so the ratio to free
    #: decoding did not rise (16 rows: 0.94-0.97 against 0.95-0.98 filling after the forward;
    #: 1 row: 0.89 against 0.94). Set it (e.g. 8) to try on a machine with cores to spare.
    OVERLAP_ROWS: int | None = None

    def _run(
        self, batch: list[Sequence], handoff: Callable[[], object] | None
    ) -> tuple[list[Sample], dict[int, str]]:
        """The forward pass and the batch's sampling: one token per row, and the rows whose
        constraint failed (row -> message)."""
        # The masks depend only on the tokens taken so far (every matcher was told its last
        # token in the previous step's `_postprocess`). On the CPU, with OVERLAP_ROWS set and
        # that many constrained rows, they are filled in a thread of their own while this one
        # runs the forward (llguidance fills without the GIL, the forward's torch ops release it),
        # joined before sampling, even if the forward raises, so no fill outlives its step.
        # On an accelerator the forward is only launched here, so the fill after it overlaps
        # the device's forward already.
        filling = self._start_bitmask(batch) if self.model.device.type == "cpu" else None
        self.model.before_unembedding = handoff
        try:
            if self.static_decode is not None and all(
                s.num_cached and s.num_new == 1 for s in batch
            ):
                logits = self.static_decode.run(
                    [DecodeRow(s.seq_id, s.token_ids[-1], s.num_cached) for s in batch]
                )
            else:
                logits = self._mixed_step(batch)
        except BaseException:
            if filling is not None:
                wait([filling])
            raise
        finally:
            unused, self.model.before_unembedding = self.model.before_unembedding, None
        if unused is not None:  # the forward ran no Python: a replayed graph
            unused()
        host, failed = filling.result() if filling is not None else self._bitmask(batch)
        # One non-blocking copy (from pinned memory on CUDA), issued here, on this thread's
        # stream: nothing waits for the device.
        bitmask = None if host is None else host.to(self.model.device, non_blocking=True)
        samples = sample_batch(
            logits,
            [s.request.sampling for s in batch],
            [self._generators[s.seq_id] for s in batch],
            [s.stop_ids for s in batch],
            bitmask=bitmask,
        )
        return samples, failed

    def _start_bitmask(
        self, batch: list[Sequence]
    ) -> Future[tuple[torch.Tensor | None, dict[int, str]]] | None:
        """`_bitmask(batch)` started in the filler thread; None when OVERLAP_ROWS is None or
        fewer rows are constrained (`_run` then fills them itself, after the forward)."""
        least = self.OVERLAP_ROWS
        if least is None or sum(s.request.constraint is not None for s in batch) < least:
            return None
        if self._filler is None:
            self._filler = ThreadPoolExecutor(1, thread_name_prefix="streamfold-bitmask")
        return self._filler.submit(self._bitmask, batch)

    def _bitmask(self, batch: list[Sequence]) -> tuple[torch.Tensor | None, dict[int, str]]:
        """The batch's token bitmask on the host (None when no row is constrained), and the
        rows whose constraint raised (left all allowed; `_postprocess` fails them).

        Rows are filled in a buffer kept between steps (pinned on CUDA, for `_run`'s one
        non-blocking copy), refilled only next step, after this step's sampling has
        synchronised on its one transfer."""
        rows = [(row, s.request.constraint) for row, s in enumerate(batch)]
        constrained = [(row, c) for row, c in rows if c is not None]
        failed: dict[int, str] = {}
        if not constrained:
            return None, failed
        host = self._bitmask_buffer(len(batch))
        # numpy, not torch, presets the words: a torch op big enough to run in parallel
        # would give the filler thread an OpenMP team of its own, and two teams on the same
        # cores throttle the engine thread's (see `_openmp`).
        words = host.numpy()
        words.fill(-1)
        errors: dict[int, BaseException] = {}
        batches: dict[type, list[tuple[int, LogitsConstraint]]] = {}
        # The batch call only on the CPU. On CUDA (the H200 host, bench_constrained at 16
        # rows, one run each) row by row measured 0.78 of free decoding's tokens/s and the
        # batch call 0.59: there the stepping thread has nothing else to do while the device
        # runs the forward, and the batch call hands the work to llguidance's thread.
        batchable = self.model.device.type == "cpu"
        for row, constraint in constrained:
            if batchable and hasattr(type(constraint), "fill_batch"):  # all its rows at once
                batches.setdefault(type(constraint), []).append((row, constraint))
                continue
            try:
                constraint.fill_bitmask(host, row)
            except Exception as exc:  # the request's own failure: it alone ends
                errors[row] = exc
        for kind, group in batches.items():
            try:
                errors.update(kind.fill_batch(host, group))  # type: ignore[attr-defined]
            except Exception as exc:  # not a row's own: every row of the call ends
                errors.update((row, exc) for row, _ in group)
        for row, error in errors.items():
            words[row] = -1
            failed[row] = f"logits constraint failed: {type(error).__name__}: {error}"
        return host, failed

    def _bitmask_buffer(self, rows: int) -> torch.Tensor:
        if self._bitmask_host is None or self._bitmask_host.shape[0] < rows:
            words = -(-self.model.config.vocab_size // 32)
            size = max(rows, self.scheduler.max_num_seqs)
            pin = self.model.device.type == "cuda"
            self._bitmask_host = torch.empty(size, words, dtype=torch.int32, pin_memory=pin)
        return self._bitmask_host[:rows]

    def _postprocess(
        self, batch: list[Sequence], samples: list[Sample], failed: dict[int, str]
    ) -> list[tuple[str, TokenChunk]]:
        """Append each row's token, tell its constraint, check its stops: one chunk per row."""
        out = []
        for row, (seq, drawn) in enumerate(zip(batch, samples, strict=True)):
            constraint = seq.request.constraint
            error = failed.get(row)
            if error is None and constraint is not None:
                try:
                    constraint.advance(drawn.token_id)
                except Exception as exc:  # as in `_bitmask`: this request alone fails
                    error = f"logits constraint failed: {type(exc).__name__}: {exc}"
            if error is not None:
                chunk = TokenChunk(finish_reason="error", error=error)
            else:
                seq.num_cached = len(seq.token_ids)
                self.blocks.commit(seq.seq_id, seq.token_ids, seq.num_cached)
                seq.token_ids.append(drawn.token_id)
                chunk = self._chunk(seq, drawn)
            if chunk.finish_reason is not None:
                self._finish(seq)
            out.append((seq.request.request_id, chunk))
        return out

    def _chunk(self, seq: Sequence, drawn: Sample) -> TokenChunk:
        """The chunk of `seq`'s new token `drawn`, with its finish reason if it ends here."""
        finish: FinishReason | None = None
        if drawn.stopped:  # checked on the device with the draw
            finish = "stop"
        elif seq.num_output >= seq.max_tokens:
            finish = "length"
        params = seq.request.sampling
        want_logprobs = params.logprobs or params.top_logprobs > 0
        # vLLM's convention: stop_reason names the stop id, None for the model's own EOS.
        stop_reason = None
        if finish == "stop" and drawn.token_id not in self.model.config.eos_token_ids:
            stop_reason = drawn.token_id
        return TokenChunk(
            token_ids=(drawn.token_id,),
            logprobs=(drawn.logprob,) if want_logprobs else None,
            top_logprobs=(drawn.top_logprobs,) if drawn.top_logprobs is not None else None,
            finish_reason=finish,
            stop_reason=stop_reason,
            cached_tokens=seq.num_prompt_cached or 0 if finish is not None else 0,
        )

    def _mixed_step(self, batch: list[Sequence]) -> torch.Tensor:
        """The logits of a step with prefills: flat tokens through `PagedAttention`."""
        layout = [
            StepSequence(seq_id=s.seq_id, num_cached=s.num_cached, num_new=s.num_new) for s in batch
        ]
        positions = self.attention.prepare(layout)
        ids: list[int] = []
        last_rows: list[int] = []
        for s in batch:
            ids.extend(s.token_ids[s.num_cached :])
            last_rows.append(len(ids) - 1)
        device = self.model.device
        return self.model(
            torch.tensor(ids, device=device),
            positions,
            self.attention,
            logits_at=torch.tensor(last_rows, device=device),
            out=self._logits_buffer(len(batch)),
        )

    def _logits_buffer(self, rows: int) -> torch.Tensor:
        if self._logits is None or self._logits.shape[0] < rows:
            vocab = self.model.config.vocab_size
            size = max(rows, self.scheduler.max_num_seqs)
            self._logits = torch.empty(
                size, vocab, device=self.model.device, dtype=self.model.dtype
            )
        return self._logits[:rows]

    def _finish(self, seq: Sequence) -> None:
        self.scheduler.remove(seq)
        self._by_request.pop(seq.request.request_id, None)
        self._generators.pop(seq.seq_id, None)

    def run_to_completion(self, requests: list[GenerationRequest]) -> dict[str, list[TokenChunk]]:
        """Generate every request in one continuous batch (offline use, tests, benchmarks)."""
        chunks: dict[str, list[TokenChunk]] = {r.request_id: [] for r in requests}
        for request in requests:
            refused = self.add_request(request)
            if refused is not None:
                chunks[request.request_id].append(refused)
        while self.has_work():
            for request_id, chunk in self.step():
                chunks[request_id].append(chunk)
        return chunks
