"""The native engine with and without a structured-output constraint, same run, same model.

    python benchmarks/bench_constrained.py [--concurrency 1 16 64] [--tokens 64] [--reps 3]
        [--device cpu|cuda] [--dtype float32|bfloat16] [--breakdown 16] [--overlap-fill 8]

The model is `init-model`'s random-weight gpt-oss (o200k_harmony's 201,088 tokens, so every
mask covers the real vocabulary); each request is a harmony prompt, sampled at temperature 1.0
with forced lengths (no stop tokens) so both sides generate exactly `--tokens` tokens. The
constrained side carries the JSON-schema grammar `responses.parse(text_format=...)` would get
(`structured.harmony_grammar`, free reasoning then a schema-bound answer); the reasoning bound
is set past `--tokens`, so a constrained sequence stays in its free analysis text as the
unconstrained one does and both run the same number of steps: what differs is only the mask.
Printed: tokens/s per level (median of `--reps`, free and constrained alternated) and their
ratio; the same per second of the process's CPU time (all threads; on a CPU machine shared
with other load, the figure that load moves least); the grammar's compile time (cold: a new
schema; cached: the same grammar again, a copy of the compiled matcher); the mask's cost per
sequence-step measured alone (llguidance filling a row on the host); and masking 16 rows of
logits on `--device`.

`--breakdown N` adds where a step's time goes, free against constrained (N rows, `EngineCore`
stepped directly, no event loop): the forward, filling the bitmask, masking the logits, the
rest of the sampling, and telling each matcher its token. On CUDA each phase is synchronised
to be timed, so the breakdown's steps are slower than the served engine's.

`--overlap-fill N` sets `EngineCore.OVERLAP_ROWS`: on the CPU, from N constrained rows, the
bitmask is filled in a thread of its own beside the forward (the breakdown's fill is then that
thread's CPU time, off the stepping thread's). Run with and without it, alternated, to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from streamfold.adapters.structured import JsonBody, Shape, harmony_grammar
from streamfold.engines import DecodingConstraint, GenerationRequest, SamplingParams
from streamfold.engines.guidance import GuidanceConstraint, guidance_for
from streamfold.engines.native import bitmask as bitmask_module
from streamfold.engines.native import build_native_engine
from streamfold.engines.native import core as core_module
from streamfold.engines.native import sampler as sampler_module
from streamfold.engines.native.core import EngineCore
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


def cpu_seconds() -> float:
    """This process's CPU time (every thread: the engine's, the event loop's)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(
    engine: object, n: int, tokens: int, decoding: DecodingConstraint | None
) -> tuple[float, float]:
    """Tokens per second of wall time, and per second of the process's CPU time."""
    cpu = cpu_seconds()
    start = time.perf_counter()
    made = asyncio.run(run(engine, n, tokens, decoding))
    wall = time.perf_counter() - start
    return made / wall, made / (cpu_seconds() - cpu)


async def run(engine: object, n: int, tokens: int, decoding: DecodingConstraint | None) -> int:
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
            if chunk.finish_reason == "error":  # a broken path must not pass for a slow one
                raise RuntimeError(f"request {request.request_id} failed: {chunk.error}")
            count += len(chunk.token_ids)
        return count

    counts = await asyncio.gather(*(one(i) for i in range(n)))
    return sum(counts)


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


