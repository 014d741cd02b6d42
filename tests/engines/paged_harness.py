"""Shared set-ups for the paged-cache tests: a cache with scattered blocks, and the check that a
fixed-shape decode step gives transformers' logits step after step."""

from __future__ import annotations

import random
from collections import deque
from typing import Any

import torch

from streamfold.engines.native.decode_graph import DecodeRow, StaticDecode
from streamfold.engines.native.gptoss.model import GptOssModel
from streamfold.engines.native.paged_attention import PagedAttention, PagedKVCache, StepSequence


def scattered_paged_cache(
    model: GptOssModel, *, num_blocks: int, block_size: int, seed: int
) -> tuple[PagedKVCache, PagedAttention]:
    """A paged cache whose free blocks are shuffled, so block tables are not contiguous."""
    cache = PagedKVCache(model.config, num_blocks=num_blocks, block_size=block_size)
    shuffled = list(cache.blocks._free)
    random.Random(seed).shuffle(shuffled)
    cache.blocks._free = deque(shuffled)
    windows = [model.window(i) for i in range(model.config.num_hidden_layers)]
    return cache, PagedAttention(cache, model.sinks, windows)


def assert_static_decode_matches(
    hf_model: Any,
    model: GptOssModel,
    static: StaticDecode,
    attention: PagedAttention,
    prompts: list[list[int]],
    full: list[list[int]],
    *,
    steps: int,
    atol: float,
) -> None:
    """Prefill `prompts` through `attention`, then decode `full`'s next tokens with `static` for
    `steps` steps: every row's logits equal transformers' on `full`, and the padded rows wrote
    only into the trash block (the sink block stays all zero)."""
    cache = attention.cache
    with torch.no_grad():
        expected = [hf_model(torch.tensor(f)[None]).logits[0] for f in full]
    step = [StepSequence(seq_id=i, num_cached=0, num_new=len(p)) for i, p in enumerate(prompts)]
    for s in step:
        cache.blocks.reserve(s.seq_id, s.num_new)
    positions = attention.prepare(step)
    model(torch.tensor([t for p in prompts for t in p]), positions, attention)
    lengths = [len(p) for p in prompts]
    for _ in range(steps):
        for i, n in enumerate(lengths):
            cache.blocks.reserve(i, n + 1)
        logits = static.run([DecodeRow(i, full[i][n], n) for i, n in enumerate(lengths)])
        assert logits.shape == (len(prompts), model.config.vocab_size)
        for i, n in enumerate(lengths):
            torch.testing.assert_close(logits[i], expected[i][n], atol=atol, rtol=atol)
        lengths = [n + 1 for n in lengths]
    assert not cache.k[:, :, cache.sink_block].any() and not cache.v[:, :, cache.sink_block].any()
