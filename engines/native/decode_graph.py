"""Fixed-shape decode steps: one shape per batch bucket, replayed as CUDA graphs on CUDA.

A decode-only step feeds one token per sequence. `StaticDecode` pads the batch to a bucket
(1, 2, 4, 8, 16, 24, ... as vLLM and nano-vllm do) and each group's block tables to a width
bucket, writes every input (token ids, positions, block tables, first positions, K/V slots)
into buffers it keeps, and runs the model over views of those buffers: no tensor is built
inside the step, no Python branch reads a tensor value, nothing waits for the device. So on
CUDA the step of each (batch bucket, widths) key is captured once as a `torch.cuda.CUDAGraph`
and replayed with new buffer contents, and everywhere else the same step runs eagerly.

Padded rows feed token 0 at position -1: their tables hold only the sink block, so they
attend to nothing (the sink alone, output zero), and they write their K/V into the pool's
trash block, never into a live sequence's blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs
import torch

from . import kernels
from .gptoss.model import GptOssModel, MoeMode
from .paged_attention import PagedKVCache, decode_attention, decode_mask

__all__ = ["DecodePlan", "DecodeRow", "StaticDecode", "default_batch_buckets"]


@attrs.frozen
class DecodeRow:
    """One sequence's decode: feed `token_id` at `position` (the number of cached tokens)."""

    seq_id: int
    token_id: int
    position: int


def default_batch_buckets(max_num_seqs: int) -> tuple[int, ...]:
    """1, 2, 4, 8, then every 8 up to max_num_seqs (the last bucket is max_num_seqs)."""
    buckets = [b for b in (1, 2, 4) if b < max_num_seqs]
    buckets += [*range(8, max_num_seqs, 8), max_num_seqs]
    return tuple(buckets)


@attrs.frozen(kw_only=True)
class DecodePlan:
    """How `EngineCore` runs decode-only steps through `StaticDecode` (see its arguments).

    `for_device` gives CUDA graphs over padded buckets with the fixed-shape MoE on CUDA, and
    the same step eagerly, unpadded, with the routed MoE elsewhere (the fastest on CPU).
    """

    batch_buckets: tuple[int, ...] | None = None
    pad_width: bool = False
    graphs: bool = False
    moe: MoeMode = "routed"

    @classmethod
    def for_device(cls, device: torch.device, max_num_seqs: int) -> DecodePlan:
        if device.type == "cuda":
            buckets = default_batch_buckets(max_num_seqs)
            return cls(batch_buckets=buckets, pad_width=True, graphs=True, moe="static")
        return cls()


@attrs.frozen
class _Views:
    """The input views one key's step reads; fixed addresses, so a graph can replay them."""

    tokens: torch.Tensor  # [B]
    positions: torch.Tensor  # [B], -1 on padded rows
    first_pos: tuple[torch.Tensor, ...]  # per group [B]
    slots: tuple[torch.Tensor, ...]  # per group [B] flat pool slot of the new token's K/V
    tables: tuple[torch.Tensor, ...]  # per group [B, W_g + 1], last column the sink block


