"""An engine that cannot enforce a constraint does not pretend (issue 30): replay serves what
was recorded, and the server says so once in its log, not once per request."""

from __future__ import annotations

import logging

import pytest
from openai import OpenAI

from streamfold.adapters.registry import ReplayEngine, bundled_traces_dir
from streamfold.adapters.server import MemoryEventStore, create_app

from ..server.serving import serve

FORMAT = {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}}


def test_replay_serves_a_constrained_request_and_says_once_it_is_not_enforced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine = ReplayEngine(bundled_traces_dir()).engine()
    assert not engine.enforces_constraints
    with caplog.at_level(logging.WARNING, logger="streamfold.server"):
        with serve(create_app(engine, store=MemoryEventStore())) as url:
            client = OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
            for _ in range(2):
                answer = client.responses.create(model="hello", input="hi", text=FORMAT)  # type: ignore[arg-type]
                assert answer.status == "completed"
            plain = client.responses.create(model="hello", input="hi")
            assert plain.status == "completed"
    said = [r for r in caplog.records if "does not enforce" in r.getMessage()]
    assert len(said) == 1
