"""Stream throughput and time to first event of `streamfold serve` on loopback.

Starts the real server (uvicorn, replay engine, no per-chunk delay) in a subprocess on
127.0.0.1, so the load generator does not share its interpreter, then runs `--streams`
`stream: true` requests, N at a time, from a minimal raw-socket HTTP client and reports, per
concurrency level N:

- streams/s and events/s over the whole run (wall clock, all streams),
- time to first event (TTFE: request sent -> first `response.created` bytes), p50 and p99,
- whole-stream latency p50,
- the server process's CPU time per event (user + system, from /proc; Linux only), which
  moves far less than the wall-clock numbers when other work shares the machine.

The trace is a harmony answer of `--tokens` text tokens, one token per chunk (the worst case
for per-chunk overhead). Run from the repository root:

    python benchmarks/bench_server.py [--concurrency 1 10 50 200] [--streams 400]
        [--tokens 100] [--store sqlite|memory]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx

ROOT = Path(__file__).resolve().parents[1]


def write_trace(directory: Path, tokens: int) -> None:
    from streamfold.engines import TokenChunk, dump_trace
    from streamfold.engines.vocab import harmony_encoding

    enc = harmony_encoding()
    header = enc.encode("<|channel|>final<|message|>", allowed_special="all")
    words = enc.encode("".join(f" w{i % 10}" for i in range(tokens)))[:tokens]
    ids = [*header, *words, *enc.encode("<|return|>", allowed_special="all")]
    text = dump_trace(
        {
            "grammar": "harmony",
            "encoding": "o200k_harmony",
            "response_id": "resp_bench",
            "model": "bench",
            "created_at": 1,
        },
        [TokenChunk(token_ids=(t,)) for t in ids],
        "stop",
    )
    (directory / "bench.jsonl").write_text(text)


def serve(args: argparse.Namespace) -> None:
    import uvicorn

    from streamfold.adapters.registry import ReplayEngine
    from streamfold.adapters.server import MemoryEventStore, SQLiteEventStore, create_app

    store = MemoryEventStore() if args.store == "memory" else SQLiteEventStore(args.store_path)
    app = create_app(ReplayEngine(args.traces).engine(), store=store)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), or NaN elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def one_stream(port: int, results: list[tuple[float, float, int]]) -> None:
    """One `stream: true` request over a raw socket: a minimal HTTP/1.1 client, so the load
    generator (on the same CPUs) costs far less than the server it measures."""
    body = json.dumps({"model": "bench", "input": "hi", "stream": True}).encode()
    request = (
        b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    t0 = time.perf_counter()
    first = None
    received = bytearray()
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(request)
        try:
            while True:
                received += await stream.receive(1 << 16)
                if first is None and b"event: " in received:
                    first = time.perf_counter() - t0
        except anyio.EndOfStream:
            pass
    if not received.startswith(b"HTTP/1.1 200") or not received.endswith(b"0\r\n\r\n"):
        raise RuntimeError(f"bad or cut-off response: {bytes(received[:200])!r}")
    results.append((first or 0.0, time.perf_counter() - t0, received.count(b"\nevent: ")))


async def run_level(port: int, concurrency: int, streams: int, pid: int) -> dict[str, float]:
    results: list[tuple[float, float, int]] = []
    await one_stream(port, [])  # warm up (trace loading, vocabulary)
    limiter = anyio.Semaphore(concurrency)

    async def bounded() -> None:
        async with limiter:
            await one_stream(port, results)

    t0, cpu0 = time.perf_counter(), cpu_seconds(pid)
    async with anyio.create_task_group() as tg:
        for _ in range(streams):
            tg.start_soon(bounded)
    wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    firsts = sorted(r[0] for r in results)
    return {
        "concurrency": concurrency,
        "streams": streams,
        "events": sum(r[2] for r in results),
        "wall_s": wall,
        "streams_per_s": streams / wall,
        "events_per_s": sum(r[2] for r in results) / wall,
        "ttfe_p50_ms": 1e3 * statistics.median(firsts),
        "ttfe_p99_ms": 1e3 * firsts[min(len(firsts) - 1, int(0.99 * len(firsts)))],
        "stream_p50_ms": 1e3 * statistics.median(r[1] for r in results),
        "server_cpu_us_per_event": 1e6 * cpu / sum(r[2] for r in results),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 10, 50, 200])
    parser.add_argument("--streams", type=int, default=400, help="streams per level")
    parser.add_argument("--tokens", type=int, default=100, help="text tokens per stream")
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    parser.add_argument("--json", action="store_true", help="print one JSON line per level")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--traces", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--store-path", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        traces = Path(tmp)
        write_trace(traces, args.tokens)
        port = free_port()
        command = [
            sys.executable, __file__, "--serve", "--traces", str(traces), "--port", str(port),
            "--store", args.store, "--store-path", str(traces / "bench.sqlite3"),
        ]  # fmt: skip
        server = subprocess.Popen(command, cwd=ROOT, env=dict(os.environ))
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 30
            while True:
                try:
                    httpx.get(f"{url}/v1/responses/resp_none", timeout=1)
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise SystemExit("the server did not start") from None
                    time.sleep(0.1)
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
            print(
                f"streamfold serve, replay engine, {args.tokens}-token answers one token per "
                f"chunk, {args.store} event log, {os.cpu_count()} CPUs, load average {load:.1f}"
            )
            for level in args.concurrency:
                row = anyio.run(run_level, port, level, max(args.streams, level), server.pid)
                if args.json:
                    print(json.dumps(row))
                else:
                    print(
                        f"concurrency {level:4d}: {row['streams_per_s']:7.1f} streams/s "
                        f"{row['events_per_s']:9.0f} events/s  TTFE p50 "
                        f"{row['ttfe_p50_ms']:7.1f} ms p99 {row['ttfe_p99_ms']:7.1f} ms  "
                        f"stream p50 {row['stream_p50_ms']:7.1f} ms  server CPU "
                        f"{row['server_cpu_us_per_event']:5.0f} us/event"
                    )
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
