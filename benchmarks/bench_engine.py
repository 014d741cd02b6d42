"""Native engine throughput against transformers `generate`, same model, same threads.

    python benchmarks/bench_engine.py [--device {cpu,cuda}] [--reps 3]
    python benchmarks/bench_engine.py --shape gpt-oss-20b [--experts {bf16,mxfp4}] [--layers N]

`--shape tiny` (the default; nano-vllm style): 16 requests, prompt lengths uniform in 16..256,
output lengths uniform in 16..128, greedy, lengths forced (no stop tokens). Counted: generated
tokens only.
* native: the 16 requests sent concurrently to `NativeEngine` (asyncio), continuous batching
  over the paged KV cache;
* transformers sequential: `generate` one request at a time (bs=1), each its own length;
* transformers padded batch: one left-padded batch of 16, `max_new_tokens` = the longest
  output; tokens past a request's own length are wasted work, as in a static-batch server.
The median of `--reps` runs after one warm-up each. Prints a markdown table.

`--shape gpt-oss-20b`: the real 20b shapes with random weights (see engine_shapes.py; `--layers`
shrinks the 24 layers to fit a CPU run), the engine core against transformers on the same
weights: one stream (`--stream P N`: an N-token answer to a P-token prompt; also the decode
rate alone, from the time of 1 token subtracted) and a batch (`--batch R`, prompts and outputs
uniform in `--batch-prompt` and `--batch-output`; transformers as one padded batch), with the
roofline: bytes of weights a decoded token reads / the device's measured copy bandwidth.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from streamfold.engines import GenerationRequest, SamplingParams
from streamfold.engines.native.core import EngineCore
from streamfold.engines.native.engine import NativeEngine
from streamfold.engines.native.gptoss.model import GptOssModel
from streamfold.engines.native.paged_attention import PagedKVCache


def build_checkpoint(path: Path, args: argparse.Namespace) -> object:
    from transformers import GptOssConfig, GptOssForCausalLM

    torch.manual_seed(0)
    config = GptOssConfig(
        num_hidden_layers=args.layers, hidden_size=args.hidden, intermediate_size=args.hidden,
        head_dim=64, num_attention_heads=8, num_key_value_heads=2, num_local_experts=8,
        num_experts_per_tok=2, vocab_size=args.vocab, sliding_window=128,
    )  # fmt: skip
    model = GptOssForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "bias" in name or "sinks" in name:
                param.normal_(0, 0.2)
    model.save_pretrained(path)
    return model.eval()


def workload(args: argparse.Namespace) -> list[tuple[list[int], int]]:
    rng = random.Random(args.seed)
    return [
        ([rng.randrange(args.vocab) for _ in range(rng.randint(16, 256))], rng.randint(16, 128))
        for _ in range(args.requests)
    ]


def run_native(engine: NativeEngine, jobs: list[tuple[list[int], int]], tag: str) -> int:
    async def one(i: int, prompt: list[int], n: int) -> int:
        request = GenerationRequest(
            request_id=f"{tag}-{i}", prompt_token_ids=tuple(prompt), max_output_tokens=n,
            sampling=SamplingParams(temperature=0.0),
        )  # fmt: skip
        return sum([len(c.token_ids) async for c in engine.generate(request)])

    async def main() -> int:
        counts = await asyncio.gather(*(one(i, p, n) for i, (p, n) in enumerate(jobs)))
        return sum(counts)

    return asyncio.run(main())


def run_hf_sequential(hf: object, jobs: list[tuple[list[int], int]], device: str) -> int:
    total = 0
    for prompt, n in jobs:
        ids = torch.tensor([prompt], device=device)
        with torch.no_grad():
            out = hf.generate(  # type: ignore[attr-defined]
                ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0
            )
        total += out.shape[1] - len(prompt)
    return total


def run_hf_padded(hf: object, jobs: list[tuple[list[int], int]], device: str) -> int:
    width = max(len(p) for p, _ in jobs)
    ids = torch.tensor([[0] * (width - len(p)) + p for p, _ in jobs], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in jobs], device=device)
    longest = max(n for _, n in jobs)
    with torch.no_grad():
        hf.generate(  # type: ignore[attr-defined]
            ids, attention_mask=mask, max_new_tokens=longest, min_new_tokens=longest,
            do_sample=False, pad_token_id=0,
        )  # fmt: skip
    return sum(n for _, n in jobs)  # only each request's own tokens are useful


def timed(fn: Callable[[], int], device: str) -> tuple[float, int]:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    tokens = fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=None, help="tiny: 4, 20b: 24")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-sequential", action="store_true")
    parser.add_argument("--shape", choices=("tiny", "gpt-oss-20b"), default="tiny")
    parser.add_argument("--experts", choices=("bf16", "mxfp4"), default="bf16")
    parser.add_argument("--stream", type=int, nargs=2, default=(256, 256), metavar=("P", "N"))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--batch-prompt", type=int, nargs=2, default=(128, 1024))
    parser.add_argument("--batch-output", type=int, nargs=2, default=(64, 256))
    parser.add_argument("--bandwidth-gbs", type=float, default=None,
                        help="stated bandwidth (GB/s) for a second roofline figure")  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.layers is None:
        args.layers = 4 if args.shape == "tiny" else 24
    if args.shape == "gpt-oss-20b":
        from engine_shapes import run_20b

        run_20b(args)
        return
    device = args.device
    jobs = workload(args)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        hf = build_checkpoint(Path(tmp), args)
        hf.to(device)  # type: ignore[attr-defined]
        model = GptOssModel.from_pretrained(tmp, device=device)
    core = EngineCore(model, block_size=args.block_size, default_stop_token_ids=())
    systems: dict[str, Callable[[], int]] = {}
    # The transformers runs use `--threads` threads; so does the engine thread (its own default
    # is every core but one, for serving).
    with NativeEngine(core, threads=args.threads) as engine:
        counter = iter(range(10**6))
        systems["native engine (paged, continuous batching)"] = lambda: run_native(
            engine, jobs, f"r{next(counter)}"
        )
        if not args.skip_sequential:
            systems["transformers generate, sequential bs=1"] = lambda: run_hf_sequential(
                hf, jobs, device
            )
        systems["transformers generate, padded batch of 16"] = lambda: run_hf_padded(
            hf, jobs, device
        )
        for fn in systems.values():  # warm-up
            fn()
        times: dict[str, list[float]] = {name: [] for name in systems}
        tokens: dict[str, int] = {}
        for _ in range(args.reps):  # interleaved, so machine load hits all alike
            for name, fn in systems.items():
                elapsed, tokens[name] = timed(fn, device)
                times[name].append(elapsed)
    print(
        f"\n{args.requests} requests, prompts 16..256, outputs 16..128 tokens, greedy; model"
        f" hidden {args.hidden}, {args.layers} layers, 8 experts top-2, vocab {args.vocab},"
        f" fp32; device {device}, {args.threads} threads; median of {args.reps};"
        f" load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after\n"
    )
    print("| system | generated tokens | seconds: median (min-max) | tokens/s |")
    print("|---|---:|---:|---:|")
    rates = {}
    for name in systems:
        med = statistics.median(times[name])
        rates[name] = tokens[name] / med
        spread = f"{min(times[name]):.2f}-{max(times[name]):.2f}"
        print(f"| {name} | {tokens[name]} | {med:.2f} ({spread}) | {rates[name]:.1f} |")
    native = rates.pop("native engine (paged, continuous batching)")
    best = max(rates, key=rates.__getitem__)
    print(f"\nnative / best transformers ({best}): {native / rates[best]:.2f}x\n")
    report_kv(core, jobs, args)


def report_kv(
    core: EngineCore, jobs: list[tuple[list[int], int]], args: argparse.Namespace
) -> None:
    """KV bytes at the native engine's peak step against a contiguous cache at that moment."""
    config = core.model.config
    per_block = PagedKVCache.bytes_per_block(config, args.block_size, core.model.dtype)
    live = core.tokens_at_peak
    paged = core.peak_blocks_in_use * per_block
    elem = torch.empty(0, dtype=core.model.dtype).element_size()
    per_token = 2 * config.num_hidden_layers * config.kv_heads_dim * elem
    max_len = max(len(p) + n for p, n in jobs)
    contiguous = len(jobs) * max_len * per_token
    print(f"KV cache at the native engine's peak step ({live} live tokens):\n")
    print("| KV cache | MiB | bytes per live token |")
    print("|---|---:|---:|")
    print(
        f"| paged, block {args.block_size}, sliding layers keep only their window"
        f" ({core.peak_blocks_in_use} blocks) | {paged / 2**20:.2f} | {paged / live:.0f} |"
    )
    print(
        f"| contiguous, {len(jobs)} sequences x max length {max_len} |"
        f" {contiguous / 2**20:.2f} | {contiguous / live:.0f} |"
    )
    print(f"| (K and V of every layer for one token) | | {per_token} |")


if __name__ == "__main__":
    main()
