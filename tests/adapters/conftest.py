from pathlib import Path

import pytest

from .chat_template_model import build_model_dir


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every adapter test runs under asyncio and under trio (anyio's pytest plugin)."""
    return str(request.param)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small think-tag model directory in the Qwen2.5 layout (`chat_template_model.py`)."""
    return build_model_dir(tmp_path_factory.mktemp("qwenish"))
