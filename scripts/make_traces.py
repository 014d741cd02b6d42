"""Regenerate the bundled harmony traces in specs/traces/ and their golden event streams.

Each trace is harmony text encoded with o200k_harmony and cut into engine chunks the way the
bug it pins needs (one token per chunk, speculative-decoding bursts, stream intervals). The
golden file is what `streamfold replay` prints for it; review its diff before committing.

    python scripts/make_traces.py
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

from streamfold.engines import TokenChunk, dump_trace, server_tools_line
from streamfold.engines.vocab import harmony_encoding
from streamfold.statemachine import (
    ListToolsStep,
    LoopStep,
    McpServer,
    McpToolInfo,
    NextGenerationStep,
    ServerTools,
    ToolResultStep,
)

TRACES = Path(__file__).resolve().parent.parent / "specs" / "traces"
CREATED_AT = 1763800000

DOUBLE_BUBBLE_REASONING = (
    "User wants us to say 'double bubble bath' ten times fast. We need to comply? It's a "
    "nonsensical request but presumably no policy violation. It's a benign language request. "
    "We can comply by repeating phrase 10 times quickly. Should we maybe output a line like "
    '"double bubble bath" repeated 10 times quickly. That\'s fine.\n\nNo policy conflicts. The '
    'phrase is not disallowed. So we comply.\n\nWe should produce "double bubble bath double '
    "bubble bath ... \" repeated 10 times. be mindful it's too much but okay."
)
DOUBLE_BUBBLE_ANSWER = " ".join(["double bubble bath"] * 10)

WEATHER = (
    "<|channel|>analysis<|message|>The user asks for the weather in Paris. I should call "
    "get_weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
    '<|constrain|>json<|message|>{"city":"Paris","unit":"celsius"}<|call|>'
)

# name -> (harmony text, chunk sizes (cycled), finish reason, extra header fields)
SPECS: dict[str, tuple[str, tuple[int, ...], str | None, dict[str, object]]] = {
    "weather_call": (WEATHER, (1,), "stop", {}),
    "hello": (
        "<|channel|>analysis<|message|>Greet the user.<|end|><|start|>assistant"
        "<|channel|>final<|message|>Hello! How can I help you today?<|return|>",
        (1,),
        "stop",
        {},
    ),
    "seed_vllm_pr23741_double_bubble_bath": (
        f"<|channel|>analysis<|message|>{DOUBLE_BUBBLE_REASONING}<|end|><|start|>assistant"
        f"<|channel|>final<|message|>{DOUBLE_BUBBLE_ANSWER}<|return|>",
        (1,),
        "stop",
        {},
    ),
    "content_index_per_item_vllm45742": (
        "<|channel|>analysis<|message|>Think first.<|end|><|start|>assistant<|channel|>final"
        "<|message|>Second item, part index 0.<|return|>",
        (1,),
        "stop",
        {},
    ),
    "spec_decode_chunk_crosses_channel_vllm_pr26291": (
        "<|channel|>analysis<|message|>Short thought.<|end|><|start|>assistant<|channel|>final"
        "<|message|>The answer is forty-two.<|return|>",
        (4, 3, 5),
        "stop",
        {},
    ),
    "stream_interval_20_vllm_pr36011": (
        "<|channel|>analysis<|message|>Plan the greeting.<|end|><|start|>assistant"
        "<|channel|>final<|message|>Hello there!<|return|>",
        (20,),
        "stop",
        {},
    ),
    "eagle_last_tokens_in_final_chunk_vllm30204": (
        "<|channel|>final<|message|>Every accepted token reaches exactly one event.<|return|>",
        (3, 7),
        "stop",
        {},
    ),
    "final_message_closed_without_next_start_vllm_pr37071": (
        "<|channel|>final<|message|>The last message still gets its done events.",
        (2,),
        "stop",
        {},
    ),
    "truncated_is_incomplete_vllm_pr45386": (
        "<|channel|>analysis<|message|>Let me think about this at length before I",
        (1,),
        "length",
        {},
    ),
    "return_after_end_vllm_pr37072": (
        "<|channel|>final<|message|>Done.<|end|><|return|>",
        (1,),
        "stop",
        {},
    ),
    "stop_token_in_header_harmony_pr82": (
        "<|channel|>final Hello without a message marker<|end|>",
        (1,),
        "stop",
        {},
    ),
    "doubled_channel_in_tool_name_vllm32587": (
        "<|channel|>commentary to=functions.manage_cart<|channel|>commentary <|constrain|>json"
        '<|message|>{"item":"apple","qty":2}<|call|>',
        (1,),
        "stop",
        {},
    ),
    "constrain_is_not_a_recipient_vllm45570": (
        '<|channel|>final <|constrain|>json<|message|>{"answer":42}<|return|>',
        (1,),
        "stop",
        {},
    ),
    "tool_call_on_analysis_channel_vllm_pr42454": (
        "<|channel|>analysis to=functions.lookup <|constrain|>json"
        '<|message|>{"q":"streamfold"}<|call|>',
        (1,),
        "stop",
        {},
    ),
    "unknown_channel_keeps_text_vllm45736": (
        "<|channel|>finalx<|message|>Text on a mistyped channel is shown, not lost.<|return|>",
        (1,),
        "stop",
        {},
    ),
    "split_utf8_across_tokens_harmony_pr83": (
        "<|channel|>final<|message|>Party time 🎉 and 你好 and héllo wörld<|return|>",
        (1,),
        "stop",
        {},
    ),
    "preamble_is_visible_message_vllm_pr32114": (
        "<|channel|>commentary<|message|>Let me check the weather for you.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city":"Oslo"}<|call|>',
        (1,),
        "stop",
        {},
    ),
    "browser_search_is_web_search_call_vllm_pr53716": (
        "<|channel|>analysis<|message|>Search the web.<|end|><|start|>assistant"
        '<|channel|>analysis to=browser.search code<|message|>{"query":"gpt-oss release"}'
        "<|call|>",
        (1,),
        "stop",
        {},
    ),
    "python_is_code_interpreter_call": (
        "<|channel|>analysis to=python code<|message|>print(sum(range(10)))<|call|>",
        (1,),
        "stop",
        {},
    ),
    "other_recipient_is_mcp_call": (
        '<|channel|>commentary to=container.exec <|constrain|>json<|message|>{"cmd":["ls"]}'
        "<|call|>",
        (1,),
        "stop",
        {},
    ),
    "double_start_recovers_exo1126": (
        "<|start|><|start|>assistant<|channel|>final<|message|>Recovered.<|return|>",
        (1,),
        "stop",
        {},
    ),
    "garbage_before_header_is_text": (
        "Hello there, no header at all.<|end|>",
        (1,),
        "stop",
        {},
    ),
    "engine_cut_off_is_failed_vllm_pr40418": (
        "<|channel|>final<|message|>The engine died in the middle of",
        (1,),
        None,
        {},
    ),
    "abort_is_cancelled_not_completed_vllm57082": (
        "<|channel|>final<|message|>The client went away while",
        (1,),
        "abort",
        {},
    ),
    "recipient_without_declared_tools_is_text_vllm_pr51616": (
        "<|channel|>analysis<|message|>Maybe search.<|end|><|start|>assistant<|channel|>"
        'commentary to=browser.search <|constrain|>json<|message|>{"query":"weather"}<|call|>',
        (1,),
        "stop",
        {"ignore_recipients_without_tools": True},
    ),
    "two_calls_same_function_get_own_items_smg": (
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
        '{"city":"Paris"}<|call|><|start|>assistant<|channel|>commentary '
        'to=functions.get_weather <|constrain|>json<|message|>{"city":"Rome"}<|call|>',
        (6,),
        "stop",
        {},
    ),
}


def chunked(tokens: list[int], sizes: tuple[int, ...]) -> list[TokenChunk]:
    chunks, at, i = [], 0, 0
    while at < len(tokens):
        size = sizes[i % len(sizes)]
        chunks.append(TokenChunk(token_ids=tuple(tokens[at : at + size])))
        at, i = at + size, i + 1
    return chunks


def with_logprobs(tokens: list[int]) -> list[TokenChunk]:
    # Deterministic, plausible logprobs so the golden file pins their placement on deltas.
    return [
        TokenChunk(token_ids=(t,), logprobs=(round(-0.05 * (1 + math.sin(i)), 6),))
        for i, t in enumerate(tokens)
    ]


AGENT = "agent_loop_list_tools_two_calls_answer"
AGENT_GENERATIONS = (
    "<|channel|>analysis<|message|>I should search for the current weather first.<|end|>"
    "<|start|>assistant<|channel|>analysis to=browser.search code<|message|>"
    '{"query": "weather in Paris today"}<|call|>',
    "<|channel|>commentary to=deepwiki.ask_question <|constrain|>json<|message|>"
    '{"repoName": "openai/gpt-oss", "question": "Which tools does gpt-oss know?"}<|call|>',
    "<|channel|>final<|message|>It is 21°C and sunny in Paris. gpt-oss knows the browser "
    "and python tools.<|return|>",
)


def agent_trace(enc: object) -> str:
    """An agent run (issue 12): the server lists an MCP server's tools, the model searches the
    web, then asks the MCP server, then answers; three generations, one response."""
    tools = ServerTools(browser=True, mcp=(McpServer(server_label="deepwiki"),))
    base = AGENT
    entries: list[TokenChunk | LoopStep] = [
        ListToolsStep(
            server_label="deepwiki",
            tools=(
                McpToolInfo(
                    name="ask_question",
                    description="Ask a question about a GitHub repository",
                    input_schema={
                        "type": "object",
                        "properties": {
                            "repoName": {"type": "string"},
                            "question": {"type": "string"},
                        },
                        "required": ["repoName", "question"],
                    },
                ),
            ),
        )
    ]
    results = (
        ToolResultStep(item_id=f"ws_{base}_2", output="Paris: 21°C, sunny, light wind."),
        ToolResultStep(item_id=f"mcp_{base}_3", output="gpt-oss knows browser and python."),
    )
    for i, text in enumerate(AGENT_GENERATIONS):
        if i:
            entries.append(NextGenerationStep(input_tokens=120 + 40 * i))
        entries += chunked(enc.encode(text, allowed_special="all"), (3, 1, 5))  # type: ignore[attr-defined]
        if i < len(results):
            entries.append(results[i])
    header = {
        "grammar": "harmony",
        "encoding": "o200k_harmony",
        "response_id": f"resp_{base}",
        "model": "gpt-oss-20b",
        "created_at": CREATED_AT,
        "prompt_token_ids": list(range(100, 200)),
        "server_tools": server_tools_line(tools),
    }
    return dump_trace(header, entries, "stop")


def main() -> int:
    enc = harmony_encoding()
    TRACES.mkdir(parents=True, exist_ok=True)
    specs = dict(SPECS)
    for name, (text, sizes, finish, extra) in specs.items():
        tokens = enc.encode(text, allowed_special="all")
        header = {
            "grammar": "harmony",
            "encoding": "o200k_harmony",
            "response_id": f"resp_{name}",
            "model": "gpt-oss-20b",
            "created_at": CREATED_AT,
            **extra,
        }
        (TRACES / f"{name}.jsonl").write_text(dump_trace(header, chunked(tokens, sizes), finish))
    tokens = enc.encode(
        "<|channel|>final<|message|>Logprobs ride on every delta 🎉.<|return|>",
        allowed_special="all",
    )
    header = {
        "grammar": "harmony",
        "encoding": "o200k_harmony",
        "response_id": "resp_logprobs",
        "model": "gpt-oss-20b",
        "created_at": CREATED_AT,
    }
    (TRACES / "logprobs_on_deltas_sglang_pr9368.jsonl").write_text(
        dump_trace(header, with_logprobs(tokens), "stop")
    )
    (TRACES / f"{AGENT}.jsonl").write_text(agent_trace(enc))
    for trace in sorted(TRACES.glob("*.jsonl")):
        if trace.name.endswith(".golden.jsonl"):
            continue
        golden = trace.with_name(trace.name.removesuffix(".jsonl") + ".golden.jsonl")
        out = subprocess.run(
            [sys.executable, "-m", "streamfold", "replay", str(trace)],
            capture_output=True,
            text=True,
            check=True,
        )
        golden.write_text(out.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
