"""`streamfold record`: a trace from any engine, replayable; bad input is a clear error."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from streamfold.adapters.grammars import replay_events
from streamfold.cli import main
from streamfold.engines import read_trace
from streamfold.statemachine import dumps


def test_record_from_replay_reproduces_the_trace_events(tmp_path: Path) -> None:
    out = tmp_path / "again.jsonl"
    assert (
        main(
            [
                "record",
                "--engine",
                "replay",
                "--model",
                "weather_call",
                "--prompt-token-ids",
                "200006,1428,200008,12194,200007,200006,173781",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    recorded = read_trace(out)
    assert recorded.header["prompt_token_ids"][:2] == [200006, 1428]
    original = read_trace(Path(__file__).parent.parent / "specs/traces/weather_call.jsonl")
    assert recorded.token_ids == original.token_ids
    assert recorded.finish_reason == "stop"
    assert recorded.chunks == original.chunks
    # With the original's identity, the recording replays to the original's events exactly.
    same_identity = attrs.evolve(recorded, header=original.header)
    assert [dumps(e) for e in replay_events(same_identity)] == [
        dumps(e) for e in replay_events(original)
    ]


@pytest.mark.parametrize("ids", ["1,x,3", "1;2"])
def test_record_rejects_bad_prompt_token_ids(
    ids: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "record",
            "--engine",
            "replay",
            "--model",
            "hello",
            "--prompt-token-ids",
            ids,
            "-o",
            str(tmp_path / "t.jsonl"),
        ]
    )
    assert code == 2
    assert "--prompt-token-ids must be comma-separated integers" in capsys.readouterr().err


def test_record_refuses_chat_template_saying_it_is_for_serve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--chat-format` is an engine option `record` shares with `serve`; a recording is a
    harmony trace, so a think-tag model is refused rather than prompted as harmony."""
    code = main(
        [
            "record",
            "--engine",
            "replay",
            "--model",
            "hello",
            "--chat-format",
            "chat-template",
            "--prompt",
            "hi",
            "-o",
            str(tmp_path / "t.jsonl"),
        ]
    )
    assert code == 2
    assert "--chat-format chat-template is for `streamfold serve`" in capsys.readouterr().err
