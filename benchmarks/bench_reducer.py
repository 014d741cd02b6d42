"""Reducer speed against openai-harmony's Rust parser and a vLLM-style pipeline, in one run.

(a) `step` per token vs `StreamableParser.process` per token (parsing only, no events);
(b) tokens -> SSE bytes: streamfold (`step` + `sse_event`) vs the pipeline vLLM uses
    (StreamableParser, reading its deltas after every token, building the openai SDK's pydantic
    event classes and `model_dump_json`).

    python benchmarks/bench_reducer.py [--tokens 120000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from openai.types.responses import (
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
    ResponseReasoningTextDeltaEvent,
    ResponseReasoningTextDoneEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)
from openai.types.responses.response_reasoning_item import Content
from openai_harmony import Role, StreamableParser

from streamfold.statemachine import HarmonyGrammar, Response, finish, sse_event, start, step
from streamfold.vocab import harmony_encoding, load_harmony_vocabulary

PARAGRAPH = (
    "The quick brown fox jumps over the lazy dog; streaming 🎉 tokens, naïve café, 你好世界. "
    "Each engine step may carry several tokens, and every one must reach exactly one event. "
)


def completion(n_tokens: int) -> list[int]:
    enc = harmony_encoding()
    unit = enc.encode(PARAGRAPH)
    messages = []
    per_message = max(len(unit), n_tokens // 8)
    for i in range(8):
        channel = "analysis" if i % 2 == 0 else "final"
        body = PARAGRAPH * (per_message // len(unit))
        prefix = "" if i == 0 else "<|start|>assistant"
        end = "<|return|>" if i == 7 else "<|end|>"
        messages.append(f"{prefix}<|channel|>{channel}<|message|>{body}{end}")
    return enc.encode("".join(messages), allowed_special="all")


def time_best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def harmony_parse_only(tokens: list[int]) -> None:
    parser = StreamableParser(harmony_encoding(), Role.ASSISTANT)
    for token in tokens:
        parser.process(token)


def streamfold_reduce(tokens: list[int], grammar: HarmonyGrammar) -> int:
    state, events = start(
        grammar, Response(id="resp_bench", created_at=0, model="m", status="in_progress")
    )
    n = len(events)
    for token in tokens:
        state, events = step(state, token)
        n += len(events)
    state, events = finish(state, "stop")
    return n + len(events)


def streamfold_sse(tokens: list[int], grammar: HarmonyGrammar) -> int:
    size = 0
    state, events = start(
        grammar, Response(id="resp_bench", created_at=0, model="m", status="in_progress")
    )
    for event in events:
        size += len(sse_event(event))
    for token in tokens:
        state, events = step(state, token)
        for event in events:
            size += len(sse_event(event))
    state, events = finish(state, "stop")
    for event in events:
        size += len(sse_event(event))
    return size


def vllm_style_sse(tokens: list[int]) -> int:
    """What vLLM's serving layer does per token: read the parser, build pydantic events."""
    parser = StreamableParser(harmony_encoding(), Role.ASSISTANT)
    size, seq, index = 0, 0, -1
    current: str | None = None
    text: list[str] = []

    def send(event: object) -> None:
        nonlocal size, seq
        data = event.model_dump_json()  # type: ignore[attr-defined]
        size += len(f"event: {event.type}\ndata: {data}\n\n".encode())  # type: ignore[attr-defined]
        seq += 1

    def close() -> None:
        joined = "".join(text)
        item_id = f"item_{index}"
        if current == "analysis":
            send(
                ResponseReasoningTextDoneEvent(
                    type="response.reasoning_text.done",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    text=joined,
                    sequence_number=seq,
                )
            )
            send(
                ResponseOutputItemDoneEvent(
                    type="response.output_item.done",
                    output_index=index,
                    sequence_number=seq,
                    item=ResponseReasoningItem(
                        type="reasoning",
                        id=item_id,
                        summary=[],
                        content=[Content(type="reasoning_text", text=joined)],
                        status="completed",
                    ),
                )
            )
        else:
            part = ResponseOutputText(type="output_text", text=joined, annotations=[], logprobs=[])
            send(
                ResponseTextDoneEvent(
                    type="response.output_text.done",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    text=joined,
                    logprobs=[],
                    sequence_number=seq,
                )
            )
            send(
                ResponseContentPartDoneEvent(
                    type="response.content_part.done",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    part=part,
                    sequence_number=seq,
                )
            )
            send(
                ResponseOutputItemDoneEvent(
                    type="response.output_item.done",
                    output_index=index,
                    sequence_number=seq,
                    item=ResponseOutputMessage(
                        type="message",
                        id=item_id,
                        role="assistant",
                        status="completed",
                        content=[part],
                    ),
                )
            )

    for token in tokens:
        parser.process(token)
        channel = parser.current_channel
        delta = parser.last_content_delta
        if channel is not None and channel != current and delta is not None:
            if current is not None:
                close()
            current, index, text = channel, index + 1, []
            item_id = f"item_{index}"
            if channel == "analysis":
                send(
                    ResponseOutputItemAddedEvent(
                        type="response.output_item.added",
                        output_index=index,
                        sequence_number=seq,
                        item=ResponseReasoningItem(
                            type="reasoning", id=item_id, summary=[], status="in_progress"
                        ),
                    )
                )
            else:
                send(
                    ResponseOutputItemAddedEvent(
                        type="response.output_item.added",
                        output_index=index,
                        sequence_number=seq,
                        item=ResponseOutputMessage(
                            type="message",
                            id=item_id,
                            role="assistant",
                            status="in_progress",
                            content=[],
                        ),
                    )
                )
                send(
                    ResponseContentPartAddedEvent(
                        type="response.content_part.added",
                        item_id=item_id,
                        output_index=index,
                        content_index=0,
                        sequence_number=seq,
                        part=ResponseOutputText(
                            type="output_text", text="", annotations=[], logprobs=[]
                        ),
                    )
                )
        if delta:
            text.append(delta)
            if current == "analysis":
                send(
                    ResponseReasoningTextDeltaEvent(
                        type="response.reasoning_text.delta",
                        item_id=f"item_{index}",
                        output_index=index,
                        content_index=0,
                        delta=delta,
                        sequence_number=seq,
                    )
                )
            else:
                send(
                    ResponseTextDeltaEvent(
                        type="response.output_text.delta",
                        item_id=f"item_{index}",
                        output_index=index,
                        content_index=0,
                        delta=delta,
                        logprobs=[],
                        sequence_number=seq,
                    )
                )
    if current is not None:
        close()
    return size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=120_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    grammar = HarmonyGrammar(vocabulary=load_harmony_vocabulary())
    tokens = completion(args.tokens)
    n = len(tokens)
    rust = time_best(lambda: harmony_parse_only(tokens), args.repeat)
    ours = time_best(lambda: streamfold_reduce(tokens, grammar), args.repeat)
    ours_sse = time_best(lambda: streamfold_sse(tokens, grammar), args.repeat)
    vllm_sse = time_best(lambda: vllm_style_sse(tokens), args.repeat)
    us = 1e6 / n
    print(f"trace: {n} tokens, best of {args.repeat}\n")
    print("| measure | streamfold | peer | ratio (streamfold / peer) |")
    print("|---|---|---|---|")
    print(
        f"| (a) per token: `step` vs harmony `StreamableParser.process` | "
        f"{ours * us:.2f} µs | {rust * us:.2f} µs | {ours / rust:.2f}× (target ≤ 1.5×) |"
    )
    print(
        f"| (b) tokens → SSE bytes vs vLLM-style pipeline | {ours_sse * us:.2f} µs/token | "
        f"{vllm_sse * us:.2f} µs/token | {vllm_sse / ours_sse:.2f}× faster (target ≥ 4×) |"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
