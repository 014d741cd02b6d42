"""Stream throughput and time to first event of `streamfold serve` on loopback, against a
vLLM-style server in the same run.

Starts each contender server (replay engine, no per-chunk delay) in a subprocess on 127.0.0.1,
so the load generator does not share its interpreter, then runs `--streams` `stream: true`
requests, N at a time, from a minimal raw-socket HTTP client and reports, per contender and
concurrency level N (rounds interleaved: every contender once per round):

- streams/s and events/s over the whole run (wall clock, all streams),
- time to first event (TTFE: request sent -> first `response.created` bytes), p50 and p99,
  and apart from it the client's connecting before the send (`connect`; the server's accept
  comes after it, so it is in the TTFE),
- whole-stream latency p50,
- the client's own event loop lag (how late a 1 ms timer runs, p50/p99): a client loop that is
  behind stamps its connects and receives late; `--client-procs N [M ...]` spreads the load
  over N client processes (each its share of the streams and of the concurrency), counts
  alternated round by round and reported apart,
- with `--stamps`, the TTFE p50 split at the server (a stamping ASGI wrapper, `Stamped`, the
  same around either server; one clock, CLOCK_MONOTONIC, in client and server): request sent
  -> the app called (accept, read, parse, the task's start), the app -> its first body send,
  and that send -> the client's receive (the loopback and the client's own lag),
- the server process's CPU time per event (user + system, from /proc; Linux only), which
  moves far less than the wall-clock numbers when other work shares the machine.

The trace is a harmony answer of `--tokens` text tokens, one token per chunk (the worst case for
per-chunk overhead). Replay without a delay has every chunk ready at once, as an engine has when
its consumer lags under load, so streamfold steps up to `driver.MAX_BATCH_CHUNKS` of them into one
batch (one log commit, one write; `ReadyChunks`); the peer, like vLLM's server, sends each event as
its own body write whatever its engine had ready. Contenders are named `SERVER[:HTTP[:LOOP]]`:
SERVER `streamfold` (the app `streamfold serve` runs, with `--store`) or `peer`
(`vllm_peer_server.py`: Starlette, the openai SDK's pydantic events, `model_dump_json` per event,
one body write per event); HTTP `h11` or `httptools` (uvicorn's parsers; streamfold's with its
header timeout, as `serve` runs them), or `granian` (granian's embedded ASGI server in place of
uvicorn, where granian is installed: `pip install granian`); LOOP `asyncio` or `uvloop`;
`streamfold-ws` is the same server loaded over WebSockets (each concurrent client one socket, its
responses one after another, `responses.connect()`'s messages, from a raw-socket client as
light as the SSE one; the report gives its events/s and CPU per event against the first
`streamfold` contender's, same rounds); `streamfold@DIR` imports streamfold
from DIR (an A/B against a baseline installed there with `pip install --no-deps --target DIR
<checkout>`). A bare name runs the stack `streamfold serve` uses (httptools and uvloop when
installed). vLLM itself runs uvicorn with httptools and uvloop. By default each request has a
connection of its own (`Connection: close`); `--keep-alive` gives each concurrent client one
kept-alive connection for all its requests, as a client's connection pool does. Run from the
repository root:

    python benchmarks/bench_server.py [--concurrency 10 200] [--streams 2000] [--rounds 3]
        [--tokens 100] [--store sqlite|memory] [--keep-alive] [--rates 200 400]
        [--contenders streamfold peer:httptools:uvloop] [--stamps] [--client-procs 1 4]

The concurrency levels are a closed loop: each client sends its next request when its stream
ends, so streams that end together make the next requests arrive together. `--rates` adds
open-loop levels: streams started at Poisson arrival times at that rate (a fixed seed, the same
for every contender), whatever is in flight; there events/s is the load offered, and the time
to first event is what a request arriving on its own waits.

WebSocket against SSE (and against a baseline checkout, installed as above):

    python benchmarks/bench_server.py --contenders streamfold streamfold-ws \
        [streamfold-ws@DIR] --concurrency 10 200 --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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

    server, http, loop = args.serve.split(":")
    protocol: Any = None if http == "default" else http
    ws: Any = "auto"
    if server == "peer":
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from vllm_peer_server import create_peer_app

        app: Any = create_peer_app(args.traces / "bench.jsonl")
    else:
        import streamfold.adapters.server as server_module
        from streamfold.adapters.registry import ReplayEngine
        from streamfold.adapters.server import (
            MemoryEventStore,
            ServerLimits,
            SQLiteEventStore,
            create_app,
            serving_asyncio,
            tune_gc_for_serving,
            uvicorn_http,
        )

        store = MemoryEventStore() if args.store == "memory" else SQLiteEventStore(args.store_path)
        app = create_app(ReplayEngine(args.traces).engine(), store=store)
        # What `streamfold serve` runs: uvicorn's parser with the header timeout (granian has
        # its own HTTP layer).
        parser = "auto" if http == "default" else http
        protocol = (
            None if http == "granian" else uvicorn_http(ServerLimits().header_timeout_s, parser)
        )
        tune_gc_for_serving()  # as `streamfold serve` does before it serves
        # `streamfold serve`'s WebSocket protocol (a baseline from before it: uvicorn's own).
        ws = getattr(server_module, "SocketFramesProtocol", "auto")
    if args.stamps:
        app = Stamped(app)
    serving = contextlib.nullcontext() if server == "peer" else serving_asyncio()
    if http == "granian":
        _serve_granian(app, args.port, loop, serving)
        return
    with serving:  # as `streamfold serve` runs uvicorn
        uvicorn.run(
            app,
            host="127.0.0.1",
            port=args.port,
            log_level="warning",
            access_log=False,
            ws=ws,
            **({} if protocol is None else {"http": protocol}),
            **({} if loop == "default" else {"loop": loop}),
        )


def _serve_granian(app: Any, port: int, loop: str, serving: Any) -> None:
    """The app on granian's embedded server (Rust HTTP, the app on this process's loop)."""
    import asyncio

    from granian.constants import Interfaces  # pip install granian
    from granian.log import LogLevels
    from granian.server.embed import Server

    server = Server(
        app,
        address="127.0.0.1",
        port=port,
        interface=Interfaces.ASGI,
        backlog=2048,  # uvicorn's
        log_level=LogLevels.warning,
    )
    with serving:
        if loop == "uvloop":
            import uvloop

            uvloop.run(server.serve())
        else:
            asyncio.run(server.serve())


def cpu_seconds(pid: int) -> tuple[float, float]:
    """User and system CPU time of a process (Linux /proc), or NaN elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan"), float("nan")
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _request(keep_alive: bool, key: str = "") -> bytes:
    body = json.dumps({"model": "bench", "input": "hi", "stream": True}).encode()
    connection = b"keep-alive" if keep_alive else b"close"
    stamp = b"X-Bench-Id: %s\r\n" % key.encode() if key else b""
    return (
        b"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"%sConnection: %s\r\nContent-Length: %d\r\n\r\n%s" % (stamp, connection, len(body), body)
    )


