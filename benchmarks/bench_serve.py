"""The whole stack: `streamfold serve --engine native` under the official openai client, next to
the engine core and transformers on the same prompts, in the same run.

    python benchmarks/bench_serve.py [--concurrency 1 16 64] [--tokens 32] [--steady 3]

Model: a random gpt-oss from `streamfold init-model` (4 layers, hidden 128, the full 201k
harmony vocabulary, fp32), or `--model DIR`. For each concurrency C and each of non-streaming
and streaming, a fresh server is started (default SQLite store, in a temporary directory) and
polled on `GET /health` until ready. Then batches of C concurrent `responses.create` calls
(greedy, `max_output_tokens` = --tokens) run: the first batch after ready is reported apart,
and each of the next --steady batches is followed at once by the engine core
(`EngineCore.run_to_completion`, in this process, on the very prompt token ids the server
rendered) at each --core-threads count, while the server sits idle. Served and core thus
alternate round by round, and each round's core / served ratio compares two runs a few
seconds apart: on a machine shared with other work, load that comes and goes between a served
phase and a later core phase otherwise decides the ratio (issue 18's first streaming
measurement, 1.71x, had the core measured minutes after the served batches at load 13-17).

CPU time is counted too (from /proc): the server's engine thread (named `streamfold-eng`), the
rest of the server (event loop, store, HTTP), this client process, and the core run; per
generated token it does not depend on what else the machine runs, so it says where a served
token's CPU goes. Transformers' padded-batch `generate` runs once per concurrency, after.
This process imports torch and transformers and has run them: the "idle torch process beside
the server" of issue 18. Counted: generated tokens (`usage.output_tokens`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import attrs
import httpx
import torch
from openai import AsyncOpenAI
from serve_timeline import SUMMARY_HEADER, decompose, print_decomposition, summary_row

from streamfold.adapters.formats import render_prompt
from streamfold.adapters.protocol import parse_create_request
from streamfold.engines import GenerationRequest, SamplingParams
from streamfold.engines.native._steplog import STEP_LOG_ENV, StepLog, read_step_log
from streamfold.engines.native.core import EngineCore
from streamfold.engines.native.engine import ENGINE_THREAD_NAME, default_engine_threads
from streamfold.engines.native.gptoss.init_model import init_model

TICKS = os.sysconf("SC_CLK_TCK")


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


def run_delay(task: str) -> float:
    """Seconds the thread spent runnable but not running: waiting for a CPU (schedstat)."""
    with open(f"{task}/schedstat") as f:
        return int(f.read().split()[1]) / 1e9


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Server:
    """`streamfold serve` in a subprocess (the native engine on `model`, else replay), ready
    once /health says 200."""

    def __init__(
        self, model: Path | None, store: str, extra: list[str], own_session: bool = False,
        step_log: Path | None = None,
    ) -> None:  # fmt: skip
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        engine = ["--engine", "native", "--model", str(model)] if model else []
        command = [sys.executable, "-m", "streamfold", "serve", *engine, "--port",
                   str(self.port), "--store", store, "--log-level", "warning", *extra]  # fmt: skip
        started = time.perf_counter()
        # own_session: its own session, so (Linux autogroups) its own share of the CPUs, as a
        # supervisor would start it; else it shares this process's share with the client.
        env = None if step_log is None else {**os.environ, STEP_LOG_ENV: str(step_log)}
        self.step_log = step_log
        self.process = subprocess.Popen(command, start_new_session=own_session, env=env)
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

    def cpu(self) -> dict[str, float]:
        """Seconds so far: CPU of the engine thread ("engine") and of the rest of the server
        ("server"), and the engine thread's time runnable but waiting for a CPU ("waited")."""
        out = {"engine": 0.0, "server": 0.0, "waited": 0.0}
        task = f"/proc/{self.process.pid}/task"
        for tid in os.listdir(task):
            try:
                with open(f"{task}/{tid}/comm") as f:
                    name = f.read().strip()
                with open(f"{task}/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                waited = run_delay(f"{task}/{tid}")
            except FileNotFoundError:  # the thread ended meanwhile
                continue
            seconds = (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime
            if name == ENGINE_THREAD_NAME:
                out["engine"] += seconds
                out["waited"] += waited
            else:
                out["server"] += seconds
        return out

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


@attrs.frozen
class Batch:
    seconds: float
    tokens: int
    # Seconds: CPU of "engine" (the engine thread, or the core's run), "server" (the rest of
    # the server), "client"; "waited": the engine's thread runnable but without a CPU.
    cpu: dict[str, float]
    # perf_counter() at the start and end (the machine's monotonic clock; the step logs' too)
    span: tuple[float, float] = (0.0, 0.0)
    steps: list[dict[str, object]] = attrs.Factory(list)  # the core's step log, if kept

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds


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


async def one_request(client: AsyncOpenAI, i: int, tokens: int, stream: bool) -> int:
    """Request `i`; returns its output tokens."""
    if not stream:
        response = await client.responses.create(**body(i, tokens))  # type: ignore[call-overload]
        return int(response.usage.output_tokens)
    count = 0
    events = await client.responses.create(**body(i, tokens), stream=True)  # type: ignore[call-overload]
    async for event in events:
        if event.type in ("response.completed", "response.incomplete"):
            count = int(event.response.usage.output_tokens)
    return count


async def served_batch(
    client: AsyncOpenAI, server: Server, concurrency: int, tokens: int, stream: bool,
    total: int | None = None,
) -> Batch:  # fmt: skip
    """`concurrency` requests at once; with `total`, `total` requests kept `concurrency` in
    flight (each of `concurrency` workers sends its next as soon as its last one ends)."""
    numbers = iter(range(concurrency if total is None else total))

    async def worker() -> int:
        return sum([await one_request(client, i, tokens, stream) for i in numbers])

    before = server.cpu()
    client0 = own_cpu()
    start = time.perf_counter()
    counts = await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds = time.perf_counter() - start
    cpu = {key: value - before[key] for key, value in server.cpu().items()}
    cpu["client"] = own_cpu() - client0
    return Batch(seconds, sum(counts), cpu, (start, start + seconds))


def prompts(concurrency: int, tokens: int) -> list[tuple[int, ...]]:
    return [render_prompt(parse_create_request(body(i, tokens))) for i in range(concurrency)]


def core_batch(
    core: EngineCore, ids: list[tuple[int, ...]], tokens: int, threads: int,
    log: StepLog | None = None, max_seqs: int | None = None,
) -> Batch:  # fmt: skip
    """The core on `ids` at once, at most `max_seqs` of them running (default: the core's)."""
    torch.set_num_threads(threads)
    seqs = core.scheduler.max_num_seqs
    core.scheduler.max_num_seqs = max_seqs or seqs
    try:
        return _core_batch(core, ids, tokens, log)
    finally:
        core.scheduler.max_num_seqs = seqs


def _core_batch(
    core: EngineCore, ids: list[tuple[int, ...]], tokens: int, log: StepLog | None
) -> Batch:
    requests = [
        GenerationRequest(request_id=f"core-{i}", prompt_token_ids=p, max_output_tokens=tokens,
                          sampling=SamplingParams(temperature=0.0))
        for i, p in enumerate(ids)
    ]  # fmt: skip
    cpu0, waited0 = own_cpu(), run_delay("/proc/thread-self")
    start = time.perf_counter()
    if log is None:
        chunks = core.run_to_completion(requests)
        count = sum(len(c.token_ids) for cs in chunks.values() for c in cs)
    else:  # run_to_completion, step by step into the log
        count = 0
        log.begin()
        for request in requests:
            core.add_request(request)
        while core.has_work():
            count += sum(len(c.token_ids) for _, c in core.step())
            log.end(admitted=len(requests) if not log.records else 0, rows=core.last_rows,
                    prefill=core.last_prefill_tokens, chunks=core.last_rows)  # fmt: skip
            log.begin()
    seconds = time.perf_counter() - start
    cpu = {"engine": own_cpu() - cpu0, "waited": run_delay("/proc/thread-self") - waited0}
    steps = [] if log is None else log.records[:]
    if log is not None:
        log.records.clear()
    return Batch(seconds, count, cpu, (start, start + seconds), steps)


def hf_batch(hf: object, ids: list[tuple[int, ...]], tokens: int, threads: int) -> Batch:
    torch.set_num_threads(threads)
    width = max(len(p) for p in ids)
    batch = torch.tensor([[0] * (width - len(p)) + list(p) for p in ids])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in ids])
    cpu0 = own_cpu()
    start = time.perf_counter()
    with torch.no_grad():
        hf.generate(  # type: ignore[attr-defined]
            batch, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
            do_sample=False, pad_token_id=0,
        )  # fmt: skip
    return Batch(time.perf_counter() - start, tokens * len(ids), {"engine": own_cpu() - cpu0})