class _StaticAttention:
    """The model's attention backend for one key: write K/V through `slots`, then attend."""

    def __init__(self, cache: PagedKVCache, sinks: list[torch.Tensor], views: _Views) -> None:
        self.cache, self.sinks, self.views = cache, sinks, views
        # One mask per group, built in the step (from the input views) by its first layer;
        # none where the Triton decode kernel runs (it masks as it reads).
        self.masks: dict[int, torch.Tensor | None] = {}
        self.need_mask = not kernels.enabled(cache.k.device)

    def __call__(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        group, slot = self.cache.layer_group[layer]
        k_pool, v_pool = self.cache.k[slot], self.cache.v[slot]
        kv_heads, _, _, d = k_pool.shape
        slots = self.views.slots[group]
        k_pool.view(kv_heads, -1, d).index_copy_(1, slots, k.transpose(0, 1))
        v_pool.view(kv_heads, -1, d).index_copy_(1, slots, v.transpose(0, 1))
        views, window = self.views, self.cache.windows[group]
        if group not in self.masks:
            self.masks[group] = decode_mask(
                views.tables[group], self.cache.block_size, views.first_pos[group],
                views.positions, window, q.dtype,
            ) if self.need_mask else None  # fmt: skip
        mask = self.masks[group]
        return decode_attention(
            q, k_pool, v_pool, views.tables[group], views.first_pos[group], views.positions,
            self.sinks[layer], window, mask=mask,
        )  # fmt: skip


class StaticDecode:
    """Decode steps in fixed shapes over `cache`, eager or as CUDA graphs (`graphs=True`).

    `batch_buckets=None` runs each batch at its own size and `pad_width=False` each group's
    tables at the batch's widest: the fastest eager CPU step, still the same code. With
    buckets and padded widths (powers of two), the shapes come from a small set, as graphs
    need. `moe="static"` runs the experts in fixed shapes (graphs need it); "routed" is
    faster on CPU (see `GptOssModel`).
    """

    def __init__(
        self,
        model: GptOssModel,
        cache: PagedKVCache,
        logits: torch.Tensor,
        *,
        max_model_len: int,
        batch_buckets: Sequence[int] | None = None,
        pad_width: bool = False,
        graphs: bool = False,
        moe: MoeMode = "routed",
    ) -> None:
        if graphs and not (batch_buckets and pad_width and moe == "static"):
            raise ValueError("CUDA graphs need batch_buckets, pad_width=True and moe='static'")
        self.model, self.cache, self.moe, self.graphs = model, cache, moe, graphs
        self.max_num_seqs = logits.shape[0]
        self.buckets = tuple(sorted(batch_buckets)) if batch_buckets else None
        if self.buckets and self.buckets[-1] < self.max_num_seqs:
            raise ValueError(f"batch buckets {self.buckets} stop below {self.max_num_seqs}")
        self.pad_width = pad_width
        self.logits = logits  # [max_num_seqs, vocab], kept: graphs write into it
        bs = cache.block_size
        num_blocks = cache.blocks.num_blocks
        # The most blocks a decode reads per group: a window spans ceil(w / bs) + 1 blocks.
        self.max_widths = tuple(
            min(num_blocks, -(-max_model_len // bs) if w is None else -(-w // bs) + 1)
            for w in cache.windows
        )
        self._device = cache.k.device
        size = self._flat_size(self.max_num_seqs, self.max_widths)
        self._staging = (
            torch.empty(size, dtype=torch.long, pin_memory=True)
            if self._device.type == "cuda"
            else None
        )
        self._inputs = torch.zeros(size, dtype=torch.long, device=self._device)
        self._views: dict[tuple[int, tuple[int, ...]], _Views] = {}
        self._graphs: dict[tuple[int, tuple[int, ...]], torch.cuda.CUDAGraph] = {}
        # A graph's logits: `logits` itself in fp32; a float32 copy the graph owns otherwise.
        self._outputs: dict[tuple[int, tuple[int, ...]], torch.Tensor] = {}
        self._pool: Any = None  # the first graph's memory pool, shared by the others
        self.num_captured = 0

    def _flat_size(self, batch: int, widths: tuple[int, ...]) -> int:
        return 2 * batch + sum(batch * (2 + w + 1) for w in widths)

    def bucket(self, n: int) -> int:
        if self.buckets is None:
            return n
        return next(b for b in self.buckets if b >= n)

    def width(self, group: int, needed: int) -> int:
        if not self.pad_width:
            return max(needed, 1)
        return min(1 << max(needed - 1, 0).bit_length(), self.max_widths[group])

    def run(self, rows: Sequence[DecodeRow]) -> torch.Tensor:
        """The logits [len(rows), vocab] (a view of the kept buffer) of one decode step."""
        n = len(rows)
        if not 0 < n <= self.max_num_seqs:
            raise ValueError(f"a decode step takes 1..{self.max_num_seqs} rows, got {n}")
        batch = self.bucket(n)
        flat, widths = self._host_inputs(rows, batch)
        key = (batch, widths)
        total = len(flat)
        host = torch.tensor(flat, dtype=torch.long)
        if self._staging is not None:  # pinned, so the copy below does not block the host
            host = self._staging[:total].copy_(host)
        self._inputs[:total].copy_(host, non_blocking=True)
        if not self.graphs:
            return self._forward(key)[:n]
        if key not in self._graphs:
            self._capture(key)
        self._graphs[key].replay()
        return self._outputs[key][:n]

    def _host_inputs(
        self, rows: Sequence[DecodeRow], batch: int
    ) -> tuple[list[int], tuple[int, ...]]:
        """The flat input list for `_views` layout, and each group's table width."""
        blocks, bs = self.cache.blocks, self.cache.block_size
        sink, trash = self.cache.sink_block, self.cache.trash_block
        pad = batch - len(rows)
        flat = [r.token_id for r in rows] + [0] * pad
        flat += [r.position for r in rows] + [-1] * pad
        widths = []
        for g in range(len(self.cache.windows)):
            live: list[list[int]] = []
            firsts: list[int] = []
            slots: list[int] = []
            for r in rows:
                blocks_read, start = blocks.read_window(r.seq_id, g, r.position)
                live.append(blocks_read)
                firsts.append(start)
                table = blocks.table(r.seq_id, g)
                slots.append(table[r.position // bs] * bs + r.position % bs)
            width = self.width(g, max(len(t) for t in live))
            widths.append(width)
            flat += firsts + [0] * pad
            flat += slots + [trash * bs] * pad
            for t in live:
                flat += t + [sink] * (width + 1 - len(t))
            flat += [sink] * ((width + 1) * pad)
        return flat, tuple(widths)

    def _views_of(self, key: tuple[int, tuple[int, ...]]) -> _Views:
        views = self._views.get(key)
        if views is None:
            batch, widths = key
            buf, at = self._inputs, 2 * batch
            firsts, slots, tables = [], [], []
            for w in widths:
                firsts.append(buf[at : at + batch])
                slots.append(buf[at + batch : at + 2 * batch])
                at += 2 * batch
                tables.append(buf[at : at + batch * (w + 1)].view(batch, w + 1))
                at += batch * (w + 1)
            views = self._views[key] = _Views(
                tokens=buf[:batch], positions=buf[batch : 2 * batch], first_pos=tuple(firsts),
                slots=tuple(slots), tables=tuple(tables),
            )  # fmt: skip
        return views

    def _forward(self, key: tuple[int, tuple[int, ...]]) -> torch.Tensor:
        views = self._views_of(key)
        attention = _StaticAttention(self.cache, self.model.sinks, views)
        batch = key[0]
        return self.model(
            views.tokens, views.positions, attention, out=self.logits[:batch], moe=self.moe
        )

    def _capture(self, key: tuple[int, tuple[int, ...]]) -> None:
        """Capture the step of `key` (after one eager run on a side stream, as torch asks:
        it also fills lazy caches); its K/V writes repeat the eager run's, so it is safe to
        capture with this step's real inputs in the buffers."""
        stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self._forward(key)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            self._outputs[key] = self._forward(key)
        self._pool = graph.pool()
        self._graphs[key] = graph
        self.num_captured += 1