class Stamped:
    """`--stamps`: an ASGI wrapper (the same around either server) that notes, for a request
    with an `X-Bench-Id` header, when the app was called and when it sent its first body bytes
    (the opening events), on `time.perf_counter`'s clock: CLOCK_MONOTONIC on Linux, the one the
    client stamps its send and its first receive with. `GET /bench/stamps` hands them over (and
    forgets them). So a time to first event splits into the server's part (send -> app called:
    accepting, reading, parsing, the task's start; app called -> first body send) and the
    client's (first body send -> the client's `data_received`: the loopback, and the client's
    own loop being busy)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.stamps: dict[str, tuple[float, float]] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)  # type: ignore[no-any-return]
        if scope["path"] == "/bench/stamps":
            body = json.dumps(self.stamps).encode()
            self.stamps = {}
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return None
        key = next((v for k, v in scope["headers"] if k == b"x-bench-id"), None)
        if key is None:
            return await self.app(scope, receive, send)  # type: ignore[no-any-return]
        called, stamps, first = time.perf_counter(), self.stamps, True

        async def stamped(message: Any) -> None:
            nonlocal first
            if first and message["type"] == "http.response.body" and message.get("body"):
                first = False
                stamps[key.decode()] = (called, time.perf_counter())
            await send(message)

        return await self.app(scope, receive, stamped)  # type: ignore[no-any-return]


#: `--stamps`: each stream's id -> (request sent, first event received), in this process.
_CLIENT_STAMPS: dict[str, tuple[float, float]] | None = None


Result = tuple[float, float, int, float]  # TTFE, whole stream, events, connecting (s)


def _result(received: bytes, t0: float, first: float | None, connect: float = 0.0) -> Result:
    if not received.startswith(b"HTTP/1.1 200") or not received.endswith(b"0\r\n\r\n"):
        raise RuntimeError(f"bad or cut-off response: {bytes(received[:200])!r}")
    return (first or 0.0, time.perf_counter() - t0, received.count(b"\nevent: "), connect)


class _StreamClient(asyncio.Protocol):
    """One streamed response, read by the protocol's callbacks: the request goes out the moment
    the connection is made, and no task wakes per chunk received."""

    def __init__(self, request: bytes, done: asyncio.Future[Exception | None]) -> None:
        self.request, self.done = request, done
        self.received = bytearray()
        self.sent = 0.0
        self.first: float | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.sent = time.perf_counter()
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.received += data
        if self.first is None and b"event: " in self.received:
            self.first = time.perf_counter()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(exc)


async def one_stream(port: int, results: list[Result]) -> None:
    """One `stream: true` request over a raw socket of its own (`Connection: close`): a
    minimal HTTP/1.1 client (an asyncio protocol), so the load generator (on the same CPUs)
    costs far less than the server it measures. The time to first event runs from the
    request's send; the connection's setup before it (the client's own `connect`, which the
    server is not part of until it accepts) is counted apart: with the client on the same
    CPUs, a busier client connects slower (with anyio's `connect_tcp` and a task woken per
    chunk: ~1.2 ms against a server sending 1400 streams a second, ~0.6 ms against one
    sending 500)."""
    loop = asyncio.get_running_loop()
    started = time.perf_counter()
    done: asyncio.Future[Exception | None] = loop.create_future()
    key = f"{os.getpid()}-{len(results)}-{id(done)}" if _CLIENT_STAMPS is not None else ""
    client = _StreamClient(_request(keep_alive=False, key=key), done)
    await loop.create_connection(lambda: client, "127.0.0.1", port)
    failed = await done
    if failed is not None:
        raise failed
    t0 = client.sent
    first = None if client.first is None else client.first - t0
    results.append(_result(client.received, t0, first, t0 - started))
    if key and client.first is not None and _CLIENT_STAMPS is not None:
        _CLIENT_STAMPS[key] = (t0, client.first)


async def kept_streams(port: int, count: int, results: list[Result]) -> None:
    """`count` requests one after another on one kept-alive connection, as a client's
    connection pool (the openai SDK's httpx) sends them: each response ends with the chunked
    body's last chunk, `0\r\n\r\n`, after its terminal event."""
    request = _request(keep_alive=True)
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        for _ in range(count):
            t0 = time.perf_counter()
            first = None
            received = bytearray()
            await stream.send(request)
            while not received.endswith(b"\r\n0\r\n\r\n"):
                received += await stream.receive(1 << 16)
                if first is None and b"event: " in received:
                    first = time.perf_counter() - t0
            results.append(_result(received, t0, first))


_TERMINAL = (
    b'{"type":"response.completed"',
    b'{"type":"response.failed"',
    b'{"type":"response.incomplete"',
)
_EVENT = b'{"type":"response.'  # how every event's JSON begins (none of its text has it raw)


def _client_frame(text: str) -> bytes:
    """`text` as a client's WebSocket text frame (RFC 6455: a client masks its frames; the mask
    is fixed here, which only a proxy's cache poisoning would care about)."""
    payload = text.encode()
    mask = b"\x01\x02\x03\x04"
    size = len(payload)
    if size < 126:
        header = bytes((0x81, 0x80 | size))
    elif size < 65536:
        header = bytes((0x81, 0x80 | 126)) + size.to_bytes(2, "big")
    else:
        header = bytes((0x81, 0x80 | 127)) + size.to_bytes(8, "big")
    return header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


_UPGRADE = (
    b"GET /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
    b"Connection: Upgrade\r\nSec-WebSocket-Key: c3RyZWFtZm9sZC1iZW5jaA==\r\n"
    b"Sec-WebSocket-Version: 13\r\n\r\n"
)
_CREATE = _client_frame(json.dumps({"type": "response.create", "model": "bench", "input": "hi"}))


def _payload_size(received: bytearray, start: int) -> int:
    """The payload size of the server's frame whose payload begins at `start`, read from its
    header (2, 4 or 10 bytes before; the byte before a 2-byte header is a JSON's `}`)."""
    if start >= 10 and received[start - 10] == 0x81 and received[start - 9] == 127:
        return int.from_bytes(received[start - 8 : start], "big")
    if start >= 4 and received[start - 4] == 0x81 and received[start - 3] == 126:
        return int.from_bytes(received[start - 2 : start], "big")
    return received[start - 1]


async def socket_streams(port: int, count: int, results: list[Result]) -> None:
    """`count` responses one after another on one WebSocket (`/v1/responses` upgraded, as
    openai-python's `responses.connect()` opens it): each a `response.create` message, each
    event one message, up to the terminal one. A minimal raw-socket client as the SSE one is
    (the handshake written by hand, no compression offered, frames not parsed: events counted
    by how their JSON begins), so the load generator costs far less than the server (the
    `websockets` library parsed each frame in Python, a slower reader than the SSE client,
    whose back-pressure then cost the server more)."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(_UPGRADE)
        received = bytearray()
        while b"\r\n\r\n" not in received:
            received += await stream.receive(1 << 16)
        head, _, rest = bytes(received).partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            raise RuntimeError(f"the upgrade was refused: {head[:200]!r}")
        for _ in range(count):
            t0 = time.perf_counter()
            first = None
            received = bytearray(rest)
            await stream.send(_CREATE)
            ended = -1
            while ended < 0:
                start = max(0, len(received) - 40)
                received += await stream.receive(1 << 16)
                if first is None:
                    first = time.perf_counter() - t0
                ended = max(received.find(t, start) for t in _TERMINAL)
            end = ended + _payload_size(received, ended)  # the terminal frame, whole
            while len(received) < end:
                received += await stream.receive(1 << 16)
            rest = bytes(received[end:])  # nothing, as nothing follows until the next create
            results.append((first or 0.0, time.perf_counter() - t0, received.count(_EVENT), 0.0))


class LagProbe:
    """How late the client's own event loop runs a timer due every `period_s`: the loop's lag,
    which every time the client stamps (connected, first event received) carries too. A client
    that is behind measures itself, not the server."""

    def __init__(self, period_s: float = 1e-3) -> None:
        self.period_s = period_s
        self.lags: list[float] = []
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._schedule(loop, loop.time() + self.period_s)

    def _schedule(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        self._handle = loop.call_at(when, self._tick, loop, when)

    def _tick(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        now = loop.time()
        self.lags.append(now - when)
        self._schedule(loop, now + self.period_s)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()


async def run_streams(
    port: int,
    concurrency: int,
    streams: int,
    keep_alive: bool,
    websocket: bool,
    rate: float | None = None,
) -> tuple[list[Result], list[float], dict[str, tuple[float, float]]]:
    """One client process's share of a level: its results, its loop's lags (s), and with
    `--stamps` its streams' send and first-receive times. `rate`: an open loop instead, each
    stream started at its own time, Poisson arrivals at `rate` a second (the same times for
    every contender: a fixed seed), however many are then in flight."""
    results: list[Result] = []
    limiter = anyio.Semaphore(concurrency)
    probe = LagProbe()

    async def bounded() -> None:
        async with limiter:
            await one_stream(port, results)

    probe.start()
    try:
        async with anyio.create_task_group() as tg:
            if rate is not None:
                arrivals = random.Random(0)
                at = anyio.current_time()
                for _ in range(streams):
                    at += arrivals.expovariate(rate)
                    await anyio.sleep_until(at)
                    tg.start_soon(one_stream, port, results)
            elif keep_alive or websocket:  # one connection per concurrent client, each its share
                for i in range(concurrency):
                    tg.start_soon(
                        socket_streams if websocket else kept_streams,
                        port,
                        streams // concurrency + (i < streams % concurrency),
                        results,
                    )
            else:
                for _ in range(streams):
                    tg.start_soon(bounded)
    finally:
        probe.stop()
    return results, probe.lags, dict(_CLIENT_STAMPS or {})


def _client_process(
    port: int,
    concurrency: int,
    streams: int,
    keep_alive: bool,
    websocket: bool,
    go: Any,
    out: Any,
) -> None:
    """A client process (`--client-procs`): waits for the start, runs its share, sends back
    its results and lags."""
    go.wait()
    out.put(anyio.run(run_streams, port, concurrency, streams, keep_alive, websocket))


def _share(total: int, parts: int, i: int) -> int:
    return total // parts + (i < total % parts)


def run_level(
    port: int,
    concurrency: int,
    streams: int,
    pid: int,
    keep_alive: bool = False,
    websocket: bool = False,
    procs: int = 1,
    rate: float | None = None,
) -> dict[str, float]:
    """One level against one server: `concurrency` streams at a time, spread over `procs`
    client processes (each its share of the streams and of the concurrency, its own loop);
    with `rate`, an open loop from one process (`run_streams`)."""
    if websocket:  # warm up (trace loading, vocabulary)
        anyio.run(socket_streams, port, 1, [])
    else:
        anyio.run(one_stream, port, [])
    procs = 1 if rate is not None else max(1, min(procs, concurrency))
    results: list[Result] = []
    lags: list[float] = []
    sent: dict[str, tuple[float, float]] = {}
    if _CLIENT_STAMPS is not None:
        _CLIENT_STAMPS.clear()
        httpx.get(f"http://127.0.0.1:{port}/bench/stamps")  # forget the warm-up's
    if procs == 1:
        t0, cpu0 = time.perf_counter(), cpu_seconds(pid)
        results, lags, sent = anyio.run(
            run_streams, port, concurrency, streams, keep_alive, websocket, rate
        )
    else:
        context = multiprocessing.get_context("fork")
        go, out = context.Event(), context.Queue()
        workers = [
            context.Process(
                target=_client_process,
                args=(
                    port,
                    _share(concurrency, procs, i),
                    _share(streams, procs, i),
                    keep_alive,
                    websocket,
                    go,
                    out,
                ),
            )
            for i in range(procs)
        ]
        for worker in workers:
            worker.start()
        time.sleep(0.2)  # every client process started, waiting
        t0, cpu0 = time.perf_counter(), cpu_seconds(pid)
        go.set()
        for _ in workers:
            share, share_lags, share_sent = out.get()
            results += share
            lags += share_lags
            sent |= share_sent
        for worker in workers:
            worker.join()
    cpu1 = cpu_seconds(pid)
    wall, user, system = time.perf_counter() - t0, cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
    events = sum(r[2] for r in results)
    firsts = sorted(r[0] for r in results)
    lags.sort()
    parts: dict[str, float] = {}
    if _CLIENT_STAMPS is not None:  # the time to first event, split at the server's stamps
        served = httpx.get(f"http://127.0.0.1:{port}/bench/stamps").json()
        both = [(sent[k], served[k]) for k in sent.keys() & served.keys()]
        for name, at in (
            ()
            if not both
            else (
                ("to_app", lambda c, s: s[0] - c[0]),  # accept, read, parse, the app's task
                ("in_app", lambda c, s: s[1] - s[0]),  # the app, to its first body send
                ("to_client", lambda c, s: c[1] - s[1]),  # loopback, and the client's loop
            )
        ):
            parts[f"ttfe_{name}_p50_ms"] = 1e3 * statistics.median(at(c, s) for c, s in both)
    return {
        **parts,
        "concurrency": concurrency,
        "streams": streams,
        "client_procs": procs,
        "events": events,
        "wall_s": wall,
        "streams_per_s": streams / wall,
        "events_per_s": events / wall,
        "ttfe_p50_ms": 1e3 * statistics.median(firsts),
        "ttfe_p99_ms": 1e3 * firsts[min(len(firsts) - 1, int(0.99 * len(firsts)))],
        "connect_p50_ms": 1e3 * statistics.median(r[3] for r in results),
        "stream_p50_ms": 1e3 * statistics.median(r[1] for r in results),
        "client_lag_p50_ms": 1e3 * statistics.median(lags) if lags else float("nan"),
        "client_lag_p99_ms": 1e3 * lags[int(0.99 * len(lags))] if lags else float("nan"),
        "server_cpu_us_per_event": 1e6 * (user + system) / events,
        "server_sys_share": system / (user + system) if user + system else float("nan"),
    }


def start_server(
    contender: str, traces: Path, store: str, index: int, stamps: bool = False
) -> tuple[subprocess.Popen[bytes], int]:
    server, http, loop = [*contender.split(":"), "default", "default"][:3]
    server, _, package_dir = server.partition("@")
    if server == "streamfold-ws":  # the same server; the load comes over WebSockets
        server = "streamfold"
    if server not in ("streamfold", "peer"):
        raise SystemExit(
            f"unknown contender {contender!r}: streamfold, streamfold-ws or peer[:HTTP[:LOOP]]"
        )
    env = dict(os.environ)
    if package_dir:  # e.g. a baseline: pip install --no-deps --target DIR <checkout>
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_dir, env.get("PYTHONPATH")]))
    port = free_port()
    command = [
        sys.executable, __file__, "--serve", f"{server}:{http}:{loop}", "--traces", str(traces),
        "--port", str(port), "--store", store,
        "--store-path", str(traces / f"bench{index}.sqlite3"),
    ] + (["--stamps"] if stamps else [])  # fmt: skip
    proc = subprocess.Popen(command, cwd=ROOT, env=env)
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/v1/responses/resp_none", timeout=1)
            return proc, port
        except httpx.TransportError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise SystemExit(f"{contender} did not start") from None
            time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[10, 200])
    # 2000: with 400, streamfold's run of a level lasted under half a second, so one stall of
    # the shared machine moved a round's rate by a third.
    parser.add_argument("--streams", type=int, default=2000, help="streams per level")
    parser.add_argument("--tokens", type=int, default=100, help="text tokens per stream")
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per level")
    parser.add_argument("--contenders", nargs="+", default=["streamfold", "peer:httptools:uvloop"])
    parser.add_argument(
        "--keep-alive",
        action="store_true",
        help="each concurrent client sends its requests on one kept-alive connection (as a "
        "connection pool does) instead of a new connection per request",
    )
    parser.add_argument(
        "--client-procs",
        type=int,
        nargs="+",
        default=[1],
        help="spread each level's load over this many client processes (each its own event "
        "loop, its share of the streams and of the concurrency), so that no client loop is "
        "behind (see the client lag the report prints); several counts run alternated, "
        "round by round, and are reported apart",
    )
    parser.add_argument(
        "--stamps",
        action="store_true",
        help="split each time to first event into the server's part and the client's, with "
        "a stamping ASGI wrapper around either server (see `Stamped`)",
    )
    parser.add_argument(
        "--rates",
        type=float,
        nargs="*",
        default=[],
        help="open-loop levels after the concurrency levels: streams started at these rates "
        "(a second, Poisson arrivals, the same for every contender), not when others end; the "
        "time to first event without the closed loop's bursts",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON line per run")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--traces", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--store-path", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args)
        return
    if args.stamps:
        global _CLIENT_STAMPS
        _CLIENT_STAMPS = {}
    with tempfile.TemporaryDirectory() as tmp:
        traces = Path(tmp)
        write_trace(traces, args.tokens)
        servers: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
        try:
            for i, name in enumerate(args.contenders):
                servers[name] = start_server(name, traces, args.store, i, args.stamps)
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
            print(
                f"{args.tokens}-token answers one token per chunk, streamfold with a "
                f"{args.store} event log, {args.rounds} interleaved rounds, {os.cpu_count()} "
                f"CPUs shared with other work (load average {load:.1f}): compare within a run"
            )
            levels: list[tuple[int, float | None]] = [(c, None) for c in args.concurrency]
            levels += [(0, rate) for rate in args.rates]
            for level, rate in levels:
                # Per client-process count, per contender: every pair once per round.
                counts = [1] if rate is not None else args.client_procs
                rows: dict[int, dict[str, list[dict[str, float]]]] = {
                    procs: {name: [] for name in servers} for procs in counts
                }
                for _ in range(args.rounds):
                    for procs in counts:
                        for name, (proc, port) in servers.items():
                            streams = max(args.streams, level)
                            websocket = name.startswith("streamfold-ws")
                            if rate is not None and (websocket or args.keep_alive):
                                raise SystemExit("--rates opens a connection per stream")
                            row = run_level(
                                port,
                                level,
                                streams,
                                proc.pid,
                                args.keep_alive,
                                websocket,
                                procs,
                                rate,
                            )
                            rows[procs][name].append(row)
                            if args.json:
                                print(json.dumps({"contender": name, **row}))
                for procs, by_name in rows.items():
                    report(level, by_name, procs, rate)
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(timeout=10)


def report(
    level: int,
    rows: dict[str, list[dict[str, float]]],
    procs: int = 1,
    rate: float | None = None,
) -> None:
    def span(name: str, key: str, fmt: str) -> str:
        values = [row[key] for row in rows[name]]
        return f"{min(values):{fmt}}–{max(values):{fmt}}"

    clients = f", {procs} client processes" if procs > 1 else ""
    if rate is None:
        print(f"\nconcurrency {level}{clients}:")
    else:  # events/s is then the load offered, not what the server can do
        print(f"\nopen loop, {rate:g} streams/s (Poisson arrivals; events/s is the load offered):")
    print(
        "| server | events/s | server CPU µs/event (kernel share) | TTFE p50 ms | TTFE p99 ms "
        "| stream p50 ms | connect p50 ms | client lag p50/p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in rows:
        print(
            f"| {name} | {span(name, 'events_per_s', '.0f')} | "
            f"{span(name, 'server_cpu_us_per_event', '.1f')} "
            f"({span(name, 'server_sys_share', '.0%')}) | {span(name, 'ttfe_p50_ms', '.1f')} "
            f"| {span(name, 'ttfe_p99_ms', '.1f')} | {span(name, 'stream_p50_ms', '.1f')} "
            f"| {span(name, 'connect_p50_ms', '.2f')} "
            f"| {span(name, 'client_lag_p50_ms', '.2f')} "
            f"/ {span(name, 'client_lag_p99_ms', '.2f')} |"
        )
    for name in rows:
        if "ttfe_to_app_p50_ms" in rows[name][0]:
            print(
                f"- {name}: TTFE p50 split (ms): request sent -> app called "
                f"{span(name, 'ttfe_to_app_p50_ms', '.2f')}, app -> its first body send "
                f"{span(name, 'ttfe_in_app_p50_ms', '.2f')}, that send -> the client's "
                f"receive {span(name, 'ttfe_to_client_p50_ms', '.2f')}"
            )
    peers = [name for name in rows if name.startswith("peer")]
    sse = [name for name in rows if name.startswith("streamfold") and "-ws" not in name]
    for ours in (name for name in rows if name.startswith("streamfold-ws")):
        for other in sse[:1]:  # WebSocket against SSE, same server, same rounds
            speed = [
                a["events_per_s"] / b["events_per_s"]
                for a, b in zip(rows[ours], rows[other], strict=True)
            ]
            cpu = [
                a["server_cpu_us_per_event"] / b["server_cpu_us_per_event"]
                for a, b in zip(rows[ours], rows[other], strict=True)
            ]
            print(
                f"- {ours} vs {other}: {min(speed):.2f}–{max(speed):.2f}× the events/s, "
                f"{min(cpu):.2f}–{max(cpu):.2f}× the server CPU per event"
            )
    for ours in (name for name in rows if name.startswith("streamfold")):
        for peer in peers:
            # Same-round pairs: the load of the machine moves both alike.
            speed = [
                a["events_per_s"] / b["events_per_s"]
                for a, b in zip(rows[ours], rows[peer], strict=True)
            ]
            cpu = [
                b["server_cpu_us_per_event"] / a["server_cpu_us_per_event"]
                for a, b in zip(rows[ours], rows[peer], strict=True)
            ]
            ttfe = [
                a["ttfe_p50_ms"] / b["ttfe_p50_ms"]
                for a, b in zip(rows[ours], rows[peer], strict=True)
            ]
            speeds = (
                f"{min(speed):.2f}–{max(speed):.2f}× the events/s (target ≥ 3×), "
                if rate is None
                else ""
            )
            print(
                f"- {ours} vs {peer}: {speeds}{min(cpu):.2f}–{max(cpu):.2f}× less server CPU "
                f"per event, {min(ttfe):.2f}–{max(ttfe):.2f}× the TTFE p50 (target ≤ 1×)"
            )


if __name__ == "__main__":
    main()
