"""A Responses request as a gpt-oss prompt: the harmony conversation, rendered to token ids.

The layout is the one gpt-oss was trained on (openai-harmony's format guide, as vLLM's
Responses server builds it): a system message carrying the reasoning effort; a developer
message carrying `instructions` and the function tools (the `functions` namespace); then the
conversation. Earlier assistant turns go on the `final` channel, earlier function calls on
`commentary` addressed `to=functions.NAME`, and tool results come from `functions.NAME`.
`system`/`developer` messages of `input` are folded into the developer instructions, since
harmony has one system and one developer message per conversation. Server-side tools and the
tool items of earlier responses are rendered by `_harmony_tools.py`.

Speed: openai-harmony spends 0.2-0.7 ms in every render call, whatever its size (more than a
100-token stream's events cost the server), while its plain text encoding takes microseconds.
The common prompt, a head (system + developer message: the same for every request with the
same effort, instructions and tools) followed by user messages, is therefore rendered as the
head, kept rendered (`_HEADS` of them, short ones only), then each user message laid out as
harmony does (`<|start|>user<|message|>` + the text as ordinary text + `<|end|>`). A
differential test holds it equal to openai-harmony's render; any other prompt is rendered by
openai-harmony whole.
"""

from __future__ import annotations

import functools
import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import openai_harmony as h

from streamfold.engines.vocab import harmony_encoding
from streamfold.statemachine import (
    CustomTool,
    FormatJsonObject,
    FormatJsonSchema,
    FunctionTool,
    NamespaceTool,
    ToolSearchTool,
)
from streamfold.statemachine._grammars.chat_tools import FUNCTIONS, TOOL_SEARCH

from ..protocol import (
    AdditionalToolsInput,
    CreateRequest,
    CustomToolCallInput,
    CustomToolCallOutputInput,
    FunctionCallInput,
    FunctionCallOutputInput,
    MessageInput,
    ReasoningInput,
    ToolSearchCallInput,
    ToolSearchOutputInput,
    client_namespace,
)
from ._harmony_tools import history_messages, with_server_tools

__all__ = ["render_prompt", "search_function", "stop_token_ids"]

#: Responses efforts onto harmony's three: below `low` is `low`, above `high` is `high`.
EFFORT = {
    "none": "LOW",
    "minimal": "LOW",
    "low": "LOW",
    "medium": "MEDIUM",
    "high": "HIGH",
    "xhigh": "HIGH",
    "max": "HIGH",
}


def _system(request: CreateRequest, namespaces: Sequence[Any] = ()) -> Any:
    effort = (request.reasoning and request.reasoning.effort) or "medium"
    content = h.SystemContent.new().with_reasoning_effort(h.ReasoningEffort[EFFORT[effort]])
    # tool_choice "none": no tool is shown, server-side ones included.
    if request.tool_choice != "none":
        content = with_server_tools(content, namespaces)
    return h.Message.from_role_and_content(h.Role.SYSTEM, content)


def _developer(request: CreateRequest) -> Any | None:
    parts, tools = _developer_parts(request)
    formats = _response_formats(request)
    if not parts and not tools and formats is None:
        return None
    content = h.DeveloperContent.new()
    if parts:
        content = content.with_instructions("\n\n".join(parts))
    # A namespace tool named `functions` (Codex's code mode) is harmony's own namespace of
    # the client's tools: its tools join the request's functions, listed once.
    functions = [
        _described(inner)
        for tool in tools
        for inner in (tool.tools if client_namespace(tool) else (tool,))
        if not isinstance(inner, NamespaceTool)
    ]
    if functions:
        content = content.with_function_tools(functions)
    for tool in tools:
        if isinstance(tool, NamespaceTool) and not client_namespace(tool):
            content = content.with_tools(
                h.ToolNamespaceConfig(
                    name=tool.name,
                    description=tool.description or None,
                    tools=[_described(inner) for inner in tool.tools],
                )
            )
    if formats is None:
        return h.Message.from_role_and_content(h.Role.DEVELOPER, content)
    # harmony's place for a structured output: `# Response Formats` at the end of the
    # developer message, after its tools (openai/harmony docs/format.md), so the model is in
    # distribution; openai-harmony has no field for it, so it is a text content after them.
    lead = "\n\n" if parts or tools else ""
    return h.Message.from_role_and_contents(
        h.Role.DEVELOPER, [content, h.TextContent(text=lead + formats)]
    )


