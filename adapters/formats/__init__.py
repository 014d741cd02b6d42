"""Chat formats: what a model family reads and writes, one object per family.

For now the harmony format (gpt-oss): the prompt a request renders to (`_harmony_prompt.py`),
the tool calls and results of the agent loop in the conversation (`_harmony_tools.py`), and the
stop ids of an assistant turn.
"""

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
