"""`POST /v1/responses` bodies as typed values, read strictly, with errors that name the field.

No HTTP stack needed: `streamfold record` renders prompts from these too.

The request shapes follow the Responses API (openai-python `response_create_params`): `input` is
a string or a list of items (messages with string or `input_text`/`output_text` content,
`function_call`, `function_call_output`, `reasoning`), tools are function tools. `include`
and `top_logprobs` ask for logprobs. Unknown top-level fields are ignored, as clients send
options this server does not act on (`user`, `text`, ...); a value of the wrong type is refused
with the OpenAI error JSON naming the field in `param`. `previous_response_id` is read here and
resolved by the server against its store (`server/_conversation.py`). Server-side tools
(`mcp`, `web_search_preview`, `code_interpreter`) and the agent loop's input items are typed in
`agent/_params.py` and `agent/_input.py`; they are read by the same converter, so their errors
name the field too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal, TypeAlias, get_args, get_origin

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn

from streamfold.statemachine import (
    FunctionTool,
    ReasoningConfig,
    StreamfoldError,
    ToolChoiceFunction,
)
from streamfold.statemachine._wire import json_type, strict_converter

from ..agent._input import AGENT_INPUT_TYPES, AgentInputItem
from ..agent._params import (
    SERVER_TOOL_TYPES,
    AllowedTools,
    AllowedToolsFilter,
    ApprovalFilterParam,
    Container,
    RequireApproval,
    ServerToolParam,
    check_server_tools,
)

__all__ = [
    "INCLUDABLE",
    "LOGPROBS_INCLUDE",
    "CreateRequest",
    "FunctionCallInput",
    "FunctionCallOutputInput",
    "InputItem",
    "MessageInput",
    "ReasoningInput",
    "RequestError",
    "RequestTool",
    "TextPart",
    "parse_create_request",
    "parse_input_items",
]


class RequestError(StreamfoldError, ValueError):
    """A request the server refuses; becomes the OpenAI error JSON with this HTTP status."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        status: int = 400,
        code: str | None = None,
        type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.code = code
        self.type = type

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


@attrs.frozen(kw_only=True)
class TextPart:
    """An `input_text` part, or an `output_text` part of an earlier assistant message."""

    type: Literal["input_text", "output_text"]
    text: str


@attrs.frozen(kw_only=True)
class MessageInput:
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | tuple[TextPart, ...]

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


@attrs.frozen(kw_only=True)
class FunctionCallInput:
    """A call the model made earlier (an item of a previous response's output)."""

    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str


@attrs.frozen(kw_only=True)
class FunctionCallOutputInput:
    """The caller's result for an earlier `function_call`, matched by `call_id`."""

    type: Literal["function_call_output"]
    call_id: str
    output: str | tuple[TextPart, ...]

    @property
    def text(self) -> str:
        if isinstance(self.output, str):
            return self.output
        return "".join(part.text for part in self.output)


@attrs.frozen(kw_only=True)
class ReasoningPart:
    type: Literal["reasoning_text", "summary_text"]
    text: str


@attrs.frozen(kw_only=True)
class ReasoningInput:
    """A reasoning item of a previous response, passed back in a tool-calling loop."""

    type: Literal["reasoning"]
    content: tuple[ReasoningPart, ...] | None = None
    summary: tuple[ReasoningPart, ...] = ()

    @property
    def text(self) -> str:
        return "".join(part.text for part in (self.content or self.summary))


#: The `include` value that asks for logprobs on output text.
LOGPROBS_INCLUDE = "message.output_text.logprobs"
#: Every value the API's `include` takes (openai `ResponseIncludable`); only the logprobs one
#: changes what this server sends, the others name data it has none of or always sends.
INCLUDABLE = frozenset(
    {
        "file_search_call.results",
        "web_search_call.results",
        "web_search_call.action.sources",
        "message.input_image.image_url",
        "computer_call_output.output.image_url",
        "code_interpreter_call.outputs",
        "reasoning.encrypted_content",
        LOGPROBS_INCLUDE,
    }
)
MAX_TOP_LOGPROBS = 20

