"""examples/embed_fastapi.py (docs/embedding.md) runs as the guide says: a custom source from
one's own FastAPI endpoint and through the mounted server, under trio, and the hypothesis
strategies against the endpoint, every stream conformant (issue 36)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "embed_fastapi.py"


def test_the_embedding_example_runs_its_self_test() -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("trio")
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--self-test"],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "mounted server" in done.stdout and "under trio" in done.stdout
    assert "hypothesis: 15 completions" in done.stdout
