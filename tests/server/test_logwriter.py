"""The write-ahead log writer: concurrent runs' batches commit together, each on its own."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfold.adapters.server import EventRecord, MemoryEventStore, SQLiteEventStore, StoreError
from streamfold.adapters.server._logwriter import LogWriter

from .test_store import LOG

pytestmark = pytest.mark.anyio


class CountingStore(SQLiteEventStore):
    commits = 0

    async def append_many(self, batches):  # type: ignore[no-untyped-def]
        self.commits += 1
        return await super().append_many(batches)


async def test_concurrent_batches_share_one_commit_and_fail_alone(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "r.sqlite3")
    writer = LogWriter(store)
    failures: dict[str, Exception] = {}

    async def run(response_id: str, records: list) -> None:  # type: ignore[type-arg]
        try:
            await writer.write(response_id, records, background=False)
        except StoreError as exc:
            failures[response_id] = exc

    async with anyio.create_task_group() as tg:
        for i in range(20):
            tg.start_soon(run, f"resp_{i}", LOG[:5])
        tg.start_soon(run, "resp_bad", LOG[3:5])  # does not begin with response.created
    # 21 batches, one group (two if the first leader ran alone); 0 would mean the batched
    # path was never used (issue 37: `<= 2` alone held then too).
    assert 1 <= store.commits <= 2
    assert list(failures) == ["resp_bad"]
    for i in range(20):
        assert await store.read(f"resp_{i}") == LOG[:5]
    assert await store.read("resp_bad") == []
    store.close()


async def test_a_store_without_append_many_gets_one_append_per_batch() -> None:
    store = MemoryEventStore()
    writer = LogWriter(store)
    async with anyio.create_task_group() as tg:
        for i in range(5):
            tg.start_soon(lambda i=i: writer.write(f"resp_{i}", LOG, background=False))
    for i in range(5):
        assert await store.read(f"resp_{i}") == LOG


async def test_a_batch_sqlite_refuses_fails_alone_in_its_group(tmp_path: Path) -> None:
    """SQLite refuses text with a lone surrogate (it cannot be encoded as UTF-8): the group's
    one-statement fast path fails, and the batches are then written one by one, so only the
    refused one fails, and its response can go on from where its log really is."""
    store = SQLiteEventStore(tmp_path / "r.sqlite3")
    writer = LogWriter(store)
    bad = EventRecord(sequence_number=2, type=LOG[2].type, data='{"delta": "\ud800"}')
    failures: dict[str, Exception] = {}

    async def run(response_id: str, records: list[EventRecord]) -> None:
        try:
            await writer.write(response_id, records, background=False)
        except StoreError as exc:
            failures[response_id] = exc

    for i in range(3):
        await writer.write(f"resp_{i}", LOG[:2], background=False)
    async with anyio.create_task_group() as tg:
        tg.start_soon(run, "resp_0", LOG[2:5])
        tg.start_soon(run, "resp_1", [bad])
        tg.start_soon(run, "resp_2", LOG[2:5])
    assert list(failures) == ["resp_1"]
    assert "writing the response store" in str(failures["resp_1"])
    await writer.write("resp_1", LOG[2:], background=False)
    assert await store.read("resp_0", 1) == await store.read("resp_2", 1) == LOG[2:5]
    assert await store.read("resp_1", 1) == LOG[2:]
    store.close()


async def test_cancelled_writers_leave_their_batches_committed_and_published(
    tmp_path: Path,
) -> None:
    """Clients leaving mid-commit must not fail the other runs of their group (one of them
    leads it) nor leave their own batches half done: the commit publishes each batch it
    wrote, whether or not its writer is still waiting."""
    scopes: list[anyio.CancelScope] = []

    class CancellingStore(SQLiteEventStore):
        async def append_many(self, batches):  # type: ignore[no-untyped-def]
            for scope in scopes:  # every writer of the group, its leader among them
                scope.cancel()
            await anyio.sleep(0)  # a cancelled waiter gives up here
            return await super().append_many(batches)

    store = CancellingStore(tmp_path / "r.sqlite3")
    writer = LogWriter(store)
    published: dict[str, list[EventRecord]] = {}
    go = anyio.Event()

    async def run(response_id: str) -> None:
        with anyio.CancelScope() as scope:
            scopes.append(scope)
            await go.wait()
            await writer.write(
                response_id,
                LOG[:3],
                background=False,
                published=lambda records: published.setdefault(response_id, list(records)),
            )

    names = [f"resp_{i}" for i in range(3)]
    async with anyio.create_task_group() as tg:
        for name in names:
            tg.start_soon(run, name)
        while len(scopes) < len(names):
            await anyio.sleep(0)
        go.set()  # all three write in one turn of the loop: one group
    for name in names:
        assert await store.read(name) == LOG[:3]
        assert published[name] == LOG[:3]
    store.close()


# -- what the group commit promises, each pinned by a planted bug it catches (issue 37) -------

#: Time allowed for a handful of in-memory commits: a waiter that never wakes fails the test
#: instead of hanging the suite. (A group's leader is shielded from cancellation: one that
#: never wakes is caught by the suite's per-test timeout instead, see pyproject.toml.)
HANG = 10


class GatedStore(MemoryEventStore):
    """A real `MemoryEventStore` that commits groups (`append_many`), with faults to inject:
    `refuse` (responses whose batch it rejects, alone in their group), `crash` (commit numbers
    that raise as a store bug would, failing the whole group) and `gate` (commit numbers that
    pause until `release` is set, while new writers arrive)."""

    def __init__(
        self,
        *,
        refuse: frozenset[str] = frozenset(),
        crash: dict[int, BaseException] | None = None,
        gate: frozenset[int] = frozenset(),
    ) -> None:
        super().__init__()
        self.refuse, self.crash, self.gate = refuse, crash or {}, gate
        self.groups: list[list[str]] = []  # the response ids of each commit, in order
        self.in_flight = self.most_in_flight = 0
        self.paused = anyio.Event()
        self.release = anyio.Event()

    async def append_many(self, batches):  # type: ignore[no-untyped-def]
        number = len(self.groups)
        self.groups.append([response_id for response_id, _, _ in batches])
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if number in self.gate:
                self.paused.set()
                await self.release.wait()
            await anyio.sleep(0)  # a commit is I/O: other tasks run meanwhile
            if number in self.crash:
                raise self.crash[number]
            errors: list[Exception | None] = []
            for response_id, records, background in batches:
                try:
                    if response_id in self.refuse:
                        raise StoreError(f"refused {response_id}")
                    await self.append(response_id, records, background=background)
                    errors.append(None)
                except StoreError as exc:
                    errors.append(exc)
            return errors
        finally:
            self.in_flight -= 1


async def test_the_batched_path_commits_the_group_in_one_call() -> None:
    """Pins the weak assertion of the test above (`commits <= 2` also held with no batched
    commit at all): 21 writers of one turn are one `append_many` call."""
    store = GatedStore()
    writer = LogWriter(store)
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            for i in range(21):
                tg.start_soon(lambda i=i: writer.write(f"resp_{i}", LOG[:5], background=False))
    assert [sorted(group) for group in store.groups] == [sorted(f"resp_{i}" for i in range(21))]


async def test_a_refused_batch_is_never_published() -> None:
    """Bug (planted, issue 37): a batch whose commit was refused was still published, so a
    client following a background response saw sequence numbers 2 and 3 twice."""
    store = GatedStore()
    writer = LogWriter(store)
    await writer.write("resp_bad", LOG[:2], background=True)
    store.refuse = frozenset({"resp_bad"})
    published: list[str] = []
    failures: list[str] = []

    async def run(response_id: str, records: list[EventRecord]) -> None:
        try:
            await writer.write(
                response_id,
                records,
                background=True,
                published=lambda _: published.append(response_id),
            )
        except StoreError:
            failures.append(response_id)

    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "resp_ok", LOG[:4])
            tg.start_soon(run, "resp_bad", LOG[2:4])
    assert published == ["resp_ok"] and failures == ["resp_bad"]
    assert await store.read("resp_bad") == LOG[:2]


async def test_a_writer_arriving_during_a_slow_commit_waits_for_it_then_commits() -> None:
    """Bugs (planted, issue 37): without waking the leader that waits for a commit in flight,
    a writer arriving meanwhile hung forever (SQLite's window: a WAL checkpoint); without
    `_committing` set, two commits ran at once. The second group forms while the first is
    paused, and commits, in one call, right after it."""
    store = GatedStore(gate=frozenset({0}))
    writer = LogWriter(store)
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: writer.write("resp_0", LOG[:5], background=False))
            await store.paused.wait()
            try:
                for i in (1, 2, 3):
                    tg.start_soon(lambda i=i: writer.write(f"resp_{i}", LOG[:5], background=False))
                await anyio.sleep(0.01)  # the three have joined the second group; it must wait
                assert store.groups == [["resp_0"]]
            finally:  # the paused leader is shielded: a failure here must not leave it paused
                store.release.set()
    assert [sorted(group) for group in store.groups] == [["resp_0"], ["resp_1", "resp_2", "resp_3"]]
    assert store.most_in_flight == 1
    for i in range(4):
        assert await store.read(f"resp_{i}") == LOG[:5]


async def test_every_writer_of_a_group_whose_commit_failed_gets_the_error() -> None:
    """Bugs (planted, issue 37): the group's waiters were not given the store's error (they
    raised an IndexError of the writer's own), and a leader that failed left the writer
    committing forever (the next write hung)."""
    crash = RuntimeError("the disk went away")
    store = GatedStore(crash={0: crash})
    writer = LogWriter(store)
    raised: dict[str, BaseException] = {}

    async def run(response_id: str) -> None:
        try:
            await writer.write(response_id, LOG[:3], background=False)
        except Exception as exc:
            raised[response_id] = exc

    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(run, f"resp_{i}")
        assert sorted(store.groups[0]) == ["resp_0", "resp_1", "resp_2"]
        assert {k: v is crash for k, v in raised.items()} == {f"resp_{i}": True for i in range(3)}
        await writer.write("resp_3", LOG[:3], background=False)  # the writer still works
    assert await store.read("resp_3") == LOG[:3]
    assert await store.read("resp_0") == []


class StoreBug(BaseException):
    """Not an `Exception`: what a waiter must not be handed as is."""


async def test_a_failure_that_is_not_an_exception_reaches_the_waiters_as_a_runtime_error() -> None:
    """Bug (planted, issue 37): a `BaseException` that is not an `Exception` was handed to the
    waiters unwrapped (they would re-raise, say, a `KeyboardInterrupt` the leader already
    carries). The leader re-raises it as it is; the waiters get a `RuntimeError` saying it."""
    store = GatedStore(crash={0: StoreBug("the store broke")})
    writer = LogWriter(store)
    raised: dict[str, BaseException] = {}

    async def run(response_id: str) -> None:
        try:
            await writer.write(response_id, LOG[:3], background=False)
        except BaseException as exc:
            raised[response_id] = exc

    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(run, f"resp_{i}")
    kinds = sorted(type(exc).__name__ for exc in raised.values())
    assert kinds == ["RuntimeError", "RuntimeError", "StoreBug"]  # the leader's is its own
    assert all("the store broke" in str(exc) for exc in raised.values())


async def test_the_per_batch_path_keeps_a_background_response_background() -> None:
    """Bug (planted, issue 37): with a store that has no `append_many`, the background flag
    was lost; a background response then could not be cancelled or resumed as one."""
    store = MemoryEventStore()
    writer = LogWriter(store)
    await writer.write("resp_bg", LOG[:2], background=True)
    await writer.write("resp_fg", LOG[:2], background=False)
    background = await store.snapshot("resp_bg")
    foreground = await store.snapshot("resp_fg")
    assert background is not None and background.background
    assert foreground is not None and not foreground.background


@st.composite
def _schedules(draw: st.DrawFn) -> tuple[list[str], list[str], frozenset[str], set[int]]:
    """Writers in two waves (the second arrives while the first group's commit is paused),
    some of whose batches the store refuses, and groups whose whole commit fails."""
    first = draw(st.integers(1, 6))
    second = draw(st.integers(0, 6))
    names = [f"resp_{i}" for i in range(first + second)]
    refused = draw(st.frozensets(st.sampled_from(names)))
    crashed = draw(st.sets(st.sampled_from([0, 1])))
    return names[:first], names[first:], refused, crashed


@settings(max_examples=40, deadline=None)
@given(schedule=_schedules(), backend=st.sampled_from(["asyncio", "trio"]))
def test_concurrent_writers_with_injected_failures_each_learn_their_own_fate(
    schedule: tuple[list[str], list[str], frozenset[str], set[int]], backend: str
) -> None:
    """Property: whatever the arrivals and faults, every writer returns (none hangs), a write
    returns without error exactly when its batch is in the store, only those are published
    (once each), each wave is one commit, and no two commits ever run at once."""
    first, second, refused, crashed = schedule
    crash = {number: RuntimeError(f"commit {number} failed") for number in crashed}

    async def main() -> None:
        store = GatedStore(refuse=refused, crash=crash, gate=frozenset({0} if second else ()))
        writer = LogWriter(store)
        published: list[str] = []
        outcome: dict[str, BaseException | None] = {}
        entered = 0

        async def run(response_id: str) -> None:
            nonlocal entered
            entered += 1
            try:
                await writer.write(
                    response_id,
                    LOG[:3],
                    background=False,
                    published=lambda _: published.append(response_id),
                )
                outcome[response_id] = None
            except Exception as exc:
                outcome[response_id] = exc

        with anyio.fail_after(HANG):
            async with anyio.create_task_group() as tg:
                for name in first:
                    tg.start_soon(run, name)
                if second:
                    await store.paused.wait()
                    try:
                        for name in second:
                            tg.start_soon(run, name)
                        while entered < len(first) + len(second):
                            await anyio.sleep(0)
                    finally:  # the paused leader is shielded: never leave it paused
                        store.release.set()
        waves = [first, second] if second else [first]
        assert [sorted(group) for group in store.groups] == [sorted(wave) for wave in waves]
        assert store.most_in_flight == 1
        for number, wave in enumerate((first, second)):
            for name in wave:
                if number in crash:
                    expected: type = RuntimeError
                    assert outcome[name] is crash[number]
                elif name in refused:
                    expected = StoreError
                    assert isinstance(outcome[name], StoreError)
                else:
                    expected = type(None)
                    assert outcome[name] is None
                committed = expected is type(None)
                assert (await store.read(name) == LOG[:3]) is committed
                assert published.count(name) == int(committed)

    anyio.run(main, backend=backend)


@pytest.mark.parametrize("answered", [2, 4])
async def test_a_store_that_answers_for_the_wrong_number_of_batches_fails_them_all(
    answered: int,
) -> None:
    """Bug (found by cosmic-ray, issue 37: `zip(..., strict=False)` survived): a store bug that
    answered for fewer batches than it was given had the batches it answered for published,
    and then every writer failed (`strict=True`: a ValueError), so a run was told its batch
    failed after clients had been sent it. Now the answer is checked first, too short or too
    long (`<` for `!=` survived): every writer gets a `StoreError` naming the bug, and nothing
    is published."""

    class MiscountingStore(GatedStore):
        async def append_many(self, batches):  # type: ignore[no-untyped-def]
            errors = await super().append_many(batches)
            return (errors + [None] * answered)[:answered]

    writer = LogWriter(MiscountingStore())
    published: list[str] = []
    raised: list[BaseException] = []

    async def run(response_id: str) -> None:
        try:
            await writer.write(response_id, LOG[:3], background=False, published=published.append)
        except StoreError as exc:
            raised.append(exc)

    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            for i in range(3):
                tg.start_soon(run, f"resp_{i}")
    assert not published
    assert [str(exc) for exc in raised] == [
        f"MiscountingStore.append_many answered for {answered} of the 3 batches it was given; "
        "it must answer for each"
    ] * 3


async def test_a_group_of_more_than_256_batches_commits_them_all() -> None:
    """Bug (found by cosmic-ray, issue 37: `len(errors) is not len(batches)` survived, as
    CPython shares the ints up to 256): a server with 500 streams makes groups that large."""
    store = GatedStore()
    writer = LogWriter(store)
    names = [f"resp_{i}" for i in range(300)]
    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            for name in names:
                tg.start_soon(lambda name=name: writer.write(name, LOG[:3], background=False))
    assert [sorted(group) for group in store.groups] == [sorted(names)]
    assert all([await store.read(name) == LOG[:3] for name in names])


async def test_a_batch_refused_on_the_per_batch_path_fails_alone() -> None:
    """Bug (found by cosmic-ray, issue 37: the per-batch path's `except Exception` could catch
    nothing unnoticed): with a store that has no `append_many`, a batch the store refuses
    failed every batch of its group instead of its own alone."""
    store = MemoryEventStore()
    writer = LogWriter(store)
    failures: list[str] = []

    async def run(response_id: str, records: list[EventRecord]) -> None:
        try:
            await writer.write(response_id, records, background=False)
        except StoreError:
            failures.append(response_id)

    with anyio.fail_after(HANG):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "resp_0", LOG[:5])
            tg.start_soon(run, "resp_bad", LOG[3:5])  # does not begin with response.created
            tg.start_soon(run, "resp_2", LOG[:5])
    assert failures == ["resp_bad"]
    assert await store.read("resp_0") == await store.read("resp_2") == LOG[:5]