InputItem: TypeAlias = (
    MessageInput | FunctionCallInput | FunctionCallOutputInput | ReasoningInput | AgentInputItem
)
RequestTool: TypeAlias = FunctionTool | ServerToolParam
ToolChoice: TypeAlias = Literal["auto", "none", "required"] | ToolChoiceFunction


@attrs.frozen(kw_only=True)
class CreateRequest:
    """The fields of `POST /v1/responses` this server acts on."""

    model: str
    input: str | tuple[InputItem, ...]
    instructions: str | None = None
    tools: tuple[RequestTool, ...] = ()
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool = True
    max_output_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    reasoning: ReasoningConfig | None = None
    metadata: dict[str, str] | None = None
    stream: bool | None = None
    background: bool | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    max_tool_calls: int | None = None
    include: tuple[str, ...] = ()
    top_logprobs: int | None = None

    @property
    def function_tools(self) -> tuple[FunctionTool, ...]:
        """The client-side tools (the model's calls to them end the response)."""
        return tuple(tool for tool in self.tools if isinstance(tool, FunctionTool))

    @property
    def server_tools(self) -> tuple[ServerToolParam, ...]:
        """The tools the server runs for the model (the agent loop's)."""
        return tuple(tool for tool in self.tools if not isinstance(tool, FunctionTool))

    @property
    def logprobs(self) -> bool:
        """Whether the answer's text carries logprobs (`include` asks for them)."""
        return LOGPROBS_INCLUDE in self.include


# --- the converter -------------------------------------------------------------------------

# The wire format's strict converter (scalars, objects), plus the request's own hooks below.
_converter = strict_converter(detailed_validation=True, forbid_extra_keys=False)
_json_type = json_type


def _exactly(tp: Any, hook: Any) -> None:
    _converter.register_structure_hook_func(lambda t: t == tp, hook)


def _metadata(value: Any, _: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
        raise TypeError("expected an object of string keys and string values")
    # The API's limits: 16 pairs, keys up to 64 characters, values up to 512.
    if len(value) > 16:
        raise ValueError(f"at most 16 keys are allowed, got {len(value)}")
    for key, text in value.items():
        if len(key) > 64:
            raise ValueError(f"keys must be at most 64 characters, got one of {len(key)}")
        if len(text) > 512:
            raise ValueError(
                f"values must be at most 512 characters; the value of {key!r} has {len(text)}"
            )
    return dict(value)


_REASONING_KEYS = frozenset({"effort", "summary", "generate_summary"})


def _reasoning(value: Any, _: Any) -> ReasoningConfig | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f'expected an object such as {{"effort": "low"}}, got {_json_type(value)}')
    unknown = sorted(set(value) - _REASONING_KEYS)
    if unknown:
        raise ValueError(
            f"unknown field {unknown[0]!r}; reasoning takes {', '.join(sorted(_REASONING_KEYS))}"
        )
    summary = value.get("summary", value.get("generate_summary"))
    return _reasoning_config({"effort": value.get("effort"), "summary": summary}, ReasoningConfig)


def _tools(value: Any, _: Any) -> tuple[RequestTool, ...]:
    if value is None:  # some clients send null for "no tools"
        return ()
    if not isinstance(value, list):
        raise TypeError(f"expected an array of tools, got {_json_type(value)}")
    return tuple(_converter.structure(value, list[RequestTool]))


def _text_or_parts(value: Any, tp: Any) -> Any:
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise TypeError(f"expected a string or an array of content parts, got {_json_type(value)}")
    return _converter.structure(value, tuple[TextPart, ...])


_ITEM_TYPES: dict[str, type] = {
    "message": MessageInput,
    "function_call": FunctionCallInput,
    "function_call_output": FunctionCallOutputInput,
    "reasoning": ReasoningInput,
    **AGENT_INPUT_TYPES,
}


def _input_item(value: Any, _: Any) -> Any:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected an object, got {_json_type(value)}")
    # Easy input messages (`{"role": "user", "content": "hi"}`) may leave out their type.
    tag = value.get("type", "message")
    cls = _ITEM_TYPES.get(tag)
    if cls is None:
        raise ValueError(
            f"unsupported input item type {tag!r}; supported: {', '.join(sorted(_ITEM_TYPES))}"
        )
    return _converter.structure(value, cls)


