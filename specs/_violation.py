"""What the checker reports: one `Violation` per broken rule occurrence, and a readable report.

The rule ids and titles here are the numbered rules of `specs/README.md`; keep them in step.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

__all__ = ["RULES", "Violation", "format_report"]

RULES: dict[str, str] = {
    "R1": "each event is a JSON object whose `type` names a ResponseStreamEvent",
    "R2": "each event has the fields its type requires, with the SDK's JSON types",
    "R3": "sequence_number is 0, 1, 2, ... in stream order (no gaps, repeats or negatives)",
    "R4": "the stream opens with response.created then response.in_progress",
    "R5": "one response id throughout",
    "R6": "exactly one terminal event, and it is the last event",
    "R7": "lifecycle status agrees with the event type",
    "R8": "response.completed carries usage",
    "R9": "output_item.added output_index counts items from 0 without gaps",
    "R10": "each item is added once and done once",
    "R11": "items are not interleaved; item events refer to an open item",
    "R12": "item ids are non-empty, unique, and the same on every event of the item",
    "R13": "item events match the item's type",
    "R14": "parts are indexed from 0 per item, with a part type that fits the item",
    "R15": "part events refer to an open part; parts close before their item",
    "R16": "every streamed text is closed by exactly one .done event, after its deltas",
    "R17": "the deltas joined equal the .done text",
    "R18": "content_part.done carries the part's text",
    "R19": "output_item.done carries the item's text",
    "R20": "a function call keeps its call_id and name from added to done to the final output",
    "R21": "every item and part is done before the terminal lifecycle event",
    "R22": "the terminal response's output equals the done items, in order",
    "R23": "an error event carries a message",
    "R26": "an item is added unfinished and done finished",
    "R27": "a tool item's progress events come in order, once each, after its text",
    "R28": "a tool item's last progress event agrees with its done item",
    "R24": "an SSE message's `event:` name equals its data's `type`",
    "R25": "an SSE stream carries JSON events only (no `[DONE]` sentinel)",
    "R29": "keys the API always sends are present, as null when empty",
    "R30": "every logprob entry has token, logprob and a top_logprobs array",
    "R31": "a strict text.format answer (and strict function arguments) follow their schema",
    "R32": "tool_choice holds: required calls, named calls only that, none calls nothing",
    "R33": "usage.output_tokens is at most the response's max_output_tokens",
    "R34": "parallel_tool_calls false holds: at most one client call",
}


@attrs.frozen(kw_only=True)
class Violation:
    """One broken rule at one place in a stream.

    `position` is the event's index in the stream (0-based); a violation about how the stream
    ended has `position` equal to the number of events and `event_type` None.
    """

    position: int
    sequence_number: int | None
    event_type: str | None
    rule: str
    message: str

    @property
    def rule_title(self) -> str:
        return RULES.get(self.rule, "")


def _untyped(v: Violation, event_count: int | None) -> str:
    """Where a violation without an event type is: the end, a sentinel, or a typeless event."""
    if v.rule == "R25":
        return " data: [DONE]"
    if v.rule == "R6":
        ended = event_count is None or v.position >= event_count
        return " (end of stream)" if ended else " (after the terminal event)"
    return " (event without a type)"


def format_report(violations: Sequence[Violation], *, event_count: int | None = None) -> str:
    """A human-readable report: one block per violation, in stream order, then a summary."""
    counted = f"{event_count} events" if event_count is not None else "the stream"
    if not violations:
        return f"conformant: {counted}, no violations\n"
    lines = []
    for v in sorted(violations, key=lambda v: v.position):
        where = f"#{v.position}"
        if v.sequence_number is not None:
            where += f" seq={v.sequence_number}"
        where += f" {v.event_type}" if v.event_type is not None else _untyped(v, event_count)
        lines.append(f"{where}  [{v.rule}: {v.rule_title}]")
        lines.append(f"    {v.message}")
    by_rule: dict[str, int] = {}
    for v in violations:
        by_rule[v.rule] = by_rule.get(v.rule, 0) + 1
    rules = ", ".join(
        f"{rule}×{n}" for rule, n in sorted(by_rule.items(), key=lambda kv: int(kv[0][1:]))
    )
    noun = "violation" if len(violations) == 1 else "violations"
    lines.append(f"NOT conformant: {counted}, {len(violations)} {noun} ({rules})")
    return "\n".join(lines) + "\n"