@attrs.define
class Mode:
    """One server run: its first batch, its steady batches, and the core batches between."""

    ready_seconds: float
    first: Batch
    steady: list[Batch] = attrs.Factory(list)
    core: dict[int, list[Batch]] = attrs.Factory(dict)  # torch threads -> one batch per round
    # --sustained: served with C requests kept in flight, then the core on the same requests
    sustained: list[tuple[Batch, Batch]] = attrs.Factory(list)
    timeline: list[dict[str, float]] = attrs.Factory(list)  # --step-log: per round, by cause


async def served_rounds(
    server: Server, core: EngineCore, ids: list[tuple[int, ...]], args: argparse.Namespace,
    stream: bool,
) -> Mode:  # fmt: skip
    concurrency = len(ids)
    client = AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=900)
    async with client:
        first = await served_batch(client, server, concurrency, args.tokens, stream)
        mode = Mode(server.ready_seconds, first)
        for _ in range(args.steady):
            mode.steady.append(await served_batch(client, server, concurrency, args.tokens, stream))
            for threads in args.core_threads:  # the server is idle meanwhile
                log = StepLog("-") if server.step_log and threads == args.threads else None
                batch = core_batch(core, ids, args.tokens, threads, log)
                mode.core.setdefault(threads, []).append(batch)
        total = args.sustained * concurrency
        for _ in range(args.sustained_rounds if total else 0):
            served = await served_batch(client, server, concurrency, args.tokens, stream, total)
            core_run = core_batch(
                core, prompts(total, args.tokens), args.tokens, args.threads, None, concurrency
            )
            mode.sustained.append((served, core_run))
    return mode


