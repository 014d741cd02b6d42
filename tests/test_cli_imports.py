"""What each subcommand imports before it works, and that building only its parser changes no
option (issue 16: `streamfold replay` spent a quarter of a second registering every other
subcommand, whose options import the checker, the engine registry and the server).

Invariants: `streamfold replay` imports neither the checker (`streamfold.specs`) nor the engine
registry nor the server; `streamfold check` imports no engine, adapter or server; every
subcommand's parser is the same (same help, same options) whether the command line names it or
not.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from streamfold import cli

TRACES = Path(__file__).resolve().parents[1] / "specs" / "traces"

_PROBE = """\
import sys
from streamfold.cli import main
status = main(sys.argv[1:])
print(" ".join(sorted(m for m in sys.modules if m.startswith("streamfold") or "." not in m)),
      file=sys.stderr)
raise SystemExit(status)
"""


def _modules_after(*argv: str) -> set[str]:
    """The streamfold modules, and every top-level module, imported by a command."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return set(done.stderr.split())


def _heavy(modules: set[str], *prefixes: str) -> list[str]:
    return sorted(m for m in modules if m.startswith(prefixes))


def test_replay_imports_no_checker_registry_or_server() -> None:
    modules = _modules_after("replay", str(TRACES / "weather_call.jsonl"))
    assert "streamfold.adapters.grammars" in modules  # the probe saw a real replay
    assert not _heavy(
        modules,
        "streamfold.specs",
        "streamfold._check",
        "streamfold._serve",
        "streamfold._record",
        "streamfold.adapters.registry",
        "streamfold.adapters.server",
        "streamfold.adapters.agent",
    )


def test_replay_and_check_import_no_asyncio() -> None:
    """asyncio (and the ssl it imports) cost each command ~15 ms of start-up, about 6% of a
    100k-token replay's whole-process CPU: `engines/sglang.py` imported it at the top for one
    line of cleanup, and `replay` imports the engines."""
    replayed = _modules_after("replay", str(TRACES / "weather_call.jsonl"))
    checked = _modules_after("check", str(TRACES / "weather_call.golden.jsonl"))
    assert "streamfold.adapters.grammars" in replayed  # the probe saw a real replay
    assert not {"asyncio", "ssl"} & (replayed | checked)


def test_replay_imports_no_engine_module_it_does_not_run() -> None:
    """A replay runs the trace source, not vLLM's, SGLang's or the native engine's: their
    modules (re-exported by `streamfold.adapters` and `streamfold.engines`, so loaded by any
    import of an adapters module, the driver's included) were ~4% of a replay's start-up."""
    modules = _modules_after("replay", str(TRACES / "weather_call.jsonl"))
    assert "streamfold.adapters.driver" in modules  # the probe saw a real replay
    assert not _heavy(
        modules,
        "streamfold.engines.vllm",
        "streamfold.engines.sglang",
        "streamfold.engines.native.gptoss.config",
    )


def test_replay_with_a_built_vocabulary_cache_imports_no_first_run_module() -> None:
    """Unpacking the bundled o200k file and building the vocabulary cache need base64, gzip
    and tempfile (which imports random); a start that finds the cache needs none of them, and
    importing them was 2.6 ms of every replay's start (issue 28: replay's whole-process CPU was
    1.04x that of 64b68ea)."""
    trace = str(TRACES / "weather_call.jsonl")
    _modules_after("replay", trace)  # the cache is built here if it was not
    modules = _modules_after("replay", trace)
    assert "streamfold.engines.vocab" in modules  # the probe saw the vocabulary load
    assert not {"base64", "gzip", "tempfile", "random"} & modules


def test_replay_of_a_plain_trace_imports_no_cattrs() -> None:
    """The generated writers write every event of a replay; the wire converter (cattrs) reads
    loop steps and writes only what the writers do not cover, and importing it and building
    its hooks at `_wire`'s import was about 7 ms of every replay's start (issue 28)."""
    modules = _modules_after("replay", str(TRACES / "weather_call.jsonl"), "--format", "sse")
    assert "streamfold.statemachine._wire" in modules  # the probe saw the events written
    assert "cattrs" not in modules


def test_check_imports_no_engine_adapter_or_server(tmp_path: Path) -> None:
    modules = _modules_after("check", str(TRACES / "weather_call.golden.jsonl"))
    assert "streamfold.specs._checker" in modules
    assert not _heavy(
        modules,
        "streamfold.engines",
        "streamfold.adapters",
        "streamfold._serve",
        "streamfold._record",
    )


def test_check_imports_no_logging_when_stderr_is_not_a_terminal() -> None:
    """The command line set up its progress logger (on a terminal only) from a `logging`
    imported at the top of `cli.py`: 2.6 ms of every `streamfold check`, which logs nothing
    (issue 28: check's whole-process CPU against 64b68ea's)."""
    modules = _modules_after("check", str(TRACES / "weather_call.golden.jsonl"))
    assert "streamfold.specs._checker" in modules  # the probe saw a real check
    assert "logging" not in modules


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", list(cli._SUBCOMMANDS))
def test_a_named_subcommand_gets_its_whole_parser(name: str) -> None:
    full = cli._parser(())
    alone = cli._parser([name, "x"])
    assert _subparser(alone, name).format_help() == _subparser(full, name).format_help()
    assert full.format_usage() == alone.format_usage()


def test_options_before_the_subcommand_still_find_it() -> None:
    assert cli._chosen(["--version"]) is None
    assert cli._chosen(["replay", "--format", "sse", "t.jsonl"]) == "replay"
    assert cli._chosen(["nonsense", "replay"]) is None  # argparse then says what is wrong
