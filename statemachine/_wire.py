"""The wire format: one private cattrs converter between event values and the exact JSON the
OpenAI Responses API sends, plus compact JSON text.

Serialisation lives here, at the edge, so events stay plain values without `to_json` methods.
Optional fields (default None) are left out of the JSON, except on `Response`, which the API
sends with explicit nulls (`usage: null` until the terminal event), and the required-but-nullable
fields marked `_model.NULLABLE`. Reading is strict: a field
of the wrong type is an error that names its path (`$.item.call_id`), never a silent `str()`.

The converter is built on first use (`_converter()`): writing events goes through the generated
writers (`_writers.py`), which need it only for a value they do not cover, so `streamfold
replay` never imports cattrs (7 ms of its start-up, issue 28).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, get_args

import attrs

from . import _controls as c
from . import _model as m
from ._errors import WireFormatError
from ._events import Event
from ._writers import Writers

if TYPE_CHECKING:
    import cattrs

__all__ = [
    "dumps",
    "from_wire",
    "json_line",
    "json_type",
    "loads",
    "read_tagged",
    "read_tool_choice",
    "sse_event",
    "strict_converter",
    "structure",
    "to_wire",
]


def json_type(value: Any) -> str:
    """What `value` is in JSON's words ("a string", "an array"), for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "an array"
    return "an object"


_JSON_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "a boolean"}


def _strict(kind: type, *accepted: type) -> Any:
    def hook(value: Any, _: type) -> Any:
        # bool is an int in Python but not a JSON number; "3" is not a number either.
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, accepted):
            raise TypeError(f"expected {_JSON_NAMES[kind]}, got {json_type(value)}")
        return kind(value)

    return hook


def _object_dict(value: Any, _: type) -> dict[str, object]:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected an object, got {json_type(value)}")
    return dict(value)


def strict_converter(**options: Any) -> cattrs.Converter:
    """A cattrs converter that reads JSON strictly: no `str()` of a number, no bool as an int,
    an object where an object is due. The wire format below and the server's request parsing
    (`streamfold.adapters.protocol`) are each one of these, with their own hooks added.
    """
    import cattrs

    converter = cattrs.Converter(**options)
    for kind, accepted in ((str, (str,)), (int, (int,)), (float, (int, float)), (bool, (bool,))):
        converter.register_structure_hook(kind, _strict(kind, *accepted))
    # Generic aliases are not classes, so they are matched by equality.
    converter.register_structure_hook_func(lambda t: t == dict[str, object], _object_dict)
    return converter


def _empty(value: Any, _: type) -> tuple[()]:
    # `annotations` and MCP error `content` are always empty in what streamfold emits.
    if not isinstance(value, list):
        raise TypeError(f"expected an array, got {json_type(value)}")
    return ()


def _omitted(cls: type) -> frozenset[str]:
    """The fields of `cls` left out of the JSON when None: optional ones, except on `Response`
    (but its `conversation`) and where a field is marked `_model.NULLABLE` (one the API always
    sends, null or not)."""
    if cls is m.Response:  # `conversation` only when set: every other stream's bytes stay
        return frozenset({"conversation"})
    return frozenset(
        a.name for a in attrs.fields(cls) if a.default is None and not a.metadata.get(m.WIRE_NULL)
    )


def read_tagged(
    value: Any, classes: Mapping[str, type], what: str, structure: Callable[[Any, type], Any]
) -> Any:
    """An object of one of `classes`, chosen by its `type`, read by `structure` (the caller's
    converter: the wire's here, the request's strict one in `adapters`); an unknown type names
    the ones there are."""
    if not isinstance(value, Mapping):
        raise TypeError(f"expected an object, got {json_type(value)}")
    cls = classes.get(str(value.get("type")))
    if cls is None:
        raise ValueError(
            f"unknown {what} type {value.get('type')!r}; expected one of "
            + ", ".join(sorted(classes))
        )
    return structure(value, cls)


