"""Paged attention in PyTorch: K/V live in a block pool, read back through block tables.

One step runs many sequences at once: their new tokens are concatenated into one flat batch.
A sequence either decodes (one new token after cached ones) or prefills (several new tokens,
after nothing or after a prefix the prefix cache supplied, `num_cached` tokens whose K/V are
already in the pool). Each layer writes its new K/V into the pool through a slot mapping (every
new position whose block the table holds), then
* decodes gather their live blocks from the pool, padded to the longest, and attend as one
  batch (padding and out-of-window keys are masked, the sink is a zero key);
* prefills attend over their own fresh K/V, after the cached prefix's K/V gathered from the
  pool (from the first position the window of their first query sees), one sequence at a
  time, through `gptoss_model.attend`, the kernel the dense path uses.
Both use the same sink trick (a zero key whose mask column holds the sink logit), so paged
attention equals the dense path to rounding.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import attrs
import torch

from . import kernels
from .gptoss.config import GptOssConfig
from .gptoss.model import attend
from .kv_blocks import FREED, BlockManager

__all__ = ["PagedAttention", "PagedKVCache", "StepSequence", "decode_attention", "decode_mask"]


@attrs.frozen(kw_only=True)
class StepSequence:
    """One sequence's share of a step: `num_new` tokens after `num_cached` cached ones."""

    seq_id: int
    num_cached: int
    num_new: int


class PagedKVCache:
    """The block pool: per layer group, K and V tensors [slots, kv_heads, blocks, block_size, D].

    Layers with the same window form a group and share block tables; `slot` is a layer's index
    within its group. Heads come before blocks so that gathering a batch's blocks along one
    dimension yields keys already laid out [kv_heads, sequences, keys, D] for a batched
    matmul, with no copy after the gather.
    """

    def __init__(
        self,
        config: GptOssConfig,
        *,
        num_blocks: int,
        block_size: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        prefix_cache: bool = False,
    ) -> None:
        """`prefix_cache` turns on `BlockManager`'s prefix cache, salted with the config."""
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
        # Two more blocks than the manager hands out: the sink block, always zero (see
        # PagedAttention; zeros also make padded reads multiply finite values by zero weight),
        # and the trash block, where the padded rows of a fixed-shape decode step write their
        # K/V (see decode_graph): a write must go somewhere, and not into the sink.
        shape = (depth, config.num_key_value_heads, num_blocks + 2, block_size, config.head_dim)
        self.sink_block = num_blocks
        self.trash_block = num_blocks + 1
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        # What the K/V of a token run depend on beyond the tokens (`BlockManager`'s salt).
        identity = f"{config!r} {dtype} {block_size}".encode()
        self.blocks = BlockManager(
            num_blocks=num_blocks, block_size=block_size, windows=self.windows,
            prefix_cache=prefix_cache, salt=hashlib.sha256(identity).digest(),
        )  # fmt: skip

    @staticmethod
    def bytes_per_block(config: GptOssConfig, block_size: int, dtype: torch.dtype) -> int:
        sliding = sum(config.is_sliding(i) for i in range(config.num_hidden_layers))
        depth = max(sliding, config.num_hidden_layers - sliding)
        elem = torch.empty(0, dtype=dtype).element_size()
        return 2 * depth * block_size * config.kv_heads_dim * elem


@attrs.frozen(kw_only=True)
class _Prefill:
    rows: tuple[int, int]  # this step's rows of the sequence's new tokens
    q_pos: torch.Tensor  # [num_new] their positions
    # Per group: the pool blocks of the cached prefix to read, how many of their slots (from
    # the first), and the positions of those keys followed by q_pos; None without a prefix.
    cached: list[tuple[torch.Tensor, int, torch.Tensor] | None]


@attrs.frozen(kw_only=True)
class _GroupLayout:
    write_rows: torch.Tensor  # [W] rows of this step's tokens whose K/V are kept
    write_slots: torch.Tensor  # [W] their flat pool slots (block * block_size + offset)
    decode_blocks: torch.Tensor  # [Bd, nb + 1] blocks to gather; padding and last = sink block
    decode_first_pos: torch.Tensor  # [Bd] position of decode_blocks[:, 0]'s first slot
    decode_q_pos: torch.Tensor  # [Bd] the decoded token's position
    # [Bd, (nb + 1) * block_size] (see decode_mask); None where the Triton kernel decodes
    decode_mask: torch.Tensor | None


