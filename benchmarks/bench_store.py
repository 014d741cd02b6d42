"""What a group commit of new responses' openings writes to the SQLite store's WAL, with the
server's response ids (`new_response_id`: time first, then random) against ids all random.

A store already holding `--stored` responses takes `--commits` group commits of `--group`
openings each (`append_many`, as the log writer commits them: each opening its saved input,
its `response.created` and `response.in_progress` events); reported per commit: the WAL
frames written (a frame is a page; `PRAGMA wal_checkpoint` counts them, automatic
checkpoints held off) and the wall time. A page a commit touches is written again by the next
commit that touches it, so ids that sort by creation keep a new response's index entries on
the last page of each index by id, where random ids scatter them over the whole index.

    python benchmarks/bench_store.py [--stored 20000] [--group 3] [--commits 1000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from streamfold.adapters.server import SQLiteEventStore
from streamfold.adapters.server import _sqlite as sqlite_store
from streamfold.adapters.server._prepare import new_response_id
from streamfold.adapters.server._store import EventRecord

INPUT = json.dumps([{"role": "user", "content": "hi"}])


def _random_id() -> str:
    return f"resp_{secrets.token_hex(16)}"


def _opening(response_id: str) -> list[EventRecord]:
    response = {"id": response_id, "object": "response", "status": "in_progress", "output": []}
    response["instructions"] = "x" * 600  # about the size of a real Response's echo
    return [
        EventRecord(n, kind, json.dumps({"type": kind, "sequence_number": n, "response": response}))
        for n, kind in enumerate(("response.created", "response.in_progress"))
    ]


async def _commits(
    store: SQLiteEventStore, new_id: Callable[[], str], commits: int, group: int
) -> float:
    """Seconds for `commits` group commits of `group` openings."""
    started = time.perf_counter()
    for _ in range(commits):
        batch = []
        for _ in range(group):
            response_id = new_id()
            await store.save_input(response_id, INPUT)
            batch.append((response_id, _opening(response_id), False))
        await store.append_many(batch)
    return time.perf_counter() - started


async def measure(
    new_id: Callable[[], str], stored: int, group: int, commits: int
) -> tuple[float, float]:
    """(WAL frames, µs) per group commit, into a store holding `stored` responses."""
    sqlite_store.CHECKPOINT_PAGES = 2**62  # count every frame the commits write
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteEventStore(Path(tmp) / "log.sqlite3")
        try:
            await _commits(store, new_id, stored // 10, 10)
            store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            seconds = await _commits(store, new_id, commits, group)
            _, frames, _ = store._db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        finally:
            store.close()
    return frames / commits, 1e6 * seconds / commits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stored", type=int, default=20_000)
    parser.add_argument("--group", type=int, default=3)
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {"server ids": [], "random ids": []}
    for _ in range(args.rounds):  # alternated
        for name, new_id in (("server ids", new_response_id), ("random ids", _random_id)):
            results[name].append(
                asyncio.run(measure(new_id, args.stored, args.group, args.commits))
            )
    print(f"group commits of {args.group} openings into a store of {args.stored} responses, "
          f"{args.commits} commits, {args.rounds} alternated rounds\n")  # fmt: skip
    print("| ids | WAL frames per commit | µs per commit (median, range) |")
    print("|---|---|---|")
    for name, rounds in results.items():
        frames = statistics.median(f for f, _ in rounds)
        times = [t for _, t in rounds]
        print(f"| {name} | {frames:.1f} | {statistics.median(times):.0f} "
              f"({min(times):.0f}–{max(times):.0f}) |")  # fmt: skip


if __name__ == "__main__":
    main()
