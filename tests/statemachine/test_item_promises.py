"""What the item code (`_items.py`, `_kinds.py`) promises, each pinned by a bug that was
planted in it and survived the suite (issue 37): logprobs of a delta held back for a split
character, a character cut at close, tool progress that claims a cut call ran, and the web
search action a browser call's arguments make."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamfold.adapters.driver import fold
from streamfold.engines import TokenChunk
from streamfold.engines.vocab import harmony_encoding
from streamfold.specs.strategies import HarmonyCompletion, chunkings, harmony_completions
from streamfold.statemachine import ServerTools, finish, start, step, to_wire
from tests.harmony_helpers import GRAMMAR, assert_conformant, new_response

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ENC = harmony_encoding()
VOCAB = GRAMMAR.vocabulary
BYTE_TOKENS = {
    data[0]: token
    for token, data in enumerate(VOCAB.token_bytes)
    if len(data) == 1 and token not in VOCAB.special_ids
}
OPEN = {
    "message": ENC.encode("<|start|>assistant<|channel|>final<|message|>", allowed_special="all"),
    "reasoning": ENC.encode(
        "<|start|>assistant<|channel|>analysis<|message|>", allowed_special="all"
    ),
}
RETURN = ENC.encode("<|return|>", allowed_special="all")
#: Characters of 1 to 4 UTF-8 bytes, so that split tokens hold back 1 to 3 bytes.
TEXT = st.text(st.sampled_from("a é€😀 \n"), min_size=1, max_size=12)


@st.composite
def split_tokens(draw: st.DrawFn, text: str) -> list[int]:
    """`text` as tokens: each character either as the tokenizer writes it or one token per
    byte (a model may split a character anywhere between tokens)."""
    out: list[int] = []
    for char in text:
        if draw(st.booleans()):
            out += [BYTE_TOKENS[b] for b in char.encode()]
        else:
            out += ENC.encode(char, allowed_special="all")
    return out


def _wire(events: Any) -> list[dict[str, Any]]:
    return [to_wire(e) for e in events]


@PROPERTY
@given(text=TEXT, data=st.data())
def test_each_token_logprob_rides_once_in_token_order_however_split_and_chunked(
    text: str, data: st.DataObject
) -> None:
    """Bug (planted, issue 37): the logprobs of a delta held back for an incomplete UTF-8
    character (`€` over 3 tokens) came out in reverse token order. Token i's logprob is
    -(i + 1), so the order on the wire names the tokens."""
    body = data.draw(split_tokens(text))
    tokens = [*OPEN["message"], *body, *RETURN]
    logprobs = [-(i + 1.0) for i in range(len(tokens))]
    chunks, at = [], 0
    for size in data.draw(chunkings(len(tokens))):
        chunks.append(
            TokenChunk(
                token_ids=tuple(tokens[at : at + size]), logprobs=tuple(logprobs[at : at + size])
            )
        )
        at += size
    events = list(fold(GRAMMAR, new_response(), chunks, "stop"))
    wire = _wire(events)
    deltas = [e for e in wire if e["type"] == "response.output_text.delta"]
    first = len(OPEN["message"])
    expected = logprobs[first : first + len(body)]
    assert [lp["logprob"] for d in deltas for lp in d["logprobs"]] == expected
    assert "".join(d["delta"] for d in deltas) == text
    for delta in deltas:  # each delta's tokens are exactly the bytes of its text
        named = [tokens[int(-lp["logprob"]) - 1] for lp in delta["logprobs"]]
        assert b"".join(VOCAB.bytes_of(t) for t in named).decode() == delta["delta"]
    (done,) = [e for e in wire if e["type"] == "response.output_text.done"]
    assert [lp["logprob"] for lp in done["logprobs"]] == expected
    (part,) = [e for e in wire if e["type"] == "response.content_part.done"]
    assert [lp["logprob"] for lp in part["part"]["logprobs"]] == expected
    assert_conformant(events)


@PROPERTY
@given(
    kind=st.sampled_from(["message", "reasoning"]),
    text=TEXT,
    logprobs=st.booleans(),
    reason=st.sampled_from(["length", "abort", "error", "stop"]),
    data=st.data(),
)
def test_a_character_cut_at_close_becomes_a_replacement_character_not_nothing(
    kind: str, text: str, logprobs: bool, reason: str, data: st.DataObject
) -> None:
    """Bug (planted, issue 37): an item closed with bytes of an unfinished character pending
    (a model cut mid-character) dropped them silently: the text lost its last character
    with no sign. It ends with U+FFFD, as the bytes decode with errors="replace"."""
    raw = text.encode()
    cut = data.draw(st.integers(1, len(raw)))
    body = [BYTE_TOKENS[b] for b in raw[:cut]]
    state, events = start(GRAMMAR, new_response())
    for token in [*OPEN[kind], *body]:
        state, new = step(state, token, -1.0) if logprobs else step(state, token)
        events += new
    state, new = finish(state, reason)  # type: ignore[arg-type]
    events += new
    wire = _wire(events)
    family = "output_text" if kind == "message" else "reasoning_text"
    streamed = "".join(e["delta"] for e in wire if e["type"] == f"response.{family}.delta")
    (done,) = [e for e in wire if e["type"] == f"response.{family}.done"]
    expected = raw[:cut].decode("utf-8", "replace")
    assert streamed == done["text"] == expected
    assert_conformant(events)


#: Tool progress that says the tool ran: only a call written in full (or answered) may send it.
RAN = {
    "response.web_search_call.searching",
    "response.web_search_call.completed",
    "response.code_interpreter_call.interpreting",
    "response.code_interpreter_call.completed",
}


@PROPERTY
@given(
    completion=harmony_completions(),
    data=st.data(),
    reason=st.sampled_from(["length", "abort", "error", "tool_limit"]),
    server_tools=st.sampled_from([ServerTools(), ServerTools(browser=True, python=True)]),
)
def test_finishing_a_cut_response_never_says_a_tool_ran(
    completion: HarmonyCompletion, data: st.DataObject, reason: str, server_tools: ServerTools
) -> None:
    """Bug (planted, issue 37): a code interpreter or search call cut by `finish("length")`
    still sent `.interpreting` / `.searching`, and the checker and the "cut anywhere"
    property both accepted it. A call is run once written in full, which only a token does:
    so `finish` with any reason but `stop` emits no progress that says a tool ran. (A call
    already pending keeps the `.interpreting` its last token sent, and ends `incomplete`.)"""
    cut = data.draw(st.integers(0, len(completion.tokens)))
    state, _ = start(GRAMMAR, new_response(), server_tools=server_tools)
    for token in completion.tokens[:cut]:
        if state.call is not None:  # a pending call: stepping waits for its result
            break
        state, _ = step(state, token)
    state, closing = finish(state, reason)  # type: ignore[arg-type]
    assert not RAN & {e.type for e in closing}, [e.type for e in closing]


@pytest.mark.parametrize(
    ("call", "running"),
    [
        ("to=python code<|message|>print(6 * 7)", "response.code_interpreter_call.interpreting"),
        ('to=browser.search code<|message|>{"query": "x"}', "response.web_search_call.searching"),
    ],
)
@pytest.mark.parametrize("reason", ["length", "abort", "error", "tool_limit"])
def test_a_call_cut_before_its_end_is_incomplete_and_never_ran(
    call: str, running: str, reason: str
) -> None:
    """The same bug, at every cut of one python and one browser call: the cut call is
    `incomplete` with no running stage; written in full, it has one."""
    tokens = ENC.encode(f"<|start|>assistant<|channel|>analysis {call}", allowed_special="all")
    for cut in range(len(tokens) + 1):
        events = _run(tokens[:cut], reason)
        assert running not in {e.type for e in events}, cut
        assert_conformant(events)
    whole = _run([*tokens, *ENC.encode("<|call|>", allowed_special="all")], reason)
    assert running in {e.type for e in whole}


def _run(tokens: list[int], reason: str) -> list[Any]:
    state, events = start(GRAMMAR, new_response())
    for token in tokens:
        state, new = step(state, token)
        events += new
    state, new = finish(state, reason)  # type: ignore[arg-type]
    return [*events, *new]


# -- the web search action of a browser call -------------------------------------------------


def _search_item(
    recipient: str, arguments: str, end: str = "<|call|>", reason: str = "stop"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The `web_search_call` item as added and as done, for a call the model wrote."""
    text = f"<|start|>assistant<|channel|>analysis to={recipient} code<|message|>{arguments}{end}"
    state, events = start(GRAMMAR, new_response())
    for token in ENC.encode(text, allowed_special="all"):
        state, new = step(state, token)
        events += new
    state, new = finish(state, reason)  # type: ignore[arg-type]
    wire = _wire([*events, *new])
    assert_conformant([*events, *new])
    (added,) = [e["item"] for e in wire if e["type"] == "response.output_item.added"]
    (done,) = [e["item"] for e in wire if e["type"] == "response.output_item.done"]
    return added, done


