"""The generated class writers (`statemachine/_writers.py`) against the generic wire path.

Invariant: for every value, `dumps(value)` is byte for byte the generic path's text,
`json.dumps(to_wire(value), separators=(",", ":"), ensure_ascii=False)`, or both raise the same
error; and for well-typed values the writer itself writes it (no silent fall back to the generic
path, which would make the first half hold trivially). Values are generated from the classes'
own type hints, with what `json` writes its own way on purpose: NaN, +/-Infinity, -0.0, 1e16,
ints beyond 64 bits, lone surrogates, non-ASCII text, non-str dict keys, None in every optional
field; then with wrong types in any field (a float where an int is declared, a bool, a str
subclass, a subclass of a model class, an object json cannot write), which the writers must hand
to the generic path. Every event of every golden trace is checked too.
"""

from __future__ import annotations

import enum
import json
import types
import typing
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamfold.specs.strategies import HarmonyCompletion, harmony_completions
from streamfold.statemachine import EVENT_TYPES, _model, _wire, dumps, finish, loads, start, step
from streamfold.statemachine._writers import Defer, Writers
from tests.harmony_helpers import GRAMMAR, new_response

TRACES = Path(__file__).resolve().parents[2] / "specs" / "traces"
GOLDEN_LINES = [
    pytest.param(line, id=f"{path.name.split('.')[0]}:{n}")
    for path in sorted(TRACES.glob("*.golden.jsonl"))
    for n, line in enumerate(path.read_text().splitlines())
]
EVENT_CLASSES = sorted(EVENT_TYPES.values(), key=lambda cls: cls.__name__)
MODEL_CLASSES = [
    getattr(_model, name)
    for name in _model.__all__
    if isinstance(getattr(_model, name), type) and attrs.has(getattr(_model, name))
]
PROPERTY = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))


def generic(value: Any) -> str:
    """Today's reference: unstructure with cattrs, then json.dumps (written out, not imported,
    so a change to `_wire.generic_dumps` cannot move the goalposts)."""
    return json.dumps(_wire.to_wire(value), separators=(",", ":"), ensure_ascii=False)


def outcome(fn: Any, value: Any) -> tuple[str, str]:
    try:
        return "text", fn(value)
    except Exception as exc:  # the error is the outcome compared
        return "raises", type(exc).__name__


# --- values from type hints --------------------------------------------------------------------

_SPECIAL_FLOATS = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e16, 1e-7, 5e-324, 1e308]
_BIG_INTS = [2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**30, -(10**40)]
TEXT = st.text(st.characters() | st.characters(categories=["Cs"]), max_size=6) | st.sampled_from(
    ["", "%s", "%d %%", '"\\\n\r\t\x00\x1f\x7f', "naïve 你好 🎉", "\ud800", "a\udfffb", "\u2028"]
)
INTS = st.integers() | st.sampled_from(_BIG_INTS)
FLOATS = st.floats() | st.sampled_from(_SPECIAL_FLOATS)
JSON_KEYS = TEXT | st.integers(-5, 5) | st.sampled_from([1.5, float("nan"), True, False, None])
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | INTS | FLOATS | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(JSON_KEYS, inner, max_size=3),
    max_leaves=8,
)


class Text(str):
    pass


class Number(int):
    pass


class Color(enum.IntEnum):
    RED = 1


class Ratio(float):
    pass


@attrs.frozen(kw_only=True)
class LongerUsage(_model.ResponseUsage):
    """A subclass of a model class: the generic path unstructures it by its own fields."""

    extra: int = 7


WRONG = st.one_of(
    st.none(),
    st.booleans(),
    INTS,
    FLOATS,
    TEXT,
    st.lists(st.integers(0, 3), max_size=2),
    st.tuples(TEXT),
    st.builds(Text, TEXT),
    st.builds(Number, st.integers()),
    st.just(Color.RED),
    st.builds(Ratio, st.floats()),
    st.dictionaries(TEXT, TEXT, max_size=2),
    st.builds(
        LongerUsage, input_tokens=st.just(1), output_tokens=st.just(2), total_tokens=st.just(3)
    ),
    st.just(object()),
)


def values(tp: Any, wrong: bool) -> st.SearchStrategy[Any]:
    """Values of the declared type `tp`; with `wrong`, any field may hold a wrong-typed value."""
    good = _good(tp, wrong)
    return good | WRONG if wrong else good


