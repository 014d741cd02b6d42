"""The native gpt-oss engine (torch extra): `engine` (the `NativeEngine` token source), `core`,
`scheduler`, `kv_blocks`, `paged_attention`, `sampler`, and the model itself in `gptoss/`.

Importing this package does not import torch; `build_native_engine` imports it when called.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .engine import NativeEngine

__all__ = ["build_native_engine"]


def build_native_engine(
    model_dir: str | Path,
    *,
    device: str = "cpu",
    dtype: str = "float32",
    kv_cache_mb: int | None = None,
    block_size: int = 16,
    max_num_seqs: int = 64,
    experts: str = "dequantize",
    threads: int | None = None,
    prefix_cache: bool = True,
) -> NativeEngine:
    """Load `model_dir` and return a `NativeEngine` (close it, or use it as a context manager).

    `threads` is the engine thread's torch thread count; None means `default_engine_threads()`
    on CPU and torch's own setting elsewhere. `prefix_cache=False` turns off the reuse of
    cached prompt blocks (see docs/engines.md, "Prefix cache")."""
    import torch

    from .core import EngineCore
    from .engine import NativeEngine, default_engine_threads

    if threads is not None and threads < 1:
        raise ValueError(f"--threads must be at least 1, got {threads}")

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in torch_dtype:
        raise ValueError(f"dtype {dtype!r} is not one of {sorted(torch_dtype)}")
    core = EngineCore.from_pretrained(
        model_dir,
        device=device,
        dtype=torch_dtype[dtype],
        experts=experts,  # type: ignore[arg-type]
        block_size=block_size,
        kv_cache_bytes=None if kv_cache_mb is None else kv_cache_mb * 2**20,
        max_num_seqs=max_num_seqs,
        prefix_cache=prefix_cache,
    )
    if threads is None and core.model.device.type == "cpu":
        threads = default_engine_threads()
    return NativeEngine(core, threads=threads)
