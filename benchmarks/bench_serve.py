"""The whole stack: `streamfold serve --engine native` under the official openai client, next to
the engine core and transformers on the same prompts, in the same run.

    python benchmarks/bench_serve.py [--concurrency 1 16 64] [--tokens 32] [--steady 3]

Model: a random gpt-oss from `streamfold init-model` (4 layers, hidden 128, the full 201k
harmony vocabulary, fp32), or `--model DIR`. For each concurrency C and each of non-streaming
and streaming, a fresh server is started (default SQLite store, in a temporary directory) and
polled on `GET /health` until ready; then batches of C concurrent `responses.create` calls
(greedy, `max_output_tokens` = --tokens) run back to back: the first batch after ready is
reported apart from the steady state (the median of the next --steady batches). Then, in the
same process, the engine core (`EngineCore.run_to_completion` on the very prompt token ids the
server rendered, at 1 and at 2 torch threads) and transformers' padded batch `generate`.
This process imports torch and transformers and has run them: the "idle torch process beside
the server" of issue 18. Counted: generated tokens (`usage.output_tokens`).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import torch
from openai import AsyncOpenAI

from streamfold.adapters.server.prompt import render_prompt
from streamfold.adapters.server.requests import parse_create_request
from streamfold.engines import GenerationRequest, SamplingParams
from streamfold.engines.native.core import EngineCore
from streamfold.engines.native.gptoss.init_model import init_model


def body(i: int, tokens: int) -> dict[str, object]:
    return {
        "model": "tiny",
        "input": f"Request {i}: say hi.",
        "temperature": 0,
        "max_output_tokens": tokens,
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """`streamfold serve` in a subprocess (the native engine on `model`, else replay), ready
    once /health says 200."""

    def __init__(self, model: Path | None, store: str, extra: list[str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        engine = ["--engine", "native", "--model", str(model)] if model else []
        command = [sys.executable, "-m", "streamfold", "serve", *engine, "--port",
                   str(self.port), "--store", store, "--log-level", "warning", *extra]  # fmt: skip
        started = time.perf_counter()
        self.process = subprocess.Popen(command)
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}")
            time.sleep(0.1)
        self.ready_seconds = time.perf_counter() - started

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


async def warm_client() -> None:
    """The openai client builds its pydantic models on first use (1.9 s for the first
    `Response` parse here): pay that on a replay server, so that a native server's first batch
    measures the server."""
    server = Server(None, ":memory:", [])
    try:
        client = AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
        async with client:
            await client.responses.create(model="hello", input="hi")
            async for _ in await client.responses.create(model="hello", input="hi", stream=True):
                pass
    finally:
        server.close()


async def served_batches(
    url: str, concurrency: int, tokens: int, stream: bool, batches: int
) -> list[tuple[float, int]]:
    client = AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)

    async def one(i: int) -> int:
        if not stream:
            response = await client.responses.create(**body(i, tokens))  # type: ignore[call-overload]
            return int(response.usage.output_tokens)
        count = 0
        events = await client.responses.create(**body(i, tokens), stream=True)  # type: ignore[call-overload]
        async for event in events:
            if event.type in ("response.completed", "response.incomplete"):
                count = int(event.response.usage.output_tokens)
        return count

    out = []
    async with client:
        for _ in range(batches):
            start = time.perf_counter()
            counts = await asyncio.gather(*(one(i) for i in range(concurrency)))
            out.append((time.perf_counter() - start, sum(counts)))
    return out


def prompts(concurrency: int, tokens: int) -> list[tuple[int, ...]]:
    return [render_prompt(parse_create_request(body(i, tokens))) for i in range(concurrency)]


def run_core(core: EngineCore, ids: list[tuple[int, ...]], tokens: int, tag: str) -> int:
    requests = [
        GenerationRequest(request_id=f"{tag}-{i}", prompt_token_ids=p, max_output_tokens=tokens,
                          sampling=SamplingParams(temperature=0.0))
        for i, p in enumerate(ids)
    ]  # fmt: skip
    chunks = core.run_to_completion(requests)
    return sum(len(c.token_ids) for cs in chunks.values() for c in cs)


def run_hf_padded(hf: object, ids: list[tuple[int, ...]], tokens: int) -> int:
    width = max(len(p) for p in ids)
    batch = torch.tensor([[0] * (width - len(p)) + list(p) for p in ids])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in ids])
    with torch.no_grad():
        hf.generate(  # type: ignore[attr-defined]
            batch, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
            do_sample=False, pad_token_id=0,
        )  # fmt: skip
    return tokens * len(ids)


def timed_rate(fn: Callable[[], int], reps: int) -> list[float]:
    rates = []
    for _ in range(reps):
        start = time.perf_counter()
        n = fn()
        rates.append(n / (time.perf_counter() - start))
    return rates


def span(values: list[float]) -> str:
    return f"{statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help="a gpt-oss checkpoint (default: init-model)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--tokens", type=int, default=32, help="max_output_tokens per request")
    parser.add_argument("--steady", type=int, default=3, help="batches after the first")
    parser.add_argument("--core-threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    parser.add_argument("--skip-transformers", action="store_true")
    parser.add_argument("--server-arg", action="append", default=[], help="passed to serve")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or init_model(
            Path(tmp) / "tiny", hidden_size=128, intermediate_size=128, num_layers=4,
            dtype="float32", seed=0,
        )  # fmt: skip
        core = EngineCore.from_pretrained(model, max_num_seqs=max(args.concurrency))
        hf = None
        if not args.skip_transformers:
            from transformers import GptOssForCausalLM

            hf = GptOssForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
        asyncio.run(warm_client())
        rows = []
        for concurrency in args.concurrency:
            ids = prompts(concurrency, args.tokens)
            row: dict[str, object] = {"c": concurrency}
            for stream in (False, True):
                store = ":memory:" if args.store == "memory" else f"{tmp}/s{concurrency}{stream}.db"
                server = Server(model, store, args.server_arg)
                try:
                    batches = asyncio.run(served_batches(
                        server.url, concurrency, args.tokens, stream, 1 + args.steady))  # fmt: skip
                finally:
                    server.close()
                rates = [n / s for s, n in batches]
                row["stream" if stream else "json"] = (server.ready_seconds, rates)
                print(f"served c={concurrency} stream={stream}: tok/s {rates}", flush=True)
            for threads in args.core_threads:
                torch.set_num_threads(threads)
                run_core(core, ids, args.tokens, "warm")
                print(f"core and transformers, c={concurrency}, {threads} threads", flush=True)
                row[f"core{threads}"] = timed_rate(
                    functools.partial(run_core, core, ids, args.tokens, "core"), args.steady
                )
                if hf is not None:
                    run_hf_padded(hf, ids, args.tokens)
                    row[f"hf{threads}"] = timed_rate(
                        functools.partial(run_hf_padded, hf, ids, args.tokens), args.steady
                    )
            rows.append(row)
            print(row, flush=True)
    report(rows, args, load_before)


def report(
    rows: list[dict[str, object]], args: argparse.Namespace, load: tuple[float, ...]
) -> None:
    print(
        f"\n{args.tokens} output tokens per request, greedy; tiny random gpt-oss (4 layers,"
        f" hidden 128, vocab 201088, fp32); {os.cpu_count()} CPUs; store {args.store};"
        f" load average {load[0]:.1f} before, {os.getloadavg()[0]:.1f} after\n"
    )
    print("| concurrency | served | ready after s | first batch tok/s | steady tok/s median"
          " (range) | first / steady time | core / served steady |")  # fmt: skip
    print("|---:|---|---:|---:|---:|---:|---:|")
    for row in rows:
        core_best = max(statistics.median(row[f"core{t}"]) for t in args.core_threads)  # type: ignore[arg-type]
        for mode in ("json", "stream"):
            ready, rates = row[mode]  # type: ignore[misc]
            first, steady = rates[0], rates[1:]
            med = statistics.median(steady)
            print(f"| {row['c']} | {'streaming' if mode == 'stream' else 'not streaming'} |"
                  f" {ready:.1f} | {first:.0f} | {span(steady)} | {med / first:.2f}x |"
                  f" {core_best / med:.2f}x |")  # fmt: skip
    print("\n| concurrency | torch threads | engine core tok/s | transformers padded batch tok/s |"
          " served steady (best) / transformers |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|")
    for row in rows:
        served = max(statistics.median(row[m][1][1:]) for m in ("json", "stream"))  # type: ignore[index]
        for t in args.core_threads:
            hf = row.get(f"hf{t}")
            ratio = f"{served / statistics.median(hf):.2f}x" if hf else "-"  # type: ignore[arg-type]
            print(
                f"| {row['c']} | {t} | {span(row[f'core{t}'])} |"  # type: ignore[arg-type]
                f" {span(hf) if hf else '-'} | {ratio} |"
            )  # type: ignore[arg-type]
    print("\nTargets: first / steady time <= 1.3x; core (its best thread count) / served steady"
          " <= 1.2x.")  # fmt: skip


if __name__ == "__main__":
    main()
