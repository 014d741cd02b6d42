"""CPU per streamed request of the server's ASGI app in process: no uvicorn, no sockets, so what
the app itself costs (middleware, preparing, the service, the SQLite log, SSE framing) without the
kernel's share or the load generator's, which `bench_server.py` counts. A/B against other builds
in the same run, alternated round by round:

    python benchmarks/bench_app.py [--requests 1500] [--concurrency 10] [--rounds 3]
        [--tokens 100] [--packages DIR ...]

`--packages`: builds installed with `pip install --no-deps --target DIR <checkout>`; the
checkout this runs from (its installed `streamfold`) is always measured, as `.`. Each round runs
every build once in a fresh process; the figure is the main thread's CPU time over `--requests`
`stream: true` requests, `--concurrency` at a time, after 50 not counted (`time.thread_time`,
so other work on the machine moves it little). Beside it, the median wall time from the app's
call to its first body send (the opening events): with `--concurrency 1 --tokens 1`, the work a
request takes before its first event; at 10, what a burst of requests queues behind each other
(`bench_server.py`'s time to first event at 10 streams is about that, its arrivals coming in
bursts: see docs/benchmarks.md). Wall time: compare within a run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
BODY = json.dumps({"model": "bench", "input": "hi", "stream": True}).encode()


async def one(app: Any, firsts: list[float] | None = None) -> int:
    """One streamed request through the app; the events it got. `firsts`: the seconds from
    the call to the first body send are appended to it."""
    sent: list[dict[str, Any]] = []
    asked = False
    done = asyncio.Event()
    called = time.perf_counter()

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": BODY, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if firsts is not None and message["type"] == "http.response.body" and len(sent) == 1:
            firsts.append(time.perf_counter() - called)
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            done.set()

    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(BODY)).encode()),
    ]
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/responses", "raw_path": b"/v1/responses",
        "query_string": b"", "root_path": "", "headers": headers,
        "client": ("127.0.0.1", 5555), "server": ("127.0.0.1", 8000), "state": {},
    }  # fmt: skip
    await app(scope, receive, send)
    if sent[0].get("status") != 200:
        raise RuntimeError(f"the app answered {sent[0]}")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return body.count(b"event: ")


async def measure(traces: Path, requests: int, concurrency: int) -> dict[str, Any]:
    import uvloop  # noqa: F401  (the loop `streamfold serve` runs)

    from streamfold.adapters.registry import ReplayEngine
    from streamfold.adapters.server import SQLiteEventStore, create_app, tune_gc_for_serving

    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(
            ReplayEngine(traces).engine(), store=SQLiteEventStore(Path(tmp) / "log.sqlite3")
        )
        tune_gc_for_serving()
        async with app.router.lifespan_context(app):
            events = await one(app)
            for _ in range(50):
                await one(app)
            slots = asyncio.Semaphore(concurrency)

            firsts: list[float] = []

            async def bounded() -> None:
                async with slots:
                    await one(app, firsts)

            t0 = time.thread_time()
            await asyncio.gather(*(bounded() for _ in range(requests)))
            cpu = time.thread_time() - t0
    import streamfold

    return {
        "us_per_request": 1e6 * cpu / requests,
        "first_us": 1e6 * statistics.median(firsts),
        "events": events,
        "from": streamfold.__file__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=100)
    parser.add_argument("--packages", nargs="*", default=[])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:  # one measurement, in a process of its own
        import uvloop

        from streamfold.adapters.server import serving_asyncio

        with serving_asyncio():
            row = uvloop.run(measure(Path(args.child), args.requests, args.concurrency))
        print(json.dumps(row))
        return
    sys.path.insert(0, str(HERE))
    from bench_server import write_trace

    builds = [".", *args.packages]
    with tempfile.TemporaryDirectory() as tmp:
        write_trace(Path(tmp), args.tokens)
        rows: dict[str, list[dict[str, Any]]] = {build: [] for build in builds}
        for _ in range(args.rounds):
            for build in builds:
                env = dict(os.environ)
                if build != ".":
                    env["PYTHONPATH"] = os.pathsep.join(
                        filter(None, [build, env.get("PYTHONPATH")])
                    )
                command = [sys.executable, __file__, "--child", tmp, "--requests",
                           str(args.requests), "--concurrency", str(args.concurrency)]  # fmt: skip
                out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
                row = json.loads(out.stdout.splitlines()[-1])
                if build != "." and not row["from"].startswith(str(Path(build).resolve())):
                    raise SystemExit(f"{build}: streamfold came from {row['from']}")
                rows[build].append(row)
    load = os.getloadavg()[0]
    print(
        f"{args.tokens}-token streams, {args.concurrency} at a time, SQLite log, in process; "
        f"{args.rounds} alternated rounds, load average {load:.1f}\n"
    )
    print(
        "| build | app CPU µs per request (median, range) | µs per event "
        "| call -> first body µs (p50 by round) |"
    )
    print("|---|---|---|---|")
    for build, got in rows.items():
        cost = [row["us_per_request"] for row in got]
        first = [row["first_us"] for row in got]
        events = got[0]["events"]
        print(
            f"| {build} | {statistics.median(cost):.0f} ({min(cost):.0f}–{max(cost):.0f}) "
            f"| {statistics.median(cost) / events:.2f} | {min(first):.0f}–{max(first):.0f} |"
        )


if __name__ == "__main__":
    main()
