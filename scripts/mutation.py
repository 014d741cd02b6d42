"""Mutation testing of the modules that carry promises, with cosmic-ray (not run in CI).

    pip install -e ".[dev,mutation]"
    python scripts/mutation.py adapters/server/_logwriter.py statemachine/_loop.py
    python scripts/mutation.py --list                 # the modules and the tests each runs

For each module: copy the package into a scratch tree laid out as it installs
(`streamfold/statemachine/...`, not the repository's `package-dir` layout, which cosmic-ray
cannot map to import names), let cosmic-ray plant its mutants there one at a time and run the
module's tests against each, then print how many each kind of outcome had and every surviving
mutant as a diff. A survivor is a behaviour no test pins, or an equivalent mutant (the code
means the same): docs/quality.md lists the ones found equivalent, with why.

The scratch tree goes first on `PYTHONPATH`, ahead of an editable install (whose finder comes
after the path finder), and `STREAMFOLD_PURE_PYTHON=1` makes the reducer run its Python code:
the compiled hot path (`_speedups*.c`) is a copy of it that mutants of the `.py` would not
reach. Each module's tests are a few files, chosen to finish in seconds: a run is
mutants x that, on 2 cores tens of minutes for a module of 300 lines.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    from cosmic_ray.work_db import use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult
except ImportError:  # pragma: no cover - the script says what to install
    sys.exit('cosmic-ray is not installed: pip install -e ".[dev,mutation]"')

ROOT = Path(__file__).resolve().parents[1]
#: repository folder -> where it lives in the installed package (pyproject's `package-dir`)
LAYOUT = {
    "streamfold": "streamfold",
    "statemachine": "streamfold/statemachine",
    "engines": "streamfold/engines",
    "adapters": "streamfold/adapters",
    "specs": "streamfold/specs",
}
_STATEMACHINE = [
    "tests/statemachine/test_item_promises.py",
    "tests/statemachine/test_golden_traces.py",
]
#: module -> the tests run against each of its mutants (few and fast; see the docstring)
TESTS: dict[str, list[str]] = {
    "adapters/server/_logwriter.py": [
        "tests/server/test_logwriter.py",
        "tests/server/test_logwriter_openings.py",
    ],
    "adapters/server/_recovery.py": ["tests/server/test_recovery.py"],
    "adapters/server/_store.py": ["tests/server/test_store.py", "tests/server/test_logwriter.py"],
    "adapters/server/_sqlite.py": ["tests/server/test_store.py", "tests/server/test_logwriter.py"],
    "adapters/server/_sqlite_reads.py": [
        "tests/server/test_store.py",
        "tests/server/test_recovery.py",
    ],
    "adapters/driver.py": ["tests/server/test_driver.py"],
    "adapters/_stepping.py": ["tests/server/test_driver.py"],
    "statemachine/_loop.py": [
        "tests/statemachine/test_loop_promises.py",
        "tests/statemachine/test_agent_loop.py",
    ],
    "statemachine/_items.py": [*_STATEMACHINE, "tests/statemachine/test_thinktags_logprobs.py"],
    "statemachine/_kinds.py": [
        *_STATEMACHINE,
        "tests/statemachine/test_loop_promises.py",
        "tests/statemachine/test_agent_loop.py",
    ],
    "statemachine/_reducer.py": [*_STATEMACHINE, "tests/statemachine/test_harmony_properties.py"],
}
#: cosmic-ray's outcomes, as its `dump` writes them
KILLED, SURVIVED, INCOMPETENT = "killed", "survived", "incompetent"


def scratch_tree(into: Path) -> Path:
    """The package as it installs, with the tests and the pytest configuration beside it."""
    for folder, target in LAYOUT.items():
        shutil.copytree(
            ROOT / folder,
            into / target,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.c", "*.h", "build"),
        )
    shutil.copytree(ROOT / "tests", into / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", into / "pyproject.toml")
    return into


def installed_path(module: str) -> str:
    """`statemachine/_loop.py` -> `streamfold/statemachine/_loop.py`"""
    return next(
        module.replace(folder, target, 1)
        for folder, target in LAYOUT.items()
        if module.startswith(folder + "/")
    )


def pytest_command(tests: list[str], per_test: float) -> list[str]:
    """The tests against one mutant: first failure ends the run, and a mutant that makes a
    test hang (a writer never woken) fails at `per_test` seconds, not at the suite's limit."""
    return [
        *(sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"),
        *(f"--timeout={per_test:g}", *tests),
    ]


def config(module: str, tests: list[str], timeout: float, per_test: float) -> str:
    installed = installed_path(module)
    command = pytest_command(tests, per_test)
    return (
        "[cosmic-ray]\n"
        f"module-path = {json.dumps(installed)}\n"
        f"timeout = {timeout}\n"
        "excluded-modules = []\n"
        f"test-command = {json.dumps(' '.join(command))}\n"
        '[cosmic-ray.distributor]\nname = "local"\n'
    )


def annotation_spans(path: Path) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where the module's annotations are: each module has `from __future__ import
    annotations`, so an annotation is a string never evaluated, and a mutant of one (`X | None`
    to `X + None`) is equivalent by construction."""
    tree = ast.parse(path.read_text())
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
            found.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns:
            found.append(node.returns)
    return [
        ((n.lineno, n.col_offset), (n.end_lineno or n.lineno, n.end_col_offset or 0)) for n in found
    ]


def skip_annotations(session: Path, module: Path) -> int:
    """Mark the mutants inside annotations as skipped (see `annotation_spans`)."""
    assert "from __future__ import annotations" in module.read_text(), module
    spans = annotation_spans(module)
    skipped = 0
    with use_db(str(session)) as db:
        for item in db.work_items:
            (mutation,) = item.mutations
            start, end = tuple(mutation.start_pos), tuple(mutation.end_pos)
            if any(a <= start and end <= b for a, b in spans):
                db.set_result(
                    item.job_id,
                    WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output="annotation"),
                )
                skipped += 1
    return skipped


def run_module(
    module: str, tests: list[str], work: Path, timeout: float, per_test: float
) -> dict[str, int]:
    tree = scratch_tree(work / "tree")
    (tree / "cr.toml").write_text(config(module, tests, timeout, per_test))
    env = {**os.environ, "PYTHONPATH": str(tree), "STREAMFOLD_PURE_PYTHON": "1"}
    cosmic = [sys.executable, "-m", "cosmic_ray.cli"]

    def cr(*args: str) -> None:
        subprocess.run([*cosmic, *args], cwd=tree, env=env, check=True)

    cr("init", "cr.toml", "session.sqlite")
    annotations = skip_annotations(tree / "session.sqlite", tree / installed_path(module))
    baseline = subprocess.run(
        pytest_command(tests, per_test),
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    if baseline.returncode:
        sys.exit(f"{module}: the tests fail before any mutant:\n{baseline.stdout[-2000:]}")
    cr("exec", "cr.toml", "session.sqlite")
    counts = {KILLED: 0, SURVIVED: 0, INCOMPETENT: 0, "annotation": annotations}
    survivors = []
    dump = subprocess.run(
        [*cosmic, "dump", "session.sqlite"], cwd=tree, env=env, capture_output=True, text=True
    )
    for line in dump.stdout.splitlines():
        _, result = json.loads(line)
        if result is None or result["worker_outcome"] == "skipped":
            continue
        outcome = result["test_outcome"]
        counts[outcome] = counts.get(outcome, 0) + 1
        if outcome == SURVIVED:
            survivors.append(result.get("diff", ""))
    for diff in survivors:
        print(diff)
    shutil.copy(tree / "session.sqlite", work / f"{Path(module).stem}.sqlite")
    shutil.rmtree(tree)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="repository paths, e.g. statemachine/_loop.py")
    parser.add_argument("--tests", nargs="+", help="tests to run instead of the module's own")
    parser.add_argument(
        "--deselect", action="append", default=[], help="a test id to leave out (pytest's own)"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant's run")
    parser.add_argument("--per-test", type=float, default=30.0, help="seconds per test")
    parser.add_argument("--work", type=Path, help="keep each session's database here")
    parser.add_argument("--list", action="store_true", help="the modules and their tests")
    args = parser.parse_args()
    if args.list or not args.modules:
        for module, tests in TESTS.items():
            print(f"{module}: {' '.join(tests)}")
        return
    work = args.work or Path(tempfile.mkdtemp(prefix="streamfold-mutation-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for module in args.modules:
        tests = args.tests or TESTS.get(module)
        if not tests:
            sys.exit(f"{module}: no tests known for it; name them with --tests")
        tests = [*tests, *(f"--deselect={test}" for test in args.deselect)]
        counts = run_module(module, tests, work, args.timeout, args.per_test)
        total = counts[KILLED] + counts[SURVIVED]
        rate = 100.0 * counts[KILLED] / total if total else 0.0
        rows.append((module, counts, rate))
    heads = ("killed", "survived", "incompetent", "annotation", "kill rate")
    print(f"\n{'module':32} " + " ".join(f"{head:>11}" for head in heads))
    for module, counts, rate in rows:
        cells = [counts[KILLED], counts[SURVIVED], counts[INCOMPETENT], counts["annotation"]]
        print(f"{module:32} " + " ".join(f"{c:>11}" for c in cells) + f" {rate:>10.1f}%")
    print(f"\nsessions kept in {work} (cosmic-ray dump / cr-report read them)")


if __name__ == "__main__":
    main()
