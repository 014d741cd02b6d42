"""A Responses request as a gpt-oss prompt: the harmony conversation, rendered to token ids.

The layout is the one gpt-oss was trained on (openai-harmony's format guide, as vLLM's
Responses server builds it): a system message carrying the reasoning effort; a developer
message carrying `instructions` and the function tools (the `functions` namespace); then the
conversation. Earlier assistant turns go on the `final` channel, earlier function calls on
`commentary` addressed `to=functions.NAME`, and tool results come from `functions.NAME`.
`system`/`developer` messages of `input` are folded into the developer instructions, since
harmony has one system and one developer message per conversation. Server-side tools and the
tool items of earlier responses are rendered by `agent/_render.py`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import openai_harmony as h

from streamfold.engines.vocab import harmony_encoding

from ..agent._render import history_messages, with_server_tools
from .requests import (
    CreateRequest,
    FunctionCallInput,
    FunctionCallOutputInput,
    MessageInput,
    ReasoningInput,
)

__all__ = ["render_prompt", "stop_token_ids"]

# Responses has a `minimal` effort that harmony lacks: the nearest is `low`.
_EFFORT = {"minimal": "LOW", "low": "LOW", "medium": "MEDIUM", "high": "HIGH"}


def _system(request: CreateRequest, namespaces: Sequence[Any] = ()) -> Any:
    effort = (request.reasoning and request.reasoning.effort) or "medium"
    content = h.SystemContent.new().with_reasoning_effort(h.ReasoningEffort[_EFFORT[effort]])
    # tool_choice "none": no tool is shown, server-side ones included.
    if request.tool_choice != "none":
        content = with_server_tools(content, namespaces)
    return h.Message.from_role_and_content(h.Role.SYSTEM, content)


def _developer(request: CreateRequest) -> Any | None:
    parts = [request.instructions] if request.instructions else []
    if isinstance(request.input, tuple):
        parts += [
            item.text
            for item in request.input
            if isinstance(item, MessageInput) and item.role in ("system", "developer")
        ]
    # tool_choice "none": the model must not call tools, so it is not shown any.
    tools = [] if request.tool_choice == "none" else list(request.function_tools)
    if not parts and not tools:
        return None
    content = h.DeveloperContent.new()
    if parts:
        content = content.with_instructions("\n\n".join(parts))
    if tools:
        content = content.with_function_tools(
            [
                h.ToolDescription.new(tool.name, tool.description or "", parameters=tool.parameters)
                for tool in tools
            ]
        )
    return h.Message.from_role_and_content(h.Role.DEVELOPER, content)


def _turns(request: CreateRequest) -> list[Any]:
    if isinstance(request.input, str):
        return [h.Message.from_role_and_content(h.Role.USER, request.input)]
    names: dict[str, str] = {}
    messages = []
    for item in request.input:
        if isinstance(item, MessageInput):
            if item.role == "user":
                messages.append(h.Message.from_role_and_content(h.Role.USER, item.text))
            elif item.role == "assistant":
                messages.append(
                    h.Message.from_role_and_content(h.Role.ASSISTANT, item.text).with_channel(
                        "final"
                    )
                )
        elif isinstance(item, ReasoningInput):
            messages.append(
                h.Message.from_role_and_content(h.Role.ASSISTANT, item.text).with_channel(
                    "analysis"
                )
            )
        elif isinstance(item, FunctionCallInput):
            names[item.call_id] = item.name
            messages.append(
                h.Message.from_role_and_content(h.Role.ASSISTANT, item.arguments)
                .with_channel("commentary")
                .with_recipient(f"functions.{item.name}")
                .with_content_type("json")
            )
        elif isinstance(item, FunctionCallOutputInput):
            author = h.Author.new(h.Role.TOOL, f"functions.{names[item.call_id]}")
            messages.append(
                h.Message.from_author_and_content(author, item.text)
                .with_channel("commentary")
                .with_recipient("assistant")
            )
        else:  # the agent loop's items (MCP and code interpreter calls, approvals, ...)
            messages += history_messages(item)
    return messages


def render_prompt(
    request: CreateRequest, namespaces: Sequence[Any] = (), after: Sequence[Any] = ()
) -> tuple[int, ...]:
    """The prompt token ids for the assistant's next turn (ends with `<|start|>assistant`).

    `namespaces`: the server-side tools, as openai-harmony `ToolNamespaceConfig`s, for the system
    message. `after`: harmony messages that follow the input (an approved call and its result).
    """
    messages = [_system(request, namespaces)]
    developer = _developer(request)
    if developer is not None:
        messages.append(developer)
    messages += _turns(request)
    messages += after
    conversation = h.Conversation.from_messages(messages)
    ids = harmony_encoding().render_conversation_for_completion(conversation, h.Role.ASSISTANT)
    return tuple(ids)


@functools.cache  # openai-harmony takes milliseconds to compute these
def stop_token_ids() -> tuple[int, ...]:
    """`<|return|>` and `<|call|>`: where an assistant turn ends."""
    return tuple(harmony_encoding().stop_tokens_for_assistant_actions())
