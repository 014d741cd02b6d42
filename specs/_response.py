"""Rules on the `response` object a lifecycle event carries (R7, R8, R20-R22).

Each rule is a function of that object (and, at the end, of the items the stream streamed),
reporting through the checker's `report(rule, message)`; none keeps state or raises on its
input. The checker (`_checker.py`) calls them, in this order, for every lifecycle event whose
`response` is an object:

- `status_rules` (R7), every lifecycle event: the status its type allows; an incomplete
  response says why (`incomplete_details.reason`), a failed one carries `error.code` and
  `error.message`.
- `usage_rule` (R8), `response.completed`: usage with its token counts, the total their sum.
- `terminal_rules` (R20-R22), the terminal event: no streamed item is left open (R21), the
  response's `output` is the items the stream finished, paired by position or, when the counts
  differ, by id (R22), and a function call keeps the `call_id` and `name` it was streamed with
  (R20).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from . import _wire as w
from ._items import Items

__all__ = ["status_rules", "terminal_rules", "usage_rule"]

Report = Callable[[str, str], None]

# The statuses each lifecycle event's response may carry (R7).
_STATUS = {
    "response.created": ("in_progress", "queued"),
    "response.queued": ("queued",),
    "response.in_progress": ("in_progress",),
    "response.completed": ("completed",),
    "response.incomplete": ("incomplete",),
    # The SDK's union has no response.cancelled event: a cancelled response ends as failed.
    "response.failed": ("failed", "cancelled"),
}
_USAGE = {
    "input_tokens": w.INDEX,
    "output_tokens": w.INDEX,
    "total_tokens": w.INDEX,
    "input_tokens_details": w.OBJ,
    "output_tokens_details": w.OBJ,
}


def status_rules(etype: str, response: Mapping[str, Any], report: Report) -> None:
    status = response.get("status")
    allowed = _STATUS[etype]
    if status not in allowed:
        report(
            "R7",
            f"{etype} must carry status {' or '.join(map(repr, allowed))}, saw {w.short(status)}",
        )
    if etype == "response.incomplete":
        reason = w.get(response.get("incomplete_details"), "reason")
        if not isinstance(reason, str) or not reason:
            report(
                "R7",
                "response.incomplete must say why in "
                f"incomplete_details.reason, saw {w.short(reason)}",
            )
    if etype == "response.failed":
        error = response.get("error")
        if not (isinstance(w.get(error, "message"), str) and isinstance(w.get(error, "code"), str)):
            report(
                "R7",
                "response.failed must carry error.code and error.message, "
                f"saw error={w.short(error)}",
            )


def usage_rule(response: Mapping[str, Any], report: Report) -> None:
    usage = response.get("usage")
    if not isinstance(usage, Mapping):
        report("R8", f"response.completed must carry usage, saw {w.short(usage)}")
        return
    problems = []
    for key, kind in _USAGE.items():
        why = w.type_error(usage[key], kind) if key in usage else "is missing"
        if why is not None:
            problems.append(f"usage.{key} {why}")
    if not problems:
        total = usage["input_tokens"] + usage["output_tokens"]
        if usage["total_tokens"] != total:
            problems.append(
                f"usage.total_tokens is {usage['total_tokens']}, but "
                f"input_tokens + output_tokens = {total}"
            )
    if problems:
        report("R8", "; ".join(problems))


def terminal_rules(response: Mapping[str, Any], items: Items, report: Report) -> None:
    for it in items.open_items():
        parts = it.open_parts()
        also = f", with {len(parts)} part(s) still open" if parts else ""
        report("R21", f"{it.describe()} (added at position {it.added_at}) is never done{also}")
    output = response.get("output")
    if not isinstance(output, list):
        return
    done = items.done_items()
    pairs = list(zip(output, done, strict=False))
    if len(output) != len(done):
        # Positions no longer line up; pair the items by id so one missing item is one report.
        by_id = {w.get(final, "id"): final for final in output if w.get_str(final, "id")}
        pairs = [(by_id[it.id], it) for it in done if it.id in by_id]
        missing = [it.id for it in done if it.id not in by_id]
        extra = sorted(set(by_id) - {it.id for it in done})
        report(
            "R22",
            f"response.output has {len(output)} item(s), but the stream "
            f"finished {len(done)}; done but not in output: {missing}, "
            f"in output but never done: {extra}",
        )
    for final, it in pairs:
        where = f"response.output[{_position(output, final)}]"
        if it.type == "function_call":
            for key, value in (("call_id", it.call_id), ("name", it.name)):
                if w.get(final, key) != value:
                    report(
                        "R20",
                        f"{where}.{key} is {w.short(w.get(final, key))}, "
                        f"but the call was streamed with {value!r}",
                    )
        difference = w.first_difference(it.done_item, final, where)
        if difference is not None:
            report("R22", f"{difference} (compared with output_item.done at position {it.done_at})")


def _position(items: list[Any], item: Any) -> int:
    return next(k for k, candidate in enumerate(items) if candidate is item)