def _input(value: Any, _: Any) -> Any:
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise TypeError(f"expected a string or an array of input items, got {_json_type(value)}")
    return _converter.structure(value, tuple[InputItem, ...])


def _tool(value: Any, _: Any) -> RequestTool:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected an object, got {_json_type(value)}")
    tag = value.get("type")
    if tag == "function":
        return _function_tool(value, FunctionTool)
    if isinstance(tag, str) and tag in SERVER_TOOL_TYPES:
        structured: RequestTool = _converter.structure(value, SERVER_TOOL_TYPES[tag])
        return structured
    supported = ", ".join(sorted(("function", *SERVER_TOOL_TYPES)))
    raise ValueError(f"unsupported tool type {tag!r}; supported: {supported}")


def _names_or(kind: type) -> Any:
    # `allowed_tools` and `require_approval` take a list/string or an object.
    def hook(value: Any, _: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, Mapping):
            return _converter.structure(value, kind)
        if kind is AllowedToolsFilter:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise TypeError("expected an array of tool names or an object")
            return tuple(value)
        if value not in ("always", "never"):
            raise ValueError(f"expected 'always', 'never' or an object, got {value!r}")
        return value

    return hook


def _object(value: Any, _: Any) -> dict[str, object]:
    # The shared strict converter's object hook (an object, or an error naming what came).
    result: dict[str, object] = _converter.structure(value, dict[str, object])
    return result


def _container(value: Any, _: Any) -> Any:
    if value is None or isinstance(value, str):
        return value
    return _object(value, _)


def _tool_choice(value: Any, _: Any) -> Any:
    if isinstance(value, str):
        if value not in ("auto", "none", "required"):
            raise ValueError(f"expected 'auto', 'none', 'required' or an object, got {value!r}")
        return value
    if not isinstance(value, Mapping) or value.get("type") != "function":
        raise ValueError('expected a string or {"type": "function", "name": ...}')
    return _converter.structure(value, ToolChoiceFunction)


def _strings(value: Any, _: Any) -> tuple[str, ...]:
    # A bare string is a sequence too, but `"abc"` is not the array `["abc"]`.
    if not isinstance(value, list):
        raise TypeError(f"expected an array of strings, got {_json_type(value)}")
    strings: list[str] = _converter.structure(value, list[str])
    return tuple(strings)


_exactly(tuple[str, ...], _strings)
_function_tool = make_dict_structure_fn(FunctionTool, _converter)
_exactly(
    dict[str, object] | None,
    lambda v, _: None if v is None else _object(v, _),
)
_exactly(dict[str, str] | None, _metadata)
_exactly(str | tuple[TextPart, ...], _text_or_parts)
_exactly(str | tuple[InputItem, ...], _input)
_exactly(InputItem, _input_item)
_exactly(RequestTool, _tool)
_exactly(tuple[RequestTool, ...], _tools)
_exactly(AllowedTools, _names_or(AllowedToolsFilter))
_exactly(RequireApproval, _names_or(ApprovalFilterParam))
_exactly(Container, _container)
_reasoning_config = make_dict_structure_fn(ReasoningConfig, _converter)
_exactly(ReasoningConfig | None, _reasoning)
_exactly(ToolChoice, _tool_choice)


def _format(exc: BaseException, tp: Any) -> str:
    if isinstance(exc, KeyError):
        return "is required"
    literal = (
        tp
        if get_origin(tp) is Literal
        else next((arg for arg in get_args(tp) if get_origin(arg) is Literal), None)
    )
    if literal is not None and " not in literal " in str(exc):
        # cattrs says "x not in literal typing.Literal[...]"; say it as the API does.
        allowed = ", ".join(repr(v) for v in get_args(literal))
        return f"expected one of {allowed}, got {str(exc).split(' not in literal')[0]!r}"
    return str(exc)


def _param(path: str) -> str | None:
    path = path.removeprefix("$").removeprefix(".")
    return path or None


# --- semantic checks -----------------------------------------------------------------------


