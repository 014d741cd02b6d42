# Triton kernels take pointers and tl.constexpr values whose annotations Triton itself reads,
# and @triton.jit is untyped where triton is not installed; the launchers stay strictly typed.
# mypy: disallow-untyped-defs=False, disallow-incomplete-defs=False
# mypy: disallow-untyped-decorators=False
"""Paged-attention decode as one Triton kernel per layer: sinks, sliding windows, GQA.

The torch path (`paged_attention.py`) gathers every decode's blocks into a padded copy, then
runs masked matmuls over it; this kernel reads the keys in place through the block table and
never touches a block outside [first_pos, q_pos]. One program per (sequence, KV head) owns the
head's whole query group (gpt-oss-20b: 8 query heads per KV head), so each key and value tile
is loaded once for the group. Online softmax (flash-decoding) keeps a running max `m`, a
denominator `l` and an accumulator; the sink is the state the loop starts from: a key whose
logit is the head's sink and whose value is zero (m = sink, l = 1, acc = 0), so it enters the
denominator exactly as in gpt-oss and needs no extra column.

Long rows with few of them (one stream at a long context: 8 programs for an H100's 132
multiprocessors) split their keys among SPLITS programs (flash-decoding); each leaves its
(max, denominator, accumulator) and a second launch merges them. Split 0 carries the sink.

Lengths come from device tensors (`first_pos`, `q_pos`) and the grid is (B, kv_heads, SPLITS),
fixed by the shapes, so a CUDA graph captures the launches. A padded row (q_pos < 0) loops zero
times and writes zeros.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

__all__ = ["decode_attention", "default_splits"]

_LOG2E = 1.4426950408889634
# Keys per loop iteration: one tile may span several pool blocks (block size 16 -> 4 blocks),
# which keeps tl.dot's key dimension at a size the tensor cores like.
_BLOCK_N = 64


@triton.jit
def _decode_kernel(
    q_ptr, k_ptr, v_ptr, out_ptr, tables_ptr, first_ptr, qpos_ptr, sinks_ptr,
    part_m_ptr, part_l_ptr, part_acc_ptr,
    window, scale_log2, table_width,
    stride_qb, stride_qh,
    stride_kh, stride_kblk, stride_ks,
    stride_vh, stride_vblk, stride_vs,
    stride_ob, stride_oh,
    stride_tb,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
    DIM_PAD: tl.constexpr, BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr, SPLITS: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    # Offsets into a pool of many blocks pass 2**31 elements: 64-bit from the head on.
    k_head = k_ptr + kvh.to(tl.int64) * stride_kh
    v_head = v_ptr + kvh.to(tl.int64) * stride_vh
    g = tl.arange(0, GROUP_PAD)
    d = tl.arange(0, DIM_PAD)
    heads = kvh * GROUP + g
    g_ok = g < GROUP
    d_ok = d < HEAD_DIM
    q = tl.load(
        q_ptr + b * stride_qb + heads[:, None] * stride_qh + d[None, :],
        mask=g_ok[:, None] & d_ok[None, :],
        other=0.0,
    )
    q_pos = tl.load(qpos_ptr + b)
    first = tl.load(first_ptr + b)
    n_keys = tl.maximum(q_pos - first + 1, 0)
    # Keys at positions >= lowest are visible; a window of 0 means none.
    lowest = tl.where(window > 0, q_pos - window + 1, first)
    sink = tl.load(sinks_ptr + heads, mask=g_ok, other=0.0).to(tl.float32) * 1.4426950408889634
    # Split 0 starts from the sink; the others from nothing (a finite floor, so that a split
    # whose keys are all masked computes exp2(-inf) = 0 rather than NaN).
    m = tl.where(split == 0, sink, -1e30)
    l_sum = tl.where(split == 0, 1.0, 0.0) + tl.zeros((GROUP_PAD,), tl.float32)
    acc = tl.zeros((GROUP_PAD, DIM_PAD), tl.float32)
    n = tl.arange(0, BLOCK_N)
    tiles = tl.cdiv(n_keys, BLOCK_N)
    per_split = tl.cdiv(tiles, SPLITS)
    for tile in range(split * per_split, tl.minimum(tiles, (split + 1) * per_split)):
        idx = tile * BLOCK_N + n  # slot index from first_pos on
        col = idx // BLOCK_SIZE
        block = tl.load(tables_ptr + b * stride_tb + col, mask=col < table_width, other=0)
        block = block.to(tl.int64)  # int32 tables too
        valid = (idx < n_keys) & (first + idx >= lowest)
        offset = (idx % BLOCK_SIZE)[:, None]
        kv_mask = valid[:, None] & d_ok[None, :]
        k = tl.load(
            k_head + block[:, None] * stride_kblk + offset * stride_ks + d[None, :],
            mask=kv_mask,
            other=0.0,
        )
        if UPCAST:  # Triton's interpreter mis-multiplies bf16: products of bf16 in fp32
            q = q.to(tl.float32)
            k = k.to(tl.float32)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2
        scores = tl.where(valid[None, :], scores, float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, 1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(scores - m_new[:, None])
        l_sum = l_sum * alpha + tl.sum(p, 1)
        v = tl.load(
            v_head + block[:, None] * stride_vblk + offset * stride_vs + d[None, :],
            mask=kv_mask,
            other=0.0,
        )
        p = p.to(v.dtype)
        if UPCAST:
            p = p.to(tl.float32)
            v = v.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p, v, input_precision=PRECISION)
        m = m_new
    if SPLITS == 1:
        tl.store(
            out_ptr + b * stride_ob + heads[:, None] * stride_oh + d[None, :],
            (acc / l_sum[:, None]).to(out_ptr.dtype.element_ty),
            mask=g_ok[:, None] & d_ok[None, :],
        )
    else:
        # Partials [B, H, SPLITS] (and [.., DIM_PAD]) for _combine_kernel.
        part = (b * GROUP * tl.num_programs(1) + heads) * SPLITS + split
        tl.store(part_m_ptr + part, m, mask=g_ok)
        tl.store(part_l_ptr + part, l_sum, mask=g_ok)
        tl.store(part_acc_ptr + part[:, None] * DIM_PAD + d[None, :], acc, mask=g_ok[:, None])


@triton.jit
def _combine_kernel(
    out_ptr, part_m_ptr, part_l_ptr, part_acc_ptr, stride_ob, stride_oh,
    HEAD_DIM: tl.constexpr, DIM_PAD: tl.constexpr, SPLITS: tl.constexpr,
):  # fmt: skip
    """Merge one (row, head)'s split partials: rescale each to the common max and add."""
    b = tl.program_id(0)
    head = tl.program_id(1)
    s = tl.arange(0, SPLITS)
    d = tl.arange(0, DIM_PAD)
    part = (b * tl.num_programs(1) + head) * SPLITS + s
    m = tl.load(part_m_ptr + part)
    weight = tl.exp2(m - tl.max(m, 0))
    l_sum = tl.sum(tl.load(part_l_ptr + part) * weight, 0)
    acc = tl.load(part_acc_ptr + part[:, None] * DIM_PAD + d[None, :])
    out = tl.sum(acc * weight[:, None], 0) / l_sum
    tl.store(
        out_ptr + b * stride_ob + head * stride_oh + d,
        out.to(out_ptr.dtype.element_ty),
        mask=d < HEAD_DIM,
    )


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
    out: torch.Tensor | None = None,
    splits: int | None = None,
) -> torch.Tensor:
    """Attend one query per sequence over its paged keys; returns [B, H, D].

    q [B, H, D]; k_pool/v_pool [kv_heads, blocks, block_size, D] (one layer's slot of the pool);
    tables [B, W] the physical blocks holding positions first_pos[b] + j * block_size onwards;
    q_pos [B] the query's position, also its own (already written) key's; negative = a padded
    row, which gets zeros. sinks [H]; window None or the sliding window in tokens. `splits`
    (a power of two) divides each row's keys among that many programs, merged by a second
    launch; None picks it from the shapes (`default_splits`), so it is fixed per graph bucket.
    """
    batch, heads, dim = q.shape
    kv_heads, _, block_size, pool_dim = k_pool.shape
    if pool_dim != dim or heads % kv_heads or v_pool.shape != k_pool.shape:
        raise ValueError(
            f"q {tuple(q.shape)} does not fit pools {tuple(k_pool.shape)}/{tuple(v_pool.shape)}"
        )
    if tables.dim() != 2 or tables.shape[0] != batch:
        raise ValueError(f"tables {tuple(tables.shape)} must be [{batch}, W]")
    group = heads // kv_heads
    if out is None:
        out = torch.empty_like(q)
    if batch == 0:
        return out
    # The kernel indexes the last dimension with stride 1.
    q, k_pool, v_pool = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k_pool, v_pool))
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    if splits is None:
        splits = default_splits(batch, kv_heads, tables.shape[1] * block_size, q.device)
    if splits < 1 or splits & (splits - 1):
        raise ValueError(f"splits must be a power of two, got {splits}")
    dim_pad = max(16, _pow2(dim))
    if splits > 1:
        part_m = q.new_empty(batch, heads, splits, dtype=torch.float32)
        part_l = torch.empty_like(part_m)
        part_acc = q.new_empty(batch, heads, splits, dim_pad, dtype=torch.float32)
    else:
        part_m = part_l = part_acc = sinks  # unused; any float32 tensor
    _decode_kernel[(batch, kv_heads, splits)](
        q, k_pool, v_pool, out, tables, first_pos, q_pos, sinks, part_m, part_l, part_acc,
        window or 0, dim**-0.5 * _LOG2E, tables.shape[1],
        q.stride(0), q.stride(1),
        k_pool.stride(0), k_pool.stride(1), k_pool.stride(2),
        v_pool.stride(0), v_pool.stride(1), v_pool.stride(2),
        out.stride(0), out.stride(1),
        tables.stride(0),
        GROUP=group, GROUP_PAD=max(16, _pow2(group)), HEAD_DIM=dim, DIM_PAD=dim_pad,
        BLOCK_SIZE=block_size, BLOCK_N=_BLOCK_N, PRECISION=precision,
        UPCAST=q.dtype == torch.bfloat16 and triton.knobs.runtime.interpret, SPLITS=splits,
    )  # fmt: skip
    if splits > 1:
        _combine_kernel[(batch, heads)](
            out, part_m, part_l, part_acc, out.stride(0), out.stride(1),
            HEAD_DIM=dim, DIM_PAD=dim_pad, SPLITS=splits,
        )  # fmt: skip
    return out


def default_splits(batch: int, kv_heads: int, max_keys: int, device: torch.device) -> int:
    """How many ways to split each row's keys: 1 unless the (row, KV head) programs alone
    leave most of the GPU's multiprocessors idle on long rows (one long stream: 8 programs for
    132 SMs on an H100), then enough to fill them, each split keeping >= 256 keys. Read from
    shapes and the device's properties only, so a captured graph keeps its choice."""
    if device.type != "cuda":
        return 1
    programs = batch * kv_heads
    sms = _multiprocessors(
        device.index if device.index is not None else torch.cuda.current_device()
    )
    wanted = min(-(-sms // programs), max_keys // 256, 16)
    return 1 if wanted < 2 else 1 << (wanted.bit_length() - 1)


@functools.cache
def _multiprocessors(index: int) -> int:
    return int(torch.cuda.get_device_properties(index).multi_processor_count)


def _pow2(n: int) -> int:
    return 1 << max(0, math.ceil(math.log2(n)))
