"""Writes `conversations/mcp-weather/`, the recorded conversation `run.py` replays: what
gpt-oss generates, as harmony text, turn by turn (`docs/agents.md`, "A recorded conversation
that calls an MCP server").

    .venv/bin/python examples/mcp_weather/make_conversation.py

Turn 0 reasons and calls the MCP server's `forecast` tool (`to=weather.forecast`: the request's
`server_label` is `weather`); turn 1 answers from the tool's output. Turn 1's header lists
`prompt_contains`: the replay fails the response unless its prompt holds the tool's real
output, so the conversation proves the server ran the tool and gave the model its answer.
"""

from __future__ import annotations

from pathlib import Path

from streamfold.engines import TokenChunk, dump_trace
from streamfold.engines.vocab import harmony_encoding

MODEL = "mcp-weather"
FORECAST = "Sunny in Paris, 21 C"
TURNS = [
    (
        "<|channel|>analysis<|message|>The user asks about tomorrow in Paris. I will ask the "
        "weather server.<|end|><|start|>assistant<|channel|>commentary to=weather.forecast "
        '<|constrain|>json<|message|>{"city": "Paris"}<|call|>',
        (),
    ),
    (
        "<|channel|>final<|message|>Tomorrow in Paris: sunny, 21 C.<|return|>",
        (f"<|start|>weather.forecast to=assistant<|channel|>commentary<|message|>{FORECAST}",),
    ),
]
HERE = Path(__file__).parent / "conversations" / MODEL


def write(directory: Path = HERE) -> None:
    encoding = harmony_encoding()
    directory.mkdir(parents=True, exist_ok=True)
    for turn, (text, prompt_contains) in enumerate(TURNS):
        ids = encoding.encode(text, allowed_special="all")
        header = {
            "grammar": "harmony",
            "encoding": "o200k_harmony",
            "response_id": f"resp_mcp_weather_{turn}",
            "model": MODEL,
            "created_at": 1764000000,
            **({"prompt_contains": list(prompt_contains)} if prompt_contains else {}),
        }
        chunks = [TokenChunk(token_ids=tuple(ids[i : i + 4])) for i in range(0, len(ids), 4)]
        (directory / f"{turn}.jsonl").write_text(dump_trace(header, chunks, "stop"), "utf-8")


if __name__ == "__main__":
    write()
