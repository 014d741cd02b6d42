"""Every code block of README.md and of the docs site's pages (docs/*.md) runs as written
(issue 19: snippets drifted from the code; issue 33: the docs site's pages too).

Invariant: each fenced `python` block runs to exit 0 in a fresh interpreter, offline, from an
empty working directory; each `sh` block runs to exit 0 under `bash -euo pipefail` from the
repository root (its relative paths are the checkout's). Only these mechanical changes are made
to a block, each because the test shares a machine:

* the install steps of a chain (`python3 -m venv …`, `… pip install …`) are dropped: CI and the
  fresh-venv test (tests/test_fresh_install.py) run them, and `.venv/bin/` is this interpreter's
  directory (activating `.venv`, `source .venv/bin/activate`, is dropped the same way);
* `/tmp/` is a private temporary directory and port 8000 a free port;
* a block (sh or python) that talks to port 8000 without starting a server gets a replay server
  started by the test, and a foreground `streamfold serve` line is started, answered once, and
  stopped;
* a block whose install step names an extra this environment lacks (CI installs
  `dev,torch,server`) is skipped, saying which;
* a block right after a `<!-- not-run: REASON -->` line is skipped with that reason (a GPU
  command, say): the page says why it is not run.

A block that runs the test suite itself (`pytest`) is not run inside it: the test checks that
`.ci/run` runs that very block, read from the README (`<!-- ci:tests -->`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
NOT_RUN = re.compile(r"<!-- not-run: (.+?) -->\s*$")


def blocks(page: Path = README) -> list[tuple[str, str, int, str | None]]:
    """(language, code, line number, why it is not run or None) of every fenced block."""
    text = page.read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = NOT_RUN.search(before)
        line = text.count("\n", 0, m.start()) + 1
        found.append((m.group(1), m.group(2), line, skip.group(1) if skip else None))
    return found


def _needs_torch(code: str) -> bool:
    return "--engine native" in code or "init-model" in code


def _commands(code: str) -> list[str]:
    """The block's commands, one per line, continuation lines joined."""
    return [c for c in code.replace("\\\n", " ").splitlines() if c.strip()]


def _without_installs(command: str) -> str:
    kept = [
        part
        for part in command.split(" && ")
        if not re.match(r"(python3 -m venv|\S*pip install|(source|\.) \.venv/bin/activate)\b",
                        part.strip())
    ]  # fmt: skip
    return " && ".join(kept)


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server exited with {proc.returncode} before answering")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"no server on port {port} after {timeout} s")


def _env(tmp: Path) -> dict[str, str]:
    from streamfold.vocab import encodings_dir

    env = dict(os.environ)
    env.update(
        HOME=str(tmp / "home"),  # a newcomer's empty home: the default store lands there
        XDG_CACHE_HOME=str(tmp / "cache"),
        TIKTOKEN_ENCODINGS_BASE=str(encodings_dir()),  # skip re-unpacking the vocabulary
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        HF_HUB_OFFLINE="1",
    )
    env.pop("STREAMFOLD_CACHE_DIR", None)
    (tmp / "home").mkdir(exist_ok=True)
    return env


def _shell(code: str, tmp: Path, port: int) -> str:
    """The sh block as the test runs it (see the module docstring)."""
    lines = []
    for command in _commands(code):
        command = _without_installs(command)
        if not command:
            continue
        if command.startswith("streamfold serve") and not command.rstrip().endswith("&"):
            # A server in the foreground: start it on the free port, see it listen, stop it.
            command = re.sub(r"\s+#.*$", "", command)
            if "--port" not in command:
                command += " --port 8000"
            command = (
                f"{command} & server=$!; "
                f"until (exec 3<>/dev/tcp/127.0.0.1/8000) 2>/dev/null; do "
                f'kill -0 "$server"; sleep 0.2; done; kill "$server"; wait "$server" || true'
            )
        lines.append(command)
    script = "\n".join(lines)
    # /tmp/ first: the checkout itself may live under /tmp (CI), and its venv path must stay.
    script = script.replace("/tmp/", f"{tmp}/").replace(".venv/bin/", f"{BIN}/")
    return script.replace("8000", str(port))


RUN = {"python", "sh", "bash"}
PARAMS = [
    pytest.param(
        lang,
        code,
        skip,
        id=f"{page.relative_to(ROOT)}:{line}:{lang or 'text'}",
    )
    for page in PAGES
    for lang, code, line, skip in blocks(page)
    if lang in RUN
]