def _check(request: CreateRequest, earlier: tuple[InputItem, ...] = ()) -> None:
    if request.previous_response_id == "":
        raise RequestError("previous_response_id must not be empty", param="previous_response_id")
    if not request.model:
        raise RequestError("model must not be empty", param="model")
    if request.temperature is not None and not (0 <= request.temperature <= 2):
        raise RequestError(
            f"temperature must be between 0 and 2, got {request.temperature}", param="temperature"
        )
    if (request.top_p is not None and not (0 < request.top_p <= 1)) or (
        request.top_p is not None and math.isnan(request.top_p)
    ):
        raise RequestError(f"top_p must be in (0, 1], got {request.top_p}", param="top_p")
    if request.max_output_tokens is not None and request.max_output_tokens < 1:
        raise RequestError(
            f"max_output_tokens must be at least 1, got {request.max_output_tokens}",
            param="max_output_tokens",
        )
    for i, value in enumerate(request.include):
        if value not in INCLUDABLE:
            raise RequestError(
                f"include[{i}] must be one of {', '.join(sorted(INCLUDABLE))}; got {value!r}",
                param=f"include[{i}]",
            )
    if request.top_logprobs is not None and not 0 <= request.top_logprobs <= MAX_TOP_LOGPROBS:
        raise RequestError(
            f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {request.top_logprobs}",
            param="top_logprobs",
        )
    if request.background and request.store is False:
        raise RequestError(
            "background responses must be stored (they are polled and resumed later); drop "
            "store: false or background: true",
            param="store",
        )
    if request.max_tool_calls is not None and request.max_tool_calls < 1:
        raise RequestError(
            f"max_tool_calls must be at least 1, got {request.max_tool_calls}",
            param="max_tool_calls",
        )
    for param, message in check_server_tools(request.tools):
        raise RequestError(message, param=param)
    names = [tool.name for tool in request.function_tools]
    seen: set[str] = set()
    for i, tool in enumerate(request.tools):
        if not isinstance(tool, FunctionTool):
            continue
        if not tool.name or tool.name in seen:
            raise RequestError(
                f"tool names must be non-empty and unique, got {tool.name!r}",
                param=f"tools[{i}].name",
            )
        seen.add(tool.name)
    if (
        isinstance(request.tool_choice, ToolChoiceFunction)
        and request.tool_choice.name not in names
    ):
        raise RequestError(
            f"tool_choice names function {request.tool_choice.name!r}, which is not in tools",
            param="tool_choice.name",
        )
    if isinstance(request.input, tuple):
        calls = {item.call_id for item in earlier if isinstance(item, FunctionCallInput)}
        for i, item in enumerate(request.input):
            if isinstance(item, FunctionCallInput):
                calls.add(item.call_id)
            elif isinstance(item, FunctionCallOutputInput) and item.call_id not in calls:
                raise RequestError(
                    f"no function_call with call_id {item.call_id!r} comes before this output; "
                    "send the model's function_call item before its function_call_output",
                    param=f"input[{i}].call_id",
                )


def parse_create_request(body: Any, *, earlier: tuple[InputItem, ...] = ()) -> CreateRequest:
    """Read a decoded JSON body; raises `RequestError` naming the first bad field.

    `earlier` is the conversation before `input` that `previous_response_id` brought in: the
    request's `input` is `earlier` followed by the body's items, and an output in the body may
    answer a call made there. Errors still name the body's own positions.
    """
    if not isinstance(body, Mapping):
        raise RequestError(f"the request body must be a JSON object, got {_json_type(body)}")
    try:
        request = _converter.structure(body, CreateRequest)
    except cattrs.BaseValidationError as exc:
        first = cattrs.transform_error(exc, format_exception=_format)[0]
        message, _, path = first.rpartition(" @ ")
        param = _param(path)
        raise RequestError(f"invalid {param or 'request'}: {message}", param=param) from exc
    _check(request, earlier)
    if earlier:
        own = (
            (MessageInput(role="user", content=request.input),)
            if isinstance(request.input, str)
            else request.input
        )
        request = attrs.evolve(request, input=(*earlier, *own))
    return request


def parse_input_items(items: Any) -> tuple[InputItem, ...]:
    """Input items stored as wire JSON (a conversation a later request continues)."""
    try:
        structured: tuple[InputItem, ...] = _converter.structure(items, tuple[InputItem, ...])
    except cattrs.BaseValidationError as exc:
        raise RequestError(f"stored input items cannot be read: {exc}") from exc
    return structured