def _response_formats(request: CreateRequest) -> str | None:
    """The `# Response Formats` section for the request's `text.format`, or None. The grammar
    (`structured.harmony_grammar`) is what holds the answer to it."""
    fmt = request.text.format if request.text is not None else None
    if isinstance(fmt, FormatJsonSchema):
        about = f"// {fmt.description}\n" if fmt.description else ""
        return f"# Response Formats\n\n## {fmt.name}\n\n{about}" + json.dumps(
            fmt.schema, separators=(",", ":")
        )
    if isinstance(fmt, FormatJsonObject):
        return "# Response Formats\n\nAnswer with one JSON object."
    return None


def _described(tool: FunctionTool | CustomTool) -> Any:
    """A client tool as harmony describes it. A custom tool takes no JSON: its description
    says that the call's message is its raw input, and gives its grammar if it has one."""
    if isinstance(tool, FunctionTool):
        return h.ToolDescription.new(tool.name, tool.description or "", parameters=tool.parameters)
    return h.ToolDescription.new(tool.name, custom_description(tool))


def custom_description(tool: CustomTool) -> str:
    lines = [tool.description] if tool.description else []
    lines.append("Freeform tool: write its input as the message itself, plain text, not JSON.")
    if tool.format is not None and tool.format.type == "grammar":
        lines.append(f"The input must follow this {tool.format.syntax} grammar:")
        lines += tool.format.definition.splitlines()
    return "\n".join(lines)


def _developer_parts(request: CreateRequest) -> tuple[list[str], list[Any]]:
    """The developer message's instructions and function tools (see the module docstring)."""
    parts = [request.instructions] if request.instructions else []
    if isinstance(request.input, tuple):
        parts += [
            item.text
            for item in request.input
            if isinstance(item, MessageInput) and item.role in ("system", "developer")
        ]
    # tool_choice "none": the model must not call tools, so it is not shown any.
    if request.tool_choice == "none":
        return parts, []
    tools: list[Any] = list(request.client_tools)
    searches = [t for t in request.tools if isinstance(t, ToolSearchTool)]
    tools += [search_function(t) for t in searches if t.execution == "client"][:1]
    return parts, tools


#: What the model is told of a client's `tool_search` that says nothing itself.
SEARCH_DESCRIPTION = (
    "Search for more tools. The tools found are added to the ones you can call; call them "
    "by name once the search has returned."
)
SEARCH_PARAMETERS: dict[str, object] = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "what the tools should do"}},
    "required": ["query"],
}


def search_function(tool: ToolSearchTool) -> FunctionTool:
    """A client's `tool_search` as the function the model sees (`functions.tool_search`): its
    calls come back as `tool_search_call` items (the reducer routes them by the echoed tool)."""
    return FunctionTool(
        name=TOOL_SEARCH,
        description=tool.description or SEARCH_DESCRIPTION,
        parameters=tool.parameters or SEARCH_PARAMETERS,
    )


def _turns(request: CreateRequest) -> list[Any]:
    if isinstance(request.input, str):
        return [h.Message.from_role_and_content(h.Role.USER, request.input)]
    recipients: dict[str, str] = {}
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
        elif isinstance(item, FunctionCallInput | CustomToolCallInput):
            recipients[item.call_id] = item.recipient
            call = h.Message.from_role_and_content(
                h.Role.ASSISTANT,
                item.arguments if isinstance(item, FunctionCallInput) else item.input,
            )
            call = call.with_channel("commentary").with_recipient(item.recipient)
            if isinstance(item, FunctionCallInput):
                call = call.with_content_type("json")
            messages.append(call)
        elif isinstance(item, FunctionCallOutputInput | CustomToolCallOutputInput):
            author = h.Author.new(h.Role.TOOL, recipients[item.call_id])
            messages.append(
                h.Message.from_author_and_content(author, item.text)
                .with_channel("commentary")
                .with_recipient("assistant")
            )
        elif isinstance(item, AdditionalToolsInput):
            continue  # its tools are listed with the request's (`_developer_parts`)
        elif isinstance(item, ToolSearchCallInput):
            messages.append(
                h.Message.from_role_and_content(h.Role.ASSISTANT, _compact(item.arguments))
                .with_channel("commentary")
                .with_recipient(f"{FUNCTIONS}.{TOOL_SEARCH}")
                .with_content_type("json")
            )
        elif isinstance(item, ToolSearchOutputInput):
            # The tools themselves are listed with the request's (`_developer_parts`).
            loaded = _compact({"loaded": [tool.name for tool in item.tools]})
            author = h.Author.new(h.Role.TOOL, f"{FUNCTIONS}.{TOOL_SEARCH}")
            messages.append(
                h.Message.from_author_and_content(author, loaded)
                .with_channel("commentary")
                .with_recipient("assistant")
            )
        else:  # the agent loop's items (MCP and code interpreter calls, approvals, ...)
            messages += history_messages(item)
    return messages


