"""The gpt-oss forward pass: token ids and positions in, logits out.

The model owns no KV cache. Each layer hands its queries, keys and values to an
`AttentionBackend`, which stores the keys and values where it likes and returns the attention
output. `DenseAttention` keeps one sequence's cache in contiguous tensors (part 1, and the
oracle for the paged cache); the engine's paged backend keeps many sequences in blocks. Both
call the same `attend` kernel, so paged and dense results agree to rounding.

Operator order follows openai/gpt-oss `torch/model.py`: RMSNorm in fp32; q/k/v with bias;
NeoX rotary with YaRN; softmax over keys plus one learned sink logit per head; sliding window
on the layers that have it; top-k router with softmax over the selected logits; SwiGLU with
gate clamped above, linear clamped both sides, and +1 on the linear branch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Literal, Protocol

import attrs
import torch
import torch.nn.functional as F

from .. import kernels
from .config import GptOssConfig, load_config
from .mxfp4 import dequantize_mxfp4
from .weights import ExpertMode, ExpertWeights, GptOssWeights, LayerWeights, load_weights

__all__ = ["AttentionBackend", "DenseAttention", "GptOssModel", "MoeMode", "attend"]

# "routed": run each chosen expert once on the rows routed to it (data-dependent shapes, a
# host sync for the counts; the fastest on CPU). "static": fixed shapes for a given token
# count and no host sync, so a CUDA graph can capture it (see `fixed_shape_experts`).
MoeMode = Literal["routed", "static"]


class AttentionBackend(Protocol):
    """Stores this step's keys/values for `layer` and attends the step's queries over the cache.

    q is [T, heads, D], k and v are [T, kv_heads, D] for the T tokens of the step, in the order
    the model was given them. Returns [T, heads, D].
    """

    def __call__(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor: ...


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    sinks: torch.Tensor,
    window: int | None,
) -> torch.Tensor:
    """Causal attention with sinks for a batch: q [B, Tq, H, D], k/v [B, L, KVH, D],
    q_pos [B, Tq], k_pos [B, L] (negative marks padding). Returns [B, Tq, H, D].

    The sink is one extra key whose value is zero and whose logit is the head's sink: a zero
    key and a mask column holding the sink make q.k + mask equal the sink exactly, so stock
    `scaled_dot_product_attention` (fused on CPU and GPU) computes gpt-oss attention; the
    unfused softmax it replaced was 3x slower on a 256-token CPU prefill.
    """
    b, tq, heads, _ = q.shape
    length = k.shape[1]
    zero = k.new_zeros(b, 1, *k.shape[2:])
    keys = torch.cat((k, zero), dim=1).transpose(1, 2)
    values = torch.cat((v, zero), dim=1).transpose(1, 2)
    kp, qp = k_pos[:, None, :], q_pos[:, :, None]
    allowed = (kp <= qp) & (kp >= 0)
    if window is not None:
        allowed &= kp > qp - window
    mask = q.new_empty(b, heads, tq, length + 1)
    mask[..., :length] = torch.zeros((), dtype=q.dtype, device=q.device).masked_fill(
        ~allowed[:, None], float("-inf")
    )
    mask[..., length] = sinks.to(q.dtype).view(1, heads, 1)
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), keys, values, attn_mask=mask, enable_gqa=True
    )
    return out.transpose(1, 2)


class DenseAttention:
    """One sequence's KV cache in contiguous per-layer tensors, grown by concatenation.

    Tokens are assumed to arrive in position order starting at 0 (prefill, then decode steps).
    """

    def __init__(self, model: GptOssModel) -> None:
        self.model = model
        self.keys: list[torch.Tensor | None] = [None] * model.config.num_hidden_layers
        self.values: list[torch.Tensor | None] = [None] * model.config.num_hidden_layers
        self.q_pos = torch.zeros(0, dtype=torch.long)

    @property
    def length(self) -> int:
        k = self.keys[0]
        return 0 if k is None else k.shape[0]

    def begin(self, positions: torch.Tensor) -> None:
        self.q_pos = positions

    def __call__(
        self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        old_k, old_v = self.keys[layer], self.values[layer]
        keys = k if old_k is None else torch.cat((old_k, k))
        values = v if old_v is None else torch.cat((old_v, v))
        self.keys[layer], self.values[layer] = keys, values
        k_pos = torch.arange(keys.shape[0], device=q.device)
        out = attend(
            q[None], keys[None], values[None], self.q_pos[None].to(q.device), k_pos[None],
            self.model.sinks[layer], self.model.window(layer),
        )  # fmt: skip
        return out[0]


class GptOssModel:
    """gpt-oss weights on one device, and the forward pass over them."""

    def __init__(self, config: GptOssConfig, weights: GptOssWeights) -> None:
        self.config = config
        # fp32 lm_head as [hidden, vocab]: x @ W runs 1.3-2x faster than F.linear's x @ W.T
        # on CPU (MKL, 2 threads, vocab 32000); keep only that copy, the weights see a view of
        # it. bf16/fp16 go the other way (oneDNN: [1, 2880] x 50k vocab, 2 threads: 92 ms
        # against [vocab, hidden] rows, 165 ms against the transposed copy), so they keep the
        # checkpoint's [vocab, hidden] and multiply by its transposed view.
        if weights.lm_head.dtype == torch.float32:
            self.lm_head_t = weights.lm_head.t().contiguous()
        else:
            self.lm_head_t = weights.lm_head.contiguous().t()
        self.weights = attrs.evolve(weights, lm_head=self.lm_head_t.t())
        self.device = weights.embedding.device
        self.dtype = weights.embedding.dtype
        self.sinks = [layer.sinks for layer in weights.layers]
        self.inv_freq = _yarn_inv_freq(config).to(self.device)
        # On CUDA with triton, the routed experts run as grouped GEMMs (kernels/moe.py):
        # routing stays on the device and MXFP4 experts are never dequantized to a copy.
        self.triton_moe = kernels.enabled(self.device)
        # Called (then cleared) by the next `forward` right before its unembedding matmul: on
        # CPU the longest stretch of a step that runs without the GIL (see `EngineCore.step`).
        self.before_unembedding: Callable[[], object] | None = None

    @classmethod
    def from_pretrained(
        cls,
        model_dir: str | Path,
        *,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        experts: ExpertMode = "dequantize",
    ) -> GptOssModel:
        config = load_config(model_dir)
        weights = load_weights(model_dir, config, device=device, dtype=dtype, experts=experts)
        return cls(config, weights)

    def window(self, layer: int) -> int | None:
        return self.config.sliding_window if self.config.is_sliding(layer) else None

    @torch.inference_mode()
    def forward(
        self,
        token_ids: torch.Tensor,
        positions: torch.Tensor,
        attention: AttentionBackend,
        *,
        logits_at: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
        moe: MoeMode = "routed",
    ) -> torch.Tensor:
        """Logits [N, vocab] in float32 for the rows `logits_at` of the T input tokens (all
        rows when None). token_ids and positions are 1-D of length T. `out`, a contiguous
        [N, vocab] tensor in the model's dtype, receives the unembedding (a caller stepping
        again and again reuses one: see `EngineCore`). `moe` picks the expert path (see
        `MoeMode`); with "static" and a fixed-shape backend the pass has no host sync."""
        x = F.embedding(token_ids.to(self.device), self.weights.embedding)
        cos, sin = self._rotary(positions.to(self.device))
        for i, layer in enumerate(self.weights.layers):
            x = x + self._attention(i, layer, _rms_norm(x, layer.input_norm, self._eps), cos, sin,
                                    attention)  # fmt: skip
            x = x + self._moe(layer, _rms_norm(x, layer.post_norm, self._eps), moe)
        if logits_at is not None:
            x = x[logits_at.to(self.device)]
        x = _rms_norm(x, self.weights.norm, self._eps)
        hook, self.before_unembedding = self.before_unembedding, None
        if hook is not None:
            hook()
        return torch.mm(x, self.lm_head_t, out=out).float()

    __call__ = forward

    @property
    def _eps(self) -> float:
        return self.config.rms_norm_eps

    def _rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions[:, None].float() * self.inv_freq[None, :]
        scale = self.config.rope.concentration
        cos = (freqs.cos() * scale).to(self.dtype)[:, None, :]
        sin = (freqs.sin() * scale).to(self.dtype)[:, None, :]
        return cos, sin

    def _attention(
        self,
        i: int,
        w: LayerWeights,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        attention: AttentionBackend,
    ) -> torch.Tensor:
        c = self.config
        t = x.shape[0]
        q = F.linear(x, w.q, w.q_bias).view(t, c.num_attention_heads, c.head_dim)
        k = F.linear(x, w.k, w.k_bias).view(t, c.num_key_value_heads, c.head_dim)
        v = F.linear(x, w.v, w.v_bias).view(t, c.num_key_value_heads, c.head_dim)
        out = attention(i, _rotate(q, cos, sin), _rotate(k, cos, sin), v)
        return F.linear(out.reshape(t, c.q_dim), w.o, w.o_bias)

    def _moe(self, w: LayerWeights, x: torch.Tensor, mode: MoeMode = "routed") -> torch.Tensor:
        c = self.config
        logits = F.linear(x, w.router, w.router_bias)
        top_logits, top_experts = torch.topk(logits, c.num_experts_per_tok, dim=-1)
        gates = torch.softmax(top_logits, dim=-1)
        experts = w.experts
        if self.triton_moe:
            from ..kernels.moe import moe_experts

            return moe_experts(x, top_experts, gates, experts, c.swiglu_limit, c.swiglu_alpha)
        if mode == "static":
            return fixed_shape_experts(x, top_experts, gates, experts, self._swiglu)
        tokens, k = top_experts.shape
        # Route: the (token, slot) pairs sorted by expert, so that each chosen expert runs
        # once, on a contiguous slice of the rows routed to it, and experts no token chose
        # are never read (nor, packed as MXFP4, dequantized). Decode used to run every expert
        # on every token in two batched matmuls; reading E/k times the expert weights cost
        # more than the loop's launches even on CPU (H 1024, 32 experts top-4, one token:
        # 330 ms against 46 ms, 1 thread; H 256, 8 experts top-2, 16 tokens: 30 against 2 ms).
        flat = top_experts.flatten()
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=c.num_local_experts).tolist()
        rows = x.index_select(0, order // k)
        out = torch.empty_like(rows)
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            part = slice(start, start + n)
            h = F.linear(rows[part], experts.gate_up_of(e), experts.gate_up_bias[e])
            out[part] = F.linear(self._swiglu(h), experts.down_of(e), experts.down_bias[e])
            start += n
        # Back to (token, slot) order with a gather: CPU index_add_/index_put were the
        # slowest ops of a decode step.
        picked = out.index_select(0, torch.argsort(order)).view(tokens, k, -1)
        return (picked * gates[..., None]).sum(dim=1)

    def _swiglu(self, h: torch.Tensor) -> torch.Tensor:
        limit = self.config.swiglu_limit
        gate = h[..., 0::2].clamp(max=limit)
        linear = h[..., 1::2].clamp(min=-limit, max=limit)
        return gate * torch.sigmoid(self.config.swiglu_alpha * gate) * (linear + 1)


def fixed_shape_experts(
    x: torch.Tensor,
    top_experts: torch.Tensor,
    gates: torch.Tensor,
    experts: ExpertWeights,
    swiglu: Callable[[torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """The MoE output [T, H] for x [T, H] routed to top_experts [T, k] with gates [T, k],
    in shapes fixed by T alone and with no host sync (CUDA-graph capturable).

    With fewer (token, slot) pairs than experts each pair gathers its expert's weights (reads
    k/E of the experts per token); otherwise every expert runs on every token and each token
    takes its k results (reads each expert once). Packed MXFP4 experts are dequantized after
    the gather. A kernel that dequantizes in the matmul may replace this (same arguments)
    behind a device check. Slots are summed in the routed path's order.
    """
    tokens, k = top_experts.shape
    num_experts = experts.gate_up_bias.shape[0]
    if tokens * k < num_experts:
        flat = top_experts.reshape(-1)
        rows = x.repeat_interleave(k, dim=0)[:, None, :]  # [T*k, 1, H]
        gate_up = _expert_matrices(experts, "gate_up", flat)  # [T*k, 2I, H]
        h = torch.baddbmm(experts.gate_up_bias[flat][:, None, :], rows, gate_up.transpose(1, 2))
        down = _expert_matrices(experts, "down", flat)  # [T*k, H, I]
        o = torch.baddbmm(experts.down_bias[flat][:, None, :], swiglu(h), down.transpose(1, 2))
        picked = o.view(tokens, k, -1)
    else:
        gate_up = _expert_matrices(experts, "gate_up", None)  # [E, 2I, H]
        h = torch.baddbmm(
            experts.gate_up_bias[:, None, :], x.expand(num_experts, *x.shape),
            gate_up.transpose(1, 2),
        )  # fmt: skip
        down = _expert_matrices(experts, "down", None)
        o = torch.baddbmm(experts.down_bias[:, None, :], swiglu(h), down.transpose(1, 2))
        token_index = torch.arange(tokens, device=x.device)[:, None]
        picked = o[top_experts, token_index]  # [T, k, H]
    return (picked * gates[..., None]).sum(dim=1)


def _expert_matrices(
    experts: ExpertWeights, which: Literal["gate_up", "down"], index: torch.Tensor | None
) -> torch.Tensor:
    """The experts' [.., out, in] matrices at `index` (all when None), dequantized if packed."""
    dense = experts.gate_up if which == "gate_up" else experts.down
    if dense is not None:
        return dense if index is None else dense.index_select(0, index)
    packed = experts.gate_up_packed if which == "gate_up" else experts.down_packed
    assert packed is not None
    blocks, scales = packed
    if index is not None:
        blocks, scales = blocks.index_select(0, index), scales.index_select(0, index)
    return dequantize_mxfp4(blocks, scales, dtype=experts.dtype)


def _rms_norm(x: torch.Tensor, scale: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (scale * xf).to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


def _yarn_inv_freq(config: GptOssConfig) -> torch.Tensor:
    """Per-pair inverse frequencies; YaRN blends interpolated and extrapolated ones."""
    rope, dim = config.rope, config.head_dim
    freq = rope.theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    if rope.factor <= 1:
        return 1.0 / freq

    def correction_dim(rotations: float) -> float:
        ctx = rope.original_max_position_embeddings
        return dim * math.log(ctx / (rotations * 2 * math.pi)) / (2 * math.log(rope.theta))

    low, high = correction_dim(rope.beta_fast), correction_dim(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    extrapolation = 1 - ramp
    return (1.0 / (rope.factor * freq)) * (1 - extrapolation) + (1.0 / freq) * extrapolation
