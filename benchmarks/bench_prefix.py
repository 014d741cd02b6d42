"""The prefix cache on an agent-shaped workload: the same engine with the cache on and off.

    python benchmarks/bench_prefix.py [--conversations 16] [--generations 5] [--prefix 3000]

Each conversation shares one `--prefix`-token start (instructions and tool list), adds its own
`--user` tokens, and runs `--generations` generations one after another, each of `--output`
greedy tokens (lengths forced: no stop ids); every later prompt is the previous prompt, its
answer and a `--tool`-token tool result, as an agent loop resends it. All conversations run at
once through `NativeEngine` (continuous batching). The model is bench_engine's tiny CPU shape
(random weights, 4 layers, hidden 256, vocab 32000, sliding window 128). For each setting, in
the same run on the same weights: prompt tokens computed (prefill) and taken from the cache,
the share of each follow-up generation's prompt the cache served, the time to first token of
first and follow-up generations (median and p90, from the `generate` call, queueing included),
and generated tokens per second over the whole run. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from streamfold.engines import GenerationRequest, SamplingParams
from streamfold.engines.native.core import EngineCore
from streamfold.engines.native.engine import NativeEngine
from streamfold.engines.native.gptoss.model import GptOssModel

sys.path.insert(0, str(Path(__file__).parent))
from bench_engine import build_checkpoint


def conversations(args: argparse.Namespace) -> list[tuple[list[int], list[list[int]]]]:
    """Per conversation: its first prompt, and the tool results after each generation."""
    rng = random.Random(args.seed)
    prefix = [rng.randrange(args.vocab) for _ in range(args.prefix)]
    out = []
    for _ in range(args.conversations):
        first = prefix + [rng.randrange(args.vocab) for _ in range(args.user)]
        tools = [
            [rng.randrange(args.vocab) for _ in range(args.tool)]
            for _ in range(args.generations - 1)
        ]
        out.append((first, tools))
    return out


async def run(engine: NativeEngine, work: list[tuple[list[int], list[list[int]]]], n: int) -> dict:
    ttft: dict[int, list[float]] = {}
    served: list[float] = []  # follow-ups: cached share of the prompt
    produced = 0

    async def conversation(c: int, prompt: list[int], tools: list[list[int]]) -> None:
        nonlocal produced
        for g in range(len(tools) + 1):
            request = GenerationRequest(
                request_id=f"c{c}g{g}", prompt_token_ids=tuple(prompt), max_output_tokens=n,
                sampling=SamplingParams(temperature=0.0),
            )  # fmt: skip
            started = time.perf_counter()
            answer: list[int] = []
            cached = 0
            async for chunk in engine.generate(request):
                if not answer and chunk.token_ids:
                    ttft.setdefault(g, []).append(time.perf_counter() - started)
                answer += chunk.token_ids
                cached = chunk.cached_tokens
            produced += len(answer)
            if g:
                served.append(cached / len(prompt))
            if g < len(tools):
                prompt = prompt + answer + tools[g]

    await asyncio.gather(*(conversation(c, p, t) for c, (p, t) in enumerate(work)))
    return {"ttft": ttft, "served": served, "produced": produced}


def measure(model: GptOssModel, args: argparse.Namespace, cache: bool) -> dict:
    core = EngineCore(
        model, block_size=args.block_size, kv_cache_bytes=args.kv_mib * 2**20,
        max_num_seqs=args.conversations, prefix_cache=cache,
    )  # fmt: skip
    with NativeEngine(core, threads=args.threads) as engine:
        started = time.perf_counter()
        result = asyncio.run(run(engine, conversations(args), args.output))
        result["seconds"] = time.perf_counter() - started
    result["prefill"] = core.scheduler.num_prefill_tokens
    result["cached"] = core.scheduler.num_cached_tokens
    result["preemptions"] = core.scheduler.num_preemptions
    return result


def _ms(values: list[float], q: float) -> str:
    ordered = sorted(values)
    return f"{1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument("--generations", type=int, default=5)
    parser.add_argument("--prefix", type=int, default=3000)
    parser.add_argument("--user", type=int, default=50)
    parser.add_argument("--tool", type=int, default=40)
    parser.add_argument("--output", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--kv-mib", type=int, default=512)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        build_checkpoint(Path(tmp), args)
        model = GptOssModel.from_pretrained(tmp)
    print(
        f"{args.conversations} conversations x {args.generations} generations, "
        f"{args.prefix}-token shared prefix, +{args.user} user, +{args.tool} per tool result, "
        f"{args.output} tokens out; {args.threads} thread(s)\n"
    )
    print(
        "| prefix cache | prefill tokens computed | from cache | follow-up prompt from cache"
        " (min / median) | TTFT first gen ms (p50 / p90) | TTFT follow-ups ms (p50 / p90)"
        " | tokens/s | wall s | preemptions |"
    )
    print("|---|---|---|---|---|---|---|---|---|", flush=True)
    results = {}
    for cache in (False, True):
        r = results[cache] = measure(model, args, cache)
        later = [t for g, ts in r["ttft"].items() if g for t in ts]
        first = r["ttft"][0]
        served = r["served"] or [0.0]
        print(
            f"| {'on' if cache else 'off'} | {r['prefill']} | {r['cached']} "
            f"| {min(served):.1%} / {statistics.median(served):.1%} "
            f"| {_ms(first, 0.5)} / {_ms(first, 0.9)} | {_ms(later, 0.5)} / {_ms(later, 0.9)} "
            f"| {r['produced'] / r['seconds']:.1f} | {r['seconds']:.1f} | {r['preemptions']} |",
            flush=True,
        )
    off, on = results[False], results[True]
    off_later = statistics.median([t for g, ts in off["ttft"].items() if g for t in ts])
    on_later = statistics.median([t for g, ts in on["ttft"].items() if g for t in ts])
    print(f"\nfollow-up TTFT p50: {off_later / on_later:.1f}x lower with the cache")


if __name__ == "__main__":
    main()
