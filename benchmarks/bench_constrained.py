"""The native engine with and without a structured-output constraint, same run, same model.

    python benchmarks/bench_constrained.py [--concurrency 1 16 64] [--tokens 64] [--reps 3]

The model is `init-model`'s random-weight gpt-oss (o200k_harmony's 201,088 tokens, so every
mask covers the real vocabulary); each request is a harmony prompt, sampled at temperature 1.0
with forced lengths (no stop tokens) so both sides generate exactly `--tokens` tokens. The
constrained side carries the JSON-schema grammar `responses.parse(text_format=...)` would get
(`structured.harmony_grammar`, free reasoning then a schema-bound answer); the reasoning bound
is set past `--tokens`, so a constrained sequence stays in its free analysis text as the
unconstrained one does and both run the same number of steps: what differs is only the mask.
Printed: tokens/s per level (median of `--reps`), the ratio, the grammar's compile time (cold:
a new schema; cached: the same grammar again, a copy of the compiled matcher), and the mask's
cost per sequence-step measured alone.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import torch

from streamfold.adapters.structured import JsonBody, Shape, harmony_grammar
from streamfold.engines import DecodingConstraint, GenerationRequest, SamplingParams
from streamfold.engines.guidance import GuidanceConstraint, guidance_for
from streamfold.engines.native import build_native_engine
from streamfold.engines.native.gptoss.init_model import init_model
from streamfold.engines.vocab import harmony_encoding, load_harmony_vocabulary

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z]{2,8}$"},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "kind": {"type": "string", "enum": ["cat", "dog", "fish"]},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    },
    "required": ["name", "age", "kind", "tags"],
    "additionalProperties": False,
}


def grammar(schema: dict[str, object], tokens: int) -> str:
    return harmony_grammar(
        Shape(answer=JsonBody(schema=schema), calls=(), reasoning_tokens=tokens * 2)
    )


def prompt() -> tuple[int, ...]:
    text = "<|start|>user<|message|>Describe a pet.<|end|><|start|>assistant"
    return tuple(harmony_encoding().encode(text, allowed_special="all"))


async def run(engine: object, n: int, tokens: int, decoding: DecodingConstraint | None) -> float:
    ids = prompt()

    async def one(i: int) -> int:
        request = GenerationRequest(
            request_id=f"r{i}-{time.perf_counter_ns()}",
            prompt_token_ids=ids,
            max_output_tokens=tokens,
            sampling=SamplingParams(temperature=1.0, seed=i),
            decoding=decoding,
        )
        count = 0
        async for chunk in engine.generate(request):  # type: ignore[attr-defined]
            count += len(chunk.token_ids)
        return count

    start = time.perf_counter()
    counts = await asyncio.gather(*(one(i) for i in range(n)))
    return sum(counts) / (time.perf_counter() - start)


def compile_costs(tokens: int) -> tuple[float, float]:
    guidance = guidance_for(load_harmony_vocabulary())
    cold, cached = [], []
    for i in range(20):
        schema = {**SCHEMA, "title": f"pet{i}"}  # a new grammar each time: a cold compile
        text = grammar(schema, tokens)
        start = time.perf_counter()
        guidance.matcher(text)
        cold.append(time.perf_counter() - start)
        start = time.perf_counter()
        guidance.matcher(text)
        cached.append(time.perf_counter() - start)
    return statistics.median(cold) * 1e3, statistics.median(cached) * 1e3


def mask_cost(tokens: int) -> tuple[float, float]:
    """Microseconds to fill one sequence's mask (median): in free analysis text, and in the
    schema-bound JSON answer."""
    guidance = guidance_for(load_harmony_vocabulary())
    encoding = harmony_encoding()
    text = (
        "<|channel|>analysis<|message|> the pet is a small animal that lives at home"
        '<|end|><|start|>assistant<|channel|>final<|message|>{"name":"rex","age":7,'
        '"kind":"dog","tags":["a","b"]}'
    )
    ids = encoding.encode(text, allowed_special="all")
    answer_from = ids.index(encoding.encode("<|message|>", allowed_special="all")[0], 3)
    bitmask = torch.full((1, guidance.row_words), -1, dtype=torch.int32)
    analysis, answer = [], []
    for _ in range(5):
        constraint = GuidanceConstraint(guidance.matcher(grammar(SCHEMA, tokens)))
        for k, token in enumerate(ids):
            start = time.perf_counter()
            constraint.fill_bitmask(bitmask, 0)
            (answer if k > answer_from else analysis).append(time.perf_counter() - start)
            constraint.advance(token)
    return statistics.median(analysis) * 1e6, statistics.median(answer) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--tokens", type=int, default=64, help="tokens per request")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()

    constraint = DecodingConstraint(grammar=grammar(SCHEMA, args.tokens))
    with tempfile.TemporaryDirectory() as tmp:
        model = init_model(Path(tmp) / "tiny", seed=0, dtype="float32")
        with build_native_engine(
            model, kv_cache_mb=256, max_num_seqs=max(args.concurrency), threads=args.threads
        ) as engine:
            asyncio.run(run(engine, 4, 8, constraint))  # warm-up: tokenizer, kernels
            print("| concurrent | free tok/s | constrained tok/s | constrained / free |")
            print("|---:|---:|---:|---:|")
            for n in args.concurrency:
                free, held = [], []
                for _ in range(args.reps):  # alternated, so drift hits both alike
                    free.append(asyncio.run(run(engine, n, args.tokens, None)))
                    held.append(asyncio.run(run(engine, n, args.tokens, constraint)))
                f, h = statistics.median(free), statistics.median(held)
                print(f"| {n} | {f:,.0f} | {h:,.0f} | {h / f:.2f} |")
    cold, cached = compile_costs(args.tokens)
    print()
    print(f"grammar compile per request: cold {cold:.2f} ms, cached {cached:.3f} ms (median of 20)")
    analysis, answer = mask_cost(args.tokens)
    print(f"mask per sequence-step: {analysis:.1f} us in analysis, {answer:.1f} us in the JSON")


if __name__ == "__main__":
    main()
