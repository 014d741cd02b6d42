"""`streamfold.statemachine` loads each of its names' modules on first use (issue 16).

Invariants: importing the package imports none of its modules; a name loads its own module and
what that module needs (the errors and the SSE parser, which `streamfold check` uses, load no
event classes); the names the package offers at run time are exactly the ones its
`TYPE_CHECKING` block shows type checkers; an unknown name is an AttributeError (so `hasattr`
works), and an AttributeError raised while a module loads is not disguised as an absent name.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import streamfold.statemachine as sm

_INIT = Path(sm.__file__)


def _loaded_after(code: str) -> set[str]:
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in sys.modules if 'statemachine.' in m))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    return {m.rpartition(".")[2] for m in done.stdout.split()}


def test_importing_the_package_imports_none_of_its_modules() -> None:
    assert _loaded_after("import streamfold.statemachine") == set()


def test_the_errors_and_the_sse_parser_load_no_event_classes() -> None:
    loaded = _loaded_after("from streamfold.statemachine import StreamfoldError, SSEParser")
    assert {"_errors", "_sse"} <= loaded
    assert not loaded & {"_events", "_model", "_accel", "_reducer", "_wire"}


def test_a_reducer_name_loads_the_compiled_path() -> None:
    assert {"_accel", "_reducer", "_events"} <= _loaded_after(
        "from streamfold.statemachine import step"
    )


def _type_checking_all() -> set[str]:
    tree = ast.parse(_INIT.read_text(encoding="utf-8"))
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
    )
    assign = next(
        n
        for n in block.body
        if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "__all__"
    )
    assert isinstance(assign.value, ast.List)
    return {e.value for e in assign.value.elts if isinstance(e, ast.Constant)}


def test_run_time_names_are_the_ones_type_checkers_see() -> None:
    from streamfold.statemachine import _controls, _events, _model

    named = _type_checking_all()
    assert named == set(sm._LAZY)
    stars = [*_controls.__all__, *_events.__all__, *_model.__all__]
    assert sorted(sm.__all__) == sorted([*named, *stars])
    for name in sm.__all__:
        assert getattr(sm, name) is not None


def test_unknown_names_are_attribute_errors() -> None:
    assert not hasattr(sm, "no_such_name")
    assert not hasattr(sm, "_no_such_module")
    assert not hasattr(sm, "__wrapped__")
    assert hasattr(sm, "_wire") and sm._wire.dumps is sm.dumps
    with pytest.raises(ImportError, match="cannot import name 'no_such_name'"):
        exec("from streamfold.statemachine import no_such_name", {})


def test_an_attribute_error_while_loading_is_not_an_absent_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A module that fails while loading (here: a stale compiled extension lacking a function,
    as happened while this was written) must say so, not look like a missing name."""

    def broken(name: str, package: str | None = None) -> object:
        raise AttributeError("module '_speedups' has no attribute 'configure_json_line'")

    monkeypatch.setattr(sm, "import_module", broken)
    monkeypatch.delitem(sm.__dict__, "json_line", raising=False)
    with pytest.raises(ImportError, match="configure_json_line"):
        sm.__getattr__("json_line")
