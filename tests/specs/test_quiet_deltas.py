"""The checker's fast path for deltas gives exactly the general path's verdicts (issue 16).

`Checker.event` takes a delta that breaks no rule in one step (`Items.quiet_delta`) and hands
everything else to the rules one by one. The invariant: on any stream, `check` returns the same
violations, messages and positions with the fast path as with the general path alone (the
fast path's table emptied). Streams: every bundled golden, and mutations of the goldens and of
the hand-built wire streams aimed at what the fast path reads (sequence numbers, ids, indexes,
types, logprobs, order, tool stages).
"""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamfold.specs import _checker, check, read_stream
from streamfold.specs._violation import Violation

from .wire_streams import good_stream, renumber, summary_and_code_stream

GOLDENS = sorted((Path(__file__).resolve().parents[2] / "specs" / "traces").glob("*.golden.jsonl"))
_STREAMS = {
    **{p.name: list(read_stream(p.read_bytes()).events) for p in GOLDENS},
    "good_stream": good_stream(),
    "summary_and_code_stream": summary_and_code_stream(),
}


def _general(events: list[Any]) -> list[Violation]:
    saved = dict(_checker._QUIET)
    _checker._QUIET.clear()
    try:
        return check(copy.deepcopy(events))
    finally:
        _checker._QUIET.update(saved)


def _check(events: list[Any], batched: bool) -> list[Violation]:
    """`check` (one event at a time), or `Checker.events` over batches of a few sizes: the
    batch loop carries the last quiet delta's target from event to event, and a new batch
    starts without it."""
    events = copy.deepcopy(events)
    if not batched:
        return check(events)
    checker = _checker.Checker()
    start = 0
    for size in itertools.cycle([1, 5, 2, 40]):
        if start >= len(events):
            break
        checker.events(events[start : start + size])
        start += size
    return checker.finish()


def _both(events: list[Any]) -> tuple[list[Violation], list[Violation]]:
    """The fast paths' verdicts (one event at a time and batched, which must agree) and the
    general path's."""
    fast = _check(events, batched=False)
    assert _check(events, batched=True) == fast
    return fast, _general(events)