def read_tool_choice(value: Any, structure: Callable[[Any, type], Any]) -> Any:
    """A `tool_choice` value: one of its strings, or its object form (`read_tagged`)."""
    if isinstance(value, str):
        if value not in ("auto", "none", "required"):
            raise ValueError(f"expected 'auto', 'none', 'required' or an object, got {value!r}")
        return value
    return read_tagged(value, c.TOOL_CHOICE_CLASSES, "tool_choice", structure)


_CLIENT_TOOLS = {
    "function": m.FunctionTool,
    "custom": m.CustomTool,
    "namespace": m.NamespaceTool,
    "tool_search": m.ToolSearchTool,
}


@functools.cache
def _converter() -> cattrs.Converter:
    """The wire format's converter, with every hook, made once on first use."""
    from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

    converter = strict_converter(unstruct_collection_overrides={tuple: list})

    def exactly(tp: Any, hook: Any) -> None:
        # Generic aliases and unions are not classes, so they are matched by equality.
        converter.register_structure_hook_func(lambda t: t == tp, hook)

    def unstructure_fn(cls: type) -> Any:
        omit = {name: override(omit_if_default=True) for name in _omitted(cls)}
        # cattrs takes per-field overrides as keywords, which its stubs cannot express.
        return make_dict_unstructure_fn(
            cls,
            converter,
            _cattrs_include_init_false=True,
            **omit,  # type: ignore[arg-type]
        )

    def structure_fn(cls: type) -> Any:
        return make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=False)

    def tagged_union(union: Any, what: str) -> None:
        """Structure a union of attrs classes by their wire `type` discriminator."""
        by_tag = {attrs.fields_dict(cls)["type"].default: cls for cls in get_args(union)}

        def hook(value: Any, _: Any) -> Any:
            if not isinstance(value, Mapping):
                raise TypeError(f"expected an object, got {json_type(value)}")
            tag = value.get("type")
            cls = by_tag.get(tag)
            if cls is None:
                raise ValueError(f"unknown {what} type {tag!r}")
            return converter.structure(value, cls)

        exactly(union, hook)

    def response_tool(value: Any, _: Any) -> Any:
        # The client's tools as values (the grammar routes calls by them); any other tool of
        # the request (MCP, hosted) as the object it was echoed as.
        if not isinstance(value, Mapping):
            raise TypeError(f"expected an object, got {json_type(value)}")
        cls = _CLIENT_TOOLS.get(str(value.get("type")))
        return dict(value) if cls is None else converter.structure(value, cls)

    def tool_error(value: Any, _: Any) -> Any:
        # A tool's error (the agent loop's `ToolResultStep`): its text, or an MCP error object.
        if value is None or isinstance(value, str):
            return value
        return converter.structure(value, m.McpCallError)  # type: ignore[arg-type]  # a union

    exactly(tuple[()], _empty)
    for union, what in (
        (m.OutputItem, "output item"),
        (m.ContentPart, "content part"),
        (m.MessageContent, "message content"),
        (m.WebSearchAction, "web search action"),
        (m.McpCallError, "MCP call error"),
        (m.FunctionTool | m.CustomTool, "namespace tool"),
        (m.CustomToolFormat, "custom tool format"),
        (Event, "event"),
    ):
        tagged_union(union, what)
    exactly(c.ToolChoice, lambda v, _: read_tool_choice(v, converter.structure))
    exactly(
        c.TextFormat,
        lambda v, _: read_tagged(v, c.TEXT_FORMAT_CLASSES, "text format", converter.structure),
    )
    exactly(m.ResponseTool, response_tool)
    exactly(str | m.McpCallError | None, tool_error)
    # Factories, not eager registration: a class's function is generated on first use, after
    # every hook it depends on exists, whatever order the classes are declared in.
    converter.register_unstructure_hook_factory(attrs.has, unstructure_fn)
    converter.register_structure_hook_factory(attrs.has, structure_fn)
    return converter


def to_wire(value: Any) -> dict[str, Any]:
    """An event or model value as the wire JSON object (a plain dict)."""
    return _converter().unstructure(value)  # type: ignore[no-any-return]


