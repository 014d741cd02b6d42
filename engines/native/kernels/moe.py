# Triton kernels take pointers and tl.constexpr values whose annotations Triton itself reads,
# and @triton.jit is untyped where triton is not installed; the launchers stay strictly typed.
# mypy: disallow-untyped-defs=False, disallow-incomplete-defs=False
# mypy: disallow-untyped-decorators=False
"""The routed experts as two grouped GEMMs in Triton, MXFP4 weights dequantized in the matmul.

The torch path (`GptOssModel._moe`) loops over the chosen experts on the host, which needs the
per-expert counts on the host (a device sync every layer) and, with packed experts, a bf16 copy
of each chosen expert's weights. Here routing stays on the device:

1. `route` sorts the (token, slot) pairs by expert and pads each expert's run to a multiple of
   BLOCK_M (vLLM's "moe_align_block_size", in plain torch ops with shapes fixed by T): every
   BLOCK_M rows then belong to one expert, and `block_expert` says which (-1: an unused block).
2. One launch per projection, grid (max blocks, N / BLOCK_N): a program multiplies its rows by
   one expert's weight tile. Packed weights are read as bytes: the low nibble of byte j holds
   column 2j and the high nibble column 2j+1, so the activations are read as their even and odd
   columns and the tile is two dots, with no interleaving in registers. E2M1 codes and E8M0
   scales become floats by building their bits (exact: no table, no exp2 rounding).
3. The first projection's epilogue applies gpt-oss's clamped SwiGLU to its interleaved
   gate/linear columns; the second's multiplies by the router gate. Both write rows in pair
   order, so the combine is a sum over the k slots.

Nothing here asks the host for a value, and the grid depends only on T, so a CUDA graph can
capture it for a fixed batch.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..gptoss.weights import ExpertWeights

__all__ = ["Routing", "moe_experts", "route"]


class Routing:
    """(token, slot) pairs grouped by expert in BLOCK_M-row blocks (see the module docstring)."""

    def __init__(self, top_experts: torch.Tensor, num_experts: int, block_m: int) -> None:
        device = top_experts.device
        flat = top_experts.flatten()
        pairs = flat.numel()
        counts = torch.zeros(num_experts, dtype=torch.long, device=device)
        # scatter_add_, not bincount: bincount on CUDA reads the max back to size its output.
        counts.scatter_add_(0, flat, torch.ones_like(flat))
        padded = (counts + block_m - 1) // block_m * block_m
        padded_end = torch.cumsum(padded, 0)
        order = torch.argsort(flat, stable=True)
        expert_of = flat[order]
        rank = torch.arange(pairs, device=device) - (torch.cumsum(counts, 0) - counts)[expert_of]
        capacity = -(-(pairs + num_experts * (block_m - 1)) // block_m) * block_m
        self.sorted_pairs = torch.full((capacity,), pairs, dtype=torch.long, device=device)
        self.sorted_pairs[(padded_end - padded)[expert_of] + rank] = order
        starts = torch.arange(0, capacity, block_m, device=device)
        block_expert = torch.searchsorted(padded_end, starts, right=True)
        self.block_expert = torch.where(block_expert < num_experts, block_expert, -1)
        self.pairs = pairs
        self.block_m = block_m


def route(top_experts: torch.Tensor, num_experts: int, block_m: int = 16) -> Routing:
    return Routing(top_experts, num_experts, block_m)


@triton.jit
def _fp4_to_float(code):
    """E2M1 nibbles (uint8 0..15) to float32 by assembling the bits: exact, branch-free."""
    c = code.to(tl.uint32)
    sign = (c >> 3) << 31
    exponent = (c >> 1) & 3
    mantissa = c & 1
    # e == 0: 0 or the subnormal 0.5 (= 2**-1, biased exponent 126); else 2**(e-1) * 1.m.
    bits = tl.where(
        exponent == 0, mantissa * (126 << 23), ((exponent + 126) << 23) | (mantissa << 22)
    )
    return (bits | sign).to(tl.float32, bitcast=True)


@triton.jit
def _e8m0_to_float(scale):
    """E8M0 bytes to 2**(s - 127); s == 0 is the subnormal 2**-127 (0x00400000)."""
    s = scale.to(tl.uint32)
    return tl.where(s == 0, 0x00400000, s << 23).to(tl.float32, bitcast=True)


@triton.jit
def _rounded(x, dtype: tl.constexpr, BY_BITS: tl.constexpr):
    """float32 `x` as `dtype`, rounded to nearest even. Triton's interpreter truncates float32 to
    bfloat16 (up to 1 ulp, half the values off), so there (BY_BITS) the rounding is done on the
    bits first and the cast is exact; compiled, the cast itself rounds to nearest even."""
    if BY_BITS:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        x = tl.where(x == x, bits.to(tl.float32, bitcast=True), x)  # NaN stays NaN
    return x.to(dtype)


@triton.jit
def _moe_gemm_kernel(
    a_ptr, w_ptr, s_ptr, bias_ptr, gate_ptr, out_ptr, sorted_ptr, block_expert_ptr,
    num_pairs, N, K, a_row_div, limit, alpha,
    stride_am, stride_we, stride_wn, stride_wk, stride_se, stride_sn, stride_be, stride_om,
    PACKED: tl.constexpr, SWIGLU: tl.constexpr, GATED: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    expert = tl.load(block_expert_ptr + pid_m)
    if expert >= 0:
        m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        pair = tl.load(sorted_ptr + m)
        row_ok = pair < num_pairs
        a_rows = a_ptr + (pair // a_row_div)[:, None] * stride_am
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        col_ok = cols < N
        w_base = w_ptr + expert.to(tl.int64) * stride_we + cols[None, :] * stride_wn
        acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
        if PACKED:
            j = tl.arange(0, BLOCK_K // 2)
            s_base = s_ptr + expert.to(tl.int64) * stride_se + cols[None, :] * stride_sn
            for k0 in range(0, K, BLOCK_K):
                byte = k0 // 2 + j  # byte j of a row holds columns 2j (low) and 2j+1 (high)
                k_ok = byte < K // 2
                w_mask = k_ok[:, None] & col_ok[None, :]
                packed = tl.load(w_base + byte[:, None], mask=w_mask, other=0)
                scale = _e8m0_to_float(
                    tl.load(s_base + (byte // 16)[:, None], mask=w_mask, other=127)
                )
                a_mask = row_ok[:, None] & k_ok[None, :]
                a_even = tl.load(a_rows + 2 * byte[None, :], mask=a_mask, other=0.0)
                a_odd = tl.load(a_rows + 2 * byte[None, :] + 1, mask=a_mask, other=0.0)
                w_low = (_fp4_to_float(packed & 0xF) * scale).to(a_even.dtype)
                w_high = (_fp4_to_float(packed >> 4) * scale).to(a_even.dtype)
                if UPCAST:  # Triton's interpreter mis-multiplies bf16: products in fp32
                    a_even, a_odd = a_even.to(tl.float32), a_odd.to(tl.float32)
                    w_low, w_high = w_low.to(tl.float32), w_high.to(tl.float32)
                acc += tl.dot(a_even, w_low, input_precision=PRECISION)
                acc += tl.dot(a_odd, w_high, input_precision=PRECISION)
        else:
            kk = tl.arange(0, BLOCK_K)
            for k0 in range(0, K, BLOCK_K):
                k = k0 + kk
                k_ok = k < K
                a = tl.load(a_rows + k[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
                w = tl.load(
                    w_base + k[:, None] * stride_wk, mask=k_ok[:, None] & col_ok[None, :], other=0.0
                )
                acc += tl.dot(a, w, input_precision=PRECISION)
        bias = tl.load(bias_ptr + expert * stride_be + cols, mask=col_ok, other=0.0)
        acc += bias.to(tl.float32)[None, :]
        if SWIGLU:
            # Columns alternate gate, linear; the output has half as many columns.
            gate, linear = tl.split(tl.reshape(acc, (BLOCK_M, BLOCK_N // 2, 2)))
            gate = tl.minimum(gate, limit)
            linear = tl.minimum(tl.maximum(linear, -limit), limit)
            result = gate * tl.sigmoid(alpha * gate) * (linear + 1)
            half = pid_n * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
            tl.store(
                out_ptr + pair[:, None] * stride_om + half[None, :],
                _rounded(result, out_ptr.dtype.element_ty, UPCAST),
                mask=row_ok[:, None] & (half < N // 2)[None, :],
            )
        else:
            if GATED:
                acc *= tl.load(gate_ptr + pair, mask=row_ok, other=0.0).to(tl.float32)[:, None]
            tl.store(
                out_ptr + pair[:, None] * stride_om + cols[None, :],
                _rounded(acc, out_ptr.dtype.element_ty, UPCAST),
                mask=row_ok[:, None] & col_ok[None, :],
            )


def _grouped_gemm(
    a: torch.Tensor,
    routing: Routing,
    weight: torch.Tensor | tuple[torch.Tensor, torch.Tensor],
    bias: torch.Tensor,
    out: torch.Tensor,
    *,
    a_row_div: int,
    swiglu: tuple[float, float] | None = None,
    gates: torch.Tensor | None = None,
) -> None:
    """out[pair] = epilogue(a[pair // a_row_div] @ W[expert of pair].T + bias[expert])."""
    if isinstance(weight, tuple):
        blocks, scales = weight  # [E, N, G, 16], [E, N, G]
        # Bytes along K and scales along groups are read with stride 1.
        w = blocks.contiguous().flatten(-2)  # [E, N, K/2]
        scales = scales.contiguous()
        n, k = w.shape[1], w.shape[2] * 2
        w_strides = (w.stride(0), w.stride(1), 1)
        s_strides = (scales.stride(0), scales.stride(1))
    else:
        w, scales = weight, weight  # `scales` unused when not packed
        n, k = w.shape[1], w.shape[2]
        w_strides = (w.stride(0), w.stride(1), w.stride(2))
        s_strides = (0, 0)
    block_n = 64
    block_k = 64
    limit, alpha = swiglu if swiglu is not None else (0.0, 0.0)
    precision = "ieee" if a.dtype == torch.float32 else "tf32"
    grid = (routing.sorted_pairs.numel() // routing.block_m, triton.cdiv(n, block_n))
    _moe_gemm_kernel[grid](
        a, w, scales, bias, gates if gates is not None else bias, out,
        routing.sorted_pairs, routing.block_expert,
        routing.pairs, n, k, a_row_div, limit, alpha,
        a.stride(0), *w_strides, *s_strides, bias.stride(0), out.stride(0),
        PACKED=isinstance(weight, tuple), SWIGLU=swiglu is not None, GATED=gates is not None,
        BLOCK_M=routing.block_m, BLOCK_N=block_n, BLOCK_K=block_k, PRECISION=precision,
        UPCAST=a.dtype == torch.bfloat16 and triton.knobs.runtime.interpret,
    )  # fmt: skip


def moe_experts(
    x: torch.Tensor,
    top_experts: torch.Tensor,
    gates: torch.Tensor,
    experts: ExpertWeights,
    limit: float,
    alpha: float,
) -> torch.Tensor:
    """The experts' weighted sum for each token: x [T, H], top_experts/gates [T, k] -> [T, H].

    Packed (MXFP4) experts are read packed; dense ones are read as they are."""
    tokens, k = top_experts.shape
    hidden = x.shape[1]
    gate_up = experts.gate_up_packed or experts.gate_up
    down = experts.down_packed or experts.down
    if gate_up is None or down is None:
        raise ValueError("ExpertWeights holds neither dense nor packed expert matrices")
    num_experts = experts.gate_up_bias.shape[0]
    intermediate = experts.gate_up_bias.shape[1] // 2
    # Small blocks for decode (few rows per expert), larger ones once rows are plentiful.
    block_m = 16 if tokens * k < 64 * num_experts else 64
    routing = route(top_experts, num_experts, block_m)
    x = x.contiguous()
    h = x.new_empty(tokens * k, intermediate)
    _grouped_gemm(x, routing, gate_up, experts.gate_up_bias, h, a_row_div=k, swiglu=(limit, alpha))
    y = x.new_empty(tokens * k, hidden)
    pair_gates = gates.reshape(-1).contiguous()
    _grouped_gemm(h, routing, down, experts.down_bias, y, a_row_div=1, gates=pair_gates)
    return y.view(tokens, k, hidden).sum(dim=1)
