"""The Codex CLI (`@openai/codex`, from `tests/clients/node/package-lock.json`) against
`streamfold serve` on the replay engine, with Codex's DEFAULT configuration: a custom provider
with `wire_api = "responses"` and `base_url` at the server, nothing else (issue 31).

Codex sends what its defaults send: `namespace` tools (`multi_agent_v1`), `web_search`,
`store: false` with `include: ["reasoning.encrypted_content"]`, `reasoning.summary`,
`prompt_cache_key`, `client_metadata`. Its first request used to be a 400.

Codex's home (its config and sessions) is a fresh directory under `node_modules`: Codex refuses
to set up its sandbox helpers under the system's temporary directory, and its default
(read-only) sandbox then cannot run a command at all. Its temporary directory is the test's
own (`TMPDIR`), so a checkout that itself lies under /tmp (a CI clone) is not "temporary".
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from .conftest import (
    CHAT_ANSWER,
    CODEX_CODE_MODEL,
    CODEX_EXEC_FINAL,
    CODEX_FINAL,
    CODEX_PATCH_FINAL,
    CODEX_PATCH_MODEL,
    missing,
    serving,
    write_client_traces,
)

NODE_MODULES = Path(__file__).parent / "node" / "node_modules"
CODEX = NODE_MODULES / ".bin" / "codex"


def run_codex(
    url: str, model: str, prompt: str, workdir: Path, *flags: str, websockets: bool = False
) -> list[dict[str, Any]]:
    """`codex exec --json [FLAGS] PROMPT` in `workdir`; its JSONL events. `websockets`: the
    provider opts in to WebSocket mode (`supports_websockets = true`)."""
    if not CODEX.exists():
        missing("the Codex CLI", f"run `npm ci` in {NODE_MODULES.parent}")
    home = NODE_MODULES / ".streamfold-codex-homes" / uuid.uuid4().hex
    home.mkdir(parents=True)
    (home / "config.toml").write_text(
        f'model = "{model}"\n'
        'model_provider = "streamfold"\n\n'
        "[model_providers.streamfold]\n"
        'name = "streamfold"\n'
        f'base_url = "{url}"\n'
        'wire_api = "responses"\n' + ("supports_websockets = true\n" if websockets else ""),
        encoding="utf-8",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "CODEX_"))}
    scratch = workdir / "codex-tmp"
    scratch.mkdir(exist_ok=True)
    env["TMPDIR"] = str(scratch)
    done = subprocess.run(
        [str(CODEX), "exec", "--json", "--skip-git-repo-check", *flags, prompt],
        cwd=workdir,
        env={**env, "HOME": str(home), "CODEX_HOME": str(home)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    failed = [e for e in events if e.get("type") in ("error", "turn.failed")]
    assert done.returncode == 0 and not failed, f"codex exec failed: {failed}\n{done.stderr}"
    return events


def _items(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [
        e["item"] for e in events if e["type"] == "item.completed" and e["item"]["type"] == kind
    ]


def test_codex_default_configuration_gets_a_plain_answer(
    streamfold_url: str, tmp_path: Path
) -> None:
    """Codex's first request was a 400: `unsupported tool type 'namespace'`."""
    events = run_codex(streamfold_url, "chat", "say hello", tmp_path)
    assert [m["text"] for m in _items(events, "agent_message")] == [CHAT_ANSWER]
    assert _items(events, "reasoning")[0]["text"] == "The user says hello. Reply kindly."


@pytest.mark.slow
def test_codex_shell_loop_carries_its_sealed_reasoning(streamfold_url: str, tmp_path: Path) -> None:
    """A shell-tool loop, stateless: Codex stores nothing on the server (`store: false`) and
    sends the first generation's reasoning back as `encrypted_content`. The second turn's trace
    asserts its prompt holds that reasoning as harmony's analysis message and the command's
    real output (`prompt_contains`); the replay fails the response otherwise."""
    events = run_codex(streamfold_url, "codex_shell", "run echo streamfold-$((6*7))", tmp_path)
    assert [m["text"] for m in _items(events, "agent_message")] == [CODEX_FINAL]