@pytest.mark.parametrize("name", sorted(_STREAMS))
@pytest.mark.parametrize("batched", [False, True], ids=["event", "events"])
def test_bundled_streams_get_the_same_verdicts(
    name: str, batched: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = _STREAMS[name]
    general = _general(events)
    judged: list[int] = []  # the positions the general path saw
    real = _checker.Checker._general

    def counted(self: _checker.Checker, position: int, raw: object) -> None:
        judged.append(position)
        real(self, position, raw)

    monkeypatch.setattr(_checker.Checker, "_general", counted)
    assert _check(events, batched) == general
    deltas = {i for i, ev in enumerate(events) if _is_delta(ev) and not ev.get("logprobs")}
    # a conformant stream's deltas all take the fast path, and nothing else does
    assert set(judged) == set(range(len(events))) - deltas


_VALUES = st.one_of(
    st.sampled_from([None, True, False, 0, 1, 2, -1, 3.0, "", "x", [], {}, [1], ["a"], {"a": 1}]),
    st.integers(-2, 5),
    st.text(max_size=3),
)
_FIELDS = [
    "type",
    "sequence_number",
    "item_id",
    "output_index",
    "content_index",
    "summary_index",
    "delta",
    "logprobs",
]


def _is_delta(ev: dict[str, Any]) -> bool:
    return isinstance(ev.get("type"), str) and ev["type"] in _checker._QUIET


def _mutate(events: list[dict[str, Any]], data: st.DataObject) -> None:
    deltas = [i for i, ev in enumerate(events) if _is_delta(ev)]
    at = data.draw(
        st.sampled_from(deltas)
        if deltas and data.draw(st.booleans())
        else st.integers(0, len(events) - 1)
    )
    ev = events[at]
    how = data.draw(
        st.sampled_from(["set", "drop", "steal", "move", "late", "remove", "copy", "type", "lp"])
    )
    if how == "set":
        ev[data.draw(st.sampled_from(_FIELDS))] = data.draw(_VALUES)
    elif how == "drop" and ev:
        del ev[data.draw(st.sampled_from(sorted(ev)))]
    elif how == "steal":  # a field value of another event: a plausible wrong id or index
        other = events[data.draw(st.integers(0, len(events) - 1))]
        key = data.draw(st.sampled_from(_FIELDS))
        if key in other:
            ev[key] = copy.deepcopy(other[key])
    elif how == "move":
        events.insert(data.draw(st.integers(0, len(events) - 1)), events.pop(at))
    elif how == "late":  # after its text's, part's or item's done event, or after the end
        events.insert(data.draw(st.integers(at, len(events) - 1)), events.pop(at))
    elif how == "remove":
        events.pop(at)
    elif how == "copy":
        events.insert(data.draw(st.integers(0, len(events))), copy.deepcopy(ev))
    elif how == "type":
        ev["type"] = data.draw(st.sampled_from(sorted(_checker._QUIET)))
    else:
        ev["logprobs"] = [{"token": "a", "logprob": -0.5, "top_logprobs": []}]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_streams_get_the_same_verdicts(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(sorted(_STREAMS)))
    events = copy.deepcopy(_STREAMS[name])
    for _ in range(data.draw(st.integers(1, 4))):
        _mutate(events, data)
    if data.draw(st.booleans()):  # moved events in their new places: R3 does not hide them
        events = renumber([ev if isinstance(ev, dict) else {} for ev in events])
    fast, general = _both(events)
    assert fast == general


def test_a_mutation_can_make_the_fast_path_refuse() -> None:
    """The properties above can fail: a wrong item_id is R12 on both paths, not a quiet delta."""
    events = copy.deepcopy(_STREAMS["good_stream"])
    at = next(i for i, ev in enumerate(events) if ev["type"] == "response.output_text.delta")
    events[at]["item_id"] = "msg_other"
    fast, general = _both(events)
    assert fast == general and [v.rule for v in fast] == ["R12"]


def _after(events: list[dict[str, Any]], at: int, etype: str) -> list[dict[str, Any]] | None:
    """The delta at `at` moved to just after the next `etype` event of its item, if any."""
    item = events[at].get("output_index")
    later = [
        i
        for i in range(at + 1, len(events))
        if events[i].get("type") == etype and events[i].get("output_index") in (item, None)
    ]
    if not later:
        return None
    moved = copy.deepcopy(events)
    moved.insert(later[0], moved.pop(at))
    return renumber(moved)  # in its new place: not off sequence, so the fast path may take it


@pytest.mark.parametrize("name", sorted(_STREAMS))
def test_late_deltas_get_the_same_verdicts(name: str) -> None:
    """Deltas after their text, part, item or response ended, also with the text's `.done`
    missing, or after their tool ran (R15, R16, R11, R6, R27): moves the random mutations
    above rarely make."""
    events = _STREAMS[name]
    firsts = {}
    for i, ev in enumerate(events):
        if _is_delta(ev):
            firsts.setdefault((ev["type"], ev.get("output_index")), i)
    cases = 0
    for at in firsts.values():
        without_done = [
            ev for ev in events if ev.get("type") != events[at]["type"].replace(".delta", ".done")
        ]
        at_without = next(i for i, ev in enumerate(without_done) if ev is events[at])
        for stream, etype in [
            (events, events[at]["type"].replace(".delta", ".done")),
            (without_done, "response.content_part.done"),
            (without_done, "response.reasoning_summary_part.done"),
            (without_done, "response.code_interpreter_call.interpreting"),  # its tool ran (R27)
            (without_done, "response.mcp_call.completed"),
            (events, "response.output_item.done"),
            (events, "response.completed"),
            (events, "response.incomplete"),
            (events, "response.failed"),
        ]:
            moved = _after(stream, at if stream is events else at_without, etype)
            if moved is not None:
                cases += 1
                fast, general = _both(moved)
                assert fast == general and fast, etype
    assert cases or not firsts


# Values that equal a right one under `==` but are of another type (False == 0, 1.0 == 1), and
# plainly wrong ones.
_NEAR_MISSES: list[Any] = [None, False, True, 0.0, 1.0, 2.0, -1, 7, "", "0", "x", [], [{}], {}]


class _Str(str):
    """A string that is not exactly a `str`: the fast path takes only exact types."""


def _lookalikes(right: Any) -> list[Any]:
    """Values equal to `right` under `==` but of another type."""
    if type(right) is int:
        return [float(right), *([bool(right)] if right in (0, 1) else [])]
    return [_Str(right)] if type(right) is str else []


def _second_deltas(events: list[dict[str, Any]]) -> list[int]:
    """Deltas right after a delta of the same text: where `Checker.events` compares an event
    with the quiet delta before it instead of asking `Items.quiet_delta`."""
    return [
        i
        for i in range(1, len(events))
        if _is_delta(events[i])
        and _is_delta(events[i - 1])
        and all(
            events[i].get(k) == events[i - 1].get(k)
            for k in ("type", "output_index", "item_id", "content_index", "summary_index")
        )
    ]


@pytest.mark.parametrize("name", sorted(_STREAMS))
def test_a_delta_after_a_quiet_delta_is_judged_in_full(name: str) -> None:
    """Every field the batch loop compares, set to each near miss on a delta that follows a
    quiet delta into the same text: the same verdicts as the general path (a bool or float
    index equals the int under `==`, so the loop must check types, as `quiet_delta` does)."""
    events = _STREAMS[name]
    seconds = _second_deltas(events)
    if not seconds:
        pytest.skip("no two deltas in a row")
    cases = 0
    for at in (seconds[0], seconds[-1]):
        for key in _FIELDS:
            for value in [
                *_NEAR_MISSES,
                events[at - 1].get(key),
                *_lookalikes(events[at].get(key)),
            ]:
                if key not in events[at] and value is None:
                    continue
                mutated = copy.deepcopy(events)
                mutated[at][key] = value
                fast, general = _both(mutated)
                assert fast == general, (at, key, value)
                cases += 1
            mutated = copy.deepcopy(events)
            if key in mutated[at]:
                del mutated[at][key]
                fast, general = _both(mutated)
                assert fast == general, (at, key, "deleted")
    assert cases