class PagedAttention:
    """The `AttentionBackend` over a `PagedKVCache` for one step; call `prepare` per step.

    Decodes gather their blocks followed by the pool's always-zero sink block; its first slot
    is the sink key (logit = the head's sink, value zero), so the whole decode batch is one
    grouped softmax(q.K + mask).V with no copy beyond the gather.
    """

    def __init__(
        self, cache: PagedKVCache, sinks: Sequence[torch.Tensor], windows: Sequence[int | None]
    ):
        self.cache = cache
        self.sinks = list(sinks)
        self.windows = list(windows)
        self.device = cache.k.device
        # The Triton decode kernel masks as it reads: no mask to build for it.
        self.need_mask = not kernels.enabled(self.device)

    def prepare(self, step: Sequence[StepSequence]) -> torch.Tensor:
        """Build slot mappings, gather tables and masks for `step`; returns flat positions."""
        positions: list[int] = []
        decode_rows: list[int] = []
        decodes: list[StepSequence] = []
        self._prefills: list[_Prefill] = []
        for s in step:
            start = len(positions)
            positions.extend(range(s.num_cached, s.num_cached + s.num_new))
            if s.num_new == 1 and s.num_cached > 0:
                decode_rows.append(start)
                decodes.append(s)
            else:
                self._prefills.append(self._prefill(s, start))
        self._decode_rows = torch.tensor(decode_rows, dtype=torch.long, device=self.device)
        self._groups = [
            self._group_layout(g, step, decodes) for g in range(len(self.cache.windows))
        ]
        return torch.tensor(positions, dtype=torch.long, device=self.device)

    def _prefill(self, s: StepSequence, start: int) -> _Prefill:
        """A prefill's rows and positions, and per group the pool blocks of its cached prefix
        that its first query's window reads (none without a prefix)."""
        end = s.num_cached + s.num_new
        q_pos = torch.arange(s.num_cached, end, device=self.device)
        cached: list[tuple[torch.Tensor, int, torch.Tensor] | None] = []
        for g in range(len(self.cache.windows)):
            if not s.num_cached:
                cached.append(None)
                continue
            blocks, first = self.cache.blocks.read_window(s.seq_id, g, s.num_cached)
            used = -(-(s.num_cached - first) // self.cache.block_size)
            cached.append(
                (
                    torch.tensor(blocks[:used], dtype=torch.long, device=self.device),
                    s.num_cached - first,
                    torch.arange(first, end, device=self.device),
                )
            )
        return _Prefill(rows=(start, start + s.num_new), q_pos=q_pos, cached=cached)

    def _group_layout(
        self, g: int, step: Sequence[StepSequence], decodes: list[StepSequence]
    ) -> _GroupLayout:
        bs, blocks = self.cache.block_size, self.cache.blocks
        rows: list[int] = []
        slots: list[int] = []
        row = 0
        for s in step:
            table = blocks.table(s.seq_id, g)
            for p in range(s.num_cached, s.num_cached + s.num_new):
                # Blocks a sliding window will never read again are not in the table.
                if p // bs < len(table) and table[p // bs] != FREED:
                    rows.append(row + p - s.num_cached)
                    slots.append(table[p // bs] * bs + p % bs)
            row += s.num_new
        tables: list[list[int]] = []
        firsts: list[int] = []
        for s in decodes:
            blocks_read, start = blocks.read_window(s.seq_id, g, s.num_cached)
            tables.append(blocks_read)
            firsts.append(start)
        width = max((len(t) for t in tables), default=0)
        sink = self.cache.sink_block
        gathered = torch.tensor(
            [t + [sink] * (width - len(t) + 1) for t in tables], dtype=torch.long
        ).view(len(decodes), width + 1)
        gathered = gathered.to(self.device)
        first_pos = torch.tensor(firsts, dtype=torch.long, device=self.device)
        q_pos = torch.tensor([s.num_cached for s in decodes], dtype=torch.long, device=self.device)
        mask = (
            decode_mask(gathered, bs, first_pos, q_pos, self.cache.windows[g], self.cache.k.dtype)
            if self.need_mask
            else None
        )
        return _GroupLayout(
            write_rows=torch.tensor(rows, dtype=torch.long, device=self.device),
            write_slots=torch.tensor(slots, dtype=torch.long, device=self.device),
            decode_blocks=gathered,
            decode_first_pos=first_pos,
            decode_q_pos=q_pos,
            decode_mask=mask,
        )

    def __call__(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        group, slot = self.cache.layer_group[layer]
        layout = self._groups[group]
        k_pool, v_pool = self.cache.k[slot], self.cache.v[slot]
        kv_heads, _, _, d = k_pool.shape
        rows = layout.write_rows
        k_pool.view(kv_heads, -1, d).index_copy_(1, layout.write_slots, k[rows].transpose(0, 1))
        v_pool.view(kv_heads, -1, d).index_copy_(1, layout.write_slots, v[rows].transpose(0, 1))
        out = torch.empty_like(q)
        sinks, window = self.sinks[layer], self.windows[layer]
        for prefill in self._prefills:
            start, end = prefill.rows
            keys, values, k_pos = k[start:end], v[start:end], prefill.q_pos
            cached = prefill.cached[group]
            if cached is not None:  # the prefix's K/V from the pool, then the fresh ones
                table, count, k_pos = cached
                old_k = k_pool.index_select(1, table).view(kv_heads, -1, d)[:, :count]
                old_v = v_pool.index_select(1, table).view(kv_heads, -1, d)[:, :count]
                keys = torch.cat((old_k.transpose(0, 1), keys))
                values = torch.cat((old_v.transpose(0, 1), values))
            out[start:end] = attend(
                q[None, start:end], keys[None], values[None], prefill.q_pos[None], k_pos[None],
                sinks, window,
            )[0]  # fmt: skip
        if len(self._decode_rows):
            rows = self._decode_rows
            out[rows] = decode_attention(
                q[rows], k_pool, v_pool, layout.decode_blocks, layout.decode_first_pos,
                layout.decode_q_pos, sinks, window, mask=layout.decode_mask,
            )  # fmt: skip
        return out


def decode_attention(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    tables: torch.Tensor,
    first_pos: torch.Tensor,
    q_pos: torch.Tensor,
    sinks: torch.Tensor,
    window: int | None,
    *,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """One decode query per row over its blocks, with fixed shapes and no host sync.

    q [B, H, D]; k_pool/v_pool [KVH, blocks, block_size, D] (one layer's pool); tables
    [B, W + 1] the row's live blocks from its first needed one, padded with the sink block,
    whose last column is always the sink block; first_pos [B] the position of tables[:, 0]'s
    first slot; q_pos [B] the query's position (-1 for a padded row: it sees only the sink
    and comes out zero). Returns [B, H, D]. The mask is built here from tensors, so a CUDA
    graph can capture the call and replay it with new tables; a kernel that reads only the
    blocks below q_pos may replace it (same arguments) behind a device check. `mask`, from
    `decode_mask` with the same arguments, saves rebuilding it in every layer of a group.

    On CUDA with triton that kernel runs instead (`kernels/decode.py`; `kernels.enabled`):
    it reads each row's blocks in place, from first_pos to q_pos only.
    """
    if kernels.enabled(q.device):
        from .kernels.decode import decode_attention as kernel

        return kernel(q, k_pool, v_pool, tables, first_pos, q_pos, sinks, window)
    kv_heads, _, bs, d = k_pool.shape
    n, heads = q.shape[0], q.shape[1]
    group_size = heads // kv_heads
    width = tables.shape[1] - 1
    flat = tables.reshape(-1)
    keys = k_pool.index_select(1, flat).view(kv_heads, n, -1, d)
    values = v_pool.index_select(1, flat).view(kv_heads, n, -1, d)
    if mask is None:
        mask = decode_mask(tables, bs, first_pos, q_pos, window, q.dtype)
    queries = q.view(n, kv_heads, group_size, d).transpose(0, 1)
    scores = torch.matmul(queries, keys.transpose(-1, -2))  # [kv_heads, n, group, L]
    scores.mul_(d**-0.5).add_(mask[:, None, :])
    # The sink column's key is the zero sink block, so its score is exactly the sink.
    scores[..., width * bs] = sinks.to(scores.dtype).view(kv_heads, 1, group_size)
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype)
    attended = torch.matmul(weights, values)  # [kv_heads, n, group, D]
    return attended.transpose(0, 1).reshape(n, heads, d)


def decode_mask(
    tables: torch.Tensor,
    block_size: int,
    first_pos: torch.Tensor,
    q_pos: torch.Tensor,
    window: int | None,
    dtype: torch.dtype,
) -> torch.Tensor:
    """`decode_attention`'s additive mask [B, (W + 1) * block_size]: 0 where a gathered key
    slot is visible to the row's query (causal, inside the window, not the sink block), else
    -inf. Built from tensors only (no host sync)."""
    width = tables.shape[1] - 1
    offsets = torch.arange((width + 1) * block_size, device=tables.device)
    k_pos = first_pos[:, None] + offsets
    allowed = (k_pos <= q_pos[:, None]) & (offsets < width * block_size)
    if window is not None:
        allowed &= k_pos > q_pos[:, None] - window
    return torch.zeros(allowed.shape, dtype=dtype, device=tables.device).masked_fill(
        ~allowed, float("-inf")
    )