@pytest.mark.slow
def test_codex_searches_its_tools_then_applies_a_patch(streamfold_url: str, tmp_path: Path) -> None:
    """With a model of Codex's own catalog (`gpt-5.5`) Codex offers `apply_patch` as a
    `custom` tool with a Lark grammar, and a client-run `tool_search` (and `web_search`).
    Turn 0 searches: the call comes back as a `tool_search_call` item, Codex runs its search
    and sends a `tool_search_output` (it loads no tool here), which turn 1's prompt must show.
    Turn 1 patches: the call is a `custom_tool_call` whose `input` is the raw patch; Codex
    applies it to the file in its working directory (`--sandbox workspace-write`: its default
    sandbox is read-only) and turn 2, whose prompt must hold the patch's real output, answers."""
    events = patch_notes(streamfold_url, tmp_path)
    assert [m["text"] for m in _items(events, "agent_message")] == [CODEX_PATCH_FINAL]


def patch_notes(url: str, workdir: Path) -> list[dict[str, Any]]:
    """Codex asked to mark `notes.txt` final (in `workdir`, its sandbox `workspace-write`: the
    default is read-only), with a model of its catalog that gets `apply_patch`: the file is
    patched and its change completed. Codex's events."""
    notes = workdir / "notes.txt"
    notes.write_text("title: streamfold\nstatus: draft\n", encoding="utf-8")
    events = run_codex(
        url, CODEX_PATCH_MODEL, "mark notes.txt final", workdir, "--sandbox", "workspace-write"
    )
    assert notes.read_text(encoding="utf-8") == "title: streamfold\nstatus: final\n"
    [change] = _items(events, "file_change")
    assert change["status"] == "completed", change
    return events


@pytest.mark.slow
def test_codex_code_mode_runs_a_command_through_exec(streamfold_url: str, tmp_path: Path) -> None:
    """The models of Codex's catalog with `tool_mode: code_mode_only` (`gpt-5.6-sol`) send no
    `tools`: an `additional_tools` input item holds them all, Codex's own in a namespace
    named `functions` (a `custom` tool `exec` taking JavaScript, with a Lark grammar, and
    `wait`), the sub-agent ones in `collaboration`. The first request was a 400 (`functions`
    refused as a built-in namespace). Turn 0 calls `functions.exec` with a script that runs
    `exec_command`; Codex runs it (the command execution below) and sends the call and its
    output back, which turn 1's prompt must hold (`prompt_contains`)."""
    events = run_codex(streamfold_url, CODEX_CODE_MODEL, "run echo streamfold-$((6*7))", tmp_path)
    assert [m["text"] for m in _items(events, "agent_message")] == [CODEX_EXEC_FINAL]
    [command] = _items(events, "command_execution")
    assert (command["aggregated_output"], command["exit_code"]) == ("streamfold-42\n", 0)


@pytest.mark.parametrize(("model", "prompt", "answer"), [
    ("chat", "say hello", CHAT_ANSWER),
    ("codex_shell", "run echo streamfold-$((6*7))", CODEX_FINAL),
    # Code mode over the socket (the catalog's code-mode models prefer WebSockets).
    (CODEX_CODE_MODEL, "run echo streamfold-$((6*7))", CODEX_EXEC_FINAL),
])  # fmt: skip
def test_codex_with_websockets_connects_without_falling_back(
    tmp_path: Path, model: str, prompt: str, answer: str
) -> None:
    """Issue 32: a provider with `supports_websockets = true` opens `/v1/responses` upgraded
    (Codex's `websocket_url_for_path("responses")`: the base URL, ws://, plus `/responses`).
    The upgrade was a 403, and Codex retried it 7 times (6.5 s) before it fell back to HTTP.
    The server's own log shows the socket accepted and no POST at all: every generation (the
    shell loop's two, the command's output and the sealed reasoning between) came over it."""
    log = tmp_path / "serve.txt"
    traces = write_client_traces(tmp_path / "traces")
    with serving(traces, log, log_level="info") as url:
        events = run_codex(url, model, prompt, tmp_path, websockets=True)
    assert [m["text"] for m in _items(events, "agent_message")] == [answer]
    served = log.read_text(encoding="utf-8")
    assert '"WebSocket /v1/responses" [accepted]' in served, served
    assert "POST /v1/responses" not in served and " 403" not in served, served
