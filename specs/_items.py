"""The item half of the checker: output items, their parts, and the texts streamed into them.

Theory of operation. Each `output_item.added` opens an `_Item`, keyed by its `output_index`;
each part event opens or closes a `_Part` inside it; each delta appends to the text of the
part (or of the item, for function arguments and code), and the `.done` event closes that text.
Every copy of a text that comes later must equal the copy before it: the `.done` text equals
the joined deltas (R17), the part in `content_part.done` equals the `.done` text (R18), the item
in `output_item.done` equals the parts (R19), and the terminal response equals the done items
(R22, in `_checker`). Comparing each copy with the one before it, rather than all with the
deltas, makes a bug fire the rule of the step that introduced it, and only that one.

An event that refers to no open item is reported (R11) and then ignored, so that one broken
reference does not set off a cascade of follow-up reports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

import attrs

from . import _wire as w

__all__ = ["Items"]

Report = Callable[[str, str], None]


@attrs.define
class _Part:
    family: str
    index: int
    part_type: str | None
    added_at: int
    deltas: list[str] = attrs.Factory(list)
    done_text: str | None = None
    text_done_at: int | None = None
    done_at: int | None = None
    final_text: str | None = None  # the text carried by content_part.done
    misfit: bool = False  # its type does not fit the item (R14, reported once when added)

    def text(self) -> str:
        """The latest copy of this part's text (R18/R19 compare against it)."""
        if self.final_text is not None:
            return self.final_text
        return self.done_text if self.done_text is not None else "".join(self.deltas)


@attrs.define
class _Item:
    index: int
    id: str | None
    type: str | None
    added_at: int
    call_id: str | None = None
    name: str | None = None
    parts: dict[tuple[str, int], _Part] = attrs.Factory(dict)
    deltas: list[str] = attrs.Factory(list)
    done_text: str | None = None
    text_done_at: int | None = None
    done_at: int | None = None
    done_item: Mapping[str, Any] | None = None

    def describe(self) -> str:
        kind = self.type or "item"
        name = repr(self.id) if self.id is not None else "(no id)"
        return f"{kind} item {name} at output_index {self.index}"

    def open_parts(self) -> list[_Part]:
        return [p for p in self.parts.values() if p.done_at is None]


# Item type -> the text that its own events stream (function arguments, code, ...).
# The statuses that say an item is over (R26): every output item type's other statuses
# (`in_progress`, `searching`, `interpreting`, `calling`, `generating`) mean it is still going.
FINAL_ITEM_STATUSES = frozenset({"completed", "incomplete", "failed"})
_ITEM_STREAM = {s.item_type: s for s in w.DONES.values() if s.part is None}
_PART_STREAM = {s.part_type: s for s in w.DONES.values() if s.part is not None}


def text_mismatch(expected: str, seen: str) -> str:
    """Where two texts first differ, short enough for one report line."""
    k = next(
        (i for i, (a, b) in enumerate(zip(expected, seen, strict=False)) if a != b),
        min(len(expected), len(seen)),
    )
    return (
        f"{len(expected)} vs {len(seen)} characters, first difference at character {k}: "
        f"expected {_excerpt(expected, k)}, saw {_excerpt(seen, k)}"
    )


def _excerpt(text: str, k: int) -> str:
    return w.short(text[k : k + 20]) if k < len(text) else "the end of the text"


