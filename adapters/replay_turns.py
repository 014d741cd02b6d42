"""Replaying a multi-step conversation: which recorded trace answers which request.

One trace answers one request. A client's tool loop sends several requests in a row (the user's
question; then the same conversation plus the model's call and the tool's output; ...), so one
trace per model would answer the tool output with the same call again, until the client's turn
limit. A *conversation directory* `DIR/<model>/` holds one trace per turn instead: `0.jsonl`
answers the first request, `1.jsonl` the request that follows one model turn, and so on.

The turn is read from the request's own prompt, so it is the same whether the client sent the
whole conversation, `previous_response_id` or `item_reference`s: it is the number of model turns
the prompt already holds, a run of assistant messages followed by something else (a tool's
output or a user's reply). Parallel calls answered together are one turn. Harmony (gpt-oss)
prompts only: a role is the text after the *control token* `<|start|>` (`assistant`,
`functions.f`). The text "<|start|>assistant" inside a tool description or a user's message is
ordinary text tokens, and is no turn (issue 29: reading the decoded text, it was one).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from streamfold.statemachine import Vocabulary

__all__ = ["ROLE_MARKERS", "TURN_FILE", "conversation_turn", "role_marker", "turn_files"]

TURN_FILE = re.compile(r"(\d+)\.jsonl")
#: The control tokens a message's role follows: harmony's, then ChatML's.
ROLE_MARKERS = ("<|start|>", "<|im_start|>")


def role_marker(vocabulary: Vocabulary) -> int | None:
    """The id of the vocabulary's role marker (`ROLE_MARKERS`), or None when it has none (its
    prompts' turns cannot be read)."""
    return next((vocabulary.special[m] for m in ROLE_MARKERS if m in vocabulary.special), None)


def _roles(prompt_token_ids: Sequence[int], vocabulary: Vocabulary) -> Iterator[bytes]:
    """The role of each message: the text between a role marker (`<|start|>`) and the next
    control token, up to its first space (`functions.f to=assistant`) or line end.

    The markers are found by `index` and only each header's first word is decoded: the replay
    engine reads every prompt on the event loop, and decoding all of a long one (an MCP
    listing at its bounds, ~36k tokens) took 4.1 ms of it per generation, 0.85 ms now (issue
    29's bench)."""
    prompt = prompt_token_ids
    start = role_marker(vocabulary)
    if not prompt or start is None:
        return
    vocabulary.bytes_of(min(prompt))  # every id must be in the vocabulary: the extremes
    vocabulary.bytes_of(max(prompt))
    special = vocabulary.special_ids
    at = -1
    while True:
        try:
            at = prompt.index(start, at + 1)
        except ValueError:
            return
        header = bytearray()
        for token in prompt[at + 1 : at + 1 + _HEADER_TOKENS]:
            if token in special:
                break
            header += vocabulary.bytes_of(token)
            if len(header.split(maxsplit=1)) > 1:  # the first word has ended
                break
        else:  # a first word longer than the window: decode on to the next control token
            rest = itertools.takewhile(
                lambda token: token not in special, prompt[at + 1 + _HEADER_TOKENS :]
            )
            header += b"".join(map(vocabulary.bytes_of, rest))
        yield bytes(header).split(maxsplit=1)[0] if header.strip() else b""


#: Tokens of a header decoded one at a time (a role is a few; a ChatML header is the message).
_HEADER_TOKENS = 16


def conversation_turn(prompt_token_ids: Sequence[int], vocabulary: Vocabulary) -> int:
    """How many model turns a prompt (harmony, or ChatML) already holds."""
    roles = list(_roles(prompt_token_ids, vocabulary))
    return sum(
        1
        for role, following in itertools.pairwise(roles)
        if role == b"assistant" and following != b"assistant"
    )


def turn_files(directory: Path) -> list[Path]:
    """The traces of a conversation directory in turn order: `0.jsonl`, `1.jsonl`, ...; the
    numbers must run from 0 without a gap (else a turn would silently replay the wrong step)."""
    found = sorted(
        (int(match.group(1)), path)
        for path in directory.iterdir()
        if (match := TURN_FILE.fullmatch(path.name))
    )
    if [turn for turn, _ in found] != list(range(len(found))):
        return []
    return [path for _, path in found]
