"""The checks of a typed request that its types cannot say, each naming its `param`."""

from __future__ import annotations

import math

from streamfold.statemachine import FunctionTool, ToolChoiceFunction

from ._controls import control_problems
from ._errors import RequestError
from ._input import FunctionCallInput, FunctionCallOutputInput, InputItem
from ._request import INCLUDABLE, MAX_TOP_LOGPROBS, CreateRequest
from ._tools import check_server_tools

__all__ = ["check_request"]


def check_request(request: CreateRequest, earlier: tuple[InputItem, ...] = ()) -> None:
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
    for param, message in control_problems(request):
        raise RequestError(message, param=param)
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