def _good(tp: Any, wrong: bool) -> st.SearchStrategy[Any]:
    scalar = {str: TEXT, int: INTS, float: FLOATS, bool: st.booleans()}
    if tp in scalar:
        return scalar[tp]
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return st.sampled_from(typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return st.one_of([_good(a, wrong) for a in typing.get_args(tp)])
    if tp is type(None):
        return st.none()
    if tp is typing.Any:  # a JSON value (a tool search call's `arguments`)
        return JSON_VALUES
    if origin is tuple:
        args = typing.get_args(tp)
        if args == ():
            return st.just(())
        return st.lists(values(args[0], wrong), max_size=3).map(tuple)
    if origin is dict:
        return st.dictionaries(JSON_KEYS, JSON_VALUES, max_size=3)
    if isinstance(tp, type) and attrs.has(tp):
        return instances(tp, wrong)
    raise AssertionError(f"no strategy for {tp!r}")


def instances(cls: type, wrong: bool = False) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls)
    fields = {
        a.name: st.deferred(lambda a=a: values(hints[a.name], wrong))
        for a in attrs.fields(cls)
        if a.init
    }
    return st.builds(cls, **fields)


# --- the properties -----------------------------------------------------------------------------

EVERY_CLASS = pytest.mark.parametrize(
    "cls", EVENT_CLASSES + MODEL_CLASSES, ids=lambda cls: cls.__name__
)


@EVERY_CLASS
@PROPERTY
@given(data=st.data())
def test_the_writer_writes_every_well_typed_value_as_the_generic_path(
    cls: type, data: st.DataObject
) -> None:
    value = data.draw(instances(cls))
    expected = outcome(generic, value)
    assert outcome(dumps, value) == expected
    write = _wire._WRITERS.text_of(cls)
    assert write is not None
    if expected[0] == "text":
        # No fall back: the writer itself wrote it (else this property would hold trivially).
        assert write(value) == expected[1]


@EVERY_CLASS
@PROPERTY
@given(data=st.data())
def test_a_wrong_typed_field_gets_the_generic_paths_text_or_error(
    cls: type, data: st.DataObject
) -> None:
    value = data.draw(instances(cls, wrong=True))
    assert outcome(dumps, value) == outcome(generic, value)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(completion=harmony_completions(), data=st.data())
def test_reducer_events_with_logprobs_are_written_as_the_generic_path(
    completion: HarmonyCompletion, data: st.DataObject
) -> None:
    logprob = st.none() | st.floats(max_value=0) | st.sampled_from([float("-inf"), -0.0, -1e16])
    state, events = start(GRAMMAR, new_response("resp_writers"))
    for token in completion.tokens:
        lp = data.draw(logprob)
        top = data.draw(
            st.none()
            | st.lists(
                st.tuples(st.integers(0, 200), logprob.filter(lambda x: x is not None)), max_size=2
            ).map(tuple)
        )
        state, new = step(state, token) if lp is None else step(state, token, lp, top)
        events.extend(new)
    events.extend(finish(state, "stop")[1])
    for event in events:
        assert dumps(event) == generic(event)


@pytest.mark.parametrize("line", GOLDEN_LINES)
def test_every_golden_event_is_written_by_its_writer_as_recorded(line: str) -> None:
    event = loads(line)
    write = _wire._WRITERS.text_of(type(event))
    assert write is not None
    assert dumps(event) == write(event) == generic(event) == line


# --- the cases json writes its own way, named ---------------------------------------------------


def _delta(logprob: float, top: float) -> Any:
    return EVENT_TYPES["response.output_text.delta"](
        sequence_number=1,
        item_id="msg_1",
        output_index=0,
        content_index=0,
        delta="x",
        logprobs=(
            _model.TextLogprob(
                token="x",
                logprob=logprob,
                top_logprobs=(_model.TextTopLogprob(token="x", logprob=top),),
            ),
        ),
    )


@pytest.mark.parametrize(
    ("logprob", "text"),
    [
        (float("-inf"), "-Infinity"),
        (float("inf"), "Infinity"),
        (float("nan"), "NaN"),
        (-0.0, "-0.0"),
        (1e16, "1e+16"),
        (-1e-7, "-1e-07"),
        (0.1, "0.1"),
        (5e-324, "5e-324"),
    ],
)
def test_floats_are_written_as_json_writes_them(logprob: float, text: str) -> None:
    event = _delta(logprob, logprob)
    written = _wire._WRITERS.text_of(type(event))(event)  # type: ignore[misc]
    assert written == generic(event)
    assert f'"logprob":{text},' in written and f'"logprob":{text}}}' in written


def _response(**changes: Any) -> Any:
    return _model.Response(
        **{"id": "resp_1", "created_at": 1, "model": "m", "status": "in_progress", **changes}
    )


