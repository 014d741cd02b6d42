"""Triton kernels for the native engine on CUDA: paged decode attention and MXFP4 expert matmuls.

`decode.decode_attention` reads a decode batch's keys straight from the paged pool (one launch
per layer); `moe.moe_experts` runs the routed experts as one grouped GEMM per projection, with
MXFP4 experts dequantized inside the matmul instead of into a bf16 copy. Both take their lengths
and routing from device tensors with a launch grid fixed by the batch shape, so a CUDA graph can
capture them.

The torch code stays the reference and the CPU path: `enabled(device)` says whether the model
should call these kernels. Importing this package imports neither torch nor triton; the kernel
modules import triton, which reads TRITON_INTERPRET when a kernel is defined, so tests that run
the kernels on CPU tensors through Triton's interpreter set it before importing them.

STREAMFOLD_KERNELS picks: `auto` (the default: kernels on CUDA when triton imports), `torch`
(never, for comparing or working around a kernel), `triton` (always, also on CPU, where Triton
runs them interpreted under TRITON_INTERPRET=1: slow, for tests).
"""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["ENV", "KernelChoiceError", "enabled", "triton_available"]

ENV = "STREAMFOLD_KERNELS"
_CHOICES = ("auto", "torch", "triton")


class KernelChoiceError(ValueError):
    """STREAMFOLD_KERNELS names no choice, or asks for kernels where they cannot run."""


def triton_available() -> bool:
    """Whether triton is installed (found without importing it: the import takes a second)."""
    return importlib.util.find_spec("triton") is not None


def enabled(device: torch.device) -> bool:
    """Whether the model on `device` should run the Triton kernels (see the module docstring)."""
    choice = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if choice not in _CHOICES:
        raise KernelChoiceError(f"{ENV}={choice!r} is not one of {', '.join(_CHOICES)}")
    if choice == "torch":
        return False
    interpreted = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on")
    if choice == "auto":
        return device.type == "cuda" and not interpreted and triton_available()
    if not triton_available():
        raise KernelChoiceError(
            f"{ENV}=triton but triton is not installed; pip install triton (Linux x86_64)"
        )
    if device.type != "cuda" and not interpreted:
        raise KernelChoiceError(
            f"{ENV}=triton on a {device.type} device needs TRITON_INTERPRET=1 (Triton's"
            " interpreter runs the kernels on CPU tensors, slowly; for tests)"
        )
    return True
