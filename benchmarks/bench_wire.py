"""`statemachine.dumps` per event type: the generated class writers against the generic path.

    python benchmarks/bench_wire.py [--repeat 7] [--number 20000]

The events are the ones a streamed response is made of, with the `Response` the server builds
(`adapters/server/_prepare.py`: sampling, reasoning, max_output_tokens filled in). Columns:
`dumps` (what the server and `replay` call), the generic path it replaced for these events
(`json.dumps(to_wire(e), separators=(",", ":"), ensure_ascii=False)`: cattrs unstructure, then
`json`), and, for comparison only, cattrs unstructure + orjson (which writes NaN and
+/-Infinity as null and refuses ints beyond 64 bits and lone surrogates, so it cannot stand in
for `json` without checks). Times are the best of `--repeat` interleaved rounds of `--number`
calls each, in CPU time of this process (`time.process_time`), so other work on a shared
machine shows up less.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from streamfold.statemachine import _events as ev
from streamfold.statemachine import _model as m
from streamfold.statemachine._wire import dumps, to_wire

try:
    import orjson
except ImportError:  # no wheel for this interpreter: the column is left out
    orjson = None


def events() -> dict[str, Any]:
    response = m.Response(
        id="resp_0123456789abcdef0123456789abcdef",
        created_at=1763800000,
        model="gpt-oss-20b",
        status="in_progress",
        temperature=1.0,
        top_p=1.0,
        max_output_tokens=4096,
        reasoning=m.ReasoningConfig(effort="medium"),
        background=False,
    )
    item_id = "msg_0123456789abcdef0123456789abcdef_0"
    text = "Hello! How can I help you today?"
    part = m.ResponseOutputText(text=text)
    item = m.ResponseOutputMessage(
        id=item_id, status="completed", content=(part,), phase="final_answer"
    )
    done = m.Response(
        **{**{a.name: getattr(response, a.name) for a in m.Response.__attrs_attrs__ if a.init},
           "status": "completed", "output": (item,), "completed_at": 1763800001,
           "usage": m.ResponseUsage(input_tokens=20, output_tokens=9, total_tokens=29)}
    )  # fmt: skip
    logprobs = (
        m.TextLogprob(
            token="Hello",
            logprob=-0.0123,
            top_logprobs=(
                m.TextTopLogprob(token="Hello", logprob=-0.0123),
                m.TextTopLogprob(token="Hi", logprob=-4.5),
                m.TextTopLogprob(token=" Hey", logprob=float("-inf")),
            ),
        ),
    )
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    return {
        "response.created": ev.ResponseCreatedEvent(sequence_number=0, response=response),
        "response.in_progress": ev.ResponseInProgressEvent(sequence_number=1, response=response),
        "output_item.added": ev.ResponseOutputItemAddedEvent(
            sequence_number=2,
            output_index=0,
            item=m.ResponseOutputMessage(id=item_id, status="in_progress", phase="final_answer"),
        ),
        "content_part.added": ev.ResponseContentPartAddedEvent(
            sequence_number=3, part=m.ResponseOutputText(text=""), **where
        ),
        "output_text.delta": ev.ResponseTextDeltaEvent(sequence_number=4, delta="Hello", **where),
        "output_text.delta +logprobs": ev.ResponseTextDeltaEvent(
            sequence_number=4, delta="Hello", logprobs=logprobs, **where
        ),
        "output_text.done": ev.ResponseTextDoneEvent(sequence_number=5, text=text, **where),
        "content_part.done": ev.ResponseContentPartDoneEvent(sequence_number=6, part=part, **where),
        "output_item.done": ev.ResponseOutputItemDoneEvent(
            sequence_number=7, output_index=0, item=item
        ),
        "response.completed": ev.ResponseCompletedEvent(sequence_number=8, response=done),
    }


def generic(event: Any) -> str:
    return json.dumps(to_wire(event), separators=(",", ":"), ensure_ascii=False)


def with_orjson(event: Any) -> bytes:
    assert orjson is not None
    return orjson.dumps(to_wire(event))  # type: ignore[no-any-return]


def cpu_us(fn: Callable[[Any], object], event: Any, number: int) -> float:
    t0 = time.process_time()
    for _ in range(number):
        fn(event)
    return (time.process_time() - t0) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=20000)
    args = parser.parse_args()
    contenders: dict[str, Callable[[Any], object]] = {"dumps": dumps, "generic": generic}
    if orjson is not None:
        contenders["cattrs+orjson"] = with_orjson
    cases = events()
    for event in cases.values():
        assert dumps(event) == generic(event)  # the contract, before any timing
    best: dict[tuple[str, str], float] = {}
    for _ in range(args.repeat):
        for name, event in cases.items():
            for contender, fn in contenders.items():
                us = cpu_us(fn, event, args.number)
                key = (name, contender)
                best[key] = min(best.get(key, us), us)
    head = " | ".join(f"{c} µs" for c in contenders)
    print(f"| event | {head} | generic / dumps |")
    print("|---|" + "---:|" * (len(contenders) + 1))
    for name in cases:
        cells = " | ".join(f"{best[name, c]:.2f}" for c in contenders)
        ratio = best[name, "generic"] / best[name, "dumps"]
        print(f"| {name} | {cells} | {ratio:.1f}x |")


if __name__ == "__main__":
    main()
