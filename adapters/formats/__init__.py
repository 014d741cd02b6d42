"""Chat formats: what a model family reads and writes, one object per family (`ChatFormat`,
see `_format.py`): its prompt, stop ids, reducer grammar and where a decoding constraint
attaches.

`HARMONY` (gpt-oss) is the one family served live today: its prompt (`_harmony_prompt.py`),
and the agent loop's tool calls and results in its conversation (`_harmony_tools.py`).
"""

from ._format import ChatFormat
from ._harmony import HARMONY, HarmonyFormat
from ._harmony_prompt import render_prompt, stop_token_ids
from ._harmony_tools import (
    call_channel,
    call_message,
    call_token,
    continuation,
    history_messages,
    message_end_tokens,
    tool_message,
    with_server_tools,
)

__all__ = [
    "HARMONY",
    "ChatFormat",
    "HarmonyFormat",
    "call_channel",
    "call_message",
    "call_token",
    "continuation",
    "history_messages",
    "message_end_tokens",
    "render_prompt",
    "stop_token_ids",
    "tool_message",
    "with_server_tools",
]
