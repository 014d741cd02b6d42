"""Start-up recovery on a store a previous server left behind (`_recovery.py`), called
directly: which responses it ends, which it reports unreadable, and that a store too damaged
to list or check itself still lets the server start (issue 37: none of this had a test)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from streamfold.adapters.server import MemoryEventStore, SQLiteEventStore, StoreError
from streamfold.adapters.server._recovery import INTERRUPTED, damaged_responses, end_interrupted
from streamfold.adapters.server._store import records_of
from streamfold.engines.vocab import harmony_encoding
from streamfold.specs import check, format_report
from streamfold.statemachine import loads
from tests.harmony_helpers import run

pytestmark = pytest.mark.anyio

_ANSWER = harmony_encoding().encode(
    "<|start|>assistant<|channel|>final<|message|>Hello there, friend.<|return|>",
    allowed_special="all",
)
WHOLE = records_of(run(_ANSWER, response_id="resp_whole"))
#: A log cut mid-message, as a killed server leaves it: no terminal event.
CUT = records_of(run(_ANSWER, response_id="resp_cut"))[:-6]


class FaultyStore(MemoryEventStore):
    """A real `MemoryEventStore` whose index (`list`), self-check (`damaged`) or one
    response's log (`read`) fails as a damaged file does."""

    def __init__(
        self,
        *,
        list_fails: bool = False,
        damaged: list[str] | Exception | None = None,
        unreadable: frozenset[str] = frozenset(),
    ) -> None:
        super().__init__()
        self.list_fails, self._damaged, self.unreadable = list_fails, damaged, unreadable

    async def list(self) -> list[str]:
        if self.list_fails:
            raise StoreError("the index of responses is damaged")
        return await super().list()

    async def read(self, response_id: str, after: int = -1, *, limit: int | None = None):  # type: ignore[no-untyped-def]
        if response_id in self.unreadable:
            raise StoreError(f"the log of {response_id} is damaged")
        return await super().read(response_id, after, limit=limit)

    async def damaged(self) -> list[str]:
        if isinstance(self._damaged, Exception):
            raise self._damaged
        return list(self._damaged or [])


async def _store_with_logs(store: MemoryEventStore) -> None:
    await store.append("resp_whole", WHOLE)
    for response_id in ("resp_cut", "resp_running", "resp_broken"):
        await store.append(response_id, CUT)


async def test_end_interrupted_ends_only_the_unfinished_logs_nobody_is_writing() -> None:
    store = FaultyStore(unreadable=frozenset({"resp_broken"}))
    await _store_with_logs(store)
    ended, unreadable, unwritten = await end_interrupted(store, {"resp_running"})
    assert ended == ["resp_cut"] and unreadable == ["resp_broken"] and not unwritten
    assert await store.read("resp_whole") == WHOLE  # finished: left alone
    assert await store.read("resp_running") == CUT  # its run is still writing it
    log = await store.read("resp_cut")
    assert log[: len(CUT)] == CUT  # the logged events stay; the close comes after them
    events = [loads(record.data) for record in log]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.failed"
    assert events[-1].response.error.message == INTERRUPTED  # type: ignore[union-attr]
    assert not check(events), format_report(check(events))
    snapshot = await store.snapshot("resp_cut")
    assert snapshot is not None and snapshot.finished
    assert await end_interrupted(store, set()) == (["resp_running"], ["resp_broken"], {})


async def test_a_store_that_cannot_list_its_responses_ends_none_and_does_not_raise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Start-up must not fail on a damaged index: it serves what can be read."""
    store = FaultyStore(list_fails=True)
    await _store_with_logs(store)
    with caplog.at_level(logging.ERROR, "streamfold.server"):
        assert await end_interrupted(store, set()) == ([], [], {})
    assert "cannot list its responses" in caplog.text
    assert await store.read("resp_cut") == CUT


@pytest.mark.parametrize("count", [3, 20, 21, 25])
async def test_damaged_responses_reports_what_the_store_found(
    count: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The first 20, sorted, and "..." exactly when there are more (cosmic-ray: the bound's
    mutants `>= 20`, `> 19`, `> 21`, `!= 20` survived a test of 25 alone)."""
    ids = [f"resp_{i:02}" for i in range(count)]
    store = FaultyStore(damaged=list(reversed(ids)))
    with caplog.at_level(logging.ERROR, "streamfold.server"):
        assert await damaged_responses(store) == list(reversed(ids))
    (message,) = [r.getMessage() for r in caplog.records]
    named = ", ".join(ids[:20]) + (", ..." if count > 20 else "")
    assert message == f"{count} stored response(s) are unreadable (the store is damaged): {named}"


async def test_one_unreadable_log_does_not_stop_the_others_being_ended(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """cosmic-ray: `continue` made `break` after an unreadable log survived, as the one test
    listed it last. The start-up says how many it ended, and only when it ended some
    (`if ended` made `if not ended` survived)."""
    store = FaultyStore(unreadable=frozenset({"resp_broken"}))
    for response_id in ("resp_broken", "resp_cut"):
        await store.append(response_id, CUT)
    with caplog.at_level(logging.WARNING, "streamfold.server"):
        assert await end_interrupted(store, set()) == (["resp_cut"], ["resp_broken"], {})
    assert "ended 1 response(s) left unfinished by a previous run" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, "streamfold.server"):
        assert await end_interrupted(store, set()) == ([], ["resp_broken"], {})
    assert "left unfinished" not in caplog.text


async def test_a_store_whose_self_check_fails_reports_none_and_does_not_raise(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FaultyStore(damaged=StoreError("not even the index can be read"))
    with caplog.at_level(logging.ERROR, "streamfold.server"):
        assert await damaged_responses(store) == []
    assert "the response store is damaged (not even the index can be read)" in caplog.text


async def test_a_store_that_cannot_check_itself_reports_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.ERROR, "streamfold.server"):
        assert await damaged_responses(MemoryEventStore()) == []
    assert not caplog.text


async def test_a_healthy_sqlite_store_reports_no_damage(tmp_path: Path) -> None:
    store = SQLiteEventStore(tmp_path / "r.sqlite3")
    try:
        await _store_with_logs(store)  # type: ignore[arg-type]
        assert await damaged_responses(store) == []
        ended, unreadable, unwritten = await end_interrupted(store, set())
        assert sorted(ended) == ["resp_broken", "resp_cut", "resp_running"]
        assert not unreadable and not unwritten
    finally:
        store.close()
