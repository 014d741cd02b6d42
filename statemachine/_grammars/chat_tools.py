"""The client's tools as a chat template model sees and calls them: one flat list of functions.

A chat template's `tools` are Chat Completions functions, one name each, and a Hermes
`<tool_call>` names one of them. The Responses API has more: `namespace` tools (Codex sends its
MCP servers' tools so, and code-mode models all of theirs in a namespace named `functions`),
`custom` tools whose input is free text, and a `tool_search` the client runs. This table says
what each becomes, and is read both ways: by the chat format to show the tools
(`adapters/formats/_chat_template.py`) and by the think-tag grammar to route a call back to its
item (as harmony's `client_call` routes a recipient), so the two cannot disagree.

| tool                                  | shown as the function      | its call is              |
|---------------------------------------|----------------------------|--------------------------|
| function `NAME`                       | `NAME`                     | `function_call` NAME     |
| custom `NAME`                         | `NAME`, one string `input` | `custom_tool_call` NAME  |
| namespace `NS`'s `NAME`               | `NS__NAME`                 | as above, namespace NS   |
| `functions`' `NAME` (code mode)       | `NAME`                     | as above, ns `functions` |
| `tool_search`, `execution: client`    | `tool_search`              | `tool_search_call`       |

`NS__NAME` is vLLM's flattening (`flat_namespace_tool_name`), so a model that was prompted by
vLLM's Responses server sees the same names here. A namespace named `functions` is harmony's
own namespace of the client's tools: its tools are shown under their own names, as the
request's are. A custom tool takes JSON like any function, `{"input": "..."}` (vLLM's shim); the
call's `input` is that string. A name the table does not hold is still a function call by that
name (a model that calls an undeclared function is answered as harmony's is, bug 52).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from .. import _model as m
from .._items import ItemKind

__all__ = [
    "CUSTOM_INPUT",
    "FUNCTIONS",
    "SEPARATOR",
    "TOOL_SEARCH",
    "FlatTool",
    "client_search",
    "custom_input",
    "flat_call",
    "flat_name",
    "flat_tools",
]

#: What joins a namespace's name and its tool's name (vLLM's).
SEPARATOR = "__"
#: harmony's namespace of the client's own tools: its tools keep their names (harmony's
#: `client_call` reads it too).
FUNCTIONS = "functions"
#: The function name a client-executed `tool_search` is shown as (to harmony models too).
TOOL_SEARCH = "tool_search"
#: The one parameter a custom tool is shown with.
CUSTOM_INPUT = "input"


def client_search(tool: object) -> bool:
    """Whether `tool` is a `tool_search` the client runs (the model may call it)."""
    return isinstance(tool, m.ToolSearchTool) and tool.execution == "client"


@attrs.frozen(kw_only=True)
class FlatTool:
    """One function a chat template model is shown: the name it calls (`flat`), the tool it
    stands for, the item kind its call becomes and the namespace that call names."""

    flat: str
    tool: m.FunctionTool | m.CustomTool | m.ToolSearchTool
    kind: ItemKind
    namespace: str | None = None

    @property
    def name(self) -> str | None:
        """The name the call item carries (None: a `tool_search_call` has none)."""
        return None if isinstance(self.tool, m.ToolSearchTool) else self.tool.name


def flat_name(namespace: str | None, name: str) -> str:
    """The function name a call of `name` in `namespace` (None: none) is shown as."""
    if namespace is None or namespace == FUNCTIONS:
        return name
    return f"{namespace}{SEPARATOR}{name}"


def _one(tool: m.FunctionTool | m.CustomTool, namespace: str | None) -> FlatTool:
    kind: ItemKind = "custom_tool_call" if isinstance(tool, m.CustomTool) else "function_call"
    return FlatTool(flat=flat_name(namespace, tool.name), tool=tool, kind=kind, namespace=namespace)


def flat_tools(tools: Iterable[Any]) -> Iterator[FlatTool]:
    """Each function `tools` (a Response's echoed tools, or a request's client tools and its
    `tool_search`) offers a chat template model, in order; other tools (hosted, MCP) offer none.
    Names may repeat (a function `a__b` and namespace `a`'s `b`): `flat_call` takes the first,
    and the chat format refuses such a request."""
    tools = tuple(tools)
    declared = set()
    for tool in tools:
        if isinstance(tool, m.FunctionTool | m.CustomTool):
            declared.add(tool.name)
            yield _one(tool, None)
        elif isinstance(tool, m.NamespaceTool):
            for inner in tool.tools:
                declared.add(flat_name(tool.name, inner.name))
                yield _one(inner, tool.name)
    if TOOL_SEARCH not in declared:
        for tool in tools:
            if client_search(tool):
                yield FlatTool(flat=TOOL_SEARCH, tool=tool, kind="tool_search_call")
                break


def flat_call(tools: Iterable[Any], called: str) -> FlatTool | None:
    """The tool a call of the function `called` stands for, or None (an undeclared function)."""
    return next((tool for tool in flat_tools(tools) if tool.flat == called), None)


def custom_input(arguments: str) -> str:
    """A custom tool's input from the JSON arguments its call was written with: the `input`
    string (or the one value of another key); anything else is kept as the model wrote it."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if isinstance(value, dict) and len(value) == 1:
        value = value.get(CUSTOM_INPUT, next(iter(value.values())))
    elif isinstance(value, dict) and CUSTOM_INPUT in value:
        value = value[CUSTOM_INPUT]
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    # A lone surrogate escape (`"\ud83d"`) decodes to a character no UTF-8 wire can carry.
    return _LONE_SURROGATE.sub("\ufffd", text)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
