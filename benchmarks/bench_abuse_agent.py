"""`streamfold serve --python-tool --mcp-allow ...` under abuse (issue 29): RSS and bystanders.

Starts `streamfold serve` (replay engine, SQLite log, `--python-tool`, `--mcp-allow`) and three
MCP servers written to misbehave (the `mcp` SDK, each its own process):

- `listing`: 2,000 tools of 2,000-character descriptions, a 4 MB `tools/list` (past the
  server's 1 MiB listing budget: the listing fails);
- `flood`: one tool whose output is 20 MB (past the 1 MiB call budget: the call fails);
- `maxed`: everything just inside the bounds, so the server takes all of it: 16 tools of
  4,000-character descriptions (the listing goes into the prompt and the log) and one tool
  whose output is 900 kB (read, cut to what the model reads, logged).

Then, alternated `--rounds` times in one run (idle then abused, abused then idle the next round,
so a drift of the machine falls on both), each phase `--phase-seconds` long:

- *idle*: `--lanes` bystanders, each a `stream: true` request of a 100-token answer every
  `--interval` seconds (a paced load, the same in both phases), time to first event (TTFE);
- *abused*: the same bystanders while `--python-calls` clients each run python that takes 800
  MB and sleeps 2 s, one request after another, and `--mcp-calls` clients (spread over the
  three MCP servers) ask their MCP server for its listing and a call, one after another. The
  bystanders start once the abuse is under way; the abusers' last requests finish before the
  next phase begins.

The abusers run in a process of their own, so reading their answers takes nothing from the
bystanders' client. It reports, per round: the bystanders' TTFE p50 (abused / idle: the
ratio) and p99; the event loop's CPU per abusive request (the abused phase's loop CPU less the
idle phase's, over the requests); per phase, the server's CPU, its event-loop thread's CPU and
the time that thread waited, runnable, for a CPU (Linux schedstat: the machine's contention,
not the server's work), the tools' CPU (sandboxes, MCP servers) and this client's CPU wait;
and the RSS peak of the server, alone and with its prompt-rendering workers (the python
memory is the sandboxes', bounded by their own limits). Then the ratio's median and range over
the rounds, and the RSS after the warm-up against each abused phase's peak: bounded means
within `--rss-bound-mb` of it and no creep from round to round. The targets (issue 29): RSS
growth within the bound, and a median bystander ratio within 2. Where the loop's thread waits
for a CPU for most of a phase (a small machine under other load: the tools alone take a core
of a 2-core machine), the ratio measures the machine; the loop CPU per abusive request is
what the server controls. Run from the repository root (about 2 minutes):

    python benchmarks/bench_abuse.py --agent [--rounds 5] [--phase-seconds 6] [--lanes 4]
        [--python-calls 6] [--mcp-calls 6] [--mcp-modes listing,flood,maxed]
"""

from __future__ import annotations

import argparse
import json
import os
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
from bench_server import free_port, one_stream, write_trace

__all__ = ["agent_abuse"]

_EVIL_MCP = """
import sys, uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.routing import Mount
server = MCPServer("evil")
mode = sys.argv[2]
if mode == "listing":
    for i in range(2000):  # about 4 MB of listing
        server.add_tool(lambda: "ok", name=f"tool_{i}", description="d" * 2000)
elif mode == "flood":
    server.add_tool(lambda: "x" * (20 << 20), name="flood", description="20 MB of output")
else:  # maxed: inside every bound (McpLimits), so all of it is taken
    words = " ".join(f"w\u00e9rd{i}" for i in range(700))[:4000]
    for i in range(15):
        server.add_tool(lambda: "ok", name=f"tool_{i}", description=words)
    server.add_tool(lambda: "y \u00e9 " * 150_000, name="big", description=words)
inner = server.streamable_http_app()
app = Starlette(routes=[Mount("/", inner)], lifespan=inner.router.lifespan_context)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error")
"""

_MODES = ("listing", "flood", "maxed")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int, children: bool = False) -> float:
    """CPU seconds of a process (user + system), with its reaped children's if `children`."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])
    if children:
        ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


def workers(pid: int) -> list[int]:
    """The server's prompt-rendering worker processes (its python sandboxes are not counted:
    their memory is the sandboxes' own limit)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:  # a thread, or a child, may end while it is read
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            try:
                command = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            if b"_render_worker" in command:
                found.append(int(child))
    return found


