"""The Codex CLI against a think-tag model (Qwen3's chat template), served by `streamfold serve`
on replayed think-tag conversations (issues 31/36).

Codex sends its tools in shapes a chat template has no word for: a code-mode model's every tool
in an `additional_tools` item's `functions` namespace (`exec`, a `custom` tool taking
JavaScript), and for the other models of its catalog `apply_patch` as a `custom` tool and a
client-run `tool_search`. Before, a chat template model was shown none of them (only top-level
function tools reached its prompt), so a Qwen3 model under Codex could not call its tools, and a
call it wrote came back as a `function_call` Codex answers `unsupported call`. Here each is shown
as a function (`exec`, `apply_patch` with one string `input`, `tool_search`), the replayed model
calls it Hermes-style, and Codex runs it: the command's real output, the patched file. Each
later turn's trace asserts its prompt holds the call under the name it was made by and the
tool's real output (`prompt_contains`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.adapters.chat_template_model import QWEN3_TEMPLATE, build_model_dir
from tests.server.test_replay_thinktags import write_conversation

from .conftest import CODEX_CODE_MODEL, CODEX_EXEC_JS, CODEX_PATCH, CODEX_PATCH_MODEL, serving
from .test_codex import _items, patch_notes, run_codex

transformers = pytest.importorskip("transformers")

EXEC_FINAL = "exec printed streamfold-42."
PATCH_FINAL = "notes.txt now says final."


def _call(thought: str, name: str, arguments: Any) -> str:
    body = json.dumps({"name": name, "arguments": arguments})
    return f"<think>\n{thought}\n</think>\n\n<tool_call>\n{body}\n</tool_call><|im_end|>"


def _answer(thought: str, text: str) -> str:
    return f"<think>\n{thought}\n</think>\n\n{text}<|im_end|>"


def _conversation(model_dir: Path, turns: list[tuple[str, tuple[str, ...]]]) -> None:
    """Each turn: what the model writes, and what its prompt must hold (`prompt_contains`)."""
    write_conversation(model_dir, [text for text, _ in turns], contains=[c for _, c in turns])


def _shown(name: str) -> str:
    """How the template lists a function the model is shown (`tool | tojson`)."""
    return f'{{"type": "function", "function": {{"name": "{name}"'


@pytest.fixture(scope="module")
def thinktags_url(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("thinktag_traces")
    code = build_model_dir(root / CODEX_CODE_MODEL, template=QWEN3_TEMPLATE)
    _conversation(
        code,
        [
            (
                _call("Run the command through exec.", "exec", {"input": CODEX_EXEC_JS}),
                (_shown("exec"), _shown("wait")),
            ),
            (
                _answer("It printed streamfold-42.", EXEC_FINAL),
                ('<tool_call>\n{"name": "exec", "arguments": {"input": ', "streamfold-42\n"),
            ),
        ],
    )
    patch = build_model_dir(root / CODEX_PATCH_MODEL, template=QWEN3_TEMPLATE)
    _conversation(
        patch,
        [
            (
                _call("Find a tool that edits files.", "tool_search", {"query": "edit files"}),
                (_shown("apply_patch"), _shown("tool_search")),
            ),
            (
                _call("Patch it.", "apply_patch", {"input": CODEX_PATCH}),
                ('{"name": "tool_search", "arguments": {"query": "edit files"}}', '{"loaded": []}'),
            ),
            (
                _answer("Done.", PATCH_FINAL),
                (
                    '<tool_call>\n{"name": "apply_patch", "arguments": {"input": ',
                    "Success. Updated the following files:\nM notes.txt",
                ),
            ),
        ],
    )
    log = tmp_path_factory.mktemp("serve_log") / "stderr.txt"
    with serving(root, log) as url:
        yield url


@pytest.mark.slow
def test_codex_code_mode_runs_exec_on_a_think_tag_model(thinktags_url: str, tmp_path: Path) -> None:
    """`exec` (a `custom` tool in the `functions` namespace of an `additional_tools` item) is
    shown to the model as a function, its call comes back a `custom_tool_call` in namespace
    `functions` whose input is the script, and Codex runs it."""
    events = run_codex(thinktags_url, CODEX_CODE_MODEL, "run echo streamfold-$((6*7))", tmp_path)
    assert [m["text"] for m in _items(events, "agent_message")] == [EXEC_FINAL]
    [command] = _items(events, "command_execution")
    assert (command["aggregated_output"], command["exit_code"]) == ("streamfold-42\n", 0)


@pytest.mark.slow
def test_codex_searches_and_patches_through_a_think_tag_model(
    thinktags_url: str, tmp_path: Path
) -> None:
    """`tool_search` comes back a `tool_search_call`, `apply_patch` (a `custom` tool with a
    Lark grammar) a `custom_tool_call` whose input is the raw patch, which Codex applies."""
    events = patch_notes(thinktags_url, tmp_path)
    assert [m["text"] for m in _items(events, "agent_message")] == [PATCH_FINAL]