@pytest.mark.parametrize(
    ("changes", "text"),
    [
        ({"created_at": 2**64 + 1}, '"created_at":18446744073709551617,'),
        ({"created_at": -(10**30)}, '"created_at":-1000000000000000000000000000000,'),
        ({"model": "\ud800x"}, '"model":"\ud800x",'),
        ({"model": "naïve 你好 🎉\n"}, '"model":"naïve 你好 🎉\\n",'),
        ({"metadata": {"k": "\udfff"}}, '"metadata":{"k":"\udfff"},'),
        ({"temperature": 1}, '"temperature":1,'),  # an int where a float is declared
        ({"temperature": float("nan")}, '"temperature":NaN,'),
        ({"max_output_tokens": 2**100}, f'"max_output_tokens":{2**100},'),
        ({}, '"usage":null,"instructions":null,"metadata":null,"temperature":null,'),
    ],
)
def test_ints_text_and_nulls_are_written_as_json_writes_them(
    changes: dict[str, Any], text: str
) -> None:
    event = EVENT_TYPES["response.created"](sequence_number=0, response=_response(**changes))
    written = _wire._WRITERS.text_of(type(event))(event)  # type: ignore[misc]
    assert written == generic(event) == dumps(event)
    assert text in written


def test_non_str_dict_keys_are_written_as_json_writes_them() -> None:
    tool = _model.FunctionTool(name="f", parameters={1: 2, 1.5: 3, None: 4, float("nan"): 5})
    event = EVENT_TYPES["response.created"](sequence_number=0, response=_response(tools=(tool,)))
    written = _wire._WRITERS.text_of(type(event))(event)  # type: ignore[misc]
    assert written == generic(event)
    assert '"parameters":{"1":2,"1.5":3,"null":4,"NaN":5}' in written


@pytest.mark.parametrize(
    "changes",
    [
        {"created_at": True},  # a bool is an int to Python, `true` to json
        {"created_at": 1.5},  # %d would write 1
        {"created_at": Color.RED},  # an IntEnum: json writes int.__repr__, 1
        {"temperature": True},
        {"output": ["not an item"]},
        {"usage": LongerUsage(input_tokens=1, output_tokens=2, total_tokens=3)},
    ],
)
def test_a_value_the_writer_does_not_cover_defers_to_the_generic_path(
    changes: dict[str, Any],
) -> None:
    response = _response(**changes)
    with pytest.raises(Defer):
        _wire._WRITERS.text_of(_model.Response)(response)  # type: ignore[misc]
    assert dumps(response) == generic(response)


@pytest.mark.parametrize("value", [Text("sub"), Text("\ud800 é")])
def test_a_str_subclass_is_written_as_json_writes_a_str(value: str) -> None:
    # json's encoder escapes any str instance the same way; so does the writer, no fall back.
    response = _response(model=value, instructions=value)
    written = _wire._WRITERS.text_of(_model.Response)(response)  # type: ignore[misc]
    assert written == generic(response)


def test_an_error_of_the_generic_path_is_still_raised() -> None:
    response = _response(metadata={"k": object()})
    with pytest.raises(TypeError, match="not JSON serializable"):
        dumps(response)


@attrs.frozen(kw_only=True)
class CallerValue:
    """A caller's own attrs class: `dumps` takes any value, not only the model's."""

    name: str
    scores: tuple[float, ...] = ()
    usage: _model.ResponseUsage | None = None


def test_a_callers_attrs_class_is_written_as_the_generic_path() -> None:
    usage = _model.ResponseUsage(input_tokens=1, output_tokens=2, total_tokens=3)
    value = CallerValue(name="é\ud800", scores=(float("-inf"), 0.5, 2**70), usage=usage)
    assert _wire._WRITERS.text_of(CallerValue) is not None
    assert dumps(value) == generic(value)


def test_a_class_whose_hints_do_not_resolve_has_no_writer_and_keeps_the_generic_outcome() -> None:
    @attrs.frozen
    class Local:
        x: Undefined  # type: ignore[name-defined]  # noqa: F821 - never resolvable

    assert _wire._WRITERS.text_of(Local) is None
    assert outcome(dumps, Local(x=1)) == outcome(generic, Local(x=1))


def test_a_union_members_writer_is_made_when_a_value_of_it_is_first_written() -> None:
    """Writing `response.created` made writers for every class a Response could hold (the
    output item kinds, the tools, their parts): 51 generated functions, 9.5 ms of CPU in each
    `streamfold replay`, most for classes it never writes (issue 28). Each union member's
    writer, and each field's, is now made at the first value that needs it (a replay of a
    two-token trace makes 9, in 4.1 ms)."""
    writers = Writers(_wire._omitted, _wire._converter().get_unstructure_hook)
    response = new_response("resp_lazy")
    write = writers.text_of(type(response))
    assert write is not None and write(response) == generic(response)
    items = set(typing.get_args(_model.OutputItem))
    tools = {t for t in typing.get_args(_model.ResponseTool) if isinstance(t, type)}
    assert not (items | tools) & set(writers.text)
    message = _model.ResponseOutputMessage(
        id="msg_1",
        status="completed",
        content=(_model.ResponseOutputText(text="hi"),),
    )
    held = attrs.evolve(response, output=(message,))
    assert write(held) == generic(held)  # the writer itself, no fall back
    assert set(writers.text) & (items | tools) == {_model.ResponseOutputMessage}
