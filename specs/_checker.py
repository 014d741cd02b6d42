"""The conformance checker: `check(events) -> list[Violation]`.

Theory of operation. The checker reads a stream once, in order, as wire JSON (a typed
streamfold event is first turned into its wire form), so it can judge any server's stream,
including a malformed one. For each event it checks, in this order: that it is an event at all
(R1) with the fields its type needs (R2); its `sequence_number` (R3); where it sits in the
response's lifecycle (R4-R8, R23); and, for item events, the item bookkeeping in `_items`
(R9-R21), and for hosted tool calls their progress stages in `_tools` (R27, R28). The terminal
event is then compared with everything that came before it (R20-R22). At the end it reports
a stream that never terminated (R6). The rules on a lifecycle event's `response` object (R7,
R8, R20-R22) are `_response`'s, those on what a completed response says `_content`'s.

A field that broke R2 is treated as absent by the later rules, so one malformed field yields
one report, not one per rule that reads it. The checker never raises on its input: whatever
the events are, it returns violations.

How `error` is judged (R6, R23): an `error` event ends the stream as a failure. It may be the
last event, or be followed by exactly one `response.failed` (which then is the terminal event);
anything else after it is a violation. Both its documented flat shape (`message`) and the
nested shape OpenAI sends live (`error.message`) are accepted. A stream that ends on a bare
`error` is not held to R21/R22: an error may cut the response at any point.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import _shapes as s
from . import _wire as w
from ._content import budget_rule, content_rules
from ._items import Items
from ._response import status_rules, terminal_rules, usage_rule
from ._tools import ToolProgress
from ._violation import Violation

__all__ = ["Checker", "check"]

_JSON_SCALARS = (str, int, float, bool, list, type(None))
# The fast path's deltas: each type's stream, whether it carries `logprobs` (R30), and the field
# that names its part (None: the item's own text). Its checks are written for exactly these
# required fields; a change to `_wire.FIELDS` that it would miss fails here at import rather
# than passing events it no longer judges.
_QUIET: dict[str, tuple[w.Stream, bool, str | None]] = {}
for _etype, _stream in w.DELTAS.items():
    _logprobs = "logprobs" in w.FIELDS[_etype]
    _part = () if _stream.part is None else (w.FAMILIES[_stream.part].index_field,)
    _known = {"item_id", "output_index", "delta", *_part, *(("logprobs",) * _logprobs)}
    assert set(w.FIELDS[_etype]) == _known, (_etype, w.FIELDS[_etype])
    _QUIET[_etype] = (_stream, _logprobs, _part[0] if _part else None)
# No event's type equals it: the batch loop's "no quiet delta yet".
_NO_TYPE = object()


def check(events: Iterable[Mapping[str, Any] | object]) -> list[Violation]:
    """Check a Responses API event stream against the rules of `specs/README.md`.

    `events` are wire-JSON objects (dicts as parsed from the stream), typed streamfold events
    (converted with `streamfold.statemachine.to_wire`), or openai SDK event objects (converted
    with their `to_dict`). Returns the violations in stream order; an empty list means the
    stream is conformant.
    """
    checker = Checker()
    for position, event in enumerate(events):
        checker.event(position, event)
    return checker.finish()


class Checker:
    """`check` one batch of events at a time (`events`), then `finish`: for a reader that
    decodes a block of events at once (`_reading`)."""

    def __init__(self) -> None:
        self._violations: list[Violation] = []
        self._where: tuple[int, int | None, str | None] = (0, None, None)
        self._count = 0
        self._items = Items(self._report)
        self._tools = ToolProgress(self._report)
        self._seq_off: list[tuple[int, int | None, str | None, Any]] = []
        self._phase = 0  # 0: expect response.created, 1: expect response.in_progress, 2: open
        self._response_id: str | None = None
        self._end: tuple[int, str] | None = None  # (position, type) of the terminal event
        self._failed_after_error = False
        self._after_end: list[int] = []

    def _report(self, rule: str, message: str) -> None:
        position, seq, etype = self._where
        self._violations.append(
            Violation(
                position=position, sequence_number=seq, event_type=etype, rule=rule, message=message
            )
        )

    # -- per event --------------------------------------------------------------------------

    def events(self, batch: Iterable[Mapping[str, Any] | object]) -> None:
        """The next events of the stream, in order.

        Nearly every event of a long stream is a quiet delta into the same text as the one
        before it (issue 16). After `_quiet` took a delta, the next one is taken here by
        comparing its fields with that delta's (the same type, item, index and part; its own
        sequence number; a string delta; no logprobs): what `_quiet` found about that target
        (open, of the right type, its tool not running) still holds, because only the general
        path changes it, and any event the general path sees ends the run."""
        position = self._count
        quiet, general = self._quiet, self._general
        kind: object = _NO_TYPE
        index: int = 0
        item_id: str = ""
        part_field: str | None = None
        part_index: object = None
        logprobs = False
        nowhere: list[str] = []
        append: Callable[[str], None] = nowhere.append  # to the last quiet delta's text
        for raw in batch:
            if type(raw) is dict:
                if (
                    type(etype := raw.get("type")) is str
                    and etype == kind
                    and type(seq := raw.get("sequence_number")) is int
                    and seq == position
                    and type(at := raw.get("output_index")) is int
                    and at == index
                    and type(iid := raw.get("item_id")) is str
                    and iid == item_id
                    and type(delta := raw.get("delta")) is str
                    and (
                        part_field is None
                        or (type(pi := raw.get(part_field)) is int and pi == part_index)
                    )
                    and (not logprobs or (type(lp := raw.get("logprobs")) is list and not lp))
                ):
                    append(delta)
                    position += 1
                    continue
                texts = quiet(position, raw)
                if texts is not None:  # the next deltas are compared with this one
                    kind, index, item_id = raw["type"], raw["output_index"], raw["item_id"]
                    _, logprobs, part_field = _QUIET[raw["type"]]
                    part_index = None if part_field is None else raw[part_field]
                    append = texts.append
                    position += 1
                    continue
            self._count = position + 1
            general(position, raw)
            kind = _NO_TYPE
            position += 1
        self._count = position

    def event(self, position: int, raw: object) -> None:
        """The event at `position` (the stream's events are given in order)."""
        self._count = position + 1
        if type(raw) is dict and self._quiet(position, raw) is not None:
            return
        self._general(position, raw)

    def _quiet(self, position: int, raw: dict[str, Any]) -> list[str] | None:
        """The fast path, for the events nearly every stream is made of: a delta that breaks no
        rule changes only its text, which is appended; the list of its text's deltas is
        returned. Quiet means in its place (R3), after the opening and before the end (R4,
        R6), without logprobs (R2, R30), and, judged by `Items.quiet_delta`, into the right
        open item and part (R11-R16) whose tool has not run yet (R27). None: nothing changed,
        and the general path judges the event."""
        if self._phase != 2 or self._end is not None:
            return None
        etype = raw.get("type")
        quiet = _QUIET.get(etype) if type(etype) is str else None
        if quiet is None:
            return None
        seq = raw.get("sequence_number")
        entries = raw.get("logprobs") if quiet[1] else []
        if type(seq) is int and seq == position and type(entries) is list and not entries:
            return self._items.quiet_delta(raw, quiet[0], self._tools.running)
        return None

    def _general(self, position: int, raw: object) -> None:
        """Every rule, in order, for one event."""
        self._where = (position, None, None)
        ev = self._as_wire(raw)
        if ev is None:
            return
        seq = ev.get("sequence_number")
        etype = ev.get("type")
        self._where = (
            position,
            seq if _is_int(seq) else None,
            etype if isinstance(etype, str) else None,
        )
        if seq != position or not _is_int(seq):
            self._seq_off.append((position, self._where[1], self._where[2], seq))
        if not isinstance(etype, str):
            self._report("R1", f"event has no string `type` (saw {w.short(etype)})")
            return
        if etype not in w.KNOWN_TYPES:
            self._report(
                "R1",
                f"unknown event type {etype!r}: it is not in the openai SDK's "
                "ResponseStreamEvent union, so strict clients reject it",
            )
            self._order(position, etype)
            return
        bad = self._shape(ev, etype)
        if not self._order(position, etype):
            return
        self._opening(position, etype)
        self._dispatch(position, ev, etype, bad)

    def _as_wire(self, raw: object) -> Mapping[str, Any] | None:
        if w.is_mapping(raw):
            return raw
        if isinstance(raw, _JSON_SCALARS):
            self._report("R1", f"event is not a JSON object: {w.short(raw)}")
            return None
        try:
            to_dict = getattr(raw, "to_dict", None)
            if callable(to_dict):  # an openai SDK event, as `responses.create(stream=True)` yields
                wire = to_dict(mode="json")
            else:
                from streamfold.statemachine import to_wire  # lazy: the event model is optional

                wire = to_wire(raw)
        except Exception as exc:  # reported, not swallowed: the input is not a usable event
            self._report(
                "R1",
                f"{type(raw).__name__} object is neither a wire-JSON mapping nor "
                f"a streamfold event that to_wire() converts ({exc!r})",
            )
            return None
        if not isinstance(wire, Mapping):
            self._report(
                "R1",
                f"to_wire() turned {type(raw).__name__} into {w.short(wire)}, not a JSON object",
            )
            return None
        return wire

    def _shape(self, ev: Mapping[str, Any], etype: str) -> set[str]:
        bad: set[str] = set()
        problems = []
        for key, kind in w.FIELDS[etype].items():
            why = w.type_error(ev[key], kind) if key in ev else "is missing"
            if why is not None:
                bad.add(key)
                problems.append(f"{key} {why}")
        response = ev.get("response")
        if "response" not in bad and w.is_mapping(response):
            for key, kind in w.RESPONSE_FIELDS.items():
                why = w.type_error(response[key], kind) if key in response else "is missing"
                if why is not None:
                    problems.append(f"response.{key} {why}")
        if problems:
            self._report("R2", "; ".join(problems))
        return bad

    def _order(self, position: int, etype: str) -> bool:
        """R6 bookkeeping; False when the event comes after the stream already ended."""
        if self._end is None:
            return True
        if self._end[1] == "error" and etype == "response.failed" and not self._failed_after_error:
            self._failed_after_error = True
            return True
        self._after_end.append(position)
        return False

    def _opening(self, position: int, etype: str) -> None:
        """R4: response.created, then (response.queued,) response.in_progress."""
        if etype == "response.created":
            if position == 0:
                self._phase = 1
            else:
                self._report("R4", "response.created must be the first event and only that")
        elif etype == "response.queued":
            if self._phase != 1:
                self._report(
                    "R4",
                    "response.queued may only come between response.created "
                    "and response.in_progress",
                )
        elif etype == "response.in_progress":
            if self._phase == 1:
                self._phase = 2
            else:
                what = "first" if self._phase == 0 else "a second time"
                self._report(
                    "R4",
                    f"response.in_progress {what}; it comes once, right after response.created",
                )
                self._phase = 2
        elif self._phase < 2:
            expected = "response.created" if self._phase == 0 else "response.in_progress"
            self._report("R4", f"expected {expected} before {etype}")
            self._phase = 2

    def _dispatch(self, position: int, ev: Mapping[str, Any], etype: str, bad: set[str]) -> None:
        for rule, message in s.client_problems(ev, etype, bad):
            self._report(rule, message)
        items = self._items
        if etype in w.LIFECYCLE:
            self._lifecycle(position, ev, etype, bad)
        elif etype == "error":
            self._error(position, ev)
        elif etype == "response.output_item.added":
            items.added(position, ev, bad)
        elif etype == "response.output_item.done":
            items.done(position, ev, bad)
            it = self._item_at(ev, bad)
            if it is not None and it.done_at == position and it.done_item is not None:
                self._tools.done(it.index, it.done_item)
        elif etype in w.PART_EVENTS:
            items.part_event(position, ev, bad, etype)
        elif etype in w.DELTAS or etype in w.DONES:
            items.text_event(position, ev, bad, etype)
            it = self._item_at(ev, bad)
            if it is not None and it.done_at is None:
                self._tools.text(it.index, it.type, etype)
        elif etype in w.PROGRESS:
            it = items.target(ev, bad, etype, frozenset({w.PROGRESS[etype]}))
            if it is not None:
                self._tools.stage(it.index, w.PROGRESS[etype], etype)
        elif etype.startswith("response.shell_call_command."):
            items.target(ev, bad, etype, frozenset({"shell_call"}))
        # audio events belong to no item; nothing more to check

    def _item_at(self, ev: Mapping[str, Any], bad: set[str]) -> Any:
        index = None if "output_index" in bad else w.get_index(ev, "output_index")
        return None if index is None else self._items.by_index.get(index)

    # -- lifecycle --------------------------------------------------------------------------

    def _lifecycle(self, position: int, ev: Mapping[str, Any], etype: str, bad: set[str]) -> None:
        response = None if "response" in bad else ev.get("response")
        if etype in w.TERMINAL:
            self._end = (position, etype)
        if not isinstance(response, Mapping):
            return
        response_id = response.get("id")
        if response_id == "":
            self._report("R5", "response.id is empty")
        elif isinstance(response_id, str):
            if self._response_id is None:
                self._response_id = response_id
            elif response_id != self._response_id:
                self._report(
                    "R5",
                    f"response.id {response_id!r} differs from "
                    f"{self._response_id!r}, the id the stream started with",
                )
        status_rules(etype, response, self._report)
        if etype == "response.completed":
            usage_rule(response, self._report)
            content_rules(response, self._report)
        if etype in w.TERMINAL:
            budget_rule(response, self._report)
            terminal_rules(response, self._items, self._report)

    def _error(self, position: int, ev: Mapping[str, Any]) -> None:
        message = ev.get("message")
        nested = w.get(ev.get("error"), "message")
        if not isinstance(message, str) and not isinstance(nested, str):
            self._report(
                "R23",
                "an error event must carry `message` (documented shape) or "
                "`error.message` (the nested shape OpenAI sends)",
            )
        self._end = (position, "error")

    # -- end of stream ----------------------------------------------------------------------

    def finish(self) -> list[Violation]:
        self._report_sequence_runs()
        end = (self._count, None, None)
        if self._end is None:
            self._where = end
            what = f"after {self._count} events" if self._count else "empty"
            self._report(
                "R6",
                f"the stream ended {what} without a terminal event "
                "(response.completed, response.incomplete or response.failed)",
            )
        elif self._after_end:
            first = self._after_end[0]
            self._where = (first, None, None)
            self._report(
                "R6",
                f"{len(self._after_end)} event(s) follow the terminal "
                f"{self._end[1]} at position {self._end[0]} (first at position "
                f"{first}); nothing may follow it except one response.failed "
                "after an error event",
            )
        return sorted(self._violations, key=lambda v: v.position)

    def _report_sequence_runs(self) -> None:
        """R3, one report per run of consecutive off-sequence events, not one per event."""
        runs: list[list[tuple[int, int | None, str | None, Any]]] = []
        for entry in self._seq_off:
            if runs and runs[-1][-1][0] == entry[0] - 1:
                runs[-1].append(entry)
            else:
                runs.append([entry])
        for run in runs:
            position, seq, etype, raw = run[0]
            self._where = (position, seq, etype)
            seen = "missing" if raw is None else w.short(raw)
            more = f"; the next {len(run) - 1} event(s) are off too" if len(run) > 1 else ""
            self._report(
                "R3",
                f"sequence_number must be {position} (the event's place in the "
                f"stream), saw {seen}{more}",
            )


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
