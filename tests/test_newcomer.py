"""A newcomer's first hour (issue 19): each small thing that made one give up, pinned.

Invariants: the command line says its version and where the bundled traces are; `init-model`
either writes a whole checkpoint with ordinary file modes or leaves nothing and says why in one
line; a command that needs the torch extra and lacks it says what to install (with the CPU
index); the vocabulary cache lives where the README says and is readable by others; the
misuse message names the vocabulary's real last id.
"""

from __future__ import annotations

import importlib.util
import os
import stat
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

import streamfold.specs
from streamfold.cli import main

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def test_version_is_the_projects(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"streamfold {PYPROJECT['project']['version']}"


def test_replay_help_says_where_the_bundled_traces_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    traces = Path(streamfold.specs.__file__).parent / "traces"
    assert str(traces) in text.replace("- ", "-")
    assert (traces / "weather_call.jsonl").is_file()


def test_the_torch_extra_brings_numpy() -> None:
    """init-model died with `No module named 'numpy'` inside safetensors after
    `pip install -e '.[torch]'`: the extra lacked numpy."""
    extra = PYPROJECT["project"]["optional-dependencies"]["torch"]
    assert any(req.startswith("numpy") for req in extra)


def _modes(directory: Path) -> dict[str, int]:
    return {p.name: stat.S_IMODE(p.stat().st_mode) for p in directory.iterdir()}


def test_init_model_writes_a_whole_checkpoint_with_ordinary_modes(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    target = tmp_path / "tiny"
    old = os.umask(0o022)
    try:
        assert main(["init-model", str(target), "--layers", "1"]) == 0
    finally:
        os.umask(old)
    assert _modes(target) == {
        "config.json": 0o644,
        "generation_config.json": 0o644,
        "model.safetensors": 0o644,  # was 0600
    }
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]  # no staging left behind


def test_init_model_that_fails_leaves_nothing_and_says_why_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: a numpy traceback with config.json left alone in the directory, then 'no
    .safetensors files' from record and a FileExistsError traceback from a second init-model."""
    pytest.importorskip("torch")
    import safetensors.torch

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", broken)
    target = tmp_path / "tiny"
    assert main(["init-model", str(target), "--layers", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("streamfold init-model: ") and "No space left" in err
    assert len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []  # no config.json alone, no staging directory


def test_init_model_over_a_checkpoint_needs_force_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("torch")
    target = tmp_path / "tiny"
    assert main(["init-model", str(target), "--layers", "1"]) == 0
    assert main(["init-model", str(target), "--layers", "1"]) == 2
    err = capsys.readouterr().err
    assert "pass --force" in err and "Traceback" not in err
    assert "overwrite=True" not in err  # issue 33: the API's argument is not a flag
    assert main(["init-model", str(target), "--layers", "1", "--force", "--seed", "1"]) == 0
    (target / "notes.txt").write_text("mine")
    assert main(["init-model", str(target), "--force"]) == 2
    assert "choose an empty directory" in capsys.readouterr().err
    assert (target / "notes.txt").read_text() == "mine"


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name in ("torch", "numpy") else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.usefixtures("no_torch")
@pytest.mark.parametrize(
    "argv",
    [
        ["init-model", "{tmp}/m"],
        ["record", "--engine", "native", "--model", "{tmp}/m", "--prompt", "hi", "-o", "{tmp}/t"],
    ],
    ids=["init-model", "record-native"],
)
def test_without_torch_the_command_says_what_to_install(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    err = capsys.readouterr().err
    assert "torch, numpy not installed" in err
    assert "pip install 'streamfold[torch]'" in err and CPU_INDEX in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.usefixtures("no_torch")
def test_serve_native_without_torch_says_what_to_install(tmp_path: Path) -> None:
    import argparse

    from streamfold.adapters.registry import EngineSetupError, native_engine

    with pytest.raises(EngineSetupError, match="whl/cpu"):
        native_engine(argparse.Namespace(model=str(tmp_path)))


def test_the_vocabulary_cache_is_where_the_readme_says_and_readable(tmp_path: Path) -> None:
    """STREAMFOLD_CACHE_DIR was used as the encodings directory itself, and the unpacked
    vocabulary and its cache were created 0600."""
    env = {k: v for k, v in os.environ.items() if k != "TIKTOKEN_ENCODINGS_BASE"}
    env["STREAMFOLD_CACHE_DIR"] = str(tmp_path)
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import os; os.umask(0o022); from streamfold.engines.vocab import "
            "load_harmony_vocabulary as load; load()",
        ],
        env=env,
        check=True,
        timeout=300,
    )
    encodings = tmp_path / "encodings"
    modes = _modes(encodings)
    assert modes.pop("o200k_base.tiktoken") == 0o644
    assert modes and set(modes.values()) == {0o644}, modes  # the decoded-table cache


def test_the_misuse_message_names_the_last_id() -> None:
    """It said `0..201088`; gpt-oss's last id is 201087 (vocab_size 201088)."""
    from streamfold.engines.vocab import load_harmony_vocabulary
    from streamfold.statemachine import ReducerUsageError

    vocabulary = load_harmony_vocabulary()
    assert len(vocabulary) == 201088
    with pytest.raises(ReducerUsageError, match=r"\(0\.\.201087\)"):
        vocabulary.bytes_of(201088)
