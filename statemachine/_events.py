"""Every streaming event streamfold emits: one frozen attrs class per wire `type`.

Class names mirror openai-python (`ResponseTextDeltaEvent` is `response.output_text.delta`).
Every event carries `sequence_number`, assigned by the reducer when the event is made, never
patched afterwards (the `-1` placeholder bug of peers came from patching).
"""

from __future__ import annotations

from typing import Literal, TypeVar

import attrs

from ._model import (
    ContentPart,
    OutputItem,
    Response,
    SummaryText,
    TextLogprob,
)

__all__ = [
    "EVENT_TYPES",
    "TERMINAL_EVENT_TYPES",
    "Event",
    "ResponseCodeInterpreterCallCodeDeltaEvent",
    "ResponseCodeInterpreterCallCodeDoneEvent",
    "ResponseCodeInterpreterCallCompletedEvent",
    "ResponseCodeInterpreterCallInProgressEvent",
    "ResponseCodeInterpreterCallInterpretingEvent",
    "ResponseCompletedEvent",
    "ResponseContentPartAddedEvent",
    "ResponseContentPartDoneEvent",
    "ResponseCreatedEvent",
    "ResponseCustomToolCallInputDeltaEvent",
    "ResponseCustomToolCallInputDoneEvent",
    "ResponseErrorEvent",
    "ResponseFailedEvent",
    "ResponseFunctionCallArgumentsDeltaEvent",
    "ResponseFunctionCallArgumentsDoneEvent",
    "ResponseInProgressEvent",
    "ResponseIncompleteEvent",
    "ResponseMcpCallArgumentsDeltaEvent",
    "ResponseMcpCallArgumentsDoneEvent",
    "ResponseMcpCallCompletedEvent",
    "ResponseMcpCallFailedEvent",
    "ResponseMcpCallInProgressEvent",
    "ResponseMcpListToolsCompletedEvent",
    "ResponseMcpListToolsFailedEvent",
    "ResponseMcpListToolsInProgressEvent",
    "ResponseOutputItemAddedEvent",
    "ResponseOutputItemDoneEvent",
    "ResponseQueuedEvent",
    "ResponseReasoningSummaryPartAddedEvent",
    "ResponseReasoningSummaryPartDoneEvent",
    "ResponseReasoningSummaryTextDeltaEvent",
    "ResponseReasoningSummaryTextDoneEvent",
    "ResponseReasoningTextDeltaEvent",
    "ResponseReasoningTextDoneEvent",
    "ResponseRefusalDeltaEvent",
    "ResponseRefusalDoneEvent",
    "ResponseTextDeltaEvent",
    "ResponseTextDoneEvent",
    "ResponseWebSearchCallCompletedEvent",
    "ResponseWebSearchCallInProgressEvent",
    "ResponseWebSearchCallSearchingEvent",
]


_T = TypeVar("_T")


def _type(value: _T) -> _T:
    # The wire discriminator: fixed per class, not an __init__ argument. Typed as its value, so
    # `type: Literal["response.created"] = _type("response.created")` checks as it reads.
    return attrs.field(default=value, init=False)


# --- lifecycle -----------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ResponseCreatedEvent:
    type: Literal["response.created"] = _type("response.created")
    sequence_number: int
    response: Response


@attrs.frozen(kw_only=True)
class ResponseQueuedEvent:
    type: Literal["response.queued"] = _type("response.queued")
    sequence_number: int
    response: Response


@attrs.frozen(kw_only=True)
class ResponseInProgressEvent:
    type: Literal["response.in_progress"] = _type("response.in_progress")
    sequence_number: int
    response: Response


@attrs.frozen(kw_only=True)
class ResponseCompletedEvent:
    type: Literal["response.completed"] = _type("response.completed")
    sequence_number: int
    response: Response


@attrs.frozen(kw_only=True)
class ResponseIncompleteEvent:
    type: Literal["response.incomplete"] = _type("response.incomplete")
    sequence_number: int
    response: Response