def main() -> None:
    # The whole docstring: its first line alone stopped mid-sentence (issue 33).
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, help="a gpt-oss checkpoint (default: init-model)")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=[1, 16, 64], metavar="C",
        help="concurrent requests per batch, one run each (default 1 16 64)",
    )  # fmt: skip
    parser.add_argument(
        "--tokens", type=int, default=32, help="max_output_tokens per request (default 32)"
    )
    parser.add_argument(
        "--steady", type=int, default=3, help="rounds after the first batch (default 3)"
    )
    parser.add_argument(
        "--threads", type=int, default=default_engine_threads(),
        help="the served engine's torch threads (serve --threads; default: its own default)",
    )  # fmt: skip
    parser.add_argument(
        "--core-threads", type=int, nargs="+",
        help="torch thread counts of the core runs (default: --threads, and all cores)",
    )  # fmt: skip
    parser.add_argument(
        "--modes", nargs="+", choices=("json", "stream"), default=["json", "stream"],
        help="not streaming (json), streaming, or both",
    )  # fmt: skip
    parser.add_argument(
        "--sustained", type=int, default=0, metavar="R",
        help="also run R x C requests with C kept in flight (each client sends its next request"
        " when its last ends), then the core on them at most C at a time",
    )  # fmt: skip
    parser.add_argument(
        "--sustained-rounds", type=int, default=2, metavar="N",
        help="rounds of the --sustained run (default 2)",
    )  # fmt: skip
    parser.add_argument(
        "--store", choices=("sqlite", "memory"), default="sqlite",
        help="the served event log (default sqlite, in a temporary directory)",
    )  # fmt: skip
    parser.add_argument(
        "--skip-transformers", action="store_true",
        help="do not run transformers' padded batch after each concurrency",
    )  # fmt: skip
    parser.add_argument(
        "--own-session", action="store_true",
        help="start the server in its own session (its own CPU share under Linux autogroups)",
    )  # fmt: skip
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="one more argument for streamfold serve (repeatable)",
    )
    parser.add_argument(
        "--step-log", action="store_true",
        help="log every step of the served engine and the core, and split each round's"
        " served - core time by cause (benchmarks/serve_timeline.py)",
    )  # fmt: skip
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    args.core_threads = list(dict.fromkeys(args.core_threads or [args.threads, cores]))
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
        rows: list[dict[str, object]] = []
        for concurrency in args.concurrency:
            ids = prompts(concurrency, args.tokens)
            for threads in args.core_threads:
                core_batch(core, ids, args.tokens, threads)  # the core's own warm-up
            row: dict[str, object] = {"c": concurrency}
            for stream in [mode == "stream" for mode in args.modes]:
                store = ":memory:" if args.store == "memory" else f"{tmp}/s{concurrency}{stream}.db"
                extra = ["--threads", str(args.threads), *args.server_arg]
                log = Path(tmp) / f"steps-{concurrency}-{stream}.jsonl" if args.step_log else None
                server = Server(model, store, extra, args.own_session, log)
                try:
                    mode = asyncio.run(served_rounds(server, core, ids, args, stream))
                finally:
                    server.close()
                if log is not None:
                    served_steps = read_step_log(log) if log.exists() else []
                    mode.timeline = [
                        decompose(served_steps, *b.span, c.steps, concurrency)
                        for b, c in zip(mode.steady, mode.core[args.threads], strict=True)
                    ]
                    print_decomposition(f"c={concurrency} stream={stream}", mode.timeline)
                row["stream" if stream else "json"] = mode
                rates = [f"{b.rate:.0f}" for b in [mode.first, *mode.steady]]
                print(f"served c={concurrency} stream={stream}: tok/s {rates}", flush=True)
            if hf is not None:
                hf_batch(hf, ids, args.tokens, args.threads)
                rounds = range(args.steady)
                row["hf"] = [hf_batch(hf, ids, args.tokens, args.threads) for _ in rounds]
            rows.append(row)
    report(rows, args, load_before)


