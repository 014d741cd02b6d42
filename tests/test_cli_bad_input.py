"""`streamfold replay` and `streamfold check` on hostile input (issue 14, "The command line").

Invariants: whatever bytes a trace or a stream holds, the command ends with exit status 2 and
one line on stderr that names the input and what is wrong with it (never a traceback); input
of any length is read line by line, so memory stays bounded (endless input ran to 23 GB before).
Each child runs under a 1 GiB address-space limit, so the memory cases fail fast rather than
eating the shared machine when the reading is not bounded.
"""

from __future__ import annotations

import os
import pty
import resource
import subprocess
import sys
from pathlib import Path

import pytest

import streamfold.specs

TRACES = Path(streamfold.specs.__file__).parent / "traces"
HEADER = (
    '{"trace": 1, "grammar": "harmony", "encoding": "o200k_harmony", "response_id": "resp_x", '
    '"model": "m", "created_at": 1763800000'
)
LIMIT = 2**30


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def streamfold(
    *args: str, stdin: object = subprocess.DEVNULL, input: bytes | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "streamfold", *args],
        stdin=None if input is not None else stdin,  # type: ignore[arg-type]
        input=input,
        capture_output=True,
        preexec_fn=_limited,
        timeout=300,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode()
    )


def assert_one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    for needle in needles:
        assert needle in done.stderr, done.stderr


BAD_TRACES = {
    "nested_100k_deep": (HEADER + "}\n" + "[" * 100_000 + "\n").encode(),
    "nested_100k_deep_header": ("[" * 100_000 + "\n").encode(),
    "lone_surrogate_in_header": (
        b'{"trace": 1, "grammar": "harmony", "response_id": "resp_x", "model": "\\ud800", '
        b'"created_at": 1}\n{"finish_reason": "stop"}\n'
    ),
    "prompt_token_ids_not_a_list": (
        HEADER + ', "prompt_token_ids": 5}\n{"finish_reason": "stop"}\n'
    ).encode(),
    "invalid_utf8_line": HEADER.encode()
    + b'}\n{"token_ids": [1], "note": "\xff\xfe"}\n{"finish_reason": "stop"}\n',
    "finish_error_not_a_string": (
        HEADER + '}\n{"finish_reason": "error", "error": {"x": 1}}\n'
    ).encode(),
    "created_at_10e30": (
        b'{"trace": 1, "grammar": "harmony", "response_id": "resp_x", "model": "m", '
        b'"created_at": 1000000000000000000000000000000}\n{"finish_reason": "stop"}\n'
    ),
}
NEEDLES = {
    "nested_100k_deep": (":2:", "nested too deeply"),
    "nested_100k_deep_header": (":1:", "nested too deeply"),
    "lone_surrogate_in_header": (":1:", "lone surrogate"),
    "prompt_token_ids_not_a_list": (":1:", "prompt_token_ids"),
    "invalid_utf8_line": (":2:", "not UTF-8"),
    "finish_error_not_a_string": (":2:", '"error" must be a message string'),
    "created_at_10e30": (":1:", "created_at"),
}


@pytest.mark.parametrize("case", sorted(BAD_TRACES))
def test_replay_of_a_bad_trace_is_one_line_and_exit_2(case: str, tmp_path: Path) -> None:
    path = tmp_path / f"{case}.jsonl"
    path.write_bytes(BAD_TRACES[case])
    done = streamfold("replay", str(path), "--format", "sse")
    assert_one_line_error(done, "streamfold replay:", path.name, *NEEDLES[case])


def test_replay_of_dev_zero_stops_at_the_line_limit() -> None:
    """Was: read /dev/zero whole (23 GB, then killed)."""
    done = streamfold("replay", "/dev/zero")
    assert_one_line_error(done, "/dev/zero:1:", "longer than")


def test_check_of_endless_input_stops_at_the_line_limit() -> None:
    """Was: `check -` read all of stdin before looking at it."""
    with open("/dev/zero", "rb") as zero:
        done = streamfold("check", "-", stdin=zero)
    assert_one_line_error(done, "<stdin>", "longer than")


def test_check_reads_a_long_stream_without_keeping_it(tmp_path: Path) -> None:
    """1.25 GiB of input (one conformant stream, then blank lines of 1 MiB each) under a 1 GiB
    address-space limit: only a line-by-line reader gets through."""
    golden = (TRACES / "hello.golden.jsonl").read_bytes()
    blank = b" " * (2**20 - 1) + b"\n"
    with subprocess.Popen(
        [sys.executable, "-m", "streamfold", "check", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_limited,
    ) as proc:
        assert proc.stdin is not None
        try:
            proc.stdin.write(golden)
            for _ in range(1280):
                proc.stdin.write(blank)
            proc.stdin.close()
        except BrokenPipeError:
            pass
        assert proc.stdout is not None and proc.stderr is not None
        out, err = proc.stdout.read(), proc.stderr.read()
        proc.wait(timeout=600)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert b"conformant" in out


@pytest.mark.parametrize(
    ("stream", "needles"),
    [
        (("[" * 100_000 + "\n").encode(), ("nested too deeply",)),
        (b"data: " + b"[" * 100_000 + b"\n\n", ("SSE event #0", "nested too deeply")),
        (b'{"type": "response.created", "x": "\xff"}\n', ("line 1 is not UTF-8",)),
    ],
    ids=["jsonl_nested_100k", "sse_nested_100k", "invalid_utf8"],
)
def test_check_of_unreadable_json_is_one_line_and_exit_2(
    stream: bytes, needles: tuple[str, ...]
) -> None:
    assert_one_line_error(streamfold("check", "-", input=stream), "<stdin>", *needles)


def test_check_of_an_error_answer_says_the_server_answered_an_error() -> None:
    """Issue 19: the README's curl against a wrong model gave "1 events, 3 violations (R1, R3,
    R6)"; the body is the server's error JSON, not a stream."""
    body = (
        b'{"error": {"message": "no trace named gpt-oss-20b", "type": "invalid_request_error", '
        b'"param": "model", "code": "model_not_found"}}'
    )
    done = streamfold("check", "-", input=body)
    assert_one_line_error(
        done, "the server answered an error", "model_not_found", "no trace named gpt-oss-20b"
    )


def test_check_of_a_trace_file_says_to_replay_it() -> None:
    """Issue 19: `check` on a trace reported 26x R1 with no hint."""
    done = streamfold("check", str(TRACES / "hello.jsonl"))
    assert_one_line_error(done, "streamfold trace", "streamfold replay")


def test_an_event_without_a_type_is_labelled_as_such_not_as_the_end() -> None:
    """Issue 19: an event without `type` was labelled `#0 (end of stream)`."""
    done = streamfold("check", "-", input=b'{"sequence_number": 0}\n')
    assert done.returncode == 1
    assert "#0 seq=0 (event without a type)" in done.stdout
    assert "#1 (end of stream)" in done.stdout


def test_check_waiting_on_a_terminal_says_so() -> None:
    """Issue 19: `check` with no file waited on stdin without a word."""
    main, child = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamfold", "check"],
            stdin=child,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        os.close(child)
        os.write(main, b"\x04")  # Ctrl-D: the end of the (empty) stream
        _, err = proc.communicate(timeout=120)
    finally:
        os.close(main)
    assert "reading a stream from stdin" in err.decode(), err
    assert proc.returncode == 2
