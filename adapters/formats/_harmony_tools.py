"""Tools and tool results in the harmony conversation, rendered by openai-harmony itself.

- The server-side tools go into the *system* message as namespaces (`## browser`,
  `## python`, one `## <server_label>` per MCP server), as gpt-oss was trained to see built-in
  tools; client-side function tools stay in the developer message (`_harmony_prompt.py`).
- A tool's result is a tool message: author the recipient the model addressed
  (`browser.search`, `python`, `<label>.<tool>`), `to=assistant`, on the channel the call was
  made on. Inside one response the loop appends the generated tokens (ending `<|call|>`) and
  that message rendered for completion (`...<|end|><|start|>assistant`) to the prompt, as the
  gpt-oss reference server does, so the prompt of the next generation extends the last one
  token for token (an engine's prefix cache keeps it).
- A later request that carries these items (input, or `previous_response_id`) shows each as
  the call message and its tool message, the same shapes.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import openai_harmony as h

from streamfold.engines.vocab import harmony_encoding

from ..protocol import AgentInputItem, CodeInterpreterCallInput, McpCallInput

__all__ = [
    "call_channel",
    "call_message",
    "call_token",
    "continuation",
    "history_messages",
    "message_end_tokens",
    "tool_message",
    "with_server_tools",
]

#: Where a call's result goes when the call's own channel is unknown (an earlier response's
#: item): built-ins think on `analysis`, MCP tools act on `commentary`.
_DEFAULT_CHANNEL = {"python": "analysis", "browser": "analysis"}


def default_channel(recipient: str) -> str:
    return _DEFAULT_CHANNEL.get(recipient.partition(".")[0], "commentary")


def with_server_tools(system: Any, namespaces: Sequence[Any]) -> Any:
    """`system` (a harmony `SystemContent`) with each tool namespace added."""
    for namespace in namespaces:
        system = system.with_tools(namespace)
    return system


def call_message(recipient: str, arguments: str, channel: str | None = None) -> Any:
    """The assistant's call as harmony writes it (`to=RECIPIENT`, json or code)."""
    content_type = "code" if recipient.partition(".")[0] == "python" else "json"
    return (
        h.Message.from_role_and_content(h.Role.ASSISTANT, arguments)
        .with_channel(channel or default_channel(recipient))
        .with_recipient(recipient)
        .with_content_type(content_type)
    )


def tool_message(recipient: str, text: str, channel: str | None = None) -> Any:
    """The tool's answer to a call addressed to `recipient`."""
    author = h.Author.new(h.Role.TOOL, recipient)
    return (
        h.Message.from_author_and_content(author, text)
        .with_channel(channel or default_channel(recipient))
        .with_recipient("assistant")
    )


def continuation(message: Any) -> tuple[int, ...]:
    """The tokens that follow a generation ending in `<|call|>`: the tool message, then the
    header of the assistant's next turn."""
    conversation = h.Conversation.from_messages([message])
    return tuple(
        harmony_encoding().render_conversation_for_completion(conversation, h.Role.ASSISTANT)
    )


@functools.cache
def call_token() -> int:
    """`<|call|>`: an engine that leaves its stop token out of the output gets it put back."""
    return int(harmony_encoding().encode("<|call|>", allowed_special="all")[0])


@functools.cache
def message_end_tokens() -> frozenset[int]:
    """`<|call|>` and `<|end|>`: where a call message can end."""
    encode = harmony_encoding().encode
    return frozenset(int(encode(t, allowed_special="all")[0]) for t in ("<|call|>", "<|end|>"))


def call_channel(generated: Sequence[int], recipient: str) -> str:
    """The channel of the generation's last message (the call), read by openai-harmony's own
    parser; the recipient's default when it cannot be read."""
    try:
        messages = harmony_encoding().parse_messages_from_completion_tokens(
            list(generated), h.Role.ASSISTANT
        )
    except Exception:  # a malformed generation still ends in a call the reducer read
        return default_channel(recipient)
    if messages and messages[-1].channel:
        return str(messages[-1].channel)
    return default_channel(recipient)


def history_messages(item: AgentInputItem) -> list[Any]:
    """An earlier response's tool item as the messages the model saw (none for items that
    carry no call: tool listings, approvals, web searches whose pages are not kept)."""
    if isinstance(item, McpCallInput):
        recipient = f"{item.server_label}.{item.name}"
        text = f"Error: {item.error}" if item.error is not None else (item.output or "")
        return [call_message(recipient, item.arguments), tool_message(recipient, text)]
    if isinstance(item, CodeInterpreterCallInput) and item.code is not None:
        return [call_message("python", item.code), tool_message("python", item.logs)]
    return []