def test_the_readme_has_code_blocks_to_run() -> None:
    assert {lang for lang, _, _, _ in blocks() if lang in RUN} >= {"python", "sh"}


def test_every_block_after_the_two_commands_says_which_environment() -> None:
    """Issue 33: blocks ran bare `streamfold`/`python` (`command not found`, `No module named
    'openai'`) with nothing saying to activate `.venv`. Each run block either uses `.venv/bin/`
    or activates `.venv` (sh) or says to run it with `.venv/bin/python` (python)."""
    silent = []
    for page in PAGES:
        for lang, code, line, skip in blocks(page):
            if lang in RUN and not skip and ".venv/" not in code:
                silent.append(f"{page.relative_to(ROOT)}:{line}")
    assert not silent, f"blocks that do not say to use .venv: {silent}"


def test_ci_runs_the_readmes_own_commands() -> None:
    """`.ci/run` reads the README's two commands from the README itself (issue 33)."""
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    text = README.read_text(encoding="utf-8")
    for name in ("main-job", "tests"):
        assert f"readme_block {name}" in ci, name
        assert re.search(rf"<!-- ci:{name} -->\s*```sh\n", text), name


def _missing_extras(code: str) -> list[str]:
    """Extras a block's (dropped) install step names whose packages are not importable here."""
    import importlib.metadata
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    missing = []
    for extra in sorted(_extras(code)):
        for requirement in project["optional-dependencies"].get(extra, []):
            # By distribution, not import name: openai-agents imports as `agents`.
            name = re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]
            try:
                importlib.metadata.distribution(name)
            except importlib.metadata.PackageNotFoundError:
                missing.append(extra)
                break
    return missing


def _extras(text: str) -> set[str]:
    return {e for group in re.findall(r"-e '\.\[([^\]]*)\]'", text) for e in group.split(",")}


@pytest.mark.slow
@pytest.mark.parametrize(("lang", "code", "skip"), PARAMS)
def test_readme_block_runs_as_written(
    lang: str, code: str, skip: str | None, tmp_path: Path
) -> None:
    if skip:
        pytest.skip(skip)
    if _needs_torch(code):
        pytest.importorskip("torch", reason="the native engine blocks need the torch extra")
    env = _env(tmp_path)
    if lang == "python":
        work = tmp_path / "work"
        work.mkdir()
        port = free_port()
        with _replay_server(code, port, env):
            run = subprocess.run(
                [sys.executable, "-"],
                input=code.replace("8000", str(port)),
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
        assert run.returncode == 0, run.stderr[-3000:]
        assert run.stdout.strip(), "a README snippet should show the reader something"
        return
    if re.search(r"\bpytest\b", code):
        # The README's own is run by .ci/run (test_ci_runs_the_readmes_own_commands); a page's
        # `pytest tests/...` would run part of this suite inside it.
        if code.strip() not in README.read_text(encoding="utf-8"):
            pytest.skip("runs the test suite, which is not run inside itself")
        return
    missing = _missing_extras(code)
    if missing:
        pytest.skip(f"the block installs extras this environment lacks: {missing}")
    port = free_port()
    with _replay_server(code, port, env):
        _run_shell(code, tmp_path, port, env)


@contextlib.contextmanager
def _replay_server(code: str, port: int, env: dict[str, str]) -> Iterator[None]:
    """A replay server on `port` while the block runs, when it talks to port 8000 without
    starting a server of its own."""
    if "8000" not in code or "streamfold serve" in code:
        yield
        return
    server = subprocess.Popen(
        [str(BIN / "streamfold"), "serve", "--port", str(port), "--store", ":memory:"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for_port(port, server)
        yield
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def _run_shell(code: str, tmp_path: Path, port: int, env: dict[str, str]) -> None:
    # Output to files, not pipes: a server the block leaves in the background would hold a
    # pipe open after the shell exits.
    out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
    with out_path.open("w") as out_file, err_path.open("w") as err_file:
        shell = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", _shell(code, tmp_path, port)],
            cwd=ROOT,
            env=env,
            stdout=out_file,
            stderr=err_file,
            start_new_session=True,
        )
        try:
            shell.wait(timeout=600)
        finally:
            try:  # and whatever the block left in the background
                os.killpg(shell.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            shell.wait(timeout=30)
    out, err = out_path.read_text(), err_path.read_text()
    assert shell.returncode == 0, f"{out[-2000:]}\n{err[-3000:]}"
