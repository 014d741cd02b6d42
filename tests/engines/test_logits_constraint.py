"""The per-sequence logits hook (issue 28, part 6): a `LogitsConstraint` on a request restricts
its row of the batch, and only its row, before sampling; the structured-output work plugs
llguidance's token bitmask in here."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from gptoss_tiny import random_prompts
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfold.engines import GenerationRequest, LogitsConstraint, SamplingParams, TokenChunk
from streamfold.engines.native.bitmask import (
    _allowed_shifts,
    _mask_cpu,
    apply_token_bitmask,
    apply_token_bitmask_,
)
from streamfold.engines.native.core import EngineCore
from streamfold.engines.native.gptoss.model import GptOssModel
from streamfold.engines.native.sampler import make_generator, sample_batch

VOCAB = 512
ALLOWED = (3, 31, 32, 200, 511)  # bit 31 of a word is its sign bit: 31 and 511 test it


def pack(allowed: tuple[int, ...], vocab: int) -> torch.Tensor:
    """An int32 bitmask row in llguidance's layout: bit j of word w allows 32 * w + j."""
    words = [0] * -(-vocab // 32)
    for token in allowed:
        words[token // 32] |= 1 << (token % 32)
    return torch.tensor([w - 2**32 if w >= 2**31 else w for w in words], dtype=torch.int32)


class OnlyTokens:
    """A constraint that allows a fixed set and records what its sequence took."""

    def __init__(self, allowed: tuple[int, ...] = ALLOWED) -> None:
        self.row = pack(allowed, VOCAB)
        self.taken: list[int] = []

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        bitmask[row] = self.row

    def advance(self, token_id: int) -> None:
        self.taken.append(token_id)


class Broken(OnlyTokens):
    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        if len(self.taken) == 2:
            raise KeyError("grammar state lost")
        super().fill_bitmask(bitmask, row)


def _tokens(chunks: list[TokenChunk]) -> list[int]:
    return [t for c in chunks for t in c.token_ids]


def _request(name: str, prompt: list[int], sampling: SamplingParams, **kw: object) -> Any:
    return GenerationRequest(
        request_id=name, prompt_token_ids=tuple(prompt), max_output_tokens=12,
        sampling=sampling, stop_token_ids=(), **kw,  # type: ignore[arg-type]
    )  # fmt: skip


GREEDY = SamplingParams(temperature=0.0)
SAMPLED = SamplingParams(temperature=1.5, seed=7, logprobs=True)


def test_bitmask_allows_exactly_the_packed_tokens() -> None:
    logits = torch.randn(2, VOCAB)
    bitmask = torch.stack([pack(ALLOWED, VOCAB), torch.full((VOCAB // 32,), -1, dtype=torch.int32)])
    masked = apply_token_bitmask(logits, bitmask)
    finite = masked[0].isfinite().nonzero()[:, 0].tolist()
    assert finite == list(ALLOWED)
    assert torch.equal(masked[1], logits[1])


def test_sample_batch_draws_inside_the_mask_and_reports_the_models_logprobs() -> None:
    logits = torch.randn(4, VOCAB, generator=torch.Generator().manual_seed(0)) * 4
    params = [GREEDY, SAMPLED, GREEDY, SAMPLED]
    bitmask = torch.full((4, VOCAB // 32), -1, dtype=torch.int32)
    bitmask[0] = bitmask[1] = pack(ALLOWED, VOCAB)
    raw = torch.log_softmax(logits, dim=-1)  # sample_batch uses its logits as scratch
    samples = sample_batch(logits, params, [make_generator(p) for p in params], bitmask=bitmask)
    assert samples[0].token_id in ALLOWED and samples[1].token_id in ALLOWED
    assert samples[2].token_id == int(raw[2].argmax())
    assert samples[1].logprob == pytest.approx(float(raw[1, samples[1].token_id]), abs=1e-5)


@pytest.mark.parametrize("static_decode", [True, False])
def test_constrained_rows_stay_inside_and_leave_their_neighbours_alone(
    model: GptOssModel, static_decode: bool
) -> None:
    """A mixed batch: two constrained rows (greedy, sampled) and two free ones (greedy,
    sampled). Every constrained token is allowed and was passed to `advance` in order; the
    free rows make exactly the tokens they make with no constraint anywhere in the batch."""
    prompts = random_prompts([5, 9, 7, 11], seed=8)
    decode = "auto" if static_decode else None

    def run(constrained: bool) -> tuple[dict[str, list[TokenChunk]], list[OnlyTokens]]:
        engine = EngineCore(model, block_size=4, num_blocks=128, decode=decode)
        hooks = [OnlyTokens(), OnlyTokens()] if constrained else [None, None]
        requests = [
            _request("cg", prompts[0], GREEDY, constraint=hooks[0]),
            _request("fg", prompts[1], GREEDY),
            _request("cs", prompts[2], SAMPLED, constraint=hooks[1]),
            _request("fs", prompts[3], SAMPLED),
        ]
        out = engine.run_to_completion(requests)
        assert engine.blocks.blocks_in_use() == 0
        return out, [h for h in hooks if h is not None]

    free, _ = run(constrained=False)
    got, hooks = run(constrained=True)
    for name, hook in zip(("cg", "cs"), hooks, strict=True):
        tokens = _tokens(got[name])
        assert len(tokens) == 12 and set(tokens) <= set(ALLOWED), (name, tokens)
        assert hook.taken == tokens
        # Without the constraint the same row leaves the set: the mask did the work.
        assert not set(_tokens(free[name])) <= set(ALLOWED)
    for name in ("fg", "fs"):
        assert _tokens(got[name]) == _tokens(free[name]), name


def test_a_failing_constraint_ends_its_own_request_only(model: GptOssModel) -> None:
    prompts = random_prompts([6, 6], seed=9)
    engine = EngineCore(model, block_size=4, num_blocks=64)
    hook = Broken()
    out = engine.run_to_completion(
        [_request("bad", prompts[0], GREEDY, constraint=hook), _request("ok", prompts[1], GREEDY)]
    )
    bad = out["bad"]
    assert _tokens(bad) == hook.taken and len(hook.taken) == 2
    assert bad[-1].finish_reason == "error" and "KeyError" in (bad[-1].error or "")
    assert len(_tokens(out["ok"])) == 12 and out["ok"][-1].finish_reason == "length"
    assert engine.blocks.blocks_in_use() == 0


class BatchFilled(OnlyTokens):
    """A constraint class with the batch hook: one call fills all its rows of a step."""

    calls: ClassVar[list[list[int]]] = []

    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.fail_at = fail_at

    @classmethod
    def fill_batch(
        cls, bitmask: torch.Tensor, rows: list[tuple[int, BatchFilled]]
    ) -> dict[int, Exception]:
        cls.calls.append([row for row, _ in rows])
        failed: dict[int, Exception] = {}
        for row, constraint in rows:
            if len(constraint.taken) == constraint.fail_at:
                bitmask[row] = 0  # garbage: the engine must reset the failed row
                failed[row] = KeyError("grammar state lost")
            else:
                constraint.fill_bitmask(bitmask, row)
        return failed


def test_a_class_with_fill_batch_fills_its_rows_in_one_call_and_fails_one_alone(
    model: GptOssModel,
) -> None:
    prompts = random_prompts([6, 6, 6], seed=9)
    engine = EngineCore(model, block_size=4, num_blocks=64)
    hooks = [BatchFilled(), BatchFilled(fail_at=2)]
    BatchFilled.calls.clear()
    out = engine.run_to_completion(
        [
            _request("a", prompts[0], SAMPLED, constraint=hooks[0]),
            _request("bad", prompts[1], SAMPLED, constraint=hooks[1]),
            _request("free", prompts[2], SAMPLED),
        ]
    )
    assert BatchFilled.calls[:3] == [[0, 1]] * 3 and BatchFilled.calls[3] == [0]
    assert out["bad"][-1].finish_reason == "error" and "KeyError" in (out["bad"][-1].error or "")
    assert _tokens(out["bad"]) == hooks[1].taken and len(hooks[1].taken) == 2
    a = _tokens(out["a"])
    assert len(a) == 12 and set(a) <= set(ALLOWED) and hooks[0].taken == a
    assert len(_tokens(out["free"])) == 12
    assert engine.blocks.blocks_in_use() == 0


class SeenFrom(OnlyTokens):
    """Records the thread of each fill and tells `forward_waits` that a fill began."""

    def __init__(self, began: threading.Event) -> None:
        super().__init__()
        self.began = began
        self.threads: set[str] = set()

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
        self.threads.add(threading.current_thread().name)
        self.began.set()
        super().fill_bitmask(bitmask, row)


def test_on_the_cpu_the_masks_are_filled_while_the_forward_runs(model: GptOssModel) -> None:
    """The bitmask of a step is filled in a thread of its own during the step's forward, not
    after it on the stepping thread (the fill was on the critical path: 0.33 ms of a 5 ms step
    at 16 rows on a 16-core machine). Each forward waits for a fill to begin before it
    returns: it sees one every step, from another thread, and the tokens stay inside."""
    engine = EngineCore(model, block_size=4, num_blocks=64, decode=None)
    engine.OVERLAP_ROWS = 1  # off by default; one row keeps the test small
    began = threading.Event()
    seen: list[bool] = []
    forward = engine._mixed_step

    def forward_waits(batch: Any) -> torch.Tensor:
        if not began.wait(timeout=10):  # only a fill that runs beside it ends the wait
            raise AssertionError("no fill began while the forward ran")
        seen.append(True)
        began.clear()
        return forward(batch)

    engine._mixed_step = forward_waits  # type: ignore[method-assign]
    hook = SeenFrom(began)
    [prompt] = random_prompts([6], seed=3)
    out = engine.run_to_completion([_request("c", prompt, SAMPLED, constraint=hook)])
    assert seen == [True] * 12
    assert threading.current_thread().name not in hook.threads and len(hook.threads) == 1
    assert set(_tokens(out["c"])) <= set(ALLOWED) and hook.taken == _tokens(out["c"])


@pytest.mark.parametrize("overlap_rows", [None, 2])
def test_without_overlap_rows_the_stepping_thread_fills_after_the_forward(
    model: GptOssModel, overlap_rows: int | None
) -> None:
    """By default (`OVERLAP_ROWS` None: the filling thread measured no gain on 2 cores), and
    with fewer constrained rows than it, the step fills its rows itself."""
    engine = EngineCore(model, block_size=4, num_blocks=64, decode=None)
    assert EngineCore.OVERLAP_ROWS is None
    engine.OVERLAP_ROWS = overlap_rows
    hook = SeenFrom(threading.Event())
    [prompt] = random_prompts([6], seed=3)
    out = engine.run_to_completion([_request("c", prompt, SAMPLED, constraint=hook)])
    assert hook.threads == {threading.current_thread().name}
    assert set(_tokens(out["c"])) <= set(ALLOWED) and hook.taken == _tokens(out["c"])


def test_a_forward_that_raises_waits_for_its_fill(model: GptOssModel) -> None:
    """No fill outlives its step: when the forward raises, the step waits for the filling
    thread before it raises (else that thread could still be writing the shared buffer when
    the next step fills it)."""
    engine = EngineCore(model, block_size=4, num_blocks=64, decode=None)
    engine.OVERLAP_ROWS = 1
    began, finished = threading.Event(), threading.Event()

    class Slow(OnlyTokens):
        def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None:
            began.set()
            time.sleep(0.2)  # still filling when the forward raises
            super().fill_bitmask(bitmask, row)
            finished.set()

    def broken_forward(batch: Any) -> torch.Tensor:
        assert began.wait(timeout=10)
        raise RuntimeError("out of memory")

    engine._mixed_step = broken_forward  # type: ignore[method-assign]
    [prompt] = random_prompts([6], seed=3)
    engine.add_request(_request("c", prompt, SAMPLED, constraint=Slow()))
    with pytest.raises(RuntimeError, match="out of memory"):
        engine.step()
    assert finished.is_set()


def test_the_protocol_is_runtime_checkable() -> None:
    assert isinstance(OnlyTokens(), LogitsConstraint)


def _reference(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """The bitmask read bit by bit in Python (llguidance's layout), as -inf on a copy."""
    out = logits.clone()
    for row, words in enumerate(bitmask.tolist()):
        for token in range(logits.shape[1]):
            if not (words[token // 32] >> (token % 32)) & 1:
                out[row, token] = float("-inf")
    return out


ROW_KINDS = ("all", "free_text", "json", "dense", "none_but_one")


def _row(kind: str, words: int, rng: np.random.Generator) -> np.ndarray:
    """One bitmask row of a kind the engine sees: all allowed; free text (a few words with
    disallowed tokens, as a grammar's reasoning); JSON (a few words with allowed ones); dense
    random words (neither, the whole row is unpacked); a single allowed token."""
    ones = np.full(words, -1, dtype=np.int32)
    random_words = rng.integers(-(2**31), 2**31, words, dtype=np.int64).astype(np.int32)
    some = rng.random(words) < 0.05
    if kind == "all":
        return ones
    if kind == "free_text":
        return np.where(some, random_words, ones)
    if kind == "json":
        return np.where(some, random_words, 0).astype(np.int32)
    if kind == "dense":
        return random_words
    row = np.zeros(words, dtype=np.int32)
    row[rng.integers(words)] = np.int32(-(2**31))  # bit 31: the sign bit
    return row


@settings(max_examples=60, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(ROW_KINDS), min_size=1, max_size=5),
    words=st.integers(1, 40),
    tail=st.sampled_from([0, 0, 1, 17, 31]),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_bitmask_masks_exactly_its_disallowed_tokens(
    kinds: list[str], words: int, tail: int, seed: int
) -> None:
    """Every path of `apply_token_bitmask_` (the C extension for float32 on the CPU; numpy's
    sparse blocks for free-text rows and for JSON rows and its whole-row unpack; the tensor
    shifts of accelerators, which bfloat16 with a vocabulary that is not a multiple of 32 also
    takes on the CPU) against the bit-by-bit reference, rows of different kinds in a batch."""
    rng = np.random.default_rng(seed)
    vocab = words * 32 - tail
    bitmask = torch.from_numpy(np.stack([_row(k, words, rng) for k in kinds]))
    logits = torch.from_numpy(rng.standard_normal((len(kinds), vocab)).astype(np.float32))
    expected = _reference(logits, bitmask)
    assert torch.equal(apply_token_bitmask(logits, bitmask), expected)
    shifts = logits.masked_fill(~_allowed_shifts(bitmask, vocab), float("-inf"))
    assert torch.equal(shifts, expected)
    in_place = logits.clone()
    assert apply_token_bitmask_(in_place, bitmask) is in_place
    assert torch.equal(in_place, expected)
    if vocab % 32 == 0:  # the numpy path, where the C extension is not built
        by_blocks = logits.clone()
        _mask_cpu(by_blocks, bitmask.numpy())
        assert torch.equal(by_blocks, expected)
    half = logits.to(torch.bfloat16)  # not float32: numpy's blocks, or the shifts
    assert torch.equal(apply_token_bitmask(half, bitmask), _reference(half, bitmask))


def test_the_c_extension_is_built_and_used() -> None:
    """setup.py builds engines/native/_bitmask.c in a checkout with a C compiler (as CI's);
    without it the engine still masks, through numpy, about 4x slower. CI sets
    STREAMFOLD_EXPECT_SPEEDUPS: there a missing build is a failure; elsewhere (no compiler) a
    skip, as for the reducer's extension (tests/statemachine/test_speedups.py)."""
    from streamfold.engines.native import bitmask

    if not os.environ.get("STREAMFOLD_EXPECT_SPEEDUPS") and bitmask._apply_f32 is None:
        pytest.skip("only where the build is expected to compile (CI)")

    assert bitmask._apply_f32 is not None, "build it: python setup.py -q build_ext --inplace"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA path needs a CUDA GPU")
def test_on_cuda_the_mask_is_the_cpus_and_waits_for_nothing(hf_dir: Path) -> None:
    """Where a GPU is: the accelerator path (tensor shifts, masked_fill_ in place) masks what
    the CPU's sparse path masks over gpt-oss's vocabulary, a constrained batch draws only
    allowed tokens with no host sync before the step's one transfer, and the engine's
    constrained rows (pinned host bitmask, one non-blocking copy) stay inside."""
    from test_sampler import _Syncs

    rng = np.random.default_rng(0)
    kinds = [*ROW_KINDS, *ROW_KINDS]
    bitmask = torch.from_numpy(np.stack([_row(k, 201088 // 32, rng) for k in kinds]))
    logits = torch.randn(len(kinds), 201088)
    expected = apply_token_bitmask(logits, bitmask)
    assert torch.equal(apply_token_bitmask_(logits.cuda(), bitmask.cuda()).cpu(), expected)
    params = [SamplingParams(temperature=1.0, seed=i) for i in range(len(kinds))]
    generators = [make_generator(p, "cuda") for p in params]
    syncs = _Syncs()
    with syncs:
        samples = sample_batch(logits.cuda(), params, generators, bitmask=bitmask.cuda())
    assert syncs.count == 0
    assert all(bool(expected[row, s.token_id].isfinite()) for row, s in enumerate(samples))

    cuda = GptOssModel.from_pretrained(hf_dir, device="cuda")
    engine = EngineCore(cuda, block_size=4, num_blocks=128)
    hooks = [OnlyTokens(), OnlyTokens()]
    prompts = random_prompts([5, 9, 7], seed=8)
    out = engine.run_to_completion(
        [
            _request("cg", prompts[0], GREEDY, constraint=hooks[0]),
            _request("cs", prompts[1], SAMPLED, constraint=hooks[1]),
            _request("fs", prompts[2], SAMPLED),
        ]
    )
    for name, hook in zip(("cg", "cs"), hooks, strict=True):
        assert set(_tokens(out[name])) <= set(ALLOWED) and hook.taken == _tokens(out[name])
    assert len(_tokens(out["fs"])) == 12
