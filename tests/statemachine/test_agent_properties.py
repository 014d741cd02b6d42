"""Properties of generated agent runs (issue 12): any number of generations, any chunking, cut
anywhere, the stream stays conformant and `snapshot(events)` equals the final response."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streamfold.adapters.grammars import replay_events
from streamfold.engines import TokenChunk, dump_trace, parse_trace, server_tools_line
from streamfold.specs.strategies import chunkings
from streamfold.specs.strategies_agent import AgentRun, agent_runs, play_agent_run
from streamfold.statemachine import Event, close_interrupted, dumps, snapshot
from tests.harmony_helpers import GRAMMAR, assert_conformant, assert_sdk_digests, new_response

REASONS = st.sampled_from(["length", "abort", "error", "tool_limit"])


def assert_whole(events: list[Event]) -> None:
    assert_conformant(events)
    assert_sdk_digests(events)
    assert snapshot(events) == events[-1].response  # type: ignore[union-attr]


@settings(max_examples=60, deadline=None)
@given(run=agent_runs())
def test_an_agent_run_is_one_conformant_response(run: AgentRun) -> None:
    events, _ = play_agent_run(run, GRAMMAR, new_response())
    assert_whole(events)
    final = events[-1].response  # type: ignore[union-attr]
    assert final.usage is not None
    assert final.usage.input_tokens == run.prompt_tokens + sum(
        g.input_tokens for g in run.generations[1:]
    )
    assert final.usage.output_tokens == sum(len(g.tokens) for g in run.generations)


@settings(max_examples=60, deadline=None)
@given(run=agent_runs(), data=st.data(), reason=REASONS)
def test_an_agent_run_cut_after_any_token_ends_conformant(
    run: AgentRun, data: st.DataObject, reason: str
) -> None:
    total = sum(len(g.tokens) for g in run.generations)
    cut = data.draw(st.integers(0, total), label="cut after tokens")
    events, _ = play_agent_run(run, GRAMMAR, new_response(), stop_after=cut, reason=reason)
    assert_whole(events)


@settings(max_examples=40, deadline=None)
@given(run=agent_runs(), data=st.data())
def test_an_agent_stream_cut_at_any_event_is_closed_conformant(
    run: AgentRun, data: st.DataObject
) -> None:
    events, _ = play_agent_run(run, GRAMMAR, new_response())
    cut = data.draw(st.integers(1, len(events) - 1), label="events kept")
    closed = [*events[:cut], *close_interrupted(events[:cut], "the server went away")]
    assert_conformant(closed)
    assert snapshot(closed) == closed[-1].response  # type: ignore[union-attr]


@settings(max_examples=40, deadline=None)
@given(run=agent_runs(), data=st.data())
def test_a_recorded_agent_run_replays_the_same_bytes_however_chunked(
    run: AgentRun, data: st.DataObject
) -> None:
    events, entries = play_agent_run(run, GRAMMAR, new_response("resp_agent"))
    chunked: list[object] = []
    for entry in entries:
        if not isinstance(entry, tuple):
            chunked.append(entry)
            continue
        at = 0
        for size in data.draw(chunkings(len(entry))):
            chunked.append(TokenChunk(token_ids=entry[at : at + size]))
            at += size
    header = {
        "grammar": "harmony",
        "encoding": "o200k_harmony",
        "response_id": "resp_agent",
        "model": "gpt-oss-20b",
        "created_at": 1763800000,
        "prompt_token_ids": [0] * run.prompt_tokens,
        "server_tools": server_tools_line(run.server_tools),
    }
    text = dump_trace(header, chunked, "stop")  # type: ignore[arg-type]
    replayed = replay_events(parse_trace(text.splitlines()))
    assert [dumps(e) for e in replayed] == [dumps(e) for e in events]
