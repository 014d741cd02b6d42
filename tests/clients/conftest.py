"""The compatibility suite: real clients against `streamfold serve`, over 127.0.0.1.

One `streamfold serve` subprocess (the command users run, on the replay engine) serves the whole
suite from a trace directory written here:

- `chat`: a reasoning item and an answer (its logprobs are sent only when asked for);
- `weather`: a conversation directory: turn 0 calls `get_weather`, turn 1 answers from its
  output (a client's default tool loop runs two steps and ends with the answer);
- `broken`: the engine fails after a few tokens (a `response.failed` with an `error`);
- `codex_shell`, `gpt-5.5`, `gpt-5.6-sol`: Codex's shell loop, its `apply_patch` custom tool
  and its code mode's `exec` (tests/clients/test_codex.py).

Where a client is not installed the tests say so: they skip with the install command, and fail
instead when `STREAMFOLD_EXPECT_CLIENTS=1` (CI sets it), so a CI run cannot pass without them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from streamfold.engines import TokenChunk, dump_trace
from tests.ports import free_port
from tests.server.helpers import encode

CHAT = (
    "<|channel|>analysis<|message|>The user says hello. Reply kindly.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello! How can I help you today?<|return|>"
)
CHAT_ANSWER = "Hello! How can I help you today?"
WEATHER_CALL = (
    "<|channel|>analysis<|message|>I should call get_weather for Paris.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city":"Paris"}<|call|>'
)
WEATHER_ANSWER = (
    "<|channel|>analysis<|message|>The tool says 22C and sunny.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>It is 22C and sunny in Paris.<|return|>"
)
WEATHER_FINAL = "It is 22C and sunny in Paris."
BROKEN = "<|channel|>final<|message|>I will fail half way through this"
BROKEN_ERROR = "the engine ran out of memory"


#: Codex's shell loop (`codex exec`, tests/clients/test_codex.py): turn 0 reasons and calls
#: its `exec_command` function; turn 1 must see that reasoning again (Codex keeps nothing on
#: the server: store false, the reasoning comes back sealed) and the command's output.
CODEX_THOUGHT = "I should run the command the user asked for and report its output."
CODEX_CALL = (
    f"<|channel|>analysis<|message|>{CODEX_THOUGHT}<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.exec_command <|constrain|>json"
    '<|message|>{"cmd":"echo streamfold-$((6*7))"}<|call|>'
)
CODEX_ANSWER = "<|channel|>final<|message|>The command printed streamfold-42.<|return|>"
CODEX_FINAL = "The command printed streamfold-42."

#: Codex's `tool_search` and `apply_patch` (a client-run search and a `custom` tool with a Lark
#: grammar, which Codex sends for the models of its own catalog: the conversation is named
#: `gpt-5.5`): turn 0 searches, turn 1 writes a patch as the tool's raw input, turn 2 answers
#: once Codex has applied it and sent its output back.
CODEX_PATCH_MODEL = "gpt-5.5"
CODEX_PATCH = (
    "*** Begin Patch\n*** Update File: notes.txt\n@@\n-status: draft\n+status: final\n"
    "*** End Patch\n"
)
CODEX_SEARCH_CALL = (
    "<|channel|>analysis<|message|>Look for a tool that edits files first.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.tool_search <|constrain|>json"
    '<|message|>{"query":"edit files","limit":3}<|call|>'
)
#: Codex has no deferred tools in this configuration: its search loads none.
CODEX_SEARCHED = (
    '<|start|>functions.tool_search to=assistant<|channel|>commentary<|message|>{"loaded":[]}'
)
CODEX_PATCH_CALL = f"<|channel|>commentary to=functions.apply_patch<|message|>{CODEX_PATCH}<|call|>"
CODEX_PATCH_ANSWER = "<|channel|>final<|message|>notes.txt now says final.<|return|>"
CODEX_PATCH_FINAL = "notes.txt now says final."

#: Codex's code mode (`tool_mode: code_mode_only` in its catalog, e.g. `gpt-5.6-sol`): no
#: `tools`, every tool in an `additional_tools` input item, its own in a namespace named
#: `functions` whose `exec` custom tool takes JavaScript that calls the nested tools. Turn 0
#: runs the command through `exec`; turn 1 must see that call and the command's real output.
CODEX_CODE_MODEL = "gpt-5.6-sol"
CODEX_EXEC_JS = (
    'const r = await tools.exec_command({cmd: "echo streamfold-$((6*7))"});\ntext(r.output);\n'
)
CODEX_EXEC_CALL = (
    "<|channel|>analysis<|message|>Run the command through exec.<|end|>"
    f"<|start|>assistant<|channel|>commentary to=functions.exec<|message|>{CODEX_EXEC_JS}<|call|>"
)
CODEX_EXEC_ANSWER = "<|channel|>final<|message|>exec printed streamfold-42.<|return|>"
CODEX_EXEC_FINAL = "exec printed streamfold-42."


#: pydantic-ai's output modes: a `final_result` output tool call (ToolOutput), and the same
#: JSON as the answer (NativeOutput: `text.format`; PromptedOutput: instructions).
CITY_JSON = '{"city":"Paris","temperature_c":22}'
OUTPUT_TOOL = (
    "<|channel|>analysis<|message|>Answer through the output tool.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.final_result <|constrain|>json"
    f"<|message|>{CITY_JSON}<|call|>"
)
OUTPUT_TEXT = (
    "<|channel|>analysis<|message|>Answer with the JSON asked for.<|end|>"
    f"<|start|>assistant<|channel|>final<|message|>{CITY_JSON}<|return|>"
)


def _write(
    path: Path,
    text: str,
    finish: str = "stop",
    error: str | None = None,
    prompt_contains: tuple[str, ...] = (),
) -> None:
    ids = encode(text)
    # Every token carries a logprob, as an engine asked for them records; the server sends
    # them only to requests that include message.output_text.logprobs.
    chunks = [
        TokenChunk(token_ids=(t,), logprobs=(-0.5 - (i % 5) / 10,)) for i, t in enumerate(ids)
    ]
    header = {
        "grammar": "harmony",
        "encoding": "o200k_harmony",
        "response_id": "resp_client",
        "model": path.stem,
        "created_at": 1,
    }
    if prompt_contains:
        header["prompt_contains"] = list(prompt_contains)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_trace(header, chunks, finish, error), encoding="utf-8")  # type: ignore[arg-type]


def write_client_traces(root: Path) -> Path:
    _write(root / "chat.jsonl", CHAT)
    _write(root / "weather" / "0.jsonl", WEATHER_CALL)
    _write(root / "weather" / "1.jsonl", WEATHER_ANSWER)
    _write(root / "broken.jsonl", BROKEN, finish="error", error=BROKEN_ERROR)
    _write(root / "output_tool.jsonl", OUTPUT_TOOL)
    _write(root / "output_text.jsonl", OUTPUT_TEXT)
    _write(root / "codex_shell" / "0.jsonl", CODEX_CALL)
    _write(
        root / "codex_shell" / "1.jsonl",
        CODEX_ANSWER,
        prompt_contains=(f"<|channel|>analysis<|message|>{CODEX_THOUGHT}<|end|>", "streamfold-42"),
    )
    _write(root / CODEX_PATCH_MODEL / "0.jsonl", CODEX_SEARCH_CALL)
    _write(
        root / CODEX_PATCH_MODEL / "1.jsonl",
        CODEX_PATCH_CALL,
        prompt_contains=(CODEX_SEARCHED,),
    )
    _write(
        root / CODEX_PATCH_MODEL / "2.jsonl",
        CODEX_PATCH_ANSWER,
        prompt_contains=(
            f"to=functions.apply_patch<|channel|>commentary<|message|>{CODEX_PATCH}<|call|>",
            "Success. Updated the following files:\nM notes.txt",
        ),
    )
    _write(root / CODEX_CODE_MODEL / "0.jsonl", CODEX_EXEC_CALL)
    _write(
        root / CODEX_CODE_MODEL / "1.jsonl",
        CODEX_EXEC_ANSWER,
        prompt_contains=(
            f"to=functions.exec<|channel|>commentary<|message|>{CODEX_EXEC_JS}<|call|>",
            "streamfold-42\n",
        ),
    )
    return root


def expect_clients() -> bool:
    return os.environ.get("STREAMFOLD_EXPECT_CLIENTS") == "1"


def missing(what: str, how: str) -> None:
    """Skip loudly, or fail where the clients are expected (CI)."""
    message = f"{what} is not installed; {how}"
    if expect_clients():
        pytest.fail(f"STREAMFOLD_EXPECT_CLIENTS=1 but {message}", pytrace=False)
    pytest.skip(message)


@contextlib.contextmanager
def serving(
    traces: Path, log: Path, log_level: str = "warning", flags: tuple[str, ...] = ()
) -> Iterator[str]:
    """A `streamfold serve [FLAGS]` subprocess on `traces` (its stderr in `log`) until the
    block ends; yields its base URL (`http://127.0.0.1:PORT/v1`)."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "streamfold",
        "serve",
        "--traces",
        str(traces),
        "--port",
        str(port),
        "--store",
        ":memory:",
        "--log-level",
        log_level,
        *flags,
    ]
    with log.open("wb") as stderr:
        server = subprocess.Popen(command, stderr=stderr)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    httpx.get(f"http://127.0.0.1:{port}/v1/responses/resp_x", timeout=1)
                    break
                except httpx.TransportError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(
                            f"streamfold serve did not start: {log.read_text()}"
                        ) from None
                    time.sleep(0.1)
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            server.terminate()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


@pytest.fixture(scope="session")
def streamfold_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL (`http://127.0.0.1:PORT/v1`) of a `streamfold serve` subprocess."""
    traces = write_client_traces(tmp_path_factory.mktemp("client_traces"))
    log = tmp_path_factory.mktemp("serve_log") / "stderr.txt"
    with serving(traces, log) as url:
        yield url
