"""Fixed-shape decode steps (issue 15): the CUDA-graph step, run eagerly, gives today's answers.

`StaticDecode` pads the batch to a bucket and the block tables to a width bucket and runs the
experts in fixed shapes; here that same step runs eagerly on CPU and is checked against
transformers, the mixed-step path and the routed MoE, across padding, sliding-window layers
and preemption. Where CUDA is, the captured graphs are checked against the eager step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest
import torch
from gptoss_tiny import WINDOW, greedy_request, hf_greedy, random_prompts
from paged_harness import assert_static_decode_matches, scattered_paged_cache
from torch.utils._python_dispatch import TorchDispatchMode

from streamfold.engines import TokenChunk
from streamfold.engines.native.core import EngineCore
from streamfold.engines.native.decode_graph import (
    DecodePlan,
    DecodeRow,
    StaticDecode,
    default_batch_buckets,
)
from streamfold.engines.native.gptoss.model import GptOssModel
from streamfold.engines.native.gptoss.mxfp4 import quantize_mxfp4
from streamfold.engines.native.gptoss.weights import ExpertWeights
from streamfold.engines.native.paged_attention import PagedKVCache

ATOL = 1e-4
# Padded batches and widths and the fixed-shape MoE: what a CUDA graph captures.
GRAPH_SHAPES = DecodePlan(batch_buckets=(1, 2, 4, 8), pad_width=True, moe="static")
PLANS = {
    "graph-shapes": GRAPH_SHAPES,
    "graph-shapes-routed-moe": attrs.evolve(GRAPH_SHAPES, moe="routed"),
    "cpu-default": DecodePlan(),
}


def _tokens(chunks: list[TokenChunk]) -> list[int]:
    return [t for c in chunks for t in c.token_ids]


def test_default_buckets_cover_every_batch_size() -> None:
    assert default_batch_buckets(64) == (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)
    assert default_batch_buckets(3) == (1, 2, 3)
    assert default_batch_buckets(12) == (1, 2, 4, 8, 12)


@pytest.mark.parametrize("plan", list(PLANS), ids=list(PLANS))
def test_static_decode_logits_match_transformers_across_padding_and_windows(
    hf_model: Any, model: GptOssModel, plan: str
) -> None:
    """Three sequences (batch bucket 4: one padded row) decode past the sliding window from
    prompts that end on, before and after block boundaries; every step's logits equal
    transformers' over the whole sequence."""
    options = PLANS[plan]
    cache, attention = scattered_paged_cache(model, num_blocks=96, block_size=4, seed=7)
    static = StaticDecode(
        model, cache, torch.empty(8, model.config.vocab_size), max_model_len=96,
        batch_buckets=options.batch_buckets, pad_width=options.pad_width, moe=options.moe,
    )  # fmt: skip
    prompts = random_prompts([4, 7, 2 * WINDOW + 1], seed=3)
    full = [p + random_prompts([WINDOW + 6], seed=20 + i)[0] for i, p in enumerate(prompts)]
    assert_static_decode_matches(
        hf_model, model, static, attention, prompts, full, steps=WINDOW + 6, atol=ATOL
    )
    if options.pad_width:
        assert {key[0] for key in static._views} == {4}  # one batch bucket for 3 rows


@pytest.mark.parametrize("plan", list(PLANS), ids=list(PLANS))
def test_engine_with_static_decode_matches_transformers_and_the_mixed_path(
    hf_model: Any, model: GptOssModel, plan: str
) -> None:
    lengths = [3, 7, 8, 9, 17, 30, 1]  # 7 sequences: bucket 8
    prompts = random_prompts(lengths, seed=1)
    n = 20
    requests = [greedy_request(i, p, n) for i, p in enumerate(prompts)]
    static = EngineCore(model, block_size=4, num_blocks=512, max_num_seqs=8, decode=PLANS[plan])
    mixed = EngineCore(model, block_size=4, num_blocks=512, decode=None)
    got, reference = static.run_to_completion(requests), mixed.run_to_completion(requests)
    for i, prompt in enumerate(prompts):
        hf = hf_greedy(hf_model, prompt, n)
        assert _tokens(got[f"r{i}"]) == hf == _tokens(reference[f"r{i}"]), f"request {i}"
    assert static.blocks.blocks_in_use() == 0


def test_static_decode_through_preemption_gives_the_same_tokens(model: GptOssModel) -> None:
    prompts = random_prompts([5, 9, 14, 6, 11, 20], seed=2)
    requests = [greedy_request(i, p, 20) for i, p in enumerate(prompts)]
    roomy = EngineCore(model, block_size=4, num_blocks=512, decode=None)
    expected = roomy.run_to_completion(requests)
    tight = EngineCore(model, block_size=4, num_blocks=18, max_num_seqs=8, decode=GRAPH_SHAPES)
    got = tight.run_to_completion(requests)
    assert tight.scheduler.num_preemptions > 0
    for key in expected:
        assert _tokens(got[key]) == _tokens(expected[key]), key
    assert tight.blocks.blocks_in_use() == 0


