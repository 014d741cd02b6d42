"""Generated JSON writers for the wire format's attrs classes: the exact text of the generic path
(`json.dumps(to_wire(value), separators=(",", ":"), ensure_ascii=False)`) without building the
dict first.

The generic path costs 5-9 µs for a lifecycle event (`response.created` carries the whole
`Response`): cattrs builds nested dicts and lists, then `json` walks them again. A writer
generated once per class formats the fields straight into text, about 4x faster.

Same bytes for every value is the contract, so a writer covers only what it can write exactly:
each field by its declared type, as cattrs unstructures it, and each value of the exact class
that type expects. Anything else (a subclass, a float where an int is declared, a list
inside a tuple of `()`) raises `Defer`, and `_wire.dumps` takes the generic path for the whole
value, which writes it (or raises) as it always did. What `json` does its own way is done the
same way here: floats are `float.__repr__` with `NaN`/`Infinity`/`-Infinity` for the
non-finite ones, ints of any size their `repr`, strings `json`'s own escaper (lone surrogates
kept), `bool` is `true`/`false`, not a number. Types without a writer of their own (the
`dict[str, object]` fields) are unstructured by the converter's own hook and encoded by `json`
itself, which is the generic path's text for that field (the encoder writes each nested value
the same wherever it sits). tests/statemachine/test_wire_writers.py holds all of this equal to
the generic path over generated values, wrong types included, and every golden event.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Callable
from typing import Any

import attrs

__all__ = ["Defer", "Writers"]

_escape = json.encoder.encode_basestring  # what json.dumps uses when ensure_ascii=False
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_NONE = type(None)

Writer = Callable[[Any], str]


class Defer(Exception):
    """A writer met a value it does not write exactly: the caller takes the generic path."""


def _defer(value: object = None) -> str:
    raise Defer


def _nonfinite(value: float) -> str:
    # json.dumps' own spelling (allow_nan=True): not JSON, but what the generic path writes.
    if value != value:
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _int(value: Any) -> str:
    if value.__class__ is not int:
        raise Defer
    return repr(value)


def _float(value: Any) -> str:
    if value.__class__ is float:
        return repr(value) if value - value == 0.0 else _nonfinite(value)
    if value.__class__ is int:  # an int in a float field is written as the int it is
        return repr(value)
    raise Defer


def _bool(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    raise Defer


def _str(value: Any) -> str:
    if value.__class__ is not str:
        raise Defer
    return _escape(value)


_SCALARS: dict[Any, Writer] = {str: _str, int: _int, float: _float, bool: _bool}


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return typing.get_args(tp)
    return None


def _literal_of_str(tp: Any) -> bool:
    return typing.get_origin(tp) is typing.Literal and all(
        isinstance(a, str) for a in typing.get_args(tp)
    )


class Writers:
    """Writers generated on first use, one per attrs class (and a class's writer makes those
    of the classes its fields hold when it first meets a value of them), following the
    converter's layout: `omitted(cls)` names the fields left out when None, `hook(tp)` is the
    converter's unstructure hook for a declared type (used where no writer of its own exists).

    `text_of(cls)` writes a value's JSON; `frame_of(cls)` an event's whole SSE frame as bytes
    (its `type` field's value is the `event:` line), one `%` and one encode per event. Both
    are None for a class without one. Once made, they are in the plain dicts `text` and
    `frames`: `text.get(cls) or text_of(cls)` is the cheapest dispatch per event.
    """

    def __init__(
        self, omitted: Callable[[type], frozenset[str]], hook: Callable[[Any], Callable[[Any], Any]]
    ) -> None:
        self._omitted = omitted
        self._hook = hook
        self._building: set[type] = set()
        self.text: dict[type, Writer | None] = {}
        self.frames: dict[type, Callable[[Any], bytes] | None] = {}

    def text_of(self, cls: type) -> Writer | None:
        """The JSON writer of `cls`, or None where it has none (not an attrs class)."""
        if cls not in self.text:
            made = self._build(cls, "{", "}", encode=False) if attrs.has(cls) else None
            self.text[cls] = made
        return self.text[cls]

    def frame_of(self, cls: type) -> Callable[[Any], bytes] | None:
        if cls not in self.frames:
            self.frames[cls] = self._frame(cls)
        return self.frames[cls]

    def _frame(self, cls: type) -> Callable[[Any], bytes] | None:
        if not attrs.has(cls):
            return None
        kind = attrs.fields_dict(cls).get("type")
        if kind is None or kind.init or not isinstance(kind.default, str):
            return None
        head = f"event: {kind.default}\ndata: {{"
        return self._build(cls, head, "}\n\n", encode=True)  # type: ignore[return-value]

    # --- one value by its declared type ---------------------------------------------------

    def _function(self, tp: Any) -> Writer:
        """A callable writing one value declared as `tp` (or raising `Defer`)."""
        if tp in _SCALARS:
            return _SCALARS[tp]
        if _literal_of_str(tp):
            return _str
        if isinstance(tp, type) and attrs.has(tp):
            return self._nested(tp)
        members = _union_args(tp)
        if members is not None:
            others = [a for a in members if a is not _NONE]
            if len(others) == 1:  # cattrs' optional: None, or the one type's hook
                inner = self._function(others[0])
                return lambda v: "null" if v is None else inner(v)
            return self._union(members)
        if typing.get_origin(tp) is tuple:
            args = typing.get_args(tp)
            if len(args) == 2 and args[1] is Ellipsis:
                return self._sequence(args[0])
            if args == ():
                return lambda v: "[]" if v.__class__ is tuple and not v else _defer()
        hook = self._hook(tp)
        return lambda v: _encode(hook(v))

    def _nested(self, cls: type) -> Writer:
        if cls in self._building:  # a class that contains itself: look it up when called
            return lambda v: self.text[cls](v)  # type: ignore[misc]
        writer = self.text_of(cls)
        return _defer if writer is None else writer

    def _union(self, members: tuple[Any, ...]) -> Writer:
        # cattrs writes a union member by the value's own class (`_unstructure_union`).
        by_class: dict[type, Writer] = {}
        classes: set[type] = set()  # attrs members: their writers are made when first met
        for member in members:
            if member is _NONE:
                by_class[_NONE] = lambda v: "null"
            elif _literal_of_str(member) or member is str:
                by_class[str] = _escape
            elif isinstance(member, type) and attrs.has(member):
                classes.add(member)
            elif member in _SCALARS:
                by_class[member] = _SCALARS[member]
            elif typing.get_origin(member) is dict:  # an echoed JSON object (`ResponseTool`)
                by_class[dict] = self._encoded(member)
            # any other member (a non-str Literal) defers: the generic path writes it
        get = by_class.get

        def first(cls: type) -> Writer:
            # The output item and tool unions hold a dozen classes each, most of which a
            # process never writes: made up front, a Response's writer made 51 functions
            # (9.5 ms of every replay, issue 28). Made at the first value of the class, kept.
            if cls not in classes:
                return _defer
            made = by_class[cls] = self._nested(cls)
            return made

        return lambda v: (get(v.__class__) or first(v.__class__))(v)

    def _on_first_call(self, tp: Any, namespace: dict[str, Any], name: str) -> Writer:
        """The writer of a field declared `tp`, made when the generated code first calls it
        (a null field or an empty tuple never does): it then replaces itself in the code's
        globals, so later values call the made writer directly."""

        def first(v: Any) -> str:
            made = namespace[name] = self._function(tp)
            return made(v)

        return first

    def _encoded(self, tp: Any) -> Writer:
        hook = self._hook(tp)
        return lambda v: _encode(hook(v))

    def _sequence(self, element: Any) -> Writer:
        write = self._function(element)

        def sequence(v: Any) -> str:
            if v.__class__ is not tuple and v.__class__ is not list:
                raise Defer
            return "[" + ",".join([write(x) for x in v]) + "]" if v else "[]"

        return sequence

    # --- one class ------------------------------------------------------------------------

    def _build(self, cls: type, start: str, end: str, *, encode: bool) -> Writer | None:
        self._building.add(cls)
        try:
            source, namespace = self._source(cls, start, end, encode)
        except Exception:  # a class whose hints do not resolve (say, a caller's local class):
            return None  # no writer, the generic path writes it as before
        finally:
            self._building.discard(cls)
        exec(source, namespace)  # the generated code reads only the value's own fields
        return namespace["write"]  # type: ignore[no-any-return]

    def _source(self, cls: type, start: str, end: str, encode: bool) -> tuple[str, dict[str, Any]]:
        hints = typing.get_type_hints(cls)
        omitted = self._omitted(cls)
        namespace: dict[str, Any] = {"_cls": cls, "_Defer": Defer, "_escape": _escape}
        namespace.update(_nonfinite=_nonfinite, _float=_float, _defer=_defer)
        fields = []  # (omitted, var, JSON key, check lines, `%` format, argument)
        body = ["if o.__class__ is not _cls: raise _Defer"]
        for i, field in enumerate(attrs.fields(cls)):
            var = f"v{i}"
            if not field.init and isinstance(field.default, str):
                # The wire `type` (and `Response.object`): fixed per class, not an __init__
                # argument, so the default is the value (the compiled frame writer relies on
                # that too).
                lines: list[str] = []
                fmt, arg = _escape(field.default), ""
            else:
                declared = hints[field.name]
                if field.name in omitted:  # written only when not None
                    declared = _without_none(declared)
                lines, fmt, arg = self._field(declared, var, namespace)
                body.append(f"{var} = o.{field.name}")
            if field.name not in omitted:
                body.extend(lines)
            key = _escape(field.name) + ":"
            fields.append((field.name in omitted, var, key, lines, fmt, arg))
        # Every field present: one `%` template (the only layout of a class with no omissions).
        every = [
            (("," if i else "") + key, fmt, arg)
            for i, (_, _, key, _, fmt, arg) in enumerate(fields)
        ]
        whole = _template([(start, "", ""), *every, (end, "", "")])
        if encode:
            whole = f"({whole}).encode()"
        maybe = [f for f in fields if f[0]]
        if not maybe:
            body.append(f"return {whole}")
        else:
            body.append("if " + " and ".join(f"{var} is not None" for _, var, *_ in maybe) + ":")
            body.extend(f"    {line}" for _, _, _, lines, _, _ in maybe for line in lines)
            body.append(f"    return {whole}")
            body.extend(_partial(fields, start, end, encode))
        source = "def write(o):\n" + "".join(f"    {line}\n" for line in body)
        return source, namespace

    def _field(self, tp: Any, var: str, namespace: dict[str, Any]) -> tuple[list[str], str, str]:
        """Code for one field declared `tp` whose value is in `var`: lines that check it (and
        may compute its text), then its `%` format and argument: `%d` and the int itself, or
        `%s` and an expression giving its JSON text."""
        if tp is int:
            return [f"if {var}.__class__ is not int: raise _Defer"], "%d", var
        lines, expr = self._expr(tp, var, namespace)
        return lines, "%s", expr

    def _expr(self, tp: Any, var: str, namespace: dict[str, Any]) -> tuple[list[str], str]:
        """Lines checking the value in `var` (declared `tp`), and an expression of its text.
        The common types are written inline: a call per field costs as much as the writing."""
        if tp is str or _literal_of_str(tp):
            return [], f"_escape({var})"  # raises TypeError (-> Defer) for a non-str
        if tp is int:
            return [f"if {var}.__class__ is not int: raise _Defer"], f"repr({var})"
        if tp is bool:
            return [], f"('true' if {var} is True else 'false' if {var} is False else _defer())"
        if tp is float:
            lines = [
                f"if {var}.__class__ is float:",
                f"    t{var} = repr({var}) if {var} - {var} == 0.0 else _nonfinite({var})",
                f"else: t{var} = _float({var})",
            ]
            return lines, f"t{var}"
        members = _union_args(tp)
        if members is not None:
            others = [a for a in members if a is not _NONE]
            if len(others) == 1:  # cattrs' optional: None, or the one type's hook
                lines, expr = self._expr(others[0], var, namespace)
                inner = [f"    {line}" for line in lines]
                return [
                    f"if {var} is None: t{var} = 'null'",
                    "else:",
                    *inner,
                    f"    t{var} = {expr}",
                ], f"t{var}"
        name = f"_w{var}"
        namespace[name] = self._on_first_call(tp, namespace, name)
        if members is not None:
            if any(a is str or _literal_of_str(a) for a in others):
                return [], f"(_escape({var}) if {var}.__class__ is str else {name}({var}))"
        elif typing.get_origin(tp) is tuple:
            # Most tuples on the wire are empty (annotations, logprobs, output at the start).
            return [], f"('[]' if {var}.__class__ is tuple and not {var} else {name}({var}))"
        return [], f"{name}({var})"


def _without_none(tp: Any) -> Any:
    members = _union_args(tp)
    if members is None or _NONE not in members:
        return tp
    return typing.Union[tuple(a for a in members if a is not _NONE)]  # noqa: UP007


def _partial(
    fields: list[tuple[bool, str, str, list[str], str, str]], start: str, end: str, encode: bool
) -> list[str]:
    """Lines writing a value some of whose omittable fields are None, into `s`."""
    lines: list[str] = [f"s = {start!r}"]
    empty = len(start)
    run: list[tuple[str, str, str]] = []
    written = "none"  # "none", "maybe" (only omittable fields so far), "certain"
    for omitted, var, key, checks, fmt, arg in fields:
        if omitted:
            if run:
                lines.append("s += " + _template(run))
                run = []
            sep = {
                "none": "",
                "certain": "',' + ",
                "maybe": f"('' if len(s) == {empty} else ',') + ",
            }
            value = repr(fmt) if not arg else f"repr({var})" if fmt == "%d" else arg
            lines.append(f"if {var} is not None:")
            lines.extend(f"    {line}" for line in checks)
            lines.append(f"    s += {sep[written]}{key!r} + {value}")
            written = "certain" if written == "certain" else "maybe"
            continue
        if written == "maybe":
            if run:
                lines.append("s += " + _template(run))
                run = []
            lines.append(f"if len(s) > {empty}: s += ','")
            run.append((key, fmt, arg))
        else:
            run.append((("," if written == "certain" else "") + key, fmt, arg))
        written = "certain"
    if run:
        lines.append("s += " + _template(run))
    lines.append(f"return (s + {end!r}).encode()" if encode else f"return s + {end!r}")
    return lines


def _template(parts: list[tuple[str, str, str]]) -> str:
    """One `%` expression writing `parts` (literal text, then a format and its argument)."""
    args = [a for _, _, a in parts if a]
    if not args:
        return repr("".join(lit + fmt for lit, fmt, _ in parts))
    text = "".join(
        lit.replace("%", "%%") + (fmt if a else fmt.replace("%", "%%")) for lit, fmt, a in parts
    )
    return f"{text!r} % ({', '.join(args)},)"
