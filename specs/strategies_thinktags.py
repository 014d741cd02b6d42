"""Hypothesis strategies for think-tag completions (Qwen3, DeepSeek-R1 style), for streamfold's
tests and for yours.

`thinktag_completions()` draws what a `<think>` model writes: reasoning, answers, Hermes tool
calls (`<tool_call>{"name": …, "arguments": {…}}</tool_call>`, in the streamable shape and in
shapes only a whole-body parse can read), unicode, blank lines between blocks, unclosed
reasoning at the end and the start-in-reasoning form, together with the items a correct
reducer makes of it. `malformed_thinktag_texts()` draws the same pieces shuffled with stray
tags, half tags and bodies that are not JSON (no expected items: the stream must still be
conformant). `tokenizations(text, vocab)` cuts a text into token ids of a vocabulary in any
way it can: every split of every tag across tokens, tags as single special tokens where the
vocabulary has them, control tokens slipped in between.

    from hypothesis import given, strategies as st
    from streamfold.specs.strategies_thinktags import (
        VocabularyIndex, small_vocabulary, thinktag_completions, tokenizations,
    )

    index = VocabularyIndex(small_vocabulary())  # or VocabularyIndex(your model's Vocabulary)

    @given(completion=thinktag_completions(), data=st.data())
    def test_my_server(completion, data):
        tokens = data.draw(tokenizations(completion.text, index))
        ...  # stream `tokens` through your server; check the items against completion.items
"""

from __future__ import annotations

import json
from typing import Literal

import attrs
from hypothesis import strategies as st

from streamfold.statemachine import Vocabulary

__all__ = [
    "TAGS",
    "ExpectedItem",
    "ThinkTagCompletion",
    "VocabularyIndex",
    "malformed_thinktag_texts",
    "small_vocabulary",
    "thinktag_completions",
    "thinktag_text",
    "tokenizations",
]

TAGS = ("<think>", "</think>", "<tool_call>", "</tool_call>")

# Fragments that look like the start of a tag, so the held-back path is exercised; whole tags
# are filtered out of free text.
_FRAGMENTS = [
    "<",
    ">",
    "</",
    "<th",
    "<think",
    "think>",
    "ink>",
    "<tool",
    "_call>",
    "</tool_c",
    "<thought>",
    "a < b",
    "x<y>z",
    "\n\n",
    "\n",
    " ",
    "\t",
]
_CHARS = [
    *list("abcdefghij KLMNOP.,;:!?'\"\n{}[]()0123456789/_"),
    "é",
    "ü",
    "ß",
    "你",
    "好",
    "🎉",
    "👍",
    "🏽",
    "∑",
    "\u200b",
    "\xa0",
    "ℝ",
]


def _free_of_tags(text: str) -> bool:
    return not any(tag in text for tag in TAGS)


def thinktag_text(max_pieces: int = 8) -> st.SearchStrategy[str]:
    """Answer or reasoning text with tag-like fragments and unicode, but no whole tag."""
    piece = st.sampled_from(_FRAGMENTS) | st.text(st.sampled_from(_CHARS), min_size=1, max_size=6)
    return st.lists(piece, max_size=max_pieces).map("".join).filter(_free_of_tags)


@attrs.frozen
class ExpectedItem:
    """One output item: `text` is the message or reasoning text, or a call's arguments."""

    type: Literal["message", "reasoning", "function_call"]
    text: str
    name: str | None = None


@attrs.frozen(kw_only=True)
class ThinkTagCompletion:
    text: str
    start_in_reasoning: bool
    expected: tuple[ExpectedItem, ...]


_NAME = st.text(st.sampled_from([*list("abcxyz_.-"), "é", '"', "\\"]), min_size=1, max_size=12)
_JSON_STR = st.text(st.sampled_from([*_CHARS, "<", ">", "\\", "\u2028"]), max_size=8)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | _JSON_STR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_JSON_STR, inner, max_size=3),
    max_leaves=6,
)
_ARGUMENTS = st.dictionaries(
    st.text(st.sampled_from(list("abcxyz_")), min_size=1, max_size=6), _JSON, max_size=4
)
_WS = st.sampled_from(["", " ", "\n", "\n  "])


@st.composite
def _tool_call(draw: st.DrawFn) -> tuple[str, ExpectedItem]:
    """`<tool_call>…</tool_call>` and the function_call item it must become."""
    name = draw(_NAME)
    arguments = draw(_ARGUMENTS)
    shape = draw(st.sampled_from(["streamed", "streamed", "arguments_first", "string_arguments"]))
    ws = [draw(_WS) for _ in range(4)]
    if shape == "streamed":
        raw = json.dumps(
            arguments,
            ensure_ascii=draw(st.booleans()),
            separators=draw(st.sampled_from([(", ", ": "), (",", ":")])),
        )
        body = (
            f'{ws[0]}{{"name":{ws[1]}{json.dumps(name)},{ws[2]}"arguments": {raw}{ws[3]}}}{ws[0]}'
        )
        expected = raw  # streamed as the model wrote it
    elif shape == "arguments_first":
        body = f'{ws[0]}{{"arguments": {json.dumps(arguments)}, "name": {json.dumps(name)}}}'
        expected = json.dumps(arguments, ensure_ascii=False)
    else:
        encoded = json.dumps(arguments)
        body = f'{{"name": {json.dumps(name)}, "arguments": {json.dumps(encoded)}}}{ws[1]}'
        expected = encoded
    return f"<tool_call>{body}</tool_call>", ExpectedItem("function_call", expected, name)


def _visible(kind: Literal["message", "reasoning"], text: str) -> tuple[ExpectedItem, ...]:
    """An item's text is its run without whitespace at either end (see `_thinktags.py`)."""
    text = text.strip()
    return (ExpectedItem(kind, text),) if text else ()


