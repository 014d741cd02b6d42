"""A fast `evolve` for the reducer's hot path.

`attrs.evolve` introspects the class on every call (about 5 µs for a state); the reducer makes a
new state for every token, so that alone would cost more than parsing. `replacer(cls)` generates,
once per class, a function that copies a value with some fields changed: for the reducer's
per-token values (`ResponseState`, `OpenItem`), which are NamedTuples, one `tuple.__new__`
(about 0.3 µs); for attrs classes, a copy of the slots (about 1 µs). It bypasses `__init__`,
so it is only for values whose fields need no validation: the reducer's own internal state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

__all__ = ["builder", "replacer", "updater"]

T = TypeVar("T")
_KEEP: Any = object()


def replacer(cls: type[T]) -> Callable[..., T]:
    """`replace(value, **changes)` for a frozen attrs class or a NamedTuple, generated once."""
    if issubclass(cls, tuple):
        # A NamedTuple is built in one call from a tuple of its fields: the cheapest value.
        names = list(cls._fields)  # type: ignore[attr-defined]
        params = ", ".join(f"{name}=_KEEP" for name in names)
        values = ", ".join(
            f"self[{i}] if {name} is _KEEP else {name}" for i, name in enumerate(names)
        )
        source = f"def replace(self, *, {params}):\n    return _tuple_new(_cls, ({values},))\n"
        namespace: dict[str, Any] = {"_KEEP": _KEEP, "_tuple_new": tuple.__new__, "_cls": cls}
    else:
        names = [a.name for a in attrs.fields(cls)]  # type: ignore[arg-type]
        params = ", ".join(f"{name}=_KEEP" for name in names)
        # Each slot's own descriptor: about twice as fast as object.__setattr__.
        body = "\n".join(
            f"    _set_{name}(new, self.{name} if {name} is _KEEP else {name})" for name in names
        )
        source = f"def replace(self, *, {params}):\n    new = _new(_cls)\n{body}\n    return new\n"
        namespace = {"_KEEP": _KEEP, "_new": object.__new__, "_cls": cls}
        for name in names:
            namespace[f"_set_{name}"] = cls.__dict__[name].__set__
    exec(source, namespace)  # the generated code only copies named fields
    replace: Callable[..., T] = namespace["replace"]
    replace.__qualname__ = f"{cls.__name__}.replace"
    return replace


def builder(cls: type[T], *names: str, **constants: Any) -> Callable[..., T]:
    """A positional constructor for a frozen attrs class, skipping `__init__`'s keyword work.

    `constants` fix fields to one value (`content_index=0`); other fields not named keep their
    defaults (the wire `type`, empty logprobs). For the reducer's own events on the hot path
    only: arguments are not validated.
    """
    fields = attrs.fields(cls)  # type: ignore[arg-type]
    missing = [
        f.name
        for f in fields
        if f.name not in names and f.name not in constants and f.default is attrs.NOTHING
    ]
    if missing:
        raise TypeError(f"builder({cls.__name__}) must set {missing}")
    lines = [f"    _set_{name}(new, {name})" for name in names]
    lines += [f"    _set_{f.name}(new, _default_{f.name})" for f in fields if f.name not in names]
    source = (
        f"def build({', '.join(names)}):\n    new = _new(_cls)\n" + "\n".join(lines) + "\n"
        "    return new\n"
    )
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    for f in fields:
        namespace[f"_set_{f.name}"] = cls.__dict__[f.name].__set__
        namespace[f"_default_{f.name}"] = constants.get(f.name, f.default)
    exec(source, namespace)  # the generated code only sets named slots
    build: Callable[..., T] = namespace["build"]
    build.__qualname__ = f"{cls.__name__}.build"
    # The same plan as data, for the compiled hot path (`_speedups.c`, `build_delta`): the
    # class, the descriptors of the named slots in order, and (descriptor, value) for the rest.
    build.plan = (  # type: ignore[attr-defined]
        cls,
        tuple(cls.__dict__[name] for name in names),
        tuple(
            (cls.__dict__[f.name], constants.get(f.name, f.default))
            for f in fields
            if f.name not in names
        ),
    )
    return build


def updater(cls: type[T], *names: str) -> Callable[..., T]:
    """`update(value, *new_values)`: a NamedTuple copy with the named fields replaced, by
    position. The hot path's own copy: no keywords, no defaults to test."""
    fields = list(cls._fields)  # type: ignore[attr-defined]
    unknown = set(names) - set(fields)
    if unknown:
        raise TypeError(f"updater({cls.__name__}): no fields {sorted(unknown)}")
    values = ", ".join(name if name in names else f"self[{i}]" for i, name in enumerate(fields))
    source = f"def update(self, {', '.join(names)}):\n    return _tuple_new(_cls, ({values},))\n"
    namespace: dict[str, Any] = {"_tuple_new": tuple.__new__, "_cls": cls}
    exec(source, namespace)  # the generated code only reads the value's own fields
    update: Callable[..., T] = namespace["update"]
    update.__qualname__ = f"{cls.__name__}.update_{'_'.join(names)}"
    return update