@attrs.frozen(kw_only=True)
class ResponseFailedEvent:
    type: Literal["response.failed"] = _type("response.failed")
    sequence_number: int
    response: Response


@attrs.frozen(kw_only=True)
class ResponseErrorEvent:
    """The documented flat `error` event (the SDK yields it without raising)."""

    type: Literal["error"] = _type("error")
    sequence_number: int
    message: str
    code: str | None = None
    param: str | None = None


# --- items and parts -----------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ResponseOutputItemAddedEvent:
    type: Literal["response.output_item.added"] = _type("response.output_item.added")
    sequence_number: int
    output_index: int
    item: OutputItem


@attrs.frozen(kw_only=True)
class ResponseOutputItemDoneEvent:
    type: Literal["response.output_item.done"] = _type("response.output_item.done")
    sequence_number: int
    output_index: int
    item: OutputItem


@attrs.frozen(kw_only=True)
class ResponseContentPartAddedEvent:
    type: Literal["response.content_part.added"] = _type("response.content_part.added")
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: ContentPart


@attrs.frozen(kw_only=True)
class ResponseContentPartDoneEvent:
    type: Literal["response.content_part.done"] = _type("response.content_part.done")
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: ContentPart


# --- text, refusal, reasoning --------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ResponseTextDeltaEvent:
    type: Literal["response.output_text.delta"] = _type("response.output_text.delta")
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: tuple[TextLogprob, ...] = ()


@attrs.frozen(kw_only=True)
class ResponseTextDoneEvent:
    type: Literal["response.output_text.done"] = _type("response.output_text.done")
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: tuple[TextLogprob, ...] = ()


@attrs.frozen(kw_only=True)
class ResponseRefusalDeltaEvent:
    type: Literal["response.refusal.delta"] = _type("response.refusal.delta")
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str


@attrs.frozen(kw_only=True)
class ResponseRefusalDoneEvent:
    type: Literal["response.refusal.done"] = _type("response.refusal.done")
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    refusal: str


@attrs.frozen(kw_only=True)
class ResponseReasoningTextDeltaEvent:
    type: Literal["response.reasoning_text.delta"] = _type("response.reasoning_text.delta")
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str


@attrs.frozen(kw_only=True)
class ResponseReasoningTextDoneEvent:
    type: Literal["response.reasoning_text.done"] = _type("response.reasoning_text.done")
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    text: str


# --- reasoning summaries (gpt-oss has no summariser: the summary is the raw reasoning) -----


@attrs.frozen(kw_only=True)
class ResponseReasoningSummaryPartAddedEvent:
    type: Literal["response.reasoning_summary_part.added"] = _type(
        "response.reasoning_summary_part.added"
    )
    sequence_number: int
    item_id: str
    output_index: int
    summary_index: int
    part: SummaryText


@attrs.frozen(kw_only=True)
class ResponseReasoningSummaryPartDoneEvent:
    type: Literal["response.reasoning_summary_part.done"] = _type(
        "response.reasoning_summary_part.done"
    )
    sequence_number: int
    item_id: str
    output_index: int
    summary_index: int
    part: SummaryText


@attrs.frozen(kw_only=True)
class ResponseReasoningSummaryTextDeltaEvent:
    type: Literal["response.reasoning_summary_text.delta"] = _type(
        "response.reasoning_summary_text.delta"
    )
    sequence_number: int
    item_id: str
    output_index: int
    summary_index: int
    delta: str


@attrs.frozen(kw_only=True)
class ResponseReasoningSummaryTextDoneEvent:
    type: Literal["response.reasoning_summary_text.done"] = _type(
        "response.reasoning_summary_text.done"
    )
    sequence_number: int
    item_id: str
    output_index: int
    summary_index: int
    text: str


# --- function calls ------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ResponseFunctionCallArgumentsDeltaEvent:
    type: Literal["response.function_call_arguments.delta"] = _type(
        "response.function_call_arguments.delta"
    )
    sequence_number: int
    item_id: str
    output_index: int
    delta: str