def reasoning_and_json_masks(rows: int, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[rows, words] bitmasks as llguidance fills them: in free reasoning, in the JSON."""
    guidance = guidance_for(load_harmony_vocabulary())
    encoding = harmony_encoding()
    reasoning = "<|channel|>analysis<|message|> the pet"
    answer = reasoning + '<|end|><|start|>assistant<|channel|>final<|message|>{"name":"rex","age":'
    masks = []
    for text in (reasoning, answer):
        constraint = GuidanceConstraint(guidance.matcher(grammar(SCHEMA, tokens)))
        for token in encoding.encode(text, allowed_special="all"):
            constraint.advance(token)
        bitmask = torch.full((rows, guidance.row_words), -1, dtype=torch.int32)
        for row in range(rows):
            constraint.fill_bitmask(bitmask, row)
        masks.append(bitmask)
    return masks[0], masks[1]


def apply_cost(device: str, tokens: int, rows: int = 16) -> tuple[float, float]:
    """Milliseconds to mask `rows` rows of logits in place on `device` (median), with the
    reasoning mask and with the JSON one; the host-to-device copy of the mask included."""
    vocab = load_harmony_vocabulary()
    out = []
    for mask in reasoning_and_json_masks(rows, tokens):
        host = mask.pin_memory() if device == "cuda" else mask
        logits = torch.randn(rows, len(vocab), device=device)
        times = []
        for _ in range(50):
            _sync(device)
            start = time.perf_counter()
            bitmask_module.apply_token_bitmask_(logits, host.to(device, non_blocking=True))
            _sync(device)
            times.append(time.perf_counter() - start)
        out.append(statistics.median(times) * 1e3)
    return out[0], out[1]


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def breakdown(core: EngineCore, rows: int, tokens: int, device: str, reps: int) -> None:
    """Milliseconds per step in each phase, free and constrained alternated (medians of reps)."""
    times: dict[str, list[int]] = defaultdict(list)
    # On the CPU each phase is timed in this thread's CPU time (the machine's other load does
    # not count); on CUDA in wall time, synchronised.
    clock = time.thread_time_ns if device == "cpu" else time.perf_counter_ns

    def timed(owner: Any, name: str, label: str) -> Callable[[], None]:
        original = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            _sync(device)
            start = clock()
            result = original(*args, **kwargs)
            _sync(device)
            times[label].append(clock() - start)
            return result

        setattr(owner, name, wrapper)
        return lambda: setattr(owner, name, original)

    phases = [
        ("step", core, "step"),
        ("forward (prefill)", core, "_mixed_step"),
        ("fill bitmask (llguidance)", core, "_bitmask"),
        ("sampling, mask included", core_module, "sample_batch"),
        ("  mask the logits", sampler_module, "apply_token_bitmask_"),
        ("append, advance matchers", core, "_postprocess"),
    ]
    if core.static_decode is not None:
        phases.insert(1, ("forward (decode)", core.static_decode, "run"))
    restore = [timed(owner, name, label) for label, owner, name in phases]
    guidance = guidance_for(load_harmony_vocabulary())
    text = grammar(SCHEMA, tokens)
    per: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    try:
        for rep in range(reps + 1):  # the first pair warms up
            for constrained in (False, True):
                times.clear()
                core.run_to_completion(
                    [
                        GenerationRequest(
                            request_id=f"b{rep}-{constrained}-{i}",
                            prompt_token_ids=prompt(),
                            max_output_tokens=tokens,
                            sampling=SamplingParams(temperature=1.0, seed=i),
                            constraint=GuidanceConstraint(guidance.matcher(text))
                            if constrained
                            else None,
                        )
                        for i in range(rows)
                    ]
                )
                steps = len(times["step"])
                if rep:
                    per[constrained].append({k: sum(v) / steps / 1e6 for k, v in times.items()})
    finally:
        for undo in restore:
            undo()
    kind = "CPU time of the stepping thread" if device == "cpu" else "wall time"
    print(f"\nper step at {rows} rows (ms of {kind}; a run's mean step, median of {reps} runs):")
    print("| phase | free | constrained | added |")
    print("|---|---:|---:|---:|")
    for label, _, _ in phases:
        f = statistics.median(r.get(label, 0.0) for r in per[False])
        c = statistics.median(r.get(label, 0.0) for r in per[True])
        print(f"| {label} | {f:.2f} | {c:.2f} | {c - f:+.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--tokens", type=int, default=64, help="tokens per request")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument(
        "--breakdown", type=int, default=0, metavar="ROWS", help="time each phase of a step"
    )
    parser.add_argument(
        "--overlap-fill",
        type=int,
        default=None,
        metavar="ROWS",
        help="fill the bitmask beside the forward from ROWS constrained rows (CPU)",
    )
    args = parser.parse_args()
    EngineCore.OVERLAP_ROWS = args.overlap_fill
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")

    constraint = DecodingConstraint(grammar=grammar(SCHEMA, args.tokens))
    with tempfile.TemporaryDirectory() as tmp:
        model = init_model(Path(tmp) / "tiny", seed=0, dtype="float32")
        with build_native_engine(
            model,
            device=args.device,
            dtype=args.dtype,
            kv_cache_mb=256,
            max_num_seqs=max(args.concurrency),
            threads=args.threads,
        ) as engine:
            asyncio.run(run(engine, 4, 8, constraint))  # warm-up: tokenizer, kernels
            print(
                "| concurrent | free tok/s | constrained tok/s | constrained / free"
                " | per CPU-second: free | constrained | constrained / free |"
            )
            print("|---:|---:|---:|---:|---:|---:|---:|")
            for n in args.concurrency:
                free, held = [], []
                for _ in range(args.reps):  # alternated, so drift hits both alike
                    free.append(measure(engine, n, args.tokens, None))
                    held.append(measure(engine, n, args.tokens, constraint))
                f, h = (statistics.median(r[0] for r in runs) for runs in (free, held))
                fc, hc = (statistics.median(r[1] for r in runs) for runs in (free, held))
                print(
                    f"| {n} | {f:,.0f} | {h:,.0f} | {h / f:.2f}"
                    f" | {fc:,.0f} | {hc:,.0f} | {hc / fc:.2f} |"
                )
            threads = engine.threads
        if args.breakdown:  # the same model in a core of its own, stepped on this thread
            torch.set_num_threads(threads)
            core = EngineCore.from_pretrained(
                model,
                device=args.device,
                dtype=getattr(torch, args.dtype),
                kv_cache_bytes=256 * 2**20,
                max_num_seqs=args.breakdown,
            )
            breakdown(core, args.breakdown, args.tokens, args.device, args.reps)
    cold, cached = compile_costs(args.tokens)
    print()
    print(f"grammar compile per request: cold {cold:.2f} ms, cached {cached:.3f} ms (median of 20)")
    analysis, answer = mask_cost(args.tokens)
    print(f"mask per sequence-step: {analysis:.1f} us in analysis, {answer:.1f} us in the JSON")
    free_text, json = apply_cost(args.device, args.tokens)
    print(
        f"masking 16 rows of logits on {args.device}: {free_text:.3f} ms in analysis,"
        f" {json:.3f} ms in the JSON (median of 50)"
    )


if __name__ == "__main__":
    main()
