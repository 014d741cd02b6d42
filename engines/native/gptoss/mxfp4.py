"""MXFP4 (OCP microscaling FP4) expert weights: dequantize on load or per expert, and quantize.

Layout (gpt-oss checkpoints): `*_blocks` is uint8 [E, rows, cols/32, 16], two E2M1 nibbles
per byte, the low nibble first; `*_scales` is uint8 [E, rows, cols/32], an E8M0 exponent with
bias 127 shared by each block of 32 values. Rows are output features, so the dequantized
matrix is already in `F.linear` layout [E, out, in].

`quantize_mxfp4` exists so tests and `init-model` can write MXFP4 checkpoints; it rounds each
value to the nearest representable one after choosing the block exponent so the block's
largest magnitude fits under 6 (the largest E2M1 value).
"""

from __future__ import annotations

import torch

__all__ = ["FP4_VALUES", "dequantize_mxfp4", "quantize_mxfp4"]

FP4_VALUES = (
    +0.0, +0.5, +1.0, +1.5, +2.0, +3.0, +4.0, +6.0,
    -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0,
)  # fmt: skip


def dequantize_mxfp4(
    blocks: torch.Tensor, scales: torch.Tensor, *, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Return the [..., rows, cols] weight that `blocks` [..., rows, G, 16] and `scales`
    [..., rows, G] encode, in `dtype` on the blocks' device."""
    if blocks.dtype != torch.uint8 or scales.dtype != torch.uint8:
        raise TypeError(
            f"MXFP4 blocks and scales must be uint8, got {blocks.dtype} and {scales.dtype}"
        )
    if blocks.shape[:-1] != scales.shape or blocks.shape[-1] != 16:
        raise ValueError(
            f"MXFP4 blocks {tuple(blocks.shape)} do not match scales {tuple(scales.shape)};"
            " expected blocks [..., G, 16] with scales [..., G]"
        )
    lut = _lut(blocks.device)
    low = lut[(blocks & 0x0F).long()]
    high = lut[(blocks >> 4).long()]
    values = torch.stack((low, high), dim=-1).flatten(-2)  # [..., G, 32]
    exponent = scales.to(torch.int32) - 127
    values = torch.ldexp(values, exponent.unsqueeze(-1))
    return values.flatten(-2).to(dtype)


_LUTS: dict[torch.device, torch.Tensor] = {}


def _lut(device: torch.device) -> torch.Tensor:
    # Kept per device: building it from a Python list is a host-to-device copy, which a CUDA
    # graph capturing a decode step may not contain (the eager warm-up step fills this).
    lut = _LUTS.get(device)
    if lut is None:
        lut = _LUTS[device] = torch.tensor(FP4_VALUES, dtype=torch.float32, device=device)
    return lut


def quantize_mxfp4(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize [..., rows, cols] (cols a multiple of 32) to (blocks, scales)."""
    if weight.shape[-1] % 32:
        raise ValueError(
            f"MXFP4 needs a last dimension that is a multiple of 32, got {tuple(weight.shape)}"
        )
    w = weight.detach().float()
    grouped = w.reshape(*w.shape[:-1], w.shape[-1] // 32, 32)
    amax = grouped.abs().amax(dim=-1).clamp_min(2.0**-126)
    # Smallest exponent e with amax / 2**e <= 6.
    exponent = torch.ceil(torch.log2(amax / 6.0)).clamp(-127, 127)
    scaled = grouped / torch.exp2(exponent).unsqueeze(-1)
    magnitudes = torch.tensor(FP4_VALUES[:8], dtype=torch.float32, device=w.device)
    codes = (scaled.abs().unsqueeze(-1) - magnitudes).abs().argmin(dim=-1)
    codes = codes | ((scaled < 0).long() << 3)
    codes = codes.to(torch.uint8)
    blocks = codes[..., 0::2] | (codes[..., 1::2] << 4)
    scales = (exponent + 127).to(torch.uint8)
    return blocks.contiguous(), scales.contiguous()