@pytest.mark.parametrize(
    ("recipient", "arguments", "action"),
    [
        ("browser.search", '{"query": "paris"}', {"type": "search", "query": "paris"}),
        # Not JSON: the model's text is the query, not lost.
        ("browser.search", "paris weather", {"type": "search", "query": "paris weather"}),
        ("browser.search", "", {"type": "search"}),
        ("browser.open", '{"url": "https://a.io/"}', {"type": "open_page", "url": "https://a.io/"}),
        # gpt-oss opens a search result by its `id` (a number or a link): that is the page.
        ("browser.open", '{"id": "https://b.io/"}', {"type": "open_page", "url": "https://b.io/"}),
        (
            "browser.open",
            '{"url": "https://a.io/", "id": "https://b.io/"}',
            {"type": "open_page", "url": "https://a.io/"},
        ),
        (
            "browser.find",
            '{"pattern": "rain", "url": "https://a.io/"}',
            {"type": "find_in_page", "pattern": "rain", "url": "https://a.io/"},
        ),
        (
            "browser.find",
            '{"pattern": "rain"}',
            {"type": "find_in_page", "pattern": "rain", "url": ""},
        ),
        # `find` without a pattern finds nothing: it is shown as the search it could be.
        ("browser.find", '{"query": "rain"}', {"type": "search", "query": "rain"}),
        ("browser.find", '{"pattern": 3}', {"type": "search"}),
        # Only `find` finds (cosmic-ray's `name <= "find"`, `>=`: `back`, `search` found).
        ("browser.back", '{"pattern": "rain"}', {"type": "search"}),
        (
            "browser.search",
            '{"query": "q", "pattern": "rain"}',
            {"type": "search", "query": "q"},
        ),
        ("browser.search", '["a", "list"]', {"type": "search", "query": '["a", "list"]'}),
    ],
)
def test_a_browser_call_becomes_the_web_search_action_its_arguments_say(
    recipient: str, arguments: str, action: dict[str, Any]
) -> None:
    """Bugs (planted, issue 37): a non-JSON `search` argument, `open` by `id`, `find` without
    a `pattern` and the in-progress action could each be changed without a test failing."""
    added, done = _search_item(recipient, arguments)
    assert added["status"] == "in_progress"
    assert added["action"] == {"type": "search"}  # nothing is known until the call is written
    assert done["status"] == "completed"
    assert {k: v for k, v in done["action"].items() if v is not None} == action


def test_a_browser_call_cut_before_its_end_shows_the_action_it_had_written() -> None:
    """Bug (found by cosmic-ray, issue 37): `status >= "in_progress"` for `== ...` made a cut
    call (`incomplete` sorts after `in_progress`) show an empty search instead of the page
    it was opening."""
    added, done = _search_item("browser.open", '{"url": "https://a.io/"}', "", "length")
    assert added["action"] == {"type": "search"}
    assert done["status"] == "incomplete"
    assert done["action"] == {"type": "open_page", "url": "https://a.io/"}
