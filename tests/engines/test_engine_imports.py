"""Import hygiene: torch only behind the extra, transformers never in the engine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def _run(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout


def test_importing_streamfold_engines_does_not_import_torch() -> None:
    out = _run("import sys, streamfold.engines as e; e.GptOssConfig; print('torch' in sys.modules)")
    assert out.strip() == "False"


def test_the_engine_never_imports_transformers(hf_dir: Path) -> None:
    code = (
        "import sys; from streamfold.engines import GptOssModel;"
        f"GptOssModel.from_pretrained({str(hf_dir)!r});"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'))"
    )
    assert _run(code).strip() == "[]"
