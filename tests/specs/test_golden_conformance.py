"""Every golden event stream shipped in specs/traces passes the checker."""

from __future__ import annotations

from pathlib import Path

import pytest

import streamfold.specs
from streamfold.specs import check_bytes, format_report

GOLDEN = sorted((Path(streamfold.specs.__file__).parent / "traces").glob("*.golden.jsonl"))


@pytest.mark.skipif(not GOLDEN, reason="no golden traces in this checkout")
@pytest.mark.parametrize("path", GOLDEN, ids=[p.name.removesuffix(".golden.jsonl") for p in GOLDEN])
def test_golden_stream_is_conformant(path: Path) -> None:
    reading, violations = check_bytes(path.read_bytes())
    assert violations == [], format_report(violations, event_count=len(reading.events))
    assert reading.framing == "jsonl" and len(reading.events) > 3
