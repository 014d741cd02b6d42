"""Bug (issue 13, item 3): `include: ["message.output_text.logprobs"]` and `top_logprobs` were
ignored over HTTP, so no client could get logprobs although every engine computes them.

Now the request's choice reaches the engine (`SamplingParams.logprobs`/`top_logprobs`), replay
sends a trace's logprobs only when asked (as a live engine does), and every logprob entry
carries a `top_logprobs` array.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from streamfold.adapters.registry import ReplayEngine
from streamfold.adapters.server import create_app
from streamfold.engines import TokenChunk, dump_trace

from .helpers import ScriptedEngine, assert_conformant, encode
from .serving import serve

ANSWER = "<|channel|>final<|message|>Paris is sunny today.<|return|>"
INCLUDE = ["message.output_text.logprobs"]


@pytest.fixture(scope="module")
def client(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[openai.OpenAI, ScriptedEngine]]:
    directory: Path = tmp_path_factory.mktemp("logprob_traces")
    ids = encode(ANSWER)
    chunks = [TokenChunk(token_ids=(t,), logprobs=(-0.25,)) for t in ids]
    header = {
        "grammar": "harmony",
        "encoding": "o200k_harmony",
        "response_id": "resp_t",
        "model": "answer",
        "created_at": 1,
    }
    (directory / "answer.jsonl").write_text(dump_trace(header, chunks, "stop"))
    engine = ScriptedEngine(ReplayEngine(directory))
    with serve(create_app(engine.engine())) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0), engine


def _text_logprobs(response: openai.types.responses.Response) -> list[object]:
    return [
        lp
        for item in response.output
        if item.type == "message"
        for part in item.content
        if part.type == "output_text"
        for lp in part.logprobs or ()
    ]


def test_logprobs_only_when_included(client: tuple[openai.OpenAI, ScriptedEngine]) -> None:
    sdk, engine = client
    plain = sdk.responses.create(model="answer", input="weather?")
    assert plain.output_text == "Paris is sunny today."
    assert _text_logprobs(plain) == []
    assert engine.requests[-1].sampling.logprobs is False

    asked = sdk.responses.create(model="answer", input="weather?", include=INCLUDE, top_logprobs=3)
    entries = _text_logprobs(asked)
    assert len(entries) == len(encode("Paris is sunny today."))
    assert all(lp.logprob == -0.25 for lp in entries)  # type: ignore[attr-defined]
    sampling = engine.requests[-1].sampling
    assert sampling.logprobs is True and sampling.top_logprobs == 3


def test_streamed_logprob_entries_carry_top_logprobs(
    client: tuple[openai.OpenAI, ScriptedEngine],
) -> None:
    sdk, _ = client
    events = list(sdk.responses.create(model="answer", input="w", include=INCLUDE, stream=True))
    assert_conformant(events)
    deltas = [e for e in events if e.type == "response.output_text.delta"]
    raw = [lp.to_dict() for e in deltas for lp in e.logprobs]
    assert raw and all(entry["top_logprobs"] == [] for entry in raw)


@pytest.mark.parametrize(
    ("field", "value", "param"),
    [
        ("include", ["message.output_text.logprob"], "include[0]"),
        ("top_logprobs", 21, "top_logprobs"),
        ("top_logprobs", -1, "top_logprobs"),
        ("include", "message.output_text.logprobs", "include"),
    ],
)
def test_bad_include_or_top_logprobs_is_a_400_naming_it(
    client: tuple[openai.OpenAI, ScriptedEngine], field: str, value: object, param: str
) -> None:
    sdk, _ = client
    with pytest.raises(openai.BadRequestError) as caught:
        sdk.responses.create(model="answer", input="w", extra_body={field: value})
    assert isinstance(caught.value.body, dict) and caught.value.body["param"] == param
