"""Session-wide set-up that must happen before any test module is imported."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # Triton decides when it is first imported whether its kernels run interpreted, and
    # transformers' gpt-oss imports it long before tests/engines/test_triton_kernels.py does.
    # Without a GPU, interpreting is the only way the kernels run, so ask for it up front.
    # (No torch here to ask CUDA: the statemachine tests check torch stays unimported.)
    if "TRITON_INTERPRET" not in os.environ and not os.path.exists("/proc/driver/nvidia"):
        os.environ["TRITON_INTERPRET"] = "1"
