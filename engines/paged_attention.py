"""Paged attention in PyTorch: K/V live in a block pool, read back through block tables.

One step runs many sequences at once: their new tokens are concatenated into one flat batch.
A sequence either decodes (one new token after a cached prefix) or prefills (every token new,
nothing cached: preempted sequences are recomputed from scratch, and there is no prefix cache).
Each layer writes its new K/V into the pool through a slot mapping, then
* decodes gather their live blocks from the pool, padded to the longest, and attend as one
  batch (padding and out-of-window keys are masked by position);
* prefills attend over their own fresh K/V, one sequence at a time.
Both go through `gptoss_model.attend`, the kernel the dense path uses, so paged equals dense.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import torch

from .gptoss_config import GptOssConfig
from .gptoss_model import attend
from .kv_blocks import FREED, BlockManager

__all__ = ["PagedAttention", "PagedKVCache", "StepSequence"]


@attrs.frozen(kw_only=True)
class StepSequence:
    """One sequence's share of a step: `num_new` tokens after `num_cached` cached ones."""

    seq_id: int
    num_cached: int
    num_new: int


class PagedKVCache:
    """The block pool: per layer group, K and V tensors [slots, blocks, block_size, kv_heads, D].

    Layers with the same window form a group and share block tables; `slot` is a layer's index
    within its group. Zero-filled so that padded reads multiply finite values by zero weights.
    """

    def __init__(
        self,
        config: GptOssConfig,
        *,
        num_blocks: int,
        block_size: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        windows: list[int | None] = []
        self.layer_group: list[tuple[int, int]] = []
        slots: dict[int | None, int] = {}
        for layer in range(config.num_hidden_layers):
            window = config.sliding_window if config.is_sliding(layer) else None
            if window not in windows:
                windows.append(window)
            self.layer_group.append((windows.index(window), slots.get(window, 0)))
            slots[window] = slots.get(window, 0) + 1
        self.windows = tuple(windows)
        self.block_size = block_size
        depth = max(slots.values())
        shape = (depth, num_blocks, block_size, config.num_key_value_heads, config.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.blocks = BlockManager(
            num_blocks=num_blocks, block_size=block_size, windows=self.windows
        )

    @staticmethod
    def bytes_per_block(config: GptOssConfig, block_size: int, dtype: torch.dtype) -> int:
        sliding = sum(config.is_sliding(i) for i in range(config.num_hidden_layers))
        depth = max(sliding, config.num_hidden_layers - sliding)
        elem = torch.empty(0, dtype=dtype).element_size()
        return 2 * depth * block_size * config.kv_heads_dim * elem


@attrs.frozen(kw_only=True)
class _GroupLayout:
    slots: torch.Tensor  # [T] flat pool slot per new token, -1 = not kept (outside window)
    decode_blocks: torch.Tensor  # [Bd, nb] physical blocks to gather, padded with block 0
    decode_k_pos: torch.Tensor  # [Bd, nb * block_size] key positions, -1 = padding


class PagedAttention:
    """The `AttentionBackend` over a `PagedKVCache` for one step; call `prepare` per step."""

    def __init__(
        self, cache: PagedKVCache, sinks: Sequence[torch.Tensor], windows: Sequence[int | None]
    ):
        self.cache = cache
        self.sinks = list(sinks)
        self.windows = list(windows)
        self.device = cache.k.device

    def prepare(self, step: Sequence[StepSequence]) -> torch.Tensor:
        """Build slot mappings and gather indices for `step`; returns the flat positions."""
        bs, blocks = self.cache.block_size, self.cache.blocks
        positions: list[int] = []
        decode_rows: list[int] = []
        self._prefills: list[tuple[int, int, torch.Tensor]] = []
        for s in step:
            start = len(positions)
            positions.extend(range(s.num_cached, s.num_cached + s.num_new))
            if s.num_new == 1 and s.num_cached > 0:
                decode_rows.append(start)
            elif s.num_cached == 0:
                pos = torch.arange(s.num_new, device=self.device)
                self._prefills.append((start, start + s.num_new, pos))
            else:
                raise ValueError(
                    f"sequence {s.seq_id}: {s.num_new} new tokens after {s.num_cached} cached;"
                    " a step either decodes one token or prefills from position 0"
                )
        decodes = [s for s in step if s.num_new == 1 and s.num_cached > 0]
        self._decode_rows = torch.tensor(decode_rows, dtype=torch.long, device=self.device)
        self._decode_q_pos = torch.tensor(
            [[s.num_cached] for s in decodes], dtype=torch.long, device=self.device
        )
        self._groups = []
        for g in range(len(self.cache.windows)):
            slots: list[int] = []
            for s in step:
                table = blocks.table(s.seq_id, g)
                end = s.num_cached + s.num_new
                keep_from = blocks.first_needed_position(g, end)
                for p in range(s.num_cached, end):
                    physical = table[p // bs] if p >= keep_from else FREED
                    slots.append(FREED if physical == FREED else physical * bs + p % bs)
            tables, k_pos = [], []
            for s in decodes:
                table = blocks.table(s.seq_id, g)
                first = blocks.first_needed_position(g, s.num_cached + 1) // bs
                live = list(range(first, len(table)))
                tables.append([table[b] for b in live])
                k_pos.append([b * bs + o for b in live for o in range(bs)])
            width = max((len(t) for t in tables), default=0)
            self._groups.append(
                _GroupLayout(
                    slots=torch.tensor(slots, dtype=torch.long, device=self.device),
                    decode_blocks=torch.tensor(
                        [t + [0] * (width - len(t)) for t in tables],
                        dtype=torch.long,
                        device=self.device,
                    ).view(len(decodes), width),
                    decode_k_pos=torch.tensor(
                        [p + [-1] * (width * bs - len(p)) for p in k_pos],
                        dtype=torch.long,
                        device=self.device,
                    ).view(len(decodes), width * bs),
                )
            )
        return torch.tensor(positions, dtype=torch.long, device=self.device)

    def __call__(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        group, slot = self.cache.layer_group[layer]
        layout = self._groups[group]
        k_pool, v_pool = self.cache.k[slot], self.cache.v[slot]
        kept = layout.slots >= 0
        flat_k = k_pool.view(-1, *k_pool.shape[2:])
        flat_v = v_pool.view(-1, *v_pool.shape[2:])
        flat_k.index_copy_(0, layout.slots[kept], k[kept])
        flat_v.index_copy_(0, layout.slots[kept], v[kept])
        out = torch.empty_like(q)
        sinks, window = self.sinks[layer], self.windows[layer]
        for start, end, pos in self._prefills:
            out[start:end] = attend(
                q[None, start:end],
                k[None, start:end],
                v[None, start:end],
                pos[None],
                pos[None],
                sinks,
                window,
            )[0]
        if len(self._decode_rows):
            n = layout.decode_blocks.shape[0]
            keys = k_pool[layout.decode_blocks].view(n, -1, *k_pool.shape[2:])
            values = v_pool[layout.decode_blocks].view(n, -1, *v_pool.shape[2:])
            q_dec = q[self._decode_rows][:, None]
            out[self._decode_rows] = attend(
                q_dec, keys, values, self._decode_q_pos, layout.decode_k_pos, sinks, window
            )[:, 0]
        return out
