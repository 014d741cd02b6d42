"""Reading `POST /v1/responses` bodies strictly: the request's hooks on the wire format's
strict converter, and the errors that name the field (`param`) a client got wrong."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, get_args, get_origin

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn

from streamfold.statemachine import (
    CustomTool,
    CustomToolFormat,
    CustomToolGrammar,
    CustomToolText,
    FunctionTool,
    NamespaceTool,
    ReasoningConfig,
)
from streamfold.statemachine._controls import TEXT_FORMAT_CLASSES, TextFormat
from streamfold.statemachine._wire import (
    json_type,
    read_tagged,
    read_tool_choice,
    strict_converter,
)

from ._checks import check_request
from ._errors import RequestError
from ._input import INPUT_ITEM_TYPES, InputItem, MessageInput, TextPart
from ._request import CreateRequest, RequestTool, ToolChoice
from ._tools import (
    HOSTED_TOOL_TYPES,
    SERVER_TOOL_TYPES,
    AllowedTools,
    AllowedToolsFilter,
    ApprovalFilterParam,
    Container,
    HostedToolParam,
    RequireApproval,
    ToolSearchParam,
)

__all__ = ["parse_create_request", "parse_input_items", "parse_item"]


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


_REASONING_KEYS = frozenset({"effort", "summary", "generate_summary", "context"})


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
    fields = {"effort": value.get("effort"), "summary": summary, "context": value.get("context")}
    return _reasoning_config(fields, ReasoningConfig)


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


def _input_item(value: Any, _: Any) -> Any:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected an object, got {_json_type(value)}")
    # Easy input messages (`{"role": "user", "content": "hi"}`) may leave out their type.
    tag = value.get("type", "message")
    cls = INPUT_ITEM_TYPES.get(tag)
    if cls is None:
        raise ValueError(
            f"unsupported input item type {tag!r}; supported: {', '.join(sorted(INPUT_ITEM_TYPES))}"
        )
    return _converter.structure(value, cls)


def _input(value: Any, _: Any) -> Any:
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise TypeError(f"expected a string or an array of input items, got {_json_type(value)}")
    return _converter.structure(value, tuple[InputItem, ...])


_CLIENT_TOOLS: dict[Any, type] = {
    "function": FunctionTool,
    "custom": CustomTool,
    "namespace": NamespaceTool,
}


def _tool(value: Any, _: Any) -> RequestTool:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected an object, got {_json_type(value)}")
    tag = value.get("type")
    if tag == "function":
        return _function_tool(value, FunctionTool)
    if isinstance(tag, str) and tag in _CLIENT_TOOLS:
        client: RequestTool = _converter.structure(value, _CLIENT_TOOLS[tag])
        return client
    if tag == "tool_search":
        return _converter.structure(value, ToolSearchParam)
    if isinstance(tag, str) and tag in HOSTED_TOOL_TYPES:
        return HostedToolParam(type=tag, spec=dict(value))
    if isinstance(tag, str) and tag in SERVER_TOOL_TYPES:
        structured: RequestTool = _converter.structure(value, SERVER_TOOL_TYPES[tag])
        return structured
    supported = ", ".join(
        sorted((*_CLIENT_TOOLS, "tool_search", *SERVER_TOOL_TYPES, *HOSTED_TOOL_TYPES))
    )
    raise ValueError(f"unsupported tool type {tag!r}; supported: {supported}")


def _tagged(choices: dict[Any, type], what: str) -> Any:
    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, Mapping):
            raise TypeError(f"expected an object, got {_json_type(value)}")
        cls = choices.get(value.get("type"))
        if cls is None:
            raise ValueError(
                f"unsupported {what} type {value.get('type')!r}; expected one of "
                + ", ".join(sorted(choices))
            )
        if cls is FunctionTool:
            return _function_tool(value, FunctionTool)
        return _converter.structure(value, cls)

    return hook


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
    # Every form the Response echoes, read by this strict converter (errors name the field).
    return read_tool_choice(value, _converter.structure)


def _text_format(value: Any, _: Any) -> Any:
    return read_tagged(value, TEXT_FORMAT_CLASSES, "text format", _converter.structure)


def _strings(value: Any, _: Any) -> tuple[str, ...]:
    # A bare string is a sequence too, but `"abc"` is not the array `["abc"]`.
    if not isinstance(value, list):
        raise TypeError(f"expected an array of strings, got {_json_type(value)}")
    strings: list[str] = _converter.structure(value, list[str])
    return tuple(strings)


_exactly(tuple[str, ...], _strings)
_exactly(
    CustomToolFormat | None,
    lambda v, t: (
        None
        if v is None
        else _tagged({"text": CustomToolText, "grammar": CustomToolGrammar}, "format")(v, t)
    ),
)
_exactly(
    FunctionTool | CustomTool,
    _tagged({"function": FunctionTool, "custom": CustomTool}, "namespace tool"),
)
_exactly(FunctionTool | CustomTool | NamespaceTool, _tagged(_CLIENT_TOOLS, "tool"))
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
_exactly(TextFormat, _text_format)


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
    check_request(request, earlier)
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


def parse_item(item: Any, *, param: str) -> InputItem:
    """One input item a request sends outside `input` (a conversation's `items`); raises
    `RequestError` naming the first bad field under `param` (`items[2].role`)."""
    try:
        structured: InputItem = _converter.structure(item, InputItem)  # type: ignore[arg-type]
    except cattrs.BaseValidationError as exc:
        first = cattrs.transform_error(exc, format_exception=_format)[0]
        message, _, path = first.rpartition(" @ ")
        where = param + path.removeprefix("$")
        raise RequestError(f"invalid {where}: {message}", param=where) from exc
    except (TypeError, ValueError) as exc:  # the item hook's own refusals (not an object, ...)
        raise RequestError(f"invalid {param}: {exc}", param=param) from exc
    return structured