class Items:
    """The items of one response, checked as their events arrive."""

    def __init__(self, report: Report) -> None:
        self._report = report
        self.by_index: dict[int, _Item] = {}
        self._ids: dict[str, int] = {}
        self._last_index: int | None = None

    def open_items(self) -> list[_Item]:
        return [it for it in self.by_index.values() if it.done_at is None]

    def done_items(self) -> list[_Item]:
        return sorted(
            (it for it in self.by_index.values() if it.done_at is not None), key=lambda it: it.index
        )

    # -- output_item.added / .done -------------------------------------------------------

    def added(self, pos: int, ev: Mapping[str, Any], bad: set[str]) -> None:
        index = None if "output_index" in bad else w.get_index(ev, "output_index")
        item = None if "item" in bad else w.get(ev, "item")
        if index is None or not isinstance(item, Mapping):
            return
        self._check_item_shape(item)
        status = w.get(item, "status")
        if status in FINAL_ITEM_STATUSES:
            self._report(
                "R26",
                f"output_item.added carries a finished item (status {status!r}); "
                "an item is added in_progress and finished by its done event",
            )
        if index in self.by_index:
            first = self.by_index[index]
            self._report(
                "R10",
                f"output_item.added for output_index {index} again: "
                f"{first.describe()} was added at position {first.added_at}",
            )
            return
        expected = 0 if self._last_index is None else self._last_index + 1
        if index != expected:
            self._report("R9", f"expected output_index {expected} (the next item), saw {index}")
        self._last_index = index
        for other in self.open_items():
            self._report(
                "R11",
                f"item at output_index {index} added while {other.describe()} "
                f"(added at position {other.added_at}) is not done yet; items "
                "must not interleave",
            )
        item_id = w.get(item, "id")
        if not isinstance(item_id, str) or not item_id:
            self._report("R12", f"item id must be a non-empty string, saw {w.short(item_id)}")
            item_id = None
        elif item_id in self._ids:
            self._report(
                "R12",
                f"item id {item_id!r} is already used by the item at "
                f"output_index {self._ids[item_id]}",
            )
        else:
            self._ids[item_id] = index
        it = _Item(index=index, id=item_id, type=w.get_str(item, "type"), added_at=pos)
        if it.type == "function_call":
            it.call_id, it.name = w.get_str(item, "call_id"), w.get_str(item, "name")
            for key, value in (("call_id", it.call_id), ("name", it.name)):
                if value == "":
                    self._report("R20", f"function_call {key} must be non-empty")
        self.by_index[index] = it

    def done(self, pos: int, ev: Mapping[str, Any], bad: set[str]) -> None:
        index = None if "output_index" in bad else w.get_index(ev, "output_index")
        item = None if "item" in bad else w.get(ev, "item")
        if index is None or not isinstance(item, Mapping):
            return
        self._check_item_shape(item)
        it = self.by_index.get(index)
        if it is None:
            self._report(
                "R10",
                f"output_item.done for output_index {index}, but no item was "
                f"added there{self._hint(w.get(item, 'id'))}",
            )
            return
        if it.done_at is not None:
            self._report(
                "R10", f"{it.describe()} is done again (first done at position {it.done_at})"
            )
            return
        it.done_at, it.done_item = pos, item
        status = w.get(item, "status")
        if isinstance(status, str) and status not in FINAL_ITEM_STATUSES:
            self._report(
                "R26",
                f"output_item.done carries status {status!r}; a done item is "
                f"{', '.join(sorted(FINAL_ITEM_STATUSES))}",
            )
        done_type, done_id = w.get_str(item, "type"), w.get(item, "id")
        if done_type != it.type:
            self._report(
                "R13",
                f"output_item.done item type {done_type!r} differs from the added type {it.type!r}",
            )
        if it.id is not None and done_id != it.id:
            self._report(
                "R12",
                f"output_item.done item id {w.short(done_id)} differs from the "
                f"id {it.id!r} it was added with",
            )
        if it.type == "function_call":
            for key, value in (("call_id", it.call_id), ("name", it.name)):
                seen = w.get(item, key)
                if seen != value:
                    self._report(
                        "R20",
                        f"function_call {key} changed: added with {value!r}, "
                        f"done with {w.short(seen)}",
                    )
        for part in it.open_parts():
            self._report(
                "R15",
                f"{part.family} part {part.index} of {it.describe()} (added at "
                f"position {part.added_at}) is not done before the item is done",
            )
        self._check_item_text(it, item)

    def _check_item_shape(self, item: Mapping[str, Any]) -> None:
        item_type = w.get(item, "type")
        if not isinstance(item_type, str):
            self._report("R2", f"item.type must be a string, saw {w.short(item_type)}")
            return
        problems = []
        for key, kind in w.ITEM_FIELDS.get(item_type, {}).items():
            why = w.type_error(item.get(key), kind) if key in item else "is missing"
            if why is not None:
                problems.append(f"item.{key} {why}")
        if problems:
            self._report("R2", f"{item_type} item: " + "; ".join(problems))

    def _check_item_text(self, it: _Item, item: Mapping[str, Any]) -> None:
        stream = _ITEM_STREAM.get(it.type or "")
        if stream is not None and stream.item_field is not None:
            streamed = bool(it.deltas) or it.text_done_at is not None
            if it.text_done_at is None and (it.deltas or stream.name in w.ALWAYS_DONE):
                self._report(
                    "R16",
                    f"{it.describe()} is done, but its {stream.name} was never "
                    f"closed by response.{stream.name}.done",
                )
            if streamed:
                expected = it.done_text if it.done_text is not None else "".join(it.deltas)
                seen = w.get(item, stream.item_field)
                if seen != expected:
                    self._report(
                        "R19",
                        f"output_item.done item.{stream.item_field} differs "
                        f"from the streamed text: " + _diff(expected, seen),
                    )
        for family in w.FAMILIES.values():
            if it.type not in family.allowed:
                continue
            parts = sorted(
                (p for p in it.parts.values() if p.family == family.name), key=lambda p: p.index
            )
            listed = w.get(item, family.item_field)
            if listed is None and not parts and family.name == "content":
                continue  # `content` is optional on reasoning items
            if not isinstance(listed, list):
                self._report(
                    "R19",
                    f"output_item.done item.{family.item_field} must list the "
                    f"{len(parts)} streamed part(s), saw {w.short(listed)}",
                )
                continue
            if len(listed) != len(parts):
                self._report(
                    "R19",
                    f"output_item.done item.{family.item_field} has "
                    f"{len(listed)} part(s), the stream added {len(parts)}",
                )
            for part, entry in zip(parts, listed, strict=False):
                self._check_part_copy(part, entry, f"item.{family.item_field}[{part.index}]", "R19")

    def _check_part_copy(self, part: _Part, entry: Any, where: str, rule: str) -> None:
        entry_type = w.get_str(entry, "type")
        if entry_type != part.part_type:
            self._report(
                rule,
                f"{where}.type is {w.short(entry_type)}, the part was added as {part.part_type!r}",
            )
            return
        field = w.PART_TEXT_FIELD.get(part.part_type or "")
        if field is None:
            return
        seen = w.get(entry, field)
        if seen != part.text():
            self._report(
                rule, f"{where}.{field} differs from the streamed text: " + _diff(part.text(), seen)
            )

    def _hint(self, item_id: Any) -> str:
        if isinstance(item_id, str) and item_id in self._ids:
            return f" (item {item_id!r} was added at output_index {self._ids[item_id]})"
        return ""

    # -- events inside an item ------------------------------------------------------------

    def quiet_delta(
        self, ev: dict[str, Any], stream: w.Stream, running: AbstractSet[int]
    ) -> list[str] | None:
        """A delta that `text_event` would take without a report (right item, id, type and
        part, all of them open, its fields of the right types, its item's tool not `running`):
        its text is appended, as `text_event` appends it, and the list of deltas it went to is
        returned. Else nothing changes and None: the general path then judges the event. The
        checker's fast path (issue 16); tests/specs/test_quiet_deltas.py holds it to the
        general path."""
        index, item_id, delta = ev.get("output_index"), ev.get("item_id"), ev.get("delta")
        if type(index) is not int or type(item_id) is not str or type(delta) is not str:
            return None
        if index in running:
            return None
        it = self.by_index.get(index)
        if it is None or it.done_at is not None or it.id != item_id or it.type != stream.item_type:
            return None
        holder: _Item | _Part = it
        if stream.part is not None:
            family = w.FAMILIES[stream.part]
            part_index = ev.get(family.index_field)
            if type(part_index) is not int:
                return None
            part = it.parts.get((family.name, part_index))
            if part is None or part.done_at is not None or part.part_type != stream.part_type:
                return None
            holder = part
        if holder.text_done_at is not None:
            return None
        holder.deltas.append(delta)
        return holder.deltas

    def target(
        self, ev: Mapping[str, Any], bad: set[str], etype: str, item_types: frozenset[str]
    ) -> _Item | None:
        """The open item an item-scoped event refers to, after R11/R12/R13; else None."""
        index = None if "output_index" in bad else w.get_index(ev, "output_index")
        if index is None:
            return None
        item_id = None if "item_id" in bad else w.get(ev, "item_id")
        it = self.by_index.get(index)
        if it is None:
            self._report(
                "R11",
                f"refers to output_index {index}, but no item was added there"
                + self._hint(item_id),
            )
            return None
        if it.done_at is not None:
            self._report(
                "R11",
                f"refers to {it.describe()}, which is already done (at position {it.done_at})",
            )
            return None
        if "item_id" in w.FIELDS.get(etype, {}) and it.id is not None and item_id != it.id:
            self._report(
                "R12",
                f"item_id {w.short(item_id)} but the item at output_index {index} has id {it.id!r}",
            )
        if it.type not in item_types:
            kinds = " or ".join(sorted(item_types))
            self._report("R13", f"{etype} belongs to a {kinds} item, but {it.describe()} is not")
            return None
        return it

    def part_event(self, pos: int, ev: Mapping[str, Any], bad: set[str], etype: str) -> None:
        family, is_done = w.PART_EVENTS[etype]
        it = self.target(ev, bad, etype, frozenset(family.allowed))
        index = None if family.index_field in bad else w.get_index(ev, family.index_field)
        part_obj = None if "part" in bad else w.get(ev, "part")
        if it is None or index is None or part_obj is None:
            return
        part_type = w.get_str(part_obj, "type")
        if part_type is None:
            seen = w.short(w.get(part_obj, "type"))
            self._report("R2", f"part.type must be a string, saw {seen}")
        key = (family.name, index)
        part = it.parts.get(key)
        if is_done:
            if part is None or part.done_at is not None:
                state = "was never added" if part is None else f"is already done ({part.done_at})"
                self._report("R15", f"{family.name} part {index} of {it.describe()} {state}")
                return
            self._close_part(pos, it, part, part_obj)
            return
        allowed = family.allowed[it.type or ""]
        misfit = part_type is not None and part_type not in allowed
        if misfit:
            self._report(
                "R14",
                f"a {it.type} item's {family.name} part must be "
                f"{' or '.join(sorted(allowed))}, saw {part_type!r}",
            )
        if part is not None:
            self._report(
                "R14",
                f"{family.name} part {index} of {it.describe()} added again "
                f"(first at position {part.added_at})",
            )
            return
        expected = sum(1 for p in it.parts.values() if p.family == family.name)
        if index != expected:
            self._report(
                "R14",
                f"expected {family.index_field} {expected} (parts already in "
                f"this item), saw {index}; indexes restart at 0 in every item",
            )
        for other in it.open_parts():
            self._report(
                "R15",
                f"{family.name} part {index} added while {other.family} part "
                f"{other.index} (added at position {other.added_at}) is open",
            )
        it.parts[key] = _Part(
            family=family.name, index=index, part_type=part_type, added_at=pos, misfit=misfit
        )

    def _close_part(self, pos: int, it: _Item, part: _Part, part_obj: Any) -> None:
        stream = _PART_STREAM.get(part.part_type or "")
        if (
            stream is not None
            and part.text_done_at is None
            and (part.deltas or stream.name in w.ALWAYS_DONE)
        ):
            self._report(
                "R16",
                f"{part.family} part {part.index} of {it.describe()} is done "
                f"before response.{stream.name}.done closed its text",
            )
        self._check_part_copy(part, part_obj, "part", "R18")
        field = w.PART_TEXT_FIELD.get(part.part_type or "")
        final = w.get(part_obj, field) if field else None
        part.final_text = final if isinstance(final, str) else None
        part.done_at = pos

    def text_event(self, pos: int, ev: Mapping[str, Any], bad: set[str], etype: str) -> None:
        is_done = etype in w.DONES
        stream = w.DONES[etype] if is_done else w.DELTAS[etype]
        it = self.target(ev, bad, etype, frozenset({stream.item_type}))
        field = stream.done_field if is_done else "delta"
        text = None if field in bad else w.get_str(ev, field)
        if it is None or text is None:
            return
        holder: _Item | _Part = it
        if stream.part is not None:
            family = w.FAMILIES[stream.part]
            index = None if family.index_field in bad else w.get_index(ev, family.index_field)
            if index is None:
                return
            part = it.parts.get((family.name, index))
            if part is None or part.done_at is not None:
                added = sorted(p.index for p in it.parts.values() if p.family == family.name)
                state = (
                    "was never added"
                    if part is None
                    else f"is already done (at position {part.done_at})"
                )
                self._report(
                    "R15",
                    f"{etype} refers to {family.name} part {index} of "
                    f"{it.describe()}, which {state} (parts added: {added})",
                )
                return
            if part.part_type != stream.part_type and not part.misfit:
                self._report(
                    "R13",
                    f"{etype} into a {part.part_type!r} part; it belongs in a "
                    f"{stream.part_type!r} part",
                )
                return
            holder = part
        if holder.text_done_at is not None:
            what = "a second .done" if is_done else "a delta"
            self._report(
                "R16", f"{what} after response.{stream.name}.done at position {holder.text_done_at}"
            )
            return
        if not is_done:
            holder.deltas.append(text)
            return
        holder.text_done_at, holder.done_text = pos, text
        joined = "".join(holder.deltas)
        if text != joined:
            self._report(
                "R17",
                f"the {len(holder.deltas)} delta(s) joined differ from the "
                f".done {field}: " + text_mismatch(joined, text),
            )


def _diff(expected: str, seen: Any) -> str:
    if isinstance(seen, str):
        return text_mismatch(expected, seen)
    return f"expected {w.short(expected)}, saw {w.short(seen)}"
