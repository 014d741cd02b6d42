"""The batch sampler (issue 15): `sample_batch` equals the row-by-row reference `sample`.

Same seeds, same logits: the same tokens, logprobs and top logprobs for every mix of greedy,
temperature, top-k and top-p rows, with stop ids checked on the device and one host transfer
per step.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from streamfold.engines import SamplingParams
from streamfold.engines.native.sampler import make_generator, sample, sample_batch

VOCAB = 3000

MIX = [
    SamplingParams(temperature=0.0),
    SamplingParams(temperature=0.7, seed=1),
    SamplingParams(temperature=1.3, top_k=20, seed=2, logprobs=True),
    SamplingParams(temperature=0.9, top_p=0.8, seed=3, top_logprobs=4),
    SamplingParams(temperature=1.0, top_k=50, top_p=0.5, seed=4, top_logprobs=2),
    SamplingParams(temperature=0.0, top_logprobs=5),
    SamplingParams(temperature=2.0, top_p=0.95, top_k=3000, seed=5),
    SamplingParams(temperature=0.5, top_k=1, seed=6),
]


def _logits(rows: int, seed: int) -> torch.Tensor:
    # Peaked rows, as a model's are, so top-p cuts keep a handful of tokens, not thousands.
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, VOCAB, generator=gen) * 4


@pytest.mark.parametrize("rows", [[0], [1], [3], list(range(len(MIX))), [2, 4, 6, 7, 1]])
def test_batch_sampling_equals_the_row_by_row_reference(rows: list[int]) -> None:
    params = [MIX[r] for r in rows]
    ref_gens = [make_generator(p) for p in params]
    batch_gens = [make_generator(p) for p in params]
    for r, p in enumerate(params):  # unseeded rows: give both sides one stream to compare
        if p.seed is None:
            ref_gens[r].manual_seed(100 + r)
            batch_gens[r].manual_seed(100 + r)
    stop_ids = [frozenset({7, 11}), frozenset(), frozenset({5})] * 3
    for step in range(12):
        logits = _logits(len(params), seed=step)
        expected = sample(logits, params, ref_gens)
        got = sample_batch(logits.clone(), params, batch_gens, stop_ids[: len(params)])
        for row, (e, g) in enumerate(zip(expected, got, strict=True)):
            assert g.token_id == e.token_id, (step, row)
            if math.isnan(e.logprob):
                assert math.isnan(g.logprob)
            else:
                assert g.logprob == pytest.approx(e.logprob, abs=1e-6)
            assert (g.top_logprobs is None) == (e.top_logprobs is None)
            if e.top_logprobs is not None and g.top_logprobs is not None:
                assert [i for i, _ in g.top_logprobs] == [i for i, _ in e.top_logprobs]
                assert [v for _, v in g.top_logprobs] == pytest.approx(
                    [v for _, v in e.top_logprobs], abs=1e-6
                )
            assert g.stopped == (g.token_id in stop_ids[row])


def test_stop_ids_are_checked_on_the_device() -> None:
    logits = torch.full((3, VOCAB), -5.0)
    logits[0, 7] = logits[1, 9] = logits[2, 200] = 5.0
    gens = [make_generator(SamplingParams(temperature=0.0)) for _ in range(3)]
    greedy = [SamplingParams(temperature=0.0)] * 3
    got = sample_batch(logits, greedy, gens, [frozenset({7}), frozenset({7, 8}), frozenset()])
    assert [(s.token_id, s.stopped) for s in got] == [(7, True), (9, False), (200, False)]
    assert all(math.isnan(s.logprob) for s in got)  # nobody asked: no log-softmax


class _Syncs(TorchDispatchMode):
    """Counts ops that read a tensor's value back to the host (item(), bool(), int())."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func.overloadpacket.__name__ in {"_local_scalar_dense", "nonzero"}:
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_one_host_transfer_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    transfers: list[tuple[int, ...]] = []
    tolist = torch.Tensor.tolist

    def counting(self: torch.Tensor) -> Any:
        transfers.append(tuple(self.shape))
        return tolist(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counting)
    gens = [make_generator(p) for p in MIX]
    syncs = _Syncs()
    with syncs:
        sample_batch(_logits(len(MIX), 0), MIX, gens, [frozenset({1})] * len(MIX))
    assert syncs.count == 0
    # ids, stop flags, logprobs, 5 top ids and 5 top logprobs per row: one [8, 13] transfer.
    assert transfers == [(len(MIX), 13)]


class _BigOutputs(TorchDispatchMode):
    """Records ops whose output is a new tensor of at least `numel` elements (not written
    into one of the op's inputs)."""

    def __init__(self, numel: int) -> None:
        super().__init__()
        self.numel = numel
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        inputs = [a for a in [*args, *(kwargs or {}).values()] if isinstance(a, torch.Tensor)]
        for tensor in out if isinstance(out, (tuple, list)) else [out]:
            if (
                isinstance(tensor, torch.Tensor)
                and tensor.numel() >= self.numel
                and all(tensor.data_ptr() != a.data_ptr() for a in inputs)
            ):
                self.ops.append(func.overloadpacket.__name__)
        return out


@pytest.mark.parametrize("masked", [False, True])
def test_a_step_that_draws_every_row_makes_no_logits_sized_temporary(masked: bool) -> None:
    """Bug: each drawn step copied its rows (index_select), scaled them, took a softmax and a
    cumsum, each a new [B, vocab] tensor (and the mask a fifth): 13 MB apiece at 16 rows of
    gpt-oss's 201k vocabulary, which glibc handed back to the system between steps, so every
    step page-faulted ~50 MB in again (8,000-12,000 faults, as much system time as the
    sampling's own). The logits are the step's scratch now."""
    params = [SamplingParams(temperature=t, seed=i) for i, t in enumerate((0.7, 1.0, 1.3))]
    vocab = 3008  # a multiple of 32, as gpt-oss's is (others take the shifts, see bitmask)
    logits = torch.randn(len(params), vocab, generator=torch.Generator().manual_seed(1))
    bitmask = torch.full((len(params), vocab // 32), -1, dtype=torch.int32)
    bitmask[:, 3:40] = 0x0F0F0F0F
    big = _BigOutputs(logits.numel())
    with big:
        sample_batch(
            logits,
            params,
            [make_generator(p) for p in params],
            [frozenset({1})] * len(params),
            bitmask=bitmask if masked else None,
        )
    assert big.ops == []
