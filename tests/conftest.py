"""Session-wide set-up that must happen before any test module is imported."""

from __future__ import annotations

import glob
import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # Triton decides when it is first imported whether its kernels run interpreted, and
    # transformers' gpt-oss imports it long before tests/engines/test_triton_kernels.py does.
    # Without a GPU, interpreting is the only way the kernels run, so ask for it up front.
    # (No torch here to ask CUDA: the statemachine tests check torch stays unimported.)
    # An NVIDIA driver shows itself in /proc or /dev (containers may mount only the devices);
    # set TRITON_INTERPRET yourself to choose otherwise.
    nvidia = os.path.exists("/proc/driver/nvidia") or bool(glob.glob("/dev/nvidia[0-9]*"))
    if "TRITON_INTERPRET" not in os.environ and not nvidia:
        os.environ["TRITON_INTERPRET"] = "1"


#: The per-test limit of a test marked `slow` (a fresh install, a kernel sweep): the suite's
#: own (`timeout` in pyproject.toml) is sized for the rest, so that a hang fails in minutes
#: with its name rather than stalling CI (issue 37).
SLOW_TIMEOUT = 900


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT))
