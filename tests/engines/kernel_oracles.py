"""Plain torch oracles for the Triton kernels: written from the definitions, not from the kernels.

`paged_reference` reads a decode batch's keys out of the pool position by position and calls
the dense model's `attend` (the kernel the transformers comparison pins), so it shares no
indexing code with either paged implementation.
"""

from __future__ import annotations

import torch

from streamfold.engines.native.gptoss.model import attend


def paged_reference(
    q: torch.Tensor,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    tables: torch.Tensor,
    first_pos: torch.Tensor,
    q_pos: torch.Tensor,
    sinks: torch.Tensor,
    window: int | None,
) -> torch.Tensor:
    """[B, H, D]: each row's query over the keys at positions first_pos..q_pos (zeros if padded)."""
    bs = k_pool.shape[2]
    out = torch.zeros_like(q)
    for b in range(q.shape[0]):
        qp, first = int(q_pos[b]), int(first_pos[b])
        if qp < 0:
            continue
        positions = range(first, qp + 1)
        blocks = [int(tables[b, (p - first) // bs]) for p in positions]
        offsets = [(p - first) % bs for p in positions]
        keys = torch.stack([k_pool[:, blk, off] for blk, off in zip(blocks, offsets, strict=True)])
        values = torch.stack(
            [v_pool[:, blk, off] for blk, off in zip(blocks, offsets, strict=True)]
        )
        k_pos = torch.tensor(list(positions))
        out[b] = attend(
            q[b][None, None].float(), keys[None].float(), values[None].float(),
            torch.tensor([[qp]]), k_pos[None], sinks.float(), window,
        )[0, 0].to(q.dtype)  # fmt: skip
    return out
