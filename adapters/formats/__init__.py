"""Chat formats: what a model family reads and writes, one object per family (`ChatFormat`,
see `_format.py`): its prompt, stop ids, reducer grammar and where a decoding constraint
attaches.

`HARMONY` (gpt-oss): its prompt (`_harmony_prompt.py`), and the agent loop's tool calls and
results in its conversation (`_harmony_tools.py`). `ChatTemplateFormat` (think-tag models:
Qwen3, DeepSeek-R1): the model's own Hugging Face chat template (`_chat_template.py`).
"""

from ._chat_template import (
    ChatTemplateError,
    ChatTemplateFormat,
    chat_messages,
    chat_tools,
    shown_tools,
    writes_harmony,
)
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
    "ChatTemplateError",
    "ChatTemplateFormat",
    "HarmonyFormat",
    "call_channel",
    "call_message",
    "call_token",
    "chat_messages",
    "chat_tools",
    "continuation",
    "history_messages",
    "message_end_tokens",
    "render_prompt",
    "shown_tools",
    "stop_token_ids",
    "tool_message",
    "with_server_tools",
    "writes_harmony",
]