@attrs.frozen(kw_only=True)
class ResponseFunctionCallArgumentsDoneEvent:
    type: Literal["response.function_call_arguments.done"] = _type(
        "response.function_call_arguments.done"
    )
    sequence_number: int
    item_id: str
    output_index: int
    arguments: str


@attrs.frozen(kw_only=True)
class ResponseCustomToolCallInputDeltaEvent:
    """A piece of a custom tool call's raw input (openai `ResponseCustomToolCallInputDelta`)."""

    type: Literal["response.custom_tool_call_input.delta"] = _type(
        "response.custom_tool_call_input.delta"
    )
    sequence_number: int
    item_id: str
    output_index: int
    delta: str


@attrs.frozen(kw_only=True)
class ResponseCustomToolCallInputDoneEvent:
    type: Literal["response.custom_tool_call_input.done"] = _type(
        "response.custom_tool_call_input.done"
    )
    sequence_number: int
    item_id: str
    output_index: int
    input: str


# --- built-in tools: browser → web_search_call, python → code_interpreter_call, other → mcp --


@attrs.frozen(kw_only=True)
class ResponseWebSearchCallInProgressEvent:
    type: Literal["response.web_search_call.in_progress"] = _type(
        "response.web_search_call.in_progress"
    )
    sequence_number: int
    item_id: str
    output_index: int


@attrs.frozen(kw_only=True)
class ResponseWebSearchCallSearchingEvent:
    type: Literal["response.web_search_call.searching"] = _type(
        "response.web_search_call.searching"
    )
    sequence_number: int
    item_id: str
    output_index: int


@attrs.frozen(kw_only=True)
class ResponseWebSearchCallCompletedEvent:
    type: Literal["response.web_search_call.completed"] = _type(
        "response.web_search_call.completed"
    )
    sequence_number: int
    item_id: str
    output_index: int


@attrs.frozen(kw_only=True)
class ResponseCodeInterpreterCallInProgressEvent:
    type: Literal["response.code_interpreter_call.in_progress"] = _type(
        "response.code_interpreter_call.in_progress"
    )
    sequence_number: int
    item_id: str
    output_index: int


@attrs.frozen(kw_only=True)
class ResponseCodeInterpreterCallInterpretingEvent:
    type: Literal["response.code_interpreter_call.interpreting"] = _type(
        "response.code_interpreter_call.interpreting"
    )
    sequence_number: int
    item_id: str
    output_index: int


@attrs.frozen(kw_only=True)
class ResponseCodeInterpreterCallCompletedEvent:
    type: Literal["response.code_interpreter_call.completed"] = _type(
        "response.code_interpreter_call.completed"
    )
    sequence_number: int
    item_id: str
    output_index: int


@attrs.frozen(kw_only=True)
class ResponseCodeInterpreterCallCodeDeltaEvent:
    type: Literal["response.code_interpreter_call_code.delta"] = _type(
        "response.code_interpreter_call_code.delta"
    )
    sequence_number: int
    item_id: str
    output_index: int
    delta: str


@attrs.frozen(kw_only=True)
class ResponseCodeInterpreterCallCodeDoneEvent:
    type: Literal["response.code_interpreter_call_code.done"] = _type(
        "response.code_interpreter_call_code.done"
    )
    sequence_number: int
    item_id: str
    output_index: int
    code: str


@attrs.frozen(kw_only=True)
class ResponseMcpCallArgumentsDeltaEvent:
    type: Literal["response.mcp_call_arguments.delta"] = _type("response.mcp_call_arguments.delta")
    sequence_number: int
    item_id: str
    output_index: int
    delta: str


@attrs.frozen(kw_only=True)
class ResponseMcpCallArgumentsDoneEvent:
    type: Literal["response.mcp_call_arguments.done"] = _type("response.mcp_call_arguments.done")
    sequence_number: int
    item_id: str
    output_index: int
    arguments: str