class RssSampler:
    """The RSS of the server and its render workers together every 10 ms, the highest per
    phase name (`phase` is set by the run)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.phase, self.peaks = pid, "warm-up", dict[str, float]()
        self.own_peaks = dict[str, float]()  # the server process alone
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def rss(self) -> tuple[float, float]:
        """The server's RSS, and its render workers' with it."""
        own = total = rss_mb(self.pid)
        for worker in workers(self.pid):
            try:
                total += rss_mb(worker)
            except OSError:  # a worker replaced meanwhile
                pass
        return own, total

    def _sample(self) -> None:
        while not self._stop.is_set():
            phase = self.phase
            own, total = self.rss()
            self.peaks[phase] = max(self.peaks.get(phase, 0.0), total)
            self.own_peaks[phase] = max(self.own_peaks.get(phase, 0.0), own)
            time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _write_turns(directory: Path, turns: list[str]) -> None:
    from streamfold.engines import TokenChunk, dump_trace
    from streamfold.engines.vocab import harmony_encoding

    directory.mkdir(parents=True)
    for turn, text in enumerate(turns):
        ids = harmony_encoding().encode(text, allowed_special="all")
        header = {"grammar": "harmony", "encoding": "o200k_harmony", "response_id": "resp_b",
                  "model": directory.name, "created_at": 1}  # fmt: skip
        chunks = [TokenChunk(token_ids=(t,)) for t in ids]
        (directory / f"{turn}.jsonl").write_text(dump_trace(header, chunks, "stop"))


def _traces(directory: Path) -> None:
    write_trace(directory, 100)  # the bystanders' model, "bench"
    final = "<|channel|>final<|message|>done<|return|>"
    hog = "x = bytearray(800 << 20)\nimport time\ntime.sleep(2)\nprint(len(x))"
    _write_turns(
        directory / "pyhog", [f"<|channel|>analysis to=python code<|message|>{hog}<|call|>", final]
    )
    for name, tool in (("flood", "flood"), ("maxed", "big")):
        call = f"<|channel|>commentary to=evil.{tool} <|constrain|>json<|message|>{{}}<|call|>"
        _write_turns(directory / name, [call, final])


def _bodies(args: argparse.Namespace, ports: dict[str, int]) -> list[dict[str, object]]:
    def mcp(mode: str) -> dict[str, str]:
        return {"type": "mcp", "server_label": "evil", "require_approval": "never",
                "server_url": f"http://127.0.0.1:{ports[mode]}/mcp"}  # fmt: skip

    python = {"type": "code_interpreter", "container": {"type": "auto"}}
    models = {"listing": "bench", "flood": "flood", "maxed": "maxed"}
    return [
        *[{"model": "pyhog", "input": "x", "tools": [python]}] * args.python_calls,
        *[
            {"model": models[mode], "input": "x", "tools": [mcp(mode)]}
            for mode in (args.mcp_modes[i % len(args.mcp_modes)] for i in range(args.mcp_calls))
        ],
    ]


async def _bystanders(port: int, args: argparse.Namespace, ttfes: list[float]) -> None:
    """`args.lanes` paced lanes, each a stream every `args.interval` s for the phase."""
    end = time.perf_counter() + args.phase_seconds

    async def lane(offset: float) -> None:
        await anyio.sleep(offset)
        while (start := time.perf_counter()) < end:
            results: list[tuple[float, float, int]] = []
            await one_stream(port, results)
            ttfes.append(results[0][0])
            await anyio.sleep(max(0.0, start + args.interval - time.perf_counter()))

    async with anyio.create_task_group() as tg:
        for i in range(args.lanes):
            tg.start_soon(lane, i * args.interval / args.lanes)


async def _abuser(port: int, body: dict[str, object], stop: anyio.Event, done: list[float]) -> None:
    async with httpx.AsyncClient(timeout=300) as client:
        while not stop.is_set():
            t0 = time.perf_counter()
            reply = await client.post(f"http://127.0.0.1:{port}/v1/responses", json=body)
            if reply.status_code != 200:
                raise RuntimeError(f"an abuser's request failed: {reply.status_code} "
                                   f"{reply.text[:200]}")  # fmt: skip
            done.append(time.perf_counter() - t0)


async def _abuse(port: int, bodies: list[dict[str, object]]) -> None:
    """The abusers (a process of their own, so that reading their answers takes nothing from
    the bystanders' client): one lane per body until stdin closes, each finishing the request
    it has under way; then how many requests they made, on stdout."""
    stop = anyio.Event()
    done: list[float] = []

    async def until_eof() -> None:
        await anyio.to_thread.run_sync(sys.stdin.read, abandon_on_cancel=True)
        stop.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(until_eof)
        for body in bodies:
            tg.start_soon(_abuser, port, body, stop, done)
    print(json.dumps({"requests": len(done), "max_s": max(done, default=0.0)}), flush=True)


def _schedstat(pid: int, tid: int) -> tuple[float, float]:
    """A thread's CPU seconds and seconds spent runnable but waiting for a CPU (Linux)."""
    fields = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
    return int(fields[0]) / 1e9, int(fields[1]) / 1e9


def _phase(
    port: int, args: argparse.Namespace, bodies: list[dict[str, object]]
) -> tuple[list[float], dict[str, float]]:
    """One phase: the bystanders' TTFEs (with the abusers running, when `bodies`)."""
    ttfes: list[float] = []
    if not bodies:
        anyio.run(_bystanders, port, args, ttfes)
        return ttfes, {"requests": 0.0}
    abusers = subprocess.Popen(
        [sys.executable, __file__, "abuse", str(port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert abusers.stdin is not None
    abusers.stdin.write(json.dumps(bodies) + "\n")
    abusers.stdin.flush()
    time.sleep(args.settle)  # the tools are under way
    anyio.run(_bystanders, port, args, ttfes)
    out, _ = abusers.communicate(timeout=300)  # closes stdin: the abusers finish and stop
    if abusers.returncode != 0:
        raise SystemExit("the abusers failed")
    return ttfes, json.loads(out)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _wait_up(urls: list[str]) -> None:
    for url in urls:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise SystemExit(f"{url} did not start") from None
                time.sleep(0.2)


def agent_abuse(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        traces = Path(tmp) / "traces"
        traces.mkdir()
        _traces(traces)
        port = free_port()
        ports = {mode: free_port() for mode in _MODES}
        evil = [
            subprocess.Popen(
                [sys.executable, "-c", _EVIL_MCP, str(ports[mode]), mode],
                stderr=subprocess.DEVNULL,
            )
            for mode in _MODES
        ]
        streamfold = Path(sys.executable).parent / "streamfold"
        allow = [a for mode in _MODES for a in ("--mcp-allow", f"http://127.0.0.1:{ports[mode]}/")]
        server = subprocess.Popen(
            [str(streamfold), "serve", "--traces", str(traces), "--port", str(port),
             "--store", str(Path(tmp) / "r.sqlite3"), "--log-level", "error", "--python-tool",
             *allow],
        )  # fmt: skip
        try:
            _wait_up(
                [f"http://127.0.0.1:{port}/health"]
                + [f"http://127.0.0.1:{p}/mcp" for p in ports.values()]
            )
            bodies = _bodies(args, ports)
            # One of each kind first: the first MCP request imports the mcp SDK (once).
            warm = [*bodies[:1], *bodies[args.python_calls : args.python_calls + len(_MODES)]]
            _phase(port, argparse.Namespace(**{**vars(args), "phase_seconds": 0.5}), warm)
            run(args, port, server.pid, [p.pid for p in evil], bodies)
        finally:
            for process in (server, *evil):
                process.terminate()
                process.wait(timeout=15)


def _measured(
    args: argparse.Namespace, port: int, pid: int, tools: list[int], bodies: list[dict[str, object]]
) -> dict[str, float]:
    """One phase and what it cost: the server's CPU, the waits of its event loop's thread and
    of this client's for a CPU (a shared machine's contention), the tools' CPU."""
    me = os.getpid()
    server0, me0 = _schedstat(pid, pid), _schedstat(me, me)
    proc0 = cpu_s(pid)
    tools0 = cpu_s(pid, children=True) - proc0 + sum(cpu_s(t) for t in tools)
    ttfes, abuse = _phase(port, args, bodies)
    server1, me1 = _schedstat(pid, pid), _schedstat(me, me)
    proc1 = cpu_s(pid)
    tools1 = cpu_s(pid, children=True) - proc1 + sum(cpu_s(t) for t in tools)
    return {
        "n": len(ttfes),
        "p50_ms": 1e3 * statistics.median(ttfes),
        "p99_ms": 1e3 * _pct(ttfes, 0.99),
        "server_cpu_s": proc1 - proc0,  # all its threads
        "loop_cpu_s": server1[0] - server0[0],  # its main thread: the event loop
        "loop_wait_s": server1[1] - server0[1],
        "client_wait_s": me1[1] - me0[1],
        "tools_cpu_s": tools1 - tools0,
        "abuse_requests": abuse["requests"],
    }


def run(
    args: argparse.Namespace,
    port: int,
    pid: int,
    tools: list[int],
    bodies: list[dict[str, object]],
) -> None:
    load0 = os.getloadavg()
    print(
        f"streamfold serve --python-tool, replay engine, {os.cpu_count()} CPUs, load average "
        f"{load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}; {args.rounds} rounds of idle/abused "
        f"phases of {args.phase_seconds:g} s, {args.lanes} bystander lanes every "
        f"{args.interval:g} s; abusers: {args.python_calls} python calls of 800 MB, "
        f"{args.mcp_calls} MCP clients ({', '.join(args.mcp_modes)})"
    )
    sampler = RssSampler(pid)
    start_own, start_rss = sampler.rss()
    rounds = []
    try:
        for r in range(args.rounds):
            result: dict[str, dict[str, float]] = {}
            order = ("idle", "abused") if r % 2 == 0 else ("abused", "idle")
            for phase in order:
                sampler.phase = f"{phase} {r}"
                result[phase] = _measured(
                    args, port, pid, tools, bodies if phase == "abused" else []
                )
                sampler.phase = "between"
                time.sleep(args.settle)
            idle, abused = result["idle"], result["abused"]
            ratio = abused["p50_ms"] / idle["p50_ms"]
            # The event loop's CPU the abuse cost, per abusive request (the idle phase's CPU
            # is the bystanders' own).
            per_request = (abused["loop_cpu_s"] - idle["loop_cpu_s"]) / max(
                1.0, abused["abuse_requests"]
            )
            peak, own = sampler.peaks[f"abused {r}"], sampler.own_peaks[f"abused {r}"]
            rounds.append({"round": r, "idle": idle, "abused": abused, "ratio_p50": ratio,
                           "rss_abused_peak_mb": peak, "rss_own_peak_mb": own,
                           "loop_cpu_ms_per_abuse": 1e3 * per_request})  # fmt: skip
            print(
                f"round {r}: bystander TTFE p50 idle {idle['p50_ms']:.1f} ms (n={idle['n']}, "
                f"p99 {idle['p99_ms']:.0f}), abused {abused['p50_ms']:.1f} ms (n={abused['n']}, "
                f"p99 {abused['p99_ms']:.0f}): ratio {ratio:.2f}; {abused['abuse_requests']:.0f} "
                f"abuse requests, {1e3 * per_request:.1f} ms of event-loop CPU each; RSS peak "
                f"{own:.0f} MB (server), {peak:.0f} MB (with its render workers)"
            )
            for name, phase_result in (("idle", idle), ("abused", abused)):
                print(
                    f"  {name}: server CPU {phase_result['server_cpu_s']:.2f} s (its event "
                    f"loop's thread {phase_result['loop_cpu_s']:.2f} s, which waited "
                    f"{phase_result['loop_wait_s']:.2f} s for a CPU), tools' CPU "
                    f"{phase_result['tools_cpu_s']:.2f} s, this client waited "
                    f"{phase_result['client_wait_s']:.2f} s for a CPU"
                )
    finally:
        sampler.stop()
    ratios = [r["ratio_p50"] for r in rounds]
    peaks = [r["rss_abused_peak_mb"] for r in rounds]
    own_peaks = [r["rss_own_peak_mb"] for r in rounds]
    load1 = os.getloadavg()
    ratio_ok = statistics.median(ratios) <= 2.0
    rss_ok = max(peaks) - start_rss <= args.rss_bound_mb
    print(
        f"bystander TTFE p50 ratio abused/idle: median {statistics.median(ratios):.2f}, range "
        f"{min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} rounds (target <= 2: "
        f"{'met' if ratio_ok else 'NOT met'})"
    )
    print(
        f"server RSS: {start_own:.0f} MB after the warm-up, abused phases' peaks "
        f"{', '.join(f'{p:.0f}' for p in own_peaks)} MB; with its render workers "
        f"{start_rss:.0f} MB after the warm-up, abused phases' peaks "
        f"{', '.join(f'{p:.0f}' for p in peaks)} MB (+{max(peaks) - start_rss:.0f} MB; bound "
        f"+{args.rss_bound_mb:g} MB: {'met' if rss_ok else 'NOT met'}); load average now "
        f"{load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}"
    )
    summary = {"ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
               "ratio_max": max(ratios), "rss_start_mb": start_rss, "rss_peak_mb": max(peaks),
               "load_before": load0, "load_after": load1}  # fmt: skip
    print(json.dumps({"rounds": rounds, **summary}))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=5, help="idle/abused phase pairs")
    parser.add_argument("--phase-seconds", type=float, default=6.0)
    parser.add_argument("--lanes", type=int, default=4, help="bystander lanes")
    parser.add_argument(
        "--interval", type=float, default=0.1, help="seconds between a lane's requests"
    )
    parser.add_argument("--settle", type=float, default=1.0, help="seconds before measuring")
    parser.add_argument("--python-calls", type=int, default=6)
    parser.add_argument("--mcp-calls", type=int, default=6)
    parser.add_argument(
        "--mcp-modes",
        type=lambda text: text.split(","),
        default=list(_MODES),
        help="which misbehaving MCP servers the MCP clients take turns on (comma-separated)",
    )
    parser.add_argument("--rss-bound-mb", type=float, default=64.0)


if __name__ == "__main__" and sys.argv[1:2] == ["abuse"]:
    anyio.run(_abuse, int(sys.argv[2]), json.loads(sys.stdin.readline()))
