"""Whole-process speed of `streamfold replay` and `streamfold check`, against two peers, in one run.

Every contender is a fresh process over the same harmony trace file (one token per line, the
worst case for reading): start-up, imports, the vocabulary, reading, the work, and the output
(to /dev/null) all count, as they do for a user at a shell.

- `streamfold replay TRACE` (JSON lines, and `--format sse`);
- `streamfold check EVENTS`: the replay's own output read back and judged (JSON lines and SSE);
- peer 1, openai-harmony parse-only: read the trace (`json.loads` per line) and feed every token
  to `StreamableParser.process`; no events, no output;
- peer 2, a vLLM-style pipeline: the same reading, then vLLM's way to events (the parser, the
  openai SDK's pydantic event classes, `model_dump_json` per event, SSE to stdout), from
  `vllm_pipeline.py`;
- the vocabulary alone (`load_harmony_vocabulary()` in a fresh process): cold (an empty cache
  directory each time) and warm (the cache the first run wrote).

Rounds are interleaved (every contender once per round, after one warm-up round that is not
timed) and each process's CPU time (user + system, from `wait4`) is what is compared: on a small
shared machine wall time mostly measures the neighbours. Wall times are printed too.

Bytecode caches are on for every contender, as they are for an installed package (pip compiles
on install): `PYTHONDONTWRITEBYTECODE` is cleared and the caches kept in a temporary
`PYTHONPYCACHEPREFIX`, which the warm-up round fills. Without that, a machine that sets
`PYTHONDONTWRITEBYTECODE=1` (this one does) compiles streamfold's modules, a source checkout,
from source in every run, while the peers' installed modules keep their caches. Run from the
repository root:

    python benchmarks/bench_cli.py [--tokens 100000] [--repeat 5] [--against DIR ...]

`--against DIR` also runs the four `streamfold` commands of another version, installed in DIR
(`git archive COMMIT | tar -x -C SRC && pip install --no-deps --target DIR SRC`), in the same
rounds, each over its own replay's output, and prints this checkout's CPU time over DIR's,
round by round. Every `streamfold` process runs from a scratch directory, so that neither the
checkout (the current directory is first on `sys.path` under `-m`) nor DIR shadows the other.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _peer_tokens(path: str) -> list[int]:
    """How a peer reads the trace: one `json.loads` per line, the header first."""
    tokens: list[int] = []
    with open(path, encoding="utf-8") as f:
        next(f)
        for line in f:
            tokens.extend(json.loads(line).get("token_ids", ()))
    return tokens


def peer(kind: str, path: str) -> int:
    sys.path.insert(0, str(HERE))
    from vllm_pipeline import HarmonyEvents, harmony_encoding, sse

    if kind == "harmony":
        from openai_harmony import Role, StreamableParser

        parser = StreamableParser(harmony_encoding(), Role.ASSISTANT)
        for token in _peer_tokens(path):
            parser.process(token)
        return 0
    stream = HarmonyEvents()
    out = sys.stdout.buffer
    for event in stream.start():
        out.write(sse(event))
    for token in _peer_tokens(path):
        for event in stream.feed(token):
            out.write(sse(event))
    for event in stream.finish():
        out.write(sse(event))
    return 0


def write_trace(path: Path, n_tokens: int) -> int:
    sys.path.insert(0, str(HERE))
    from bench_reducer import completion

    from streamfold.engines import TokenChunk, dump_trace

    tokens = completion(n_tokens)
    if len(tokens) < n_tokens:  # the paragraphs come in whole units: scale up once
        tokens = completion(n_tokens * n_tokens // len(tokens) + 1)
    header = {
        "grammar": "harmony",
        "encoding": "o200k_harmony",
        "response_id": "resp_bench",
        "model": "bench",
        "created_at": 1,
    }
    chunks = [TokenChunk(token_ids=(t,)) for t in tokens]
    path.write_text(dump_trace(header, chunks, "stop"), encoding="utf-8")
    return len(tokens)


def vocabulary_ms() -> int:
    """In a fresh process: the CPU time of loading the vocabulary alone, after the imports every
    command pays anyway (the reducer: `streamfold.statemachine` itself loads its parts lazily)."""
    import streamfold.statemachine._accel  # noqa: F401

    t0 = time.process_time()
    from streamfold.engines.vocab import load_harmony_vocabulary

    load_harmony_vocabulary()
    print(json.dumps(1e3 * (time.process_time() - t0)))
    return 0


def run(
    command: list[str], env: dict[str, str], stdout: int | None = None, cwd: Path = ROOT
) -> tuple[float, float]:
    """Wall and CPU seconds (user + system, from wait4) of one process; fails on a nonzero exit."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=stdout or subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited with {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def run_vocabulary(env: dict[str, str], into: list[float]) -> tuple[float, float]:
    """`vocabulary_ms` in a fresh process: whole-process times, and the load's own in `into`."""
    with tempfile.TemporaryFile() as out:
        times = run([sys.executable, __file__, "--vocabulary"], env, out.fileno())
        out.seek(0)
        into.append(json.loads(out.read()))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--against",
        nargs="+",
        default=[],
        metavar="DIR",
        help="also time the streamfold commands of the version installed in DIR (pip --target)",
    )
    parser.add_argument("--peer", choices=("harmony", "vllm"), help=argparse.SUPPRESS)
    parser.add_argument("--vocabulary", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("trace", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        return peer(args.peer, args.trace)
    if args.vocabulary:
        return vocabulary_ms()

    from streamfold.engines.vocab import encodings_dir

    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        trace = tmp / "trace.jsonl"
        n = write_trace(trace, args.tokens)
        drop = ("TIKTOKEN_ENCODINGS_BASE", "PYTHONDONTWRITEBYTECODE")
        base = {k: v for k, v in os.environ.items() if k not in drop}
        base["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        ours = {**base, "STREAMFOLD_CACHE_DIR": str(tmp / "cache")}
        peers = {**base, "TIKTOKEN_ENCODINGS_BASE": str(encodings_dir())}
        replay = [py, "-m", "streamfold", "replay", str(trace)]
        scratch = tmp / "cwd"  # no `streamfold` directory here: see the module docstring
        scratch.mkdir()
        versions: dict[str, dict[str, str]] = {"": ours}  # suffix of the contender's name: env
        for i, package_dir in enumerate(args.against):
            versions[f" @{Path(package_dir).name}"] = {
                **base,
                "STREAMFOLD_CACHE_DIR": str(tmp / f"cache{i}"),
                "PYTHONPATH": os.pathsep.join(filter(None, [package_dir, base.get("PYTHONPATH")])),
            }
        streamfold: dict[str, Callable[[], tuple[float, float]]] = {}
        for i, (suffix, env) in enumerate(versions.items()):
            jsonl, sse = tmp / f"ev{i}.jsonl", tmp / f"ev{i}.sse"
            with jsonl.open("wb") as out:  # also the first run: it fills the cache
                run(replay, env, out.fileno(), scratch)
            with sse.open("wb") as out:
                run([*replay, "--format", "sse"], env, out.fileno(), scratch)
            check = [py, "-m", "streamfold", "check"]
            commands = {
                "streamfold replay": replay,
                "streamfold replay --format sse": [*replay, "--format", "sse"],
                "streamfold check (JSON lines)": [*check, str(jsonl)],
                "streamfold check (SSE)": [*check, str(sse)],
            }
            for name, command in commands.items():
                streamfold[name + suffix] = functools.partial(run, command, env, None, scratch)
        cold = iter(range(1 << 30))
        warm_ms: list[float] = []
        cold_ms: list[float] = []

        def cold_vocab() -> tuple[float, float]:
            fresh = {**base, "STREAMFOLD_CACHE_DIR": str(tmp / f"cold{next(cold)}")}
            return run_vocabulary(fresh, cold_ms)

        contenders: dict[str, Callable[[], tuple[float, float]]] = {
            **streamfold,
            "peer: openai-harmony parse-only": lambda: run(
                [py, __file__, "--peer", "harmony", str(trace)], peers
            ),
            "peer: vLLM-style pipeline (SSE)": lambda: run(
                [py, __file__, "--peer", "vllm", str(trace)], peers
            ),
            "vocabulary, warm cache": lambda: run_vocabulary(ours, warm_ms),
            "vocabulary, cold (empty cache)": cold_vocab,
            "python -c pass (interpreter floor)": lambda: run([py, "-c", "pass"], base),
        }
        for name, fn in contenders.items():  # warm-up: bytecode caches, not timed
            if not name.startswith("vocabulary"):
                fn()
        walls: dict[str, list[float]] = {name: [] for name in contenders}
        cpus: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(args.repeat):
            for name, fn in contenders.items():
                wall, cpu = fn()
                walls[name].append(wall)
                cpus[name].append(cpu)

    load = os.getloadavg()[0]
    print(
        f"trace: {n} tokens, one per line; {args.repeat} interleaved rounds, one process per "
        f"run; {os.cpu_count()} CPUs, load average {load:.1f} (shared machine: compare ratios)\n"
    )
    print("| process | CPU s (best, range) | CPU s median | wall s (range) |")
    print("|---|---|---|---|")
    for name in contenders:
        c, w = cpus[name], walls[name]
        print(
            f"| {name} | {min(c):.3f} ({min(c):.3f}–{max(c):.3f}) | {statistics.median(c):.3f} "
            f"| {min(w):.2f}–{max(w):.2f} |"
        )

    def ratio(a: str, b: str) -> str:
        per_round = [x / y for x, y in zip(cpus[a], cpus[b], strict=True)]
        best = min(cpus[a]) / min(cpus[b])
        return (
            f"{best:.2f}× (per round {min(per_round):.2f}–{max(per_round):.2f}×, "
            f"median {statistics.median(per_round):.2f}×)"
        )

    harmony, vllm = "peer: openai-harmony parse-only", "peer: vLLM-style pipeline (SSE)"
    print(
        "\nratios of CPU time (best of rounds; the range and median are over same-round pairs, "
        "which share the machine's load of the moment):"
    )
    for name in ("streamfold replay", "streamfold replay --format sse"):
        print(f"- {name} / harmony parse-only: {ratio(name, harmony)} (target ≤ 1)")
        print(f"- vLLM-style pipeline / {name}: {ratio(vllm, name)} faster (target ≥ 5×)")
    for check, of in (
        ("streamfold check (JSON lines)", "streamfold replay"),
        ("streamfold check (SSE)", "streamfold replay --format sse"),
    ):
        print(f"- {check} / {of}: {ratio(check, of)} (target ≤ 1)")
    for suffix in list(versions)[1:]:
        for name in list(streamfold)[:4]:
            print(f"- {name}, this checkout / {suffix.strip()}: {ratio(name, name + suffix)}")
    print(
        f"- vocabulary start-up (`load_harmony_vocabulary()`, CPU, after the reducer's imports): "
        f"warm {min(warm_ms):.0f}–{max(warm_ms):.0f} ms (target < 100 ms), cold (empty cache "
        f"directory) {min(cold_ms):.0f}–{max(cold_ms):.0f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
