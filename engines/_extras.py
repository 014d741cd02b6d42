"""Which optional part to install, said the same way by every command that needs one."""

from __future__ import annotations

import importlib.util

__all__ = ["TORCH_CPU_INSTALL", "missing_torch_extra"]

#: The CPU build of torch from PyTorch's own index: a bare `pip install torch` resolves to the
#: CUDA build on Linux (a 500 MB wheel plus several GB of nvidia-* packages).
TORCH_CPU_INSTALL = "pip install torch --index-url https://download.pytorch.org/whl/cpu"


def missing_torch_extra(what: str) -> str | None:
    """None when the `torch` extra is importable; else a message for `what` (e.g. "--engine
    native") that names the missing packages and how to install them."""
    missing = [
        name for name in ("torch", "safetensors", "numpy") if importlib.util.find_spec(name) is None
    ]
    if not missing:
        return None
    return (
        f"{what} needs the torch extra ({', '.join(missing)} not installed): "
        f"pip install 'streamfold[torch]'; for the CPU build of torch, first {TORCH_CPU_INSTALL}"
    )