def _compact(value: Any) -> str:
    """JSON as gpt-oss writes it: no spaces, text as it is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def render_prompt(
    request: CreateRequest, namespaces: Sequence[Any] = (), after: Sequence[Any] = ()
) -> tuple[int, ...]:
    """The prompt token ids for the assistant's next turn (ends with `<|start|>assistant`).

    `namespaces`: the server-side tools, as openai-harmony `ToolNamespaceConfig`s, for the system
    message. `after`: harmony messages that follow the input (an approved call and its result).
    """
    if not namespaces and not after:
        fast = _head_and_user_turns(request)
        if fast is not None:
            return fast
    return _harmony_render(request, namespaces, after)


def _harmony_render(
    request: CreateRequest, namespaces: Sequence[Any] = (), after: Sequence[Any] = ()
) -> tuple[int, ...]:
    """The whole prompt, rendered by openai-harmony (the reference)."""
    messages = [_system(request, namespaces)]
    developer = _developer(request)
    if developer is not None:
        messages.append(developer)
    messages += _turns(request)
    messages += after
    conversation = h.Conversation.from_messages(messages)
    # harmony drops the reasoning of turns that ended in an answer; `all_turns` keeps it.
    keep = request.reasoning is not None and request.reasoning.context == "all_turns"
    config = h.RenderConversationConfig(auto_drop_analysis=not keep)
    ids = harmony_encoding().render_conversation_for_completion(
        conversation, h.Role.ASSISTANT, config
    )
    return tuple(ids)


#: Rendered prompt heads kept (least recently used dropped first), and the longest head text
#: kept: a longer one (large instructions or tool schemas) is rendered every time.
_HEADS = 256
_HEAD_KEY_CHARS = 16384
_heads: OrderedDict[tuple[Any, ...], tuple[int, ...]] = OrderedDict()


def _head_and_user_turns(request: CreateRequest) -> tuple[int, ...] | None:
    """The prompt of a request whose turns are all user messages, or None for any other."""
    items = request.input
    if isinstance(items, str):
        texts = [items]
    else:
        texts = []
        for item in items:
            if not isinstance(item, MessageInput) or item.role == "assistant":
                return None
            if item.role == "user":
                texts.append(item.text)
    head = _head(request)
    if head is None:
        return None
    end, user, assistant = _layout()
    encode = harmony_encoding().encode
    ids = list(head)
    for text in texts:
        ids += user
        ids += encode(text, disallowed_special=())
        ids.append(end)
    ids += assistant
    return tuple(ids)


def _head(request: CreateRequest) -> tuple[int, ...] | None:
    """The system and developer messages rendered (kept for the next request like it)."""
    effort = (request.reasoning and request.reasoning.effort) or "medium"
    parts, tools = _developer_parts(request)
    described = tuple(_key(tool) for tool in tools)
    formats = _response_formats(request) or ""
    key = (effort, tuple(parts), described, formats)
    size = len(formats) + sum(map(len, parts))
    if size + sum(len(a) + len(b) + len(c) for a, b, c in described) > _HEAD_KEY_CHARS:
        return None
    ids = _heads.get(key)
    if ids is None:
        messages = [_system(request)]
        developer = _developer(request)
        if developer is not None:
            messages.append(developer)
        conversation = h.Conversation.from_messages(messages)
        ids = tuple(harmony_encoding().render_conversation(conversation))
        _heads[key] = ids
        if len(_heads) > _HEADS:
            _heads.popitem(last=False)
    else:
        _heads.move_to_end(key)
    return ids


def _key(tool: FunctionTool | CustomTool | NamespaceTool) -> tuple[str, str, str]:
    """What a tool adds to the prompt's head, as text (the kept heads' key)."""
    if isinstance(tool, FunctionTool):
        return tool.name, tool.description or "", json.dumps(tool.parameters)
    if isinstance(tool, CustomTool):
        return tool.name, "custom", custom_description(tool)
    inner = json.dumps([_key(t) for t in tool.tools])
    return tool.name, f"namespace {tool.description}", inner


@functools.cache
def _layout() -> tuple[int, list[int], list[int]]:
    """harmony's `<|end|>`, a user message's opening, and the completion's tail."""
    encoding = harmony_encoding()
    start, message, end = (
        encoding.encode(t, allowed_special="all")[0]
        for t in ("<|start|>", "<|message|>", "<|end|>")
    )
    user = [start, *encoding.encode("user", disallowed_special=()), message]
    assistant = [start, *encoding.encode("assistant", disallowed_special=())]
    return end, user, assistant


@functools.cache  # openai-harmony takes milliseconds to compute these
def stop_token_ids() -> tuple[int, ...]:
    """`<|return|>` and `<|call|>`: where an assistant turn ends."""
    return tuple(harmony_encoding().stop_tokens_for_assistant_actions())