def span(values: list[float], digits: int = 0) -> str:
    median = statistics.median(values)
    return f"{median:.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def per_token_ms(batches: list[Batch], key: str) -> float:
    return 1e3 * sum(b.cpu[key] for b in batches) / sum(b.tokens for b in batches)


def waiting(batches: list[Batch]) -> float:
    return sum(b.cpu["waited"] for b in batches) / sum(b.seconds for b in batches)


def modes_of(rows: list[dict[str, object]]) -> list[tuple[dict[str, object], str, Mode]]:
    return [(row, key, row[key]) for row in rows for key in ("json", "stream") if key in row]  # type: ignore[misc]


def report(
    rows: list[dict[str, object]], args: argparse.Namespace, load: tuple[float, ...]
) -> None:
    print(
        f"\n{args.tokens} output tokens per request, greedy; tiny random gpt-oss (4 layers,"
        f" hidden 128, vocab 201088, fp32); {os.cpu_count()} CPUs; served engine"
        f" --threads {args.threads}{' in its own session' if args.own_session else ''};"
        f" store {args.store}; load average {load[0]:.1f} before,"
        f" {os.getloadavg()[0]:.1f} after\n"
    )
    same = args.threads
    print(f"| C | served | ready s | first tok/s | steady tok/s | first / steady time |"
          f" core {same}t tok/s | core {same}t / served, per round |")  # fmt: skip
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for row, key, mode in modes_of(rows):
        steady = [b.rate for b in mode.steady]
        core = mode.core[same]
        ratios = [c.rate / s.rate for c, s in zip(core, mode.steady, strict=True)]
        print(
            f"| {row['c']} | {'streaming' if key == 'stream' else 'not streaming'} |"
            f" {mode.ready_seconds:.1f} | {mode.first.rate:.0f} | {span(steady)} |"
            f" {statistics.median(steady) / mode.first.rate:.2f}x |"
            f" {span([c.rate for c in core])} | {span(ratios, 2)}x |"
        )
    print("\nCPU per generated token in the steady rounds (ms), and the share of the time the"
          " engine's thread was runnable but had no CPU (the machine's other load):\n")  # fmt: skip
    print(f"| C | served | engine thread | rest of server | client | core {same}t |"
          " served (engine + server) / core |"
          " engine thread waiting for a CPU: served / core |")  # fmt: skip
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for row, key, mode in modes_of(rows):
        core = mode.core[same]
        served = per_token_ms(mode.steady, "engine") + per_token_ms(mode.steady, "server")
        print(
            f"| {row['c']} | {'streaming' if key == 'stream' else 'not streaming'} |"
            f" {per_token_ms(mode.steady, 'engine'):.2f} |"
            f" {per_token_ms(mode.steady, 'server'):.2f} |"
            f" {per_token_ms(mode.steady, 'client'):.2f} | {per_token_ms(core, 'engine'):.2f} |"
            f" {served / per_token_ms(core, 'engine'):.2f}x |"
            f" {waiting(mode.steady):.0%} / {waiting(core):.0%} |"
        )
    others = [t for t in args.core_threads if t != same]
    print(f"\n| C | core at other thread counts tok/s | transformers padded batch ({same}t) tok/s"
          " | served steady (best mode) / transformers |")  # fmt: skip
    print("|---:|---|---:|---:|")
    for row in rows:
        modes: list[Mode] = [row[k] for k in ("json", "stream") if k in row]  # type: ignore[misc]
        other = ", ".join(
            f"{t}t {span([b.rate for m in modes for b in m.core[t]])}" for t in others
        )
        hf: list[Batch] | None = row.get("hf")  # type: ignore[assignment]
        served = max(statistics.median([b.rate for b in m.steady]) for m in modes)
        hf_rate = statistics.median([b.rate for b in hf]) if hf else None
        print(
            f"| {row['c']} | {other or '-'} | {span([b.rate for b in hf]) if hf else '-'} |"
            f" {f'{served / hf_rate:.2f}x' if hf_rate else '-'} |"
        )
    if args.sustained:
        print(f"\nSustained: {args.sustained} x C requests, C in flight; core at most C at a time"
              " on the same requests, right after (per round):\n")  # fmt: skip
        print(
            "| C | served | served tok/s | core tok/s | core / served |\n|---:|---|---:|---:|---:|"
        )
        for row, key, mode in modes_of(rows):
            ratios = [c.rate / s.rate for s, c in mode.sustained]
            print(
                f"| {row['c']} | {'streaming' if key == 'stream' else 'not streaming'} |"
                f" {span([s.rate for s, _ in mode.sustained])} |"
                f" {span([c.rate for _, c in mode.sustained])} | {span(ratios, 2)}x |"
            )
    if args.step_log:
        print(
            "\nSteady rounds, medians: served / core time, the engine's own span / core, and"
            " served - core time by cause, as shares of the core's time (serve_timeline.py):\n"
        )
        print(SUMMARY_HEADER)
        for row, key, mode in modes_of(rows):
            mode_name = "streaming" if key == "stream" else "not streaming"
            print(summary_row(row["c"], mode_name, mode.timeline))  # type: ignore[arg-type]
    print("\nTargets: first / steady time <= 1.3x; core / served steady <= 1.2x.")


if __name__ == "__main__":
    main()
