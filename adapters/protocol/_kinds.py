"""What the protocol layer knows per kind of item, read from the reducer's kinds table
(`statemachine/_kinds.py`) where the table already says it.

Every output item kind is also an input item (a later request sends it back, or
`previous_response_id` brings it in); more kinds are input only: `additional_tools`, calls'
outputs and the client's answer to an approval request (`ANSWERS` says what each answers).
"""

from __future__ import annotations

from typing import NamedTuple

from streamfold.statemachine._kinds import KINDS

__all__ = ["ANSWERS", "CARRIED_ITEM_TYPES", "INPUT_ITEM_PREFIX", "Answers"]

#: The id prefix of each input item kind (`GET .../input_items` gives an item sent without an
#: id one, `{prefix}_{response}_in{i}`): an output kind's own prefix, plus the input-only kinds.
INPUT_ITEM_PREFIX: dict[str, str] = {
    **{kind.name: kind.prefix for kind in KINDS.values()},
    "function_call_output": "fco",
    "custom_tool_call_output": "ctco",
    "additional_tools": "at",
    "tool_search_output": "tso",
    "mcp_approval_response": "mcpar",
}

#: The output item kinds a following request sees again (`previous_response_id`): all but web
#: search calls, whose pages are not kept, so the prompt cannot show them again.
CARRIED_ITEM_TYPES: frozenset[str] = frozenset(KINDS) - {"web_search_call"}


class Answers(NamedTuple):
    """The item kind an input item answers, and how it names it: its own field `key` holds
    the call's field `call_key`."""

    call: str
    call_key: str
    key: str


#: Each input item kind that answers an earlier item: an answer kept without its call cannot be
#: shown (a tool's result answering no call), so `truncation: "auto"` drops them together. An
#: approved `mcp_call` names its approval request as the client's answer does.
ANSWERS: dict[str, Answers] = {
    "function_call_output": Answers("function_call", "call_id", "call_id"),
    "custom_tool_call_output": Answers("custom_tool_call", "call_id", "call_id"),
    "tool_search_output": Answers("tool_search_call", "call_id", "call_id"),
    "mcp_approval_response": Answers("mcp_approval_request", "id", "approval_request_id"),
    "mcp_call": Answers("mcp_approval_request", "id", "approval_request_id"),
}
