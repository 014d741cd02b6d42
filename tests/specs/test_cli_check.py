"""`streamfold check`: exit 0 conformant, 1 violations, 2 unreadable; SSE and JSON lines."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from streamfold._check import add_check_parser, main, run_check
from streamfold.specs import UnreadableStreamError, read_stream
from streamfold.statemachine._sse import sse_frame
from tests.specs.wire_streams import good_stream, index_of, renumber


def as_sse(events: list[dict[str, Any]]) -> bytes:
    return b"".join(sse_frame(ev["type"], json.dumps(ev)) for ev in events)


def as_jsonl(events: list[Any]) -> bytes:
    return "".join(json.dumps(ev) + "\n" for ev in events).encode()


def run(tmp_path: Path, data: bytes, *args: str) -> int:
    path = tmp_path / "stream.txt"
    path.write_bytes(data)
    return main([str(path), *args])


@pytest.mark.parametrize("encode", [as_sse, as_jsonl], ids=["sse", "jsonl"])
def test_conformant_stream_exits_0(
    tmp_path: Path, encode: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(tmp_path, encode(good_stream())) == 0
    out = capsys.readouterr().out
    assert "25 events" in out and "conformant" in out and "NOT" not in out


@pytest.mark.parametrize("encode", [as_sse, as_jsonl], ids=["sse", "jsonl"])
def test_violating_stream_exits_1(
    tmp_path: Path, encode: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(tmp_path, encode(good_stream()[:-1])) == 1
    assert "R6" in capsys.readouterr().out


def test_json_array_is_read_too(tmp_path: Path) -> None:
    assert run(tmp_path, json.dumps(good_stream(), indent=2).encode()) == 0


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"", "empty"),
        (b'{"type": "response.created"}\n{not json\n', "line 2 is not JSON"),
        (b"event: response.created\ndata: {oops\n\n", "not JSON"),
        (b"data: {}\n", "no complete SSE event"),
        (b"\xff\xfe{}\n", "not UTF-8"),
    ],
    ids=["empty", "bad-json-line", "bad-sse-data", "no-sse-event", "not-utf8"],
)
def test_unreadable_input_exits_2(
    tmp_path: Path, data: bytes, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(tmp_path, data) == 2
    assert why in capsys.readouterr().err


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "nope.sse")]) == 2
    assert "nope.sse" in capsys.readouterr().err


def test_json_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    events = good_stream()
    events = renumber(
        [ev for i, ev in enumerate(events) if i != index_of(events, "response.output_text.delta")]
    )
    assert run(tmp_path, as_sse(events), "--format", "json") == 1
    report = json.loads(capsys.readouterr().out)
    assert report["framing"] == "sse" and not report["conformant"]
    assert [v["rule"] for v in report["violations"]] == ["R17"]


def test_sse_done_sentinel_and_mismatched_event_name() -> None:
    events = good_stream()
    body = as_sse(events) + b"data: [DONE]\n\n"
    body = body.replace(b"event: response.in_progress", b"event: response.queued", 1)
    from streamfold.specs import check_bytes

    reading, found = check_bytes(body)
    assert len(reading.events) == len(events)
    assert [(v.rule, v.position) for v in found] == [("R24", 1), ("R25", len(events))]


def test_truncated_sse_is_noted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = as_sse(good_stream())[:-1]  # the last blank line is missing
    assert run(tmp_path, body) == 1
    out = capsys.readouterr().out
    assert "ends inside an SSE event" in out and "R6" in out


def test_streamfold_console_entry_point(tmp_path: Path) -> None:
    from streamfold.cli import main as streamfold_main

    path = tmp_path / "stream.sse"
    path.write_bytes(as_sse(good_stream()))
    assert streamfold_main(["check", str(path)]) == 0
    path.write_bytes(as_sse(good_stream()[:-1]))
    assert streamfold_main(["check", str(path)]) == 1


def test_read_stream_rejects_non_stream() -> None:
    with pytest.raises(UnreadableStreamError, match="line 1 is not JSON"):
        read_stream(b"hello world\n")


def test_subcommand_wiring_and_stdin() -> None:
    parser = argparse.ArgumentParser(prog="streamfold")
    add_check_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["check"])
    assert args.run is run_check and args.file == "-"
    done = subprocess.run(
        [sys.executable, "-m", "streamfold._check", "-"],
        input=as_jsonl(good_stream()),
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    broken = subprocess.run(
        [sys.executable, "-m", "streamfold._check"],
        input=as_jsonl([1, 2]),
        capture_output=True,
        check=False,
    )
    assert broken.returncode == 1 and b"R1" in broken.stdout


@pytest.mark.parametrize("fails", [False, True], ids=["checked", "unreadable"])
def test_the_cycle_collector_is_off_during_the_check_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: bool
) -> None:
    """`streamfold check` turns Python's cyclic collector off while it reads (issue 16: it
    rescanned the batch in flight, about a tenth of the CPU time), and turns it back on after,
    also when the input is unreadable, for a caller that runs `main` in its own process."""
    import gc

    from streamfold import _check

    seen: list[bool] = []
    real = _check.check_file

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(_check, "check_file", spy)
    assert gc.isenabled()
    assert run(tmp_path, b"{oops\n" if fails else as_sse(good_stream())) == (2 if fails else 0)
    assert seen == [False] and gc.isenabled()