@pytest.mark.parametrize("packed", [False, True], ids=["bf16-layout", "mxfp4"])
@pytest.mark.parametrize("tokens", [1, 2, 9])  # 1 x top-2 < 4 experts: gathered; else dense
def test_fixed_shape_experts_equal_the_routed_moe(
    model: GptOssModel, tokens: int, packed: bool
) -> None:
    layer = model.weights.layers[1]
    if packed:
        gate_up, down = layer.experts.gate_up, layer.experts.down
        assert gate_up is not None and down is not None
        layer = attrs.evolve(
            layer,
            experts=ExpertWeights(
                gate_up_bias=layer.experts.gate_up_bias, down_bias=layer.experts.down_bias,
                gate_up_packed=quantize_mxfp4(gate_up), down_packed=quantize_mxfp4(down),
            ),
        )  # fmt: skip
    x = torch.randn(tokens, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    routed = model._moe(layer, x, "routed")
    static = model._moe(layer, x, "static")
    torch.testing.assert_close(static, routed, atol=1e-5, rtol=1e-5)


class _OpLog(TorchDispatchMode):
    """Every aten op a region runs, with its output shapes."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, tuple[tuple[int, ...], ...]]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        results = out if isinstance(out, (tuple, list)) else (out,)
        shapes = tuple(tuple(r.shape) for r in results if isinstance(r, torch.Tensor))
        self.ops.append((str(func.overloadpacket.__name__), shapes))
        return out


# Ops that read a tensor value on the host or make a shape from data: a graph cannot hold them.
_HOST_SYNC_OPS = {"_local_scalar_dense", "nonzero", "masked_select", "unique", "bincount"}


def _logged_step(static: StaticDecode, cache: PagedKVCache, lengths: list[int]) -> _OpLog:
    for i, n in enumerate(lengths):
        cache.blocks.reserve(i, n + 1)
    rows = [DecodeRow(i, 5 + i, n) for i, n in enumerate(lengths)]
    batch = static.bucket(len(rows))
    flat, widths = static._host_inputs(rows, batch)
    static._inputs[: len(flat)] = torch.tensor(flat)
    static._views_of((batch, widths))  # made once per key, before any capture
    log = _OpLog()
    with log:
        static._forward((batch, widths))
    return log


@pytest.mark.parametrize("moe", ["static", "routed"])
def test_the_graph_step_has_fixed_shapes_and_no_host_sync(model: GptOssModel, moe: str) -> None:
    """What CUDA graph capture needs, checked on CPU: two steps with different sequences,
    positions and expert choices in one bucket run the same ops with the same shapes, and
    none of them syncs with the host. The routed MoE fails both (so the check can fail)."""
    cache = PagedKVCache(model.config, num_blocks=64, block_size=4)
    static = StaticDecode(
        model, cache, torch.empty(8, model.config.vocab_size), max_model_len=64,
        batch_buckets=(1, 2, 4, 8), pad_width=True, moe=moe,  # type: ignore[arg-type]
    )  # fmt: skip
    for i in range(3):
        cache.blocks.reserve(i, 1)
    first = _logged_step(static, cache, [9, 13, 3])
    second = _logged_step(static, cache, [11, 14, 5])
    assert len(first.ops) > 100
    synced = {name for name, _ in first.ops} & _HOST_SYNC_OPS
    if moe == "static":
        assert not synced
        assert first.ops == second.ops
    else:
        assert synced  # the routed MoE counts tokens per expert on the host


def test_graphs_need_fixed_shapes() -> None:
    with pytest.raises(ValueError, match="CUDA graphs need"):
        StaticDecode(
            None, None, torch.empty(1, 1), max_model_len=1, graphs=True,  # type: ignore[arg-type]
        )  # fmt: skip


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA GPU")
def test_cuda_graph_decode_replays_the_eager_step(hf_dir: Path) -> None:
    """Where a GPU is: the engine's default CUDA plan (graphs per bucket) gives the tokens of
    the same fixed-shape step run eagerly, and of the mixed-step path, fp32 without TF32."""
    torch.backends.cuda.matmul.allow_tf32 = False
    cuda = GptOssModel.from_pretrained(hf_dir, device="cuda")
    prompts = random_prompts([3, 9, 17, 30, 5], seed=4)
    requests = [greedy_request(i, p, 24) for i, p in enumerate(prompts)]
    plan = DecodePlan.for_device(torch.device("cuda"), 8)
    assert plan.graphs
    graphs = EngineCore(cuda, block_size=4, num_blocks=512, max_num_seqs=8)
    assert graphs.static_decode is not None and graphs.static_decode.graphs
    eager = EngineCore(
        cuda, block_size=4, num_blocks=512, max_num_seqs=8, decode=attrs.evolve(plan, graphs=False)
    )
    mixed = EngineCore(cuda, block_size=4, num_blocks=512, max_num_seqs=8, decode=None)
    results = [e.run_to_completion(requests) for e in (graphs, eager, mixed)]
    tokens = [{k: _tokens(v) for k, v in r.items()} for r in results]
    assert tokens[0] == tokens[1] == tokens[2]
    assert graphs.static_decode.num_captured > 0
