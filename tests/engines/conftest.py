from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from gptoss_tiny import make_hf_model, save

from streamfold.engines.native.gptoss.model import GptOssModel


@pytest.fixture(scope="session")
def hf_model() -> Any:
    return make_hf_model(seed=0)


@pytest.fixture(scope="session")
def hf_dir(hf_model: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save(hf_model, tmp_path_factory.mktemp("tiny_gptoss"))


@pytest.fixture(scope="module")
def model(hf_dir: Path) -> GptOssModel:
    """The native model on the tiny checkpoint, loaded once per test module."""
    return GptOssModel.from_pretrained(hf_dir)