@st.composite
def thinktag_completions(draw: st.DrawFn, max_blocks: int = 5) -> ThinkTagCompletion:
    """A well-formed think-tag completion and the items it must produce."""
    start_in_reasoning = draw(st.booleans())
    parts: list[str] = []
    expected: list[ExpectedItem] = []
    if start_in_reasoning:
        # The template opened reasoning; some models repeat `<think>` anyway (bug 22).
        repeat = draw(st.sampled_from(["", "<think>", "\n<think>\n"]))
        reasoning = draw(thinktag_text())
        parts.append(f"{repeat}{reasoning}</think>")
        expected += _visible("reasoning", reasoning)
    blocks = draw(st.lists(st.sampled_from(["think", "call", "text"]), max_size=max_blocks))
    last = None
    for block in blocks:
        if block == "text" and last == "text":
            continue  # adjacent text is one run
        if block == "think":
            reasoning = draw(thinktag_text())
            parts.append(f"<think>{reasoning}</think>")
            expected += _visible("reasoning", reasoning)
        elif block == "call":
            call, item = draw(_tool_call())
            parts.append(call)
            expected.append(item)
        else:
            text = draw(thinktag_text())
            parts.append(text)
            expected += _visible("message", text)
        last = block
    if draw(st.booleans()) and last != "text":
        # Unclosed reasoning at the end: a `stop` keeps it as a completed reasoning item.
        reasoning = draw(thinktag_text())
        parts.append(f"<think>{reasoning}")
        expected += _visible("reasoning", reasoning)
    return ThinkTagCompletion(
        text="".join(parts), start_in_reasoning=start_in_reasoning, expected=tuple(expected)
    )


_BAD_BODIES = [
    '{"name": "f", "arguments": {"a": ',
    "not json",
    '{"arguments": {}}',
    '{"name": "", "arguments": {}}',
    '{"name": "f", "arguments": {"a": "</',
    "[1, 2]",
    '{"name": "f", "arguments": {"a": 1}} trailing',
    '{"name": 3}',
    "{",
    '{"name": "g", "arguments": [1, {"b": "}"}]',
    '{"name": "f\\q", "arguments": {}}',
]


def malformed_thinktag_texts(max_pieces: int = 12) -> st.SearchStrategy[str]:
    """Text a broken model might write: stray and unclosed tags, bad bodies, tag halves."""
    piece = (
        st.sampled_from(TAGS)
        | st.sampled_from(_BAD_BODIES)
        | thinktag_text(3)
        | _tool_call().map(lambda call: call[0])
    )
    return st.lists(piece, max_size=max_pieces).map("".join)


class VocabularyIndex:
    """Bytes → id for a vocabulary's ordinary tokens, and its tag and control specials."""

    def __init__(self, vocabulary: Vocabulary) -> None:
        self.vocabulary = vocabulary
        self.ids: dict[bytes, int] = {}
        for token, data in enumerate(vocabulary.token_bytes):
            if token not in vocabulary.special_ids and data:
                self.ids.setdefault(data, token)
        self.longest = max(map(len, self.ids))
        self.tags = {name: i for name, i in vocabulary.special.items() if name in TAGS}
        self.controls = sorted(i for name, i in vocabulary.special.items() if name not in TAGS)


@st.composite
def tokenizations(
    draw: st.DrawFn, text: str, index: VocabularyIndex, controls: bool = True
) -> list[int]:
    """Any cut of `text` into tokens of `index`'s vocabulary that decodes back to `text`.

    Needs every single byte to be a token (true of byte-level vocabularies).
    """
    data = text.encode("utf-8")
    tokens: list[int] = []
    at = 0
    tag_at: dict[int, tuple[int, int]] = {}
    for name, token in index.tags.items():
        raw, start = name.encode(), 0
        while (found := data.find(raw, start)) != -1:
            tag_at[found] = (len(raw), token)
            start = found + 1
    while at < len(data):
        if controls and index.controls and draw(st.integers(0, 15)) == 0:
            tokens.append(draw(st.sampled_from(index.controls)))
        if at in tag_at and draw(st.booleans()):
            size, token = tag_at[at]
            tokens.append(token)
            at += size
            continue
        size = draw(st.integers(1, min(index.longest, 12)))
        while size > 1 and data[at : at + size] not in index.ids:
            size -= 1
        tokens.append(index.ids[data[at : at + size]])
        at += size
    return tokens


def small_vocabulary() -> Vocabulary:
    """A small byte-level vocabulary for tests: the 256 bytes, every piece of every tag, pieces
    that straddle a tag and its neighbours, the tags as specials, and control tokens."""
    pieces = [bytes([b]) for b in range(256)]
    for tag in TAGS:
        raw = tag.encode()
        pieces += [raw[i:j] for i in range(len(raw)) for j in range(i + 2, len(raw) + 1)]
    pieces += [
        p.encode()
        for p in (
            ">\n",
            ">\n\n",
            "\n<",
            " <",
            '{"',
            '":',
            '": ',
            "name",
            "arguments",
            "é",
            "🎉",
            'ok</think>\n\nThe answer<tool_call>\n{"',
            "</think>\n\n",
            ">\n\nHi",
            "}\n</tool_call>",
            "Hello",
            " world",
            "reason",
            "ing",
        )
    ]
    seen: dict[bytes, None] = dict.fromkeys(pieces)
    table = list(seen)
    special: dict[str, int] = {}
    for name in (*TAGS, "<|im_end|>", "<|endoftext|>"):
        special[name] = len(table)
        table.append(name.encode())
    return Vocabulary(name="thinktags-test", token_bytes=tuple(table), special=special)
