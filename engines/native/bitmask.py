"""The batch's token bitmask (llguidance's layout) applied to its logits, in place.

A bitmask is int32 [B, ceil(vocab / 32)]: bit `j` of word `w` allows token `32 * w + j`.
`apply_token_bitmask_` sets every disallowed logit to -inf in the logits tensor itself:

- On the CPU, float32 logits go to the C extension `_bitmask` (built by setup.py where a C
  compiler is): one sequential read of the words, -inf written only where a bit is clear
  (16 rows of 201,088 tokens in free text: ~0.1 ms where the path below took ~0.5). The
  path below is the reference and the fallback (no compiler, other dtypes).
- On the CPU without it, numpy and torch write only the 32-token blocks that change: in free
  text (a grammar's reasoning) all but a few hundred of o200k's 6,284 words are all ones, so
  the blocks of the others get -inf added where their bits are clear; in JSON nearly every
  word is zero, so the row's few allowing blocks are kept, the row is filled with -inf, and
  they are put back. Rows of neither kind (rare) are masked whole. (The first version built a
  [B, vocab] bool tensor and a masked copy of the logits each step: 16 MB of fresh memory at
  16 rows, page-faulted in every step, which slowed that step's sampling too.)
- On an accelerator it unpacks with tensor shifts and `masked_fill_` (no host sync; the
  bitmask came over in one non-blocking copy from pinned memory).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch


def _load_compiled() -> Callable[[int, int, int, int, int, int], None] | None:
    try:
        from . import _bitmask
    except ImportError:  # built without a C compiler: the numpy and torch path below
        return None
    return _bitmask.apply_f32


_apply_f32 = _load_compiled()

__all__ = ["apply_token_bitmask", "apply_token_bitmask_"]

#: Row `b` is byte `b`'s 8 tokens as additive logits: 0 where its bit is set, -inf where not.
#: Masking a block of 32 tokens is adding its word's 4 rows (a float add, which numpy and torch
#: run 20-50x faster than a masked fill with a [k, 32] bool tensor).
_BYTE_ADD = np.where(
    np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little") == 1,
    np.float32(0),
    np.float32("-inf"),
)
#: A row takes the sparse path when at most this fraction of its words need reading (each
#: costs a block of 32 logits; past it, the row is masked whole).
_SPARSE = 8


def apply_token_bitmask_(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """Set every logit of `logits` [B, vocab] that `bitmask` [B, ceil(vocab / 32)] (int32, on
    the logits' device) disallows to -inf, in place; returns `logits`."""
    rows, vocab = logits.shape
    on_cpu = logits.device.type == "cpu"
    if (
        on_cpu
        and _apply_f32 is not None
        and logits.dtype == torch.float32
        and logits.stride(1) == 1
        and bitmask.dtype == torch.int32
        and bitmask.is_contiguous()
        and bitmask.shape[0] == rows
        and bitmask.shape[1] * 32 >= vocab
    ):
        _apply_f32(
            logits.data_ptr(), bitmask.data_ptr(), rows, bitmask.shape[1], vocab, logits.stride(0)
        )
    elif on_cpu and logits.is_contiguous() and vocab % 32 == 0:
        _mask_cpu(logits, bitmask.numpy())
    else:  # an accelerator (no host sync), or a layout the paths above do not take
        logits.masked_fill_(~_allowed_shifts(bitmask, vocab), float("-inf"))
    return logits


def apply_token_bitmask(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    """`apply_token_bitmask_` on a copy: `logits` is left as it was."""
    return apply_token_bitmask_(logits.clone(), bitmask)


def _allowed_shifts(bitmask: torch.Tensor, vocab: int) -> torch.Tensor:
    """[B, vocab] bool from the bitmask with tensor ops (any device, no host sync)."""
    shifts = torch.arange(32, device=bitmask.device, dtype=torch.int32)
    return ((bitmask[:, :, None] >> shifts) & 1).view(bitmask.shape[0], -1)[:, :vocab] != 0


def _additive(words: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """[k, 32]: 0 for each allowed token of the int32 `words`, -inf for the others."""
    octets = words.astype("<i4", copy=False).view(np.uint8)  # bit j of byte b: token 8b + j
    return torch.from_numpy(np.take(_BYTE_ADD, octets, axis=0).reshape(-1, 32)).to(dtype)


def _mask_cpu(logits: torch.Tensor, words: np.ndarray) -> None:
    """`apply_token_bitmask_` on the CPU, touching only the logits that change (see above):
    the logits are read as [B * words, 32] blocks, one per bitmask word."""
    rows, width = words.shape
    blocks = logits.view(rows * width, 32)
    limit = max(1, width // _SPARSE)
    restricted = words != -1  # words with a disallowed token
    counts = np.count_nonzero(restricted, axis=1)
    few = counts <= limit
    # Mostly allowed (free text): mask the few blocks that disallow something.
    at = np.flatnonzero(restricted & few[:, None])
    if at.size:  # one op: gather, add, scatter (distinct indices)
        add = _additive(words.reshape(-1)[at], logits.dtype)
        blocks.index_add_(0, torch.from_numpy(at), add)
    if few.all():
        return
    # Mostly disallowed (JSON): -inf everywhere, then the few blocks that allow something back.
    allowing = words != 0
    keep = ~few & (np.count_nonzero(allowing, axis=1) <= limit)
    if keep.any():
        at = np.flatnonzero(allowing & keep[:, None])
        index = torch.from_numpy(at)
        picked = blocks.index_select(0, index)
        logits.index_fill_(0, torch.from_numpy(np.flatnonzero(keep)), float("-inf"))
        blocks.index_copy_(0, index, picked.add_(_additive(words.reshape(-1)[at], logits.dtype)))
    for row in np.flatnonzero(~few & ~keep):  # neither (rare): the whole row
        logits[row].view(-1, 32).add_(_additive(words[row], logits.dtype))
