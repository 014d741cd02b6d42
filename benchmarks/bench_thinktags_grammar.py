"""A think-tag model's structured-output grammar beside harmony's, on the same vocabulary.

    python benchmarks/bench_thinktags_grammar.py [--runs 7]

Both grammars are compiled for the same shape (a JSON answer following a nested schema with
free and patterned strings, the reasoning bounded by a 1,000-token budget) against o200k_harmony
(201,088 tokens; the think tags are spelled over ordinary tokens there, the think-tag grammar's
"no tag" patterns included). Reported, alternating the two in each run, the median and range
over `--runs` of compiling the grammar with its first mask; and the median of one mask over
every token of every run, in the reasoning and in the JSON answer apart. Inside the answer's
free string the think-tag grammar pays for its "no tag" pattern: llguidance takes its slow path
for any string with a `pattern` (even `^(?s:.*)$`), where a free string without one is cheap.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import llguidance

from streamfold.adapters.structured import (
    JsonBody,
    Shape,
    ThinkTagTokens,
    budget_shape,
    harmony_grammar,
    thinktags_grammar,
)
from streamfold.engines.guidance import Guidance
from streamfold.engines.vocab import harmony_encoding, load_harmony_vocabulary

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {
            "type": "array",
            "items": {"type": "string", "pattern": "^[A-Z][0-9]{2}$"},
            "maxItems": 3,
        },
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
ANSWER = '{"name":"Rex the dog, who is a good dog","age":3,"tags":["A12","B34"]}'
REASONING = "The user wants a pet as JSON. A dog named Rex, three years old, two tags. " * 3


def _run(guidance: Guidance, grammar: str, ids: list[int]) -> tuple[float, list[float]]:
    """(compile and first mask in ms, each token's mask in us, the mask after it)."""
    started = time.perf_counter()
    matcher = llguidance.LLMatcher(guidance.tokenizer, grammar, log_level=0)
    if matcher.is_error():
        raise RuntimeError(matcher.get_error())
    matcher.compute_bitmask()
    compiled = (time.perf_counter() - started) * 1e3
    masks = []
    for token in ids:
        if not matcher.consume_token(token):
            raise RuntimeError(f"the completion breaks the grammar: {matcher.get_error()}")
        started = time.perf_counter()
        matcher.compute_bitmask()
        masks.append((time.perf_counter() - started) * 1e6)
    return compiled, masks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    vocabulary = load_harmony_vocabulary()
    guidance = Guidance(vocabulary)
    encoding = harmony_encoding()
    shape = budget_shape(Shape(answer=JsonBody(schema=SCHEMA), calls=()), 1000)
    stop = vocabulary.special["<|return|>"]
    one_block = Shape(
        answer=JsonBody(schema=SCHEMA), calls=(), reasoning_tokens=shape.reasoning_tokens
    )
    cases = {
        "harmony": (
            harmony_grammar(shape),
            f"<|channel|>analysis<|message|>{REASONING}<|end|><|start|>assistant"
            f"<|channel|>final<|message|>{ANSWER}<|return|>",
        ),
        "thinktags": (
            thinktags_grammar(one_block, ThinkTagTokens(stop_ids=(stop,))),
            f"<think>\n{REASONING}\n</think>\n\n{ANSWER}<|return|>",
        ),
    }
    results: dict[str, list[tuple[float, list[float]]]] = {name: [] for name in cases}
    for _ in range(args.runs):
        for name, (grammar, text) in cases.items():  # alternated, run by run
            ids = list(encoding.encode(text, allowed_special="all"))
            results[name].append(_run(guidance, grammar, ids))
    for name, runs in results.items():
        grammar, text = cases[name]
        ids = list(encoding.encode(text, allowed_special="all"))
        # Where each token ends in the text: the reasoning, the answer's free string, the rest.
        ends = [len(encoding.decode(ids[: i + 1])) for i in range(len(ids))]
        value = text.index(ANSWER) + ANSWER.index("Rex")
        free = range(value, value + len("Rex the dog, who is a good dog"))
        phase = [
            "reasoning" if end <= text.index(ANSWER) else "string" if end in free else "answer"
            for end in ends
        ]
        compiled = [c for c, _ in runs]
        medians = {
            part: statistics.median(
                m for _, each in runs for m, p in zip(each, phase, strict=True) if p == part
            )
            for part in ("reasoning", "answer", "string")
        }
        print(
            f"{name:9} grammar {len(grammar):6} chars | compile+first mask "
            f"{statistics.median(compiled):.2f} ms ({min(compiled):.2f}-{max(compiled):.2f}) | "
            "mask median: " + ", ".join(f"{part} {us:.1f} us" for part, us in medians.items())
        )


if __name__ == "__main__":
    main()
