"""What the protocol layer knows per kind of item, read from the reducer's kinds table
(`statemachine/_kinds.py`) where the table already says it.

Every output item kind is also an input item (a later request sends it back, or
`previous_response_id` brings it in); two more kinds are input only: a function call's output
and the client's answer to an approval request.
"""

from __future__ import annotations

from streamfold.statemachine._kinds import KINDS

__all__ = ["CARRIED_ITEM_TYPES", "INPUT_ITEM_PREFIX"]

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
