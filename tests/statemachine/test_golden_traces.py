"""Golden traces: each recorded trace replays to exactly its golden event stream, and the
bug each one is named after stays fixed (one named assertion per bug class)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import streamfold.specs
from streamfold.adapters.grammars import iter_replay
from streamfold.cli import main as cli_main
from streamfold.engines import read_trace
from streamfold.statemachine import dumps

TRACES = Path(streamfold.specs.__file__).parent / "traces"
ALL = sorted(p for p in TRACES.glob("*.jsonl") if not p.name.endswith(".golden.jsonl"))


def events_of(name: str) -> list[dict[str, Any]]:
    path = TRACES / f"{name}.jsonl"
    return [json.loads(dumps(e)) for e in iter_replay(read_trace(path), base_dir=TRACES)]


def items_of(name: str) -> list[dict[str, Any]]:
    return events_of(name)[-1]["response"]["output"]


@pytest.mark.parametrize("path", ALL, ids=[p.stem for p in ALL])
def test_trace_replays_to_its_golden_stream(path: Path) -> None:
    golden = path.with_name(path.stem + ".golden.jsonl").read_text().splitlines()
    replayed = [dumps(e) for e in iter_replay(read_trace(path), base_dir=TRACES)]
    assert replayed == golden


def test_cli_replay_prints_the_golden_stream(capsys: pytest.CaptureFixture[str]) -> None:
    path = TRACES / "weather_call.jsonl"
    assert cli_main(["replay", str(path)]) == 0
    assert capsys.readouterr().out == path.with_name("weather_call.golden.jsonl").read_text()


def test_content_index_restarts_per_item_vllm45742() -> None:
    parts = [
        e
        for e in events_of("content_index_per_item_vllm45742")
        if e["type"] == "response.content_part.added"
    ]
    assert [(p["output_index"], p["content_index"]) for p in parts] == [(0, 0), (1, 0)]


def test_chunk_crossing_a_channel_splits_its_text_vllm_pr26291() -> None:
    reasoning, message = items_of("spec_decode_chunk_crosses_channel_vllm_pr26291")
    assert reasoning["content"][0]["text"] == "Short thought."
    assert message["content"][0]["text"] == "The answer is forty-two."


def test_stream_interval_20_loses_no_text_vllm_pr36011() -> None:
    events = events_of("stream_interval_20_vllm_pr36011")
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == "Hello there!"


def test_last_chunk_tokens_reach_events_eagle_vllm30204() -> None:
    (message,) = items_of("eagle_last_tokens_in_final_chunk_vllm30204")
    assert message["content"][0]["text"] == "Every accepted token reaches exactly one event."


def test_final_message_is_closed_at_the_end_vllm_pr37071() -> None:
    types = [e["type"] for e in events_of("final_message_closed_without_next_start_vllm_pr37071")]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]


def test_truncation_is_incomplete_not_completed_vllm_pr45386() -> None:
    terminal = events_of("truncated_is_incomplete_vllm_pr45386")[-1]
    assert terminal["type"] == "response.incomplete"
    assert terminal["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert terminal["response"]["output"][0]["status"] == "incomplete"


def test_return_after_end_is_end_of_stream_vllm_pr37072() -> None:
    events = events_of("return_after_end_vllm_pr37072")
    assert events[-1]["type"] == "response.completed"
    assert [i["content"][0]["text"] for i in events[-1]["response"]["output"]] == ["Done."]


def test_stop_token_in_header_keeps_the_text_harmony_pr82() -> None:
    (message,) = items_of("stop_token_in_header_harmony_pr82")
    assert message["content"][0]["text"] == "Hello without a message marker"


def test_doubled_channel_never_leaks_into_the_tool_name_vllm32587() -> None:
    (call,) = items_of("doubled_channel_in_tool_name_vllm32587")
    assert call["type"] == "function_call" and call["name"] == "manage_cart"


def test_constrain_is_never_a_recipient_vllm45570() -> None:
    (message,) = items_of("constrain_is_not_a_recipient_vllm45570")
    assert message["type"] == "message" and message["content"][0]["text"] == '{"answer":42}'


def test_function_call_on_analysis_channel_is_a_call_vllm_pr42454() -> None:
    (call,) = items_of("tool_call_on_analysis_channel_vllm_pr42454")
    assert call["type"] == "function_call" and call["name"] == "lookup"


def test_recipient_without_declared_tools_is_read_by_channel_vllm_pr51616() -> None:
    """Bug 54: a live model offered no tools wrote `to=browser.search`; it is no call."""
    reasoning, message = items_of("recipient_without_declared_tools_is_text_vllm_pr51616")
    assert reasoning["type"] == "reasoning"
    assert message["type"] == "message" and message["phase"] == "commentary"
    assert message["content"][0]["text"] == '{"query":"weather"}'


def test_recipients_route_when_tools_are_declared_or_the_option_is_off() -> None:
    from streamfold.engines.vocab import harmony_encoding, load_harmony_vocabulary
    from streamfold.statemachine import FunctionTool, HarmonyGrammar, Response, finish, start, step

    tokens = harmony_encoding().encode(
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city":"Paris"}<|call|>',
        allowed_special="all",
    )
    vocabulary = load_harmony_vocabulary()

    def first_item(grammar: HarmonyGrammar, tools: tuple[FunctionTool, ...]) -> str:
        response = Response(id="resp_t", created_at=0, model="m", status="in_progress", tools=tools)
        state, _ = start(grammar, response)
        for token in tokens:
            state, _ = step(state, token)
        _, events = finish(state, "stop")
        return events[-1].response.output[0].type  # type: ignore[union-attr]

    strict = HarmonyGrammar(vocabulary=vocabulary, ignore_recipients_without_tools=True)
    weather = FunctionTool(name="get_weather", parameters={"type": "object"})
    assert first_item(strict, ()) == "message"
    assert first_item(strict, (weather,)) == "function_call"
    assert first_item(HarmonyGrammar(vocabulary=vocabulary), ()) == "function_call"


def test_unknown_channel_text_is_shown_vllm45736() -> None:
    (message,) = items_of("unknown_channel_keeps_text_vllm45736")
    assert message["content"][0]["text"].startswith("Text on a mistyped channel")


def test_split_utf8_deltas_carry_whole_characters_harmony_pr83() -> None:
    deltas = [
        e["delta"]
        for e in events_of("split_utf8_across_tokens_harmony_pr83")
        if e["type"] == "response.output_text.delta"
    ]
    assert "".join(deltas) == "Party time 🎉 and 你好 and héllo wörld"
    assert all("\ufffd" not in d for d in deltas)


def test_preamble_is_a_visible_message_vllm_pr32114() -> None:
    preamble, call = items_of("preamble_is_visible_message_vllm_pr32114")
    assert preamble["type"] == "message" and preamble["phase"] == "commentary"
    assert call["type"] == "function_call"


def test_browser_call_has_one_lifecycle_vllm_pr53716() -> None:
    events = events_of("browser_search_is_web_search_call_vllm_pr53716")
    assert not any(e["type"].startswith("response.mcp_call") for e in events)
    search = events[-1]["response"]["output"][1]
    assert search["type"] == "web_search_call"
    assert search["action"] == {"type": "search", "query": "gpt-oss release"}


def test_call_id_is_minted_once_vllm_pr47916() -> None:
    events = events_of("weather_call")
    added = next(
        e["item"]
        for e in events
        if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"
    )
    done = next(
        e["item"]
        for e in events
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"
    )
    final = events[-1]["response"]["output"][1]
    assert added["call_id"] == done["call_id"] == final["call_id"]
    assert added["id"] == done["id"] == final["id"]


def test_two_calls_to_one_function_get_two_items_smg() -> None:
    first, second = items_of("two_calls_same_function_get_own_items_smg")
    assert first["call_id"] != second["call_id"]
    assert (first["arguments"], second["arguments"]) == ('{"city":"Paris"}', '{"city":"Rome"}')


def test_cut_off_engine_ends_in_failed_keeping_text_vllm_pr40418() -> None:
    terminal = events_of("engine_cut_off_is_failed_vllm_pr40418")[-1]
    assert terminal["type"] == "response.failed"
    assert terminal["response"]["output"][0]["content"][0]["text"].startswith("The engine died")


def test_abort_is_not_reported_as_success_vllm57082() -> None:
    terminal = events_of("abort_is_cancelled_not_completed_vllm57082")[-1]
    assert terminal["type"] == "response.failed"
    assert terminal["response"]["status"] == "cancelled"


def test_logprobs_ride_on_deltas_and_parts_sglang_pr9368() -> None:
    events = events_of("logprobs_on_deltas_sglang_pr9368")
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert all(d["logprobs"] for d in deltas)
    (message,) = events[-1]["response"]["output"]
    part = message["content"][0]
    assert len(part["logprobs"]) == sum(len(d["logprobs"]) for d in deltas)
    assert "".join(lp["token"] for lp in part["logprobs"]).startswith("Logprobs")


def test_think_boundary_in_one_chunk_keeps_every_part_vllm_pr42691() -> None:
    kinds = [i["type"] for i in items_of("thinktags_boundary_in_one_chunk_vllm_pr42691")]
    assert kinds == ["reasoning", "message", "function_call"]


def test_agent_run_is_one_response_over_three_generations_issue12() -> None:
    # The loop's bug classes (peers): ids and output indices restarting per iteration, usage
    # counting one generation, a tool's output never streamed. One response, one id sequence.
    events = events_of("agent_loop_list_tools_two_calls_answer")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert sum(e["type"] == "response.created" for e in events) == 1
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [e["output_index"] for e in added] == [0, 1, 2, 3, 4]
    assert [e["item"]["type"] for e in added] == [
        "mcp_list_tools",
        "reasoning",
        "web_search_call",
        "mcp_call",
        "message",
    ]
    final = events[-1]["response"]
    assert final["output"][3]["output"] == "gpt-oss knows browser and python."
    assert final["usage"]["input_tokens"] == 100 + 160 + 200  # the prompt of each generation
    types = [e["type"] for e in events]
    # the search ran between the generations: completed after searching, before the MCP call
    assert (
        types.index("response.web_search_call.searching")
        < types.index("response.web_search_call.completed")
        < types.index("response.mcp_call.in_progress")
    )
