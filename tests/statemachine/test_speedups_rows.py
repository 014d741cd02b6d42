"""The stores' scans of a logged batch, compiled (`_speedups_rows.c`): `rows_numbered` and
`last_of_kinds` give their Python references' answers for any rows, plain or not, and leak
nothing."""

from __future__ import annotations

import gc
import sys
from collections import UserList
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfold.adapters.server._store import LIFECYCLE_EVENT_TYPES, EventRecord, last_lifecycle
from streamfold.statemachine import _accel

try:
    from streamfold.statemachine import _speedups
except ImportError:  # built without a C compiler: the pure-Python path is the whole package
    _speedups = None  # type: ignore[assignment]

pytestmark = pytest.mark.skipif(_speedups is None, reason="the C extension was not built")
PROPERTY = settings(max_examples=150, deadline=None)

KINDS = frozenset({"response.created", "response.completed"})
_types = st.sampled_from([*KINDS, "response.output_text.delta", "x"])
# Sequence numbers as a store meets them: mostly the expected run, with gaps, repeats, values
# past 64 bits, and numbers that are equal without being exact ints (True, 1.0).
_odd_number = st.one_of(
    st.integers(-3, 3), st.integers(2**63 - 2, 2**65), st.just(True), st.just(1.0)
)


def _numbers(first: int, size: int, changes: dict[int, Any]) -> list[Any]:
    return [changes.get(i, first + i) for i in range(size)]


@st.composite
def _rows(draw: st.DrawFn, first: int) -> list[Any]:
    size = draw(st.integers(0, 12))
    changes = draw(st.dictionaries(st.integers(0, max(size - 1, 0)), _odd_number, max_size=2))
    numbers = _numbers(first, size, changes)
    rows: list[Any] = [
        EventRecord(n, draw(_types), "{}") if draw(st.booleans()) else (n, draw(_types), "{}")
        for n in numbers
    ]
    return rows


_first = st.one_of(st.integers(-5, 5), st.integers(2**63 - 20, 2**64), st.just(True))


def _answer(function: Any, *args: Any) -> Any:
    try:
        return function(*args)
    except Exception as exc:  # the same error type, where the reference raises
        return type(exc)


@PROPERTY
@given(st.data(), _first)
def test_rows_numbered_answers_as_its_reference(data: st.DataObject, first: Any) -> None:
    rows = data.draw(_rows(first if isinstance(first, int) else 1))
    for batch in (rows, tuple(rows)):
        expected = _answer(_accel._python_rows_numbered, batch, first)
        assert _answer(_accel.rows_numbered, batch, first) == expected, (batch, first)


def test_rows_numbered_sees_a_gap_a_repeat_and_a_wrong_start() -> None:
    rows = [EventRecord(n, "x", "{}") for n in (4, 5, 6)]
    assert _accel.rows_numbered(rows, 4)
    assert not _accel.rows_numbered(rows, 3)
    assert not _accel.rows_numbered([rows[0], rows[2]], 4)
    assert not _accel.rows_numbered([rows[0], rows[0]], 4)
    assert not _accel.rows_numbered([EventRecord(2**64 + 4, "x", "{}")], 4)
    assert _accel.rows_numbered([], 7)


def _no_reference(*args: Any) -> Any:
    raise AssertionError(f"the reference was asked: {args}")


@pytest.mark.parametrize("first", [0, 1, 7, 2**40, -3])
def test_plain_rows_are_scanned_in_c_without_their_reference(first: int) -> None:
    rows = [EventRecord(first + i, "x", "{}") for i in range(5)]
    rows.append(EventRecord(first + 5, "response.completed", "{}"))
    for batch in (rows, tuple(rows), [tuple(r) for r in rows]):
        assert _speedups.rows_numbered(_no_reference, batch, first) is True
        assert _speedups.rows_numbered(_no_reference, batch, first + 1) is False
        assert _speedups.last_of_kinds(_no_reference, batch, KINDS) == 5
        assert _speedups.last_of_kinds(_no_reference, batch[:-1], KINDS) == -1


@PROPERTY
@given(st.data())
def test_last_of_kinds_answers_as_its_reference(data: st.DataObject) -> None:
    rows = data.draw(_rows(0))
    kinds = data.draw(st.sampled_from([KINDS, set(KINDS), frozenset(), LIFECYCLE_EVENT_TYPES]))
    for batch in (rows, tuple(rows)):
        expected = _answer(_accel._python_last_of_kinds, batch, kinds)
        assert _answer(_accel.last_of_kinds, batch, kinds) == expected, (batch, kinds)


def test_last_lifecycle_is_the_batchs_last_lifecycle_record() -> None:
    rows = [
        EventRecord(0, "response.created", "a"),
        EventRecord(1, "response.output_text.delta", "b"),
        EventRecord(2, "response.completed", "c"),
        EventRecord(3, "response.output_text.delta", "d"),
    ]
    assert last_lifecycle(rows) == rows[2]
    assert last_lifecycle(rows[:2]) == rows[0]
    assert last_lifecycle(rows[1:2]) is None
    assert last_lifecycle([]) is None


@pytest.mark.parametrize(
    "rows",
    [
        [(0, b"response.created", "{}")],  # a type that is not a str
        [[0, "response.created", "{}"]],  # a row that is not a tuple
        [(0,)],  # a row too short for a type
        [(0, ["unhashable"], "{}")],
        UserList([(0, "response.created", "{}")]),  # a sequence that is not a list or tuple
    ],
    ids=["bytes type", "list row", "short row", "unhashable type", "other sequence"],
)
def test_rows_the_scans_do_not_read_themselves_get_their_references_answer(rows: Any) -> None:
    for scan, reference, arg in (
        (_accel.rows_numbered, _accel._python_rows_numbered, 0),
        (_accel.last_of_kinds, _accel._python_last_of_kinds, KINDS),
    ):
        assert _answer(scan, rows, arg) == _answer(reference, rows, arg)
        calls: list[Any] = []

        def answered(*args: Any, calls: list[Any] = calls) -> str:
            calls.append(args)
            return "answered"

        compiled = getattr(_speedups, scan.func.__name__)  # type: ignore[attr-defined]
        assert compiled(answered, rows, arg) == "answered"
        assert calls == [(rows, arg)]


def test_the_scans_leak_no_references() -> None:
    rows = [EventRecord(n, "response.output_text.delta", "{}") for n in range(50)]
    rows.append(EventRecord(50, "response.completed", "{}"))
    watched = [rows[0], rows[0].type, rows[-1].type, KINDS, _accel._python_rows_numbered]
    gc.collect()
    before = [sys.getrefcount(value) for value in watched]
    for _round in range(2000):
        assert _accel.rows_numbered(rows, 0)
        assert not _accel.rows_numbered(rows, 1)
        assert _accel.last_of_kinds(rows, KINDS) == 50
        assert _accel.last_of_kinds(rows[:-1], KINDS) == -1
        _accel.rows_numbered([(0, b"x", "{}")], 0)  # the reference's path
    gc.collect()
    assert [sys.getrefcount(value) for value in watched] == before