@attrs.frozen(kw_only=True)
class ResponseMcpCallInProgressEvent:
    type: Literal["response.mcp_call.in_progress"] = _type("response.mcp_call.in_progress")
    sequence_number: int
    item_id: str
    output_index: int


@attrs.frozen(kw_only=True)
class ResponseMcpCallCompletedEvent:
    type: Literal["response.mcp_call.completed"] = _type("response.mcp_call.completed")
    sequence_number: int
    item_id: str
    output_index: int


@attrs.frozen(kw_only=True)
class ResponseMcpCallFailedEvent:
    type: Literal["response.mcp_call.failed"] = _type("response.mcp_call.failed")
    sequence_number: int
    item_id: str
    output_index: int


@attrs.frozen(kw_only=True)
class ResponseMcpListToolsInProgressEvent:
    type: Literal["response.mcp_list_tools.in_progress"] = _type(
        "response.mcp_list_tools.in_progress"
    )
    sequence_number: int
    item_id: str
    output_index: int


@attrs.frozen(kw_only=True)
class ResponseMcpListToolsCompletedEvent:
    type: Literal["response.mcp_list_tools.completed"] = _type("response.mcp_list_tools.completed")
    sequence_number: int
    item_id: str
    output_index: int


@attrs.frozen(kw_only=True)
class ResponseMcpListToolsFailedEvent:
    type: Literal["response.mcp_list_tools.failed"] = _type("response.mcp_list_tools.failed")
    sequence_number: int
    item_id: str
    output_index: int


Event = (
    ResponseCreatedEvent
    | ResponseQueuedEvent
    | ResponseInProgressEvent
    | ResponseCompletedEvent
    | ResponseIncompleteEvent
    | ResponseFailedEvent
    | ResponseErrorEvent
    | ResponseOutputItemAddedEvent
    | ResponseOutputItemDoneEvent
    | ResponseContentPartAddedEvent
    | ResponseContentPartDoneEvent
    | ResponseTextDeltaEvent
    | ResponseTextDoneEvent
    | ResponseRefusalDeltaEvent
    | ResponseRefusalDoneEvent
    | ResponseReasoningTextDeltaEvent
    | ResponseReasoningTextDoneEvent
    | ResponseReasoningSummaryPartAddedEvent
    | ResponseReasoningSummaryPartDoneEvent
    | ResponseReasoningSummaryTextDeltaEvent
    | ResponseReasoningSummaryTextDoneEvent
    | ResponseFunctionCallArgumentsDeltaEvent
    | ResponseFunctionCallArgumentsDoneEvent
    | ResponseCustomToolCallInputDeltaEvent
    | ResponseCustomToolCallInputDoneEvent
    | ResponseWebSearchCallInProgressEvent
    | ResponseWebSearchCallSearchingEvent
    | ResponseWebSearchCallCompletedEvent
    | ResponseCodeInterpreterCallInProgressEvent
    | ResponseCodeInterpreterCallInterpretingEvent
    | ResponseCodeInterpreterCallCompletedEvent
    | ResponseCodeInterpreterCallCodeDeltaEvent
    | ResponseCodeInterpreterCallCodeDoneEvent
    | ResponseMcpCallArgumentsDeltaEvent
    | ResponseMcpCallArgumentsDoneEvent
    | ResponseMcpCallInProgressEvent
    | ResponseMcpCallCompletedEvent
    | ResponseMcpCallFailedEvent
    | ResponseMcpListToolsInProgressEvent
    | ResponseMcpListToolsCompletedEvent
    | ResponseMcpListToolsFailedEvent
)

#: wire `type` -> event class, for reading events back.
EVENT_TYPES: dict[str, type[Event]] = {
    attrs.fields_dict(cls)["type"].default: cls  # type: ignore[misc]
    for cls in Event.__args__
}

TERMINAL_EVENT_TYPES = frozenset({"response.completed", "response.incomplete", "response.failed"})
