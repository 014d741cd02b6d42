"""A newcomer's first hour, part 2 (issue 33): the smaller things, each pinned.

Invariants: `check` on a missing file says so in words (no raw `[Errno 2] ...: 'x'`);
`init-model --help` gives every option a help text and its default; `serve` logs the URL it
serves on (uvicorn, handed a bound socket, names none); a bundled trace or golden stream is
found by name from any directory, and a file that exists wins over a bundled name.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamfold.cli import main
from tests.ports import free_port

BIN = Path(sys.executable).parent


def test_check_of_a_missing_file_says_so_in_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", str(tmp_path / "nope.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err == f"streamfold check: {tmp_path / 'nope.jsonl'}: cannot read a stream: " \
        "No such file or directory\n"  # fmt: skip


def test_init_model_help_shows_every_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["init-model", "--help"])
    out = " ".join(capsys.readouterr().out.split("options:", 1)[1].split())
    for option, default in (
        ("--hidden-size N", "32"),
        ("--layers N", "2"),
        ("--experts N", "4"),
        ("--seed SEED", "0"),
        ("--dtype {bfloat16,float32}", "bfloat16"),
    ):
        assert option in out and f"(default {default}" in out.split(option, 1)[1][:80], option
    assert "--force overwrite" in out and "--mxfp4 store" in out


def test_bundled_names_resolve_from_anywhere_and_files_win(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["check", "weather_call"]) == 0  # the bundled golden stream
    assert "conformant: 36 events" in capsys.readouterr().out
    assert main(["replay", "weather_call"]) == 0
    assert capsys.readouterr().out.count("\n") == 36
    (tmp_path / "weather_call").write_text("not a stream\n")
    assert main(["check", "weather_call"]) == 2  # the local file, not the bundled one
    assert "weather_call" in capsys.readouterr().err


def test_serve_says_where_it_listens(tmp_path: Path) -> None:
    pytest.importorskip("uvicorn")
    port = free_port()
    env = dict(os.environ, HOME=str(tmp_path), XDG_CACHE_HOME=str(tmp_path / "cache"))
    server = subprocess.Popen(
        [str(BIN / "streamfold"), "serve", "--port", str(port), "--store", ":memory:"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        assert server.stderr is not None
        deadline, seen = time.monotonic() + 120, []
        while time.monotonic() < deadline:
            line = server.stderr.readline()
            seen.append(line)
            if not line or "startup complete" in line:
                break
        wanted = f"streamfold serves http://127.0.0.1:{port}/v1/responses"
        assert any(wanted in line for line in seen), seen
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_the_offline_agent_example_prints_no_log_lines(tmp_path: Path) -> None:
    """examples/agent_offline.py printed 34 lines of the MCP SDK's INFO logging to stderr."""
    pytest.importorskip("mcp")
    pytest.importorskip("openai")
    example = Path(__file__).resolve().parents[1] / "examples" / "agent_offline.py"
    env = dict(os.environ, HOME=str(tmp_path), XDG_CACHE_HOME=str(tmp_path / "cache"))
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "2 + 3 = 5" in done.stdout
    assert done.stderr == "", done.stderr[-2000:]


def test_the_torch_install_a_command_suggests_is_the_readmes() -> None:
    """`init-model` without torch said `pip install torch --index-url .../whl/cpu`, which fails
    where only the package registries are; it now says what the README's test command runs."""
    from streamfold.engines._extras import TORCH_CPU_INSTALL

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert TORCH_CPU_INSTALL.removeprefix("pip install ") in readme
