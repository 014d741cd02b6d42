"""Fixtures the think-tag grammar tests share: a Qwen3-layout model directory (its real chat
template, a small vocabulary) and its chat format."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamfold.adapters.formats import ChatTemplateFormat
from tests.adapters.chat_template_model import build_model_dir


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("qwenish"))


@pytest.fixture(scope="module")
def chat_format(model_dir: Path) -> ChatTemplateFormat:
    return ChatTemplateFormat(model_dir)
