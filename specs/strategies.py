"""Hypothesis strategies for harmony completions, for streamfold's tests and for yours.

`harmony_completions()` draws what gpt-oss writes after `<|start|>assistant`: reasoning,
preambles, final answers, function calls, built-in tool calls (browser, python, other
recipients), with unicode (accents, CJK, emoji split over tokens) and empty messages, rendered
to token ids with openai-harmony. `chunkings(n)` draws ways an engine may cut n tokens into
output chunks. Use them to test your own server:

    @given(completion=harmony_completions())
    def test_my_server(completion): ...
"""

from __future__ import annotations

from typing import Literal

import attrs
from hypothesis import strategies as st

__all__ = [
    "HarmonyCompletion",
    "HarmonyMessage",
    "chunkings",
    "harmony_completions",
    "message_text",
]

Kind = Literal["reasoning", "final", "preamble", "function", "browser", "python", "mcp"]

_ALPHABET = st.sampled_from(
    [
        *"abcdefghij KLMNOP.,;:!?'\"\n{}[]()0123456789",
        "é",
        "ü",
        "ß",
        "ñ",
        "你",
        "好",
        "世",
        "界",
        "🎉",
        "👍",
        "\U0001f3fd",
        "∑",
        "\u200b",
        "ℝ",
    ]
)


def message_text(max_size: int = 40) -> st.SearchStrategy[str]:
    """Message text that cannot be mistaken for a harmony control token."""
    return st.text(_ALPHABET, max_size=max_size)


_NAME = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)


@attrs.frozen(kw_only=True)
class HarmonyMessage:
    kind: Kind
    text: str
    name: str | None = None  # function or tool name

    @property
    def channel(self) -> str:
        return {
            "reasoning": "analysis",
            "final": "final",
            "preamble": "commentary",
            "function": "commentary",
            "browser": "analysis",
            "python": "analysis",
            "mcp": "commentary",
        }[self.kind]

    @property
    def recipient(self) -> str | None:
        return {
            "function": f"functions.{self.name}",
            "browser": f"browser.{self.name}",
            "python": "python",
            "mcp": f"container.{self.name}",
        }.get(self.kind)

    def header(self) -> str:
        header = f"<|channel|>{self.channel}"
        if self.kind == "function" or self.kind == "mcp":
            return f"{header} to={self.recipient} <|constrain|>json"
        if self.kind in ("browser", "python"):
            return f"{header} to={self.recipient} code"
        return header


@attrs.frozen(kw_only=True)
class HarmonyCompletion:
    messages: tuple[HarmonyMessage, ...]
    text: str
    tokens: tuple[int, ...]


def _message(kind: Kind) -> st.SearchStrategy[HarmonyMessage]:
    if kind in ("function", "mcp"):
        args = st.dictionaries(_NAME, st.integers() | message_text(12), max_size=3)
        import json

        return st.builds(
            HarmonyMessage,
            kind=st.just(kind),
            name=_NAME,
            text=args.map(lambda a: json.dumps(a, ensure_ascii=False)),
        )
    if kind == "browser":
        return st.builds(
            HarmonyMessage,
            kind=st.just(kind),
            name=st.sampled_from(["search", "open", "find"]),
            text=message_text(20).map(lambda q: f'{{"query": {_json(q)}}}'),
        )
    return st.builds(HarmonyMessage, kind=st.just(kind), text=message_text())


def _json(text: str) -> str:
    import json

    return json.dumps(text, ensure_ascii=False)


_KINDS: tuple[Kind, ...] = (
    "reasoning",
    "final",
    "preamble",
    "function",
    "browser",
    "python",
    "mcp",
)


@st.composite
def harmony_completions(draw: st.DrawFn, max_messages: int = 4) -> HarmonyCompletion:
    """A completion as gpt-oss writes it after the prompt's `<|start|>assistant`."""
    from streamfold.engines.vocab import harmony_encoding

    kinds = draw(st.lists(st.sampled_from(_KINDS), min_size=1, max_size=max_messages))
    messages = tuple(draw(_message(kind)) for kind in kinds)
    pieces = []
    for i, message in enumerate(messages):
        last = i == len(messages) - 1
        if message.recipient is not None:
            end = "<|call|>" if last else "<|end|>"
        else:
            end = draw(st.sampled_from(["<|return|>", "<|end|>"])) if last else "<|end|>"
        prefix = "" if i == 0 else "<|start|>assistant"
        pieces.append(f"{prefix}{message.header()}<|message|>{message.text}{end}")
    text = "".join(pieces)
    tokens = tuple(harmony_encoding().encode(text, allowed_special="all"))
    return HarmonyCompletion(messages=messages, text=text, tokens=tokens)


@st.composite
def chunkings(draw: st.DrawFn, n: int) -> list[int]:
    """Chunk sizes (all >= 1) that add up to `n`: how an engine may batch n tokens."""
    sizes = []
    left = n
    while left > 0:
        size = draw(st.integers(1, min(left, 24)))
        sizes.append(size)
        left -= size
    return sizes
