"""Reducer speed against openai-harmony's Rust parser and a vLLM-style pipeline, in one run.

(a) `step` per token vs `StreamableParser.process` per token (parsing only, no events);
(b) tokens -> SSE bytes: streamfold (`step` + `sse_event`) vs the pipeline vLLM uses
    (StreamableParser, reading its deltas after every token, building the openai SDK's pydantic
    event classes and `model_dump_json`).

    python benchmarks/bench_reducer.py [--tokens 120000] [--repeat 5]

Each measure is the best of `--repeat` rounds, the rounds interleaved (every contender once per
round), timed in CPU time of this process (`time.process_time`): all contenders are
single-threaded, and CPU time keeps other work on a small shared machine out of the numbers.
streamfold is measured twice: `step` and `sse_event` as installed (the compiled hot paths of
`_speedups.c` where it was built) and the pure-Python reference functions (what
STREAMFOLD_PURE_PYTHON=1 runs).
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from typing import Any

from openai_harmony import Role, StreamableParser
from vllm_pipeline import vllm_style_sse  # benchmarks/, the peer shared by every benchmark

from streamfold.engines.vocab import harmony_encoding, load_harmony_vocabulary
from streamfold.statemachine import HarmonyGrammar, Response, _accel, finish, start
from streamfold.statemachine._reducer import step as python_step
from streamfold.statemachine._wire import sse_event as python_sse_event

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


Step = Callable[..., tuple[object, list[object]]]


def time_best(contenders: dict[str, Callable[[], object]], repeat: int) -> dict[str, float]:
    """Best CPU time of each contender over `repeat` interleaved rounds.

    Each round starts from a collected heap (the collector stays on while it runs): a full
    collection, whose cost grows with everything the process has loaded, otherwise landed
    inside a timed round by the luck of the allocation counts left by the rounds before. At
    100k tokens it put the compiled `step` at 0.72-0.82 us a token against 0.33 for 64b68ea's
    build, when both take 0.32-0.34 (timed per 20k-token block, or with this)."""
    best = dict.fromkeys(contenders, float("inf"))
    for _ in range(repeat):
        for name, fn in contenders.items():
            gc.collect()
            t0 = time.process_time()
            fn()
            best[name] = min(best[name], time.process_time() - t0)
    return best


def harmony_parse_only(tokens: list[int]) -> None:
    parser = StreamableParser(harmony_encoding(), Role.ASSISTANT)
    for token in tokens:
        parser.process(token)


def streamfold_reduce(tokens: list[int], grammar: HarmonyGrammar, step: Step) -> int:
    state, events = start(
        grammar, Response(id="resp_bench", created_at=0, model="m", status="in_progress")
    )
    n = len(events)
    for token in tokens:
        state, events = step(state, token)
        n += len(events)
    state, events = finish(state, "stop")
    return n + len(events)


def streamfold_sse(
    tokens: list[int], grammar: HarmonyGrammar, step: Step, sse_event: Callable[[Any], bytes]
) -> int:
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=120_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    grammar = HarmonyGrammar(vocabulary=load_harmony_vocabulary())
    tokens = completion(args.tokens)
    n = len(tokens)
    steps: dict[str, tuple[Step, Callable[[Any], bytes]]] = {
        "python": (python_step, python_sse_event)
    }
    if _accel.ACCELERATED:
        steps["compiled"] = (_accel.step, _accel.sse_event)
    contenders: dict[str, Callable[[], object]] = {
        "rust": lambda: harmony_parse_only(tokens),
        "vllm_sse": lambda: vllm_style_sse(tokens),
    }
    for name, (step, sse) in steps.items():
        contenders[f"{name}_step"] = lambda step=step: streamfold_reduce(tokens, grammar, step)
        contenders[f"{name}_sse"] = lambda step=step, sse=sse: streamfold_sse(
            tokens, grammar, step, sse
        )
    best = time_best(contenders, args.repeat)
    us = 1e6 / n
    rust, vllm_sse = best["rust"], best["vllm_sse"]
    print(f"trace: {n} tokens, best of {args.repeat} interleaved rounds, CPU time\n")
    print("| measure | streamfold `step` | streamfold | peer | ratio |")
    print("|---|---|---|---|---|")
    for name in steps:
        ours, ours_sse = best[f"{name}_step"], best[f"{name}_sse"]
        print(
            f"| (a) per token: `step` vs harmony `StreamableParser.process` | {name} | "
            f"{ours * us:.2f} µs | {rust * us:.2f} µs | "
            f"{ours / rust:.2f}× the Rust parser's time (target ≤ 1.5×) |"
        )
        print(
            f"| (b) tokens → SSE bytes vs vLLM-style pipeline | {name} | "
            f"{ours_sse * us:.2f} µs/token | {vllm_sse * us:.2f} µs/token | "
            f"{vllm_sse / ours_sse:.2f}× faster (target ≥ 4×) |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
