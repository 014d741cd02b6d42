"""Which optional part to install, said the same way by every command that needs one."""

from __future__ import annotations

import importlib.util

__all__ = ["TORCH_CPU_INSTALL", "missing_torch_extra"]

#: The CPU build of torch, as the README installs it: a bare `pip install torch` resolves to the
#: CUDA build on Linux (a 500 MB wheel plus several GB of nvidia-* packages). PyTorch's CPU
#: index as an *extra* index: its `2.13.0+cpu` sorts above PyPI's `2.13.0`, and where that
#: index cannot be reached pip still installs from the others (`--index-url` failed there).
TORCH_CPU_INSTALL = (
    "pip install --retries 2 'torch==2.13.0' --extra-index-url https://download.pytorch.org/whl/cpu"
)


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
