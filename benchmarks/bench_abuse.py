"""`streamfold serve` under abuse: RSS and time to first event with hostile clients attached.

Starts `streamfold serve` (replay engine, SQLite log, the server's own limits) in a subprocess
on 127.0.0.1 and measures, in one run:

1. `--streams` concurrent `stream: true` requests alone (the peer: the same server unabused):
   time to first event (TTFE) p50/p99, wall time, the server's peak RSS;
2. the same streams while `--stalled` clients hold `GET ?stream=true` of a large finished
   response without reading a byte and `--half-open` sockets have sent half a request line;
3. whether the half-open sockets are closed by the header timeout (`--header-timeout`), and
   the server's RSS once the abusers are gone.

The ratio of the two TTFEs is the cost of the abuse. Run from the repository root:

    python benchmarks/bench_abuse.py [--streams 500] [--stalled 50] [--half-open 200]

With `--agent` it measures the server-side tools instead (issue 29): misbehaving MCP servers
and concurrent python calls against paced bystanders, idle and abused phases alternated; see
`bench_abuse_agent.py` for what it runs and its arguments:

    python benchmarks/bench_abuse.py --agent [--rounds 5] [--python-calls 6] [--mcp-calls 6]
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
import threading
import time
from pathlib import Path

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_abuse_agent import add_arguments, agent_abuse
from bench_server import free_port, one_stream, write_trace


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class PeakRSS:
    """Samples a process's RSS every 20 ms while the block runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()

    def __enter__(self) -> PeakRSS:
        def sample() -> None:
            while not self._stop.is_set():
                self.peak = max(self.peak, rss_mb(self.pid))
                time.sleep(0.02)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


async def streams(port: int, n: int) -> dict[str, float]:
    results: list[tuple[float, float, int]] = []
    t0 = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(n):
            tg.start_soon(one_stream, port, results)
    wall = time.perf_counter() - t0
    firsts = sorted(r[0] for r in results)
    return {
        "streams": len(results),
        "wall_s": wall,
        "ttfe_p50_ms": 1e3 * statistics.median(firsts),
        "ttfe_p99_ms": 1e3 * firsts[min(len(firsts) - 1, int(0.99 * len(firsts)))],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--stalled", type=int, default=50)
    parser.add_argument("--half-open", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=100, help="text tokens per stream")
    parser.add_argument("--big-tokens", type=int, default=20_000, help="the stalled-for log")
    parser.add_argument("--header-timeout", type=float, default=5.0)
    parser.add_argument("--agent", action="store_true", help="the server-side tools instead")
    add_arguments(parser)
    args = parser.parse_args()
    if args.agent:
        agent_abuse(args)
        return
    with tempfile.TemporaryDirectory() as tmp:
        traces = Path(tmp) / "traces"
        traces.mkdir()
        write_trace(traces, args.tokens)
        big = Path(tmp) / "big"
        big.mkdir()
        write_trace(big, args.big_tokens)
        (big / "bench.jsonl").rename(traces / "big.jsonl")
        port = free_port()
        streamfold = Path(sys.executable).parent / "streamfold"
        server = subprocess.Popen(
            [str(streamfold), "serve", "--traces", str(traces), "--port", str(port),
             "--store", str(Path(tmp) / "r.sqlite3"), "--log-level", "error",
             "--header-timeout", str(args.header_timeout)],
        )  # fmt: skip
        sockets: list[socket.socket] = []
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    httpx.get(f"{url}/v1/responses/resp_none", timeout=1)
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise SystemExit("the server did not start") from None
                    time.sleep(0.1)
            anyio.run(one_stream, port, [])  # warm up: trace loading, vocabulary
            big_id = httpx.post(
                f"{url}/v1/responses", json={"model": "big", "input": "x"}, timeout=300
            ).json()["id"]
            log_mb = len(httpx.get(f"{url}/v1/responses/{big_id}?stream=true").content) / 2**20
            load = os.getloadavg()[0]
            print(
                f"streamfold serve, replay engine, SQLite log, {os.cpu_count()} CPUs, load "
                f"average {load:.1f} (a shared machine: compare the rows of one run)"
            )
            idle = rss_mb(server.pid)
            with PeakRSS(server.pid) as peak:
                alone = anyio.run(streams, port, args.streams)
            row(f"{args.streams} streams alone", alone, idle, peak.peak)

            request = f"GET /v1/responses/{big_id}?stream=true HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            for _ in range(args.stalled):
                sock = socket.create_connection(("127.0.0.1", port))
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.sendall(request.encode())
                sockets.append(sock)
            half_open = []
            opened_at = time.monotonic()
            for _ in range(args.half_open):
                sock = socket.create_connection(("127.0.0.1", port))
                sock.sendall(b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                half_open.append(sock)
            time.sleep(1)
            before = rss_mb(server.pid)
            with PeakRSS(server.pid) as peak:
                abused = anyio.run(streams, port, args.streams)
            row(
                f"{args.streams} streams + {args.stalled} stalled readers of a {log_mb:.1f} MB "
                f"log + {args.half_open} half-open sockets",
                abused,
                before,
                peak.peak,
            )
            print(
                f"TTFE p50 ratio abused/alone: {abused['ttfe_p50_ms'] / alone['ttfe_p50_ms']:.2f}, "
                f"p99 ratio: {abused['ttfe_p99_ms'] / alone['ttfe_p99_ms']:.2f}"
            )
            closed = 0
            for sock in half_open:
                sock.settimeout(max(0.1, opened_at + args.header_timeout + 5 - time.monotonic()))
                try:
                    closed += sock.recv(1) == b""
                except (TimeoutError, ConnectionResetError):
                    pass
                sock.close()
            print(
                f"half-open sockets closed by the server within {args.header_timeout + 5:g} s "
                f"(header timeout {args.header_timeout:g} s): {closed} of {args.half_open}"
            )
            for sock in sockets:
                sock.close()
            time.sleep(1)
            print(f"server RSS after the abusers left: {rss_mb(server.pid):.0f} MB")
        finally:
            for sock in sockets:
                sock.close()
            server.terminate()
            server.wait(timeout=15)


def row(name: str, result: dict[str, float], before: float, peak: float) -> None:
    print(
        f"{name}: TTFE p50 {result['ttfe_p50_ms']:.0f} ms p99 {result['ttfe_p99_ms']:.0f} ms, "
        f"wall {result['wall_s']:.1f} s, server RSS {before:.0f} MB before, peak {peak:.0f} MB"
        + (f", server CPU {result['server_cpu_s']:.2f} s" if "server_cpu_s" in result else "")
    )
    print(json.dumps({"case": name, **result, "rss_before_mb": before, "rss_peak_mb": peak}))


if __name__ == "__main__":
    main()