def structure(data: Any, cls: Any, what: str | None = None) -> Any:
    """Read wire JSON as `cls`; raises `WireFormatError` naming each bad field's path."""
    import cattrs

    what = what or getattr(cls, "__name__", "value")
    try:
        return _converter().structure(data, cls)
    except cattrs.BaseValidationError as exc:
        raise WireFormatError(f"invalid {what}: " + "; ".join(cattrs.transform_error(exc))) from exc
    except (TypeError, ValueError) as exc:
        raise WireFormatError(f"invalid {what}: {exc} @ $") from exc


def from_wire(data: Mapping[str, Any]) -> Event:
    """Read one wire JSON event; raises `WireFormatError` naming the bad field."""
    return structure(data, Event, "event")  # type: ignore[no-any-return]


#: How a plain event's field is written by the compiled frame writer (`_speedups_sse.c`): the
#: `type` literal, an int, an escaped string, or an empty list (a delta's `logprobs`; one that
#: has logprobs is handed to `sse_event` here).
PlainField = tuple[str, Literal["type", "int", "str", "empty"]]


def plain_plan(cls: type) -> tuple[str, tuple[PlainField, ...]] | None:
    """The wire type and field layout of an event made only of str and int fields (deltas,
    progress events), in the generic path's field order, as the compiled writers take it
    (`_accel.py`); None for any other event."""
    event_type = None
    plan: list[PlainField] = []
    for field in attrs.fields(cls):
        if field.name == "type":
            event_type = field.default
            plan.append((field.name, "type"))
        elif field.type in ("int", int):
            plan.append((field.name, "int"))
        elif field.type in ("str", str):
            plan.append((field.name, "str"))
        elif field.name == "logprobs":
            plan.append((field.name, "empty"))
        else:
            return None
    return (event_type, tuple(plan)) if event_type is not None else None


PLAIN_EVENTS = [cls for cls in Event.__args__ if plain_plan(cls) is not None]

# Every attrs value gets writers generated on first use (`_writers.py`): its JSON text, and
# for an event its SSE frame, the same bytes as the generic path below, 3-7x faster.
_WRITERS = Writers(_omitted, lambda tp: _converter().get_unstructure_hook(tp))
_TEXT, _text_of = _WRITERS.text, _WRITERS.text_of
_FRAMES, _frame_of = _WRITERS.frames, _WRITERS.frame_of


def generic_dumps(value: Any) -> str:
    """The reference text of `dumps`: unstructure, then `json.dumps`. The generated writers
    are held equal to it (tests/statemachine/test_wire_writers.py)."""
    return json.dumps(to_wire(value), separators=(",", ":"), ensure_ascii=False)


def dumps(value: Any) -> str:
    """Compact JSON text of an event or value, as it goes on the wire."""
    write = _TEXT.get(type(value)) or _text_of(type(value))
    if write is not None:
        try:
            return write(value)
        except Exception:  # `Defer`, or any surprise: the generic path decides
            pass
    return generic_dumps(value)


def json_line(event: Event) -> bytes:
    """One event as a line of JSON lines (`streamfold replay`'s output): `dumps`, then `\n`."""
    return dumps(event).encode() + b"\n"


def sse_event(event: Event) -> bytes:
    """One event framed for Server-Sent Events: `event: <type>`, `data: <json>`, blank line.

    `dumps` never writes a raw line break (JSON escapes them), so the frame needs no checks.
    """
    frame = _FRAMES.get(type(event)) or _frame_of(type(event))
    if frame is not None:
        try:
            return frame(event)
        except Exception:  # as in `dumps`: the generic path writes or raises
            pass
    return f"event: {event.type}\ndata: {generic_dumps(event)}\n\n".encode()


def loads(text: str | bytes) -> Event:
    """Parse one event from JSON text; raises `WireFormatError` on bad JSON or fields."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WireFormatError(f"not JSON: {exc}") from exc
    return from_wire(data)
