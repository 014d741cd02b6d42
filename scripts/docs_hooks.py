"""MkDocs hooks of the docs site (`mkdocs.yml`: `hooks:`), run by `mkdocs build` itself.

* The API reference (mkdocstrings, griffe) reads the source statically, and the source is laid
  out by pyproject.toml's `package-dir` (`statemachine/` is `streamfold.statemachine`), which
  griffe cannot follow. So `build/docs-src/streamfold` is made as the installed package looks:
  links to `streamfold/*` and one link per mapped subpackage.
* The benchmark plots (`docs/img/*.svg`) are drawn from `docs/benchmarks.json` by
  `scripts/plot_benchmarks.py` before the pages are read, so a plot never disagrees with its
  data.
"""

from __future__ import annotations

import runpy
import shutil
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "build" / "docs-src"


def _package_tree() -> None:
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
        "setuptools"
    ]["package-dir"]
    shutil.rmtree(SOURCE, ignore_errors=True)
    package = SOURCE / "streamfold"
    package.mkdir(parents=True)
    for entry in (ROOT / mapping["streamfold"]).iterdir():
        (package / entry.name).symlink_to(entry)
    for name, folder in mapping.items():
        if name != "streamfold":
            (package / name.removeprefix("streamfold.")).symlink_to(ROOT / folder)


# At import, when mkdocs reads `hooks:`: mkdocstrings takes its `paths` in its own `on_config`,
# before a hook's `on_config` would run.
_package_tree()


def on_pre_build(config: Any, **kwargs: Any) -> None:
    plot = ROOT / "scripts" / "plot_benchmarks.py"
    if plot.exists():
        runpy.run_path(str(plot))["main"]([])
