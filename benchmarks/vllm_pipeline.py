"""The peer every streamfold benchmark compares with: harmony tokens -> Responses events the way
vLLM's serving layer makes them (openai-harmony's `StreamableParser`, its deltas read after every
token, the openai SDK's pydantic event classes, `model_dump_json` per event).

It imports only openai-harmony and the openai SDK (never streamfold), so a peer process pays
exactly the start-up a vLLM-style server or tool pays. Used by `bench_reducer.py` (in process),
`bench_cli.py` (a whole process over a trace file) and `bench_server.py` (a Starlette server).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from openai.types.responses import Response as SDKResponse
from openai.types.responses import (
    ResponseCompletedEvent,
    ResponseContentPartAddedEvent,
    ResponseContentPartDoneEvent,
    ResponseCreatedEvent,
    ResponseInProgressEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
    ResponseReasoningTextDeltaEvent,
    ResponseReasoningTextDoneEvent,
    ResponseTextDeltaEvent,
    ResponseTextDoneEvent,
)
from openai.types.responses.response_reasoning_item import Content
from openai_harmony import HarmonyEncodingName, Role, StreamableParser, load_harmony_encoding

__all__ = ["HarmonyEvents", "harmony_encoding", "vllm_style_sse"]

_ENCODING: list[Any] = []


def harmony_encoding() -> Any:
    """o200k_harmony, loaded once per process (the caller sets TIKTOKEN_ENCODINGS_BASE)."""
    if not _ENCODING:
        _ENCODING.append(load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS))
    return _ENCODING[0]


class HarmonyEvents:
    """One response: feed it tokens, get the openai SDK's pydantic events (vLLM's way)."""

    def __init__(self, response_id: str = "resp_peer", model: str = "peer") -> None:
        self.parser = StreamableParser(harmony_encoding(), Role.ASSISTANT)
        self.response_id, self.model = response_id, model
        self.seq, self.index = 0, -1
        self.current: str | None = None
        self.text: list[str] = []
        self.output: list[Any] = []

    def _response(self, status: str) -> SDKResponse:
        return SDKResponse(
            id=self.response_id,
            object="response",
            created_at=0,
            model=self.model,
            status=status,  # type: ignore[arg-type]
            output=list(self.output),
            parallel_tool_calls=True,
            tool_choice="auto",
            tools=[],
        )

    def _seq(self) -> int:
        self.seq += 1
        return self.seq - 1

    def start(self) -> list[Any]:
        return [
            ResponseCreatedEvent(
                type="response.created",
                response=self._response("in_progress"),
                sequence_number=self._seq(),
            ),
            ResponseInProgressEvent(
                type="response.in_progress",
                response=self._response("in_progress"),
                sequence_number=self._seq(),
            ),
        ]

    def _close_item(self) -> list[Any]:
        joined = "".join(self.text)
        item_id, index = f"item_{self.index}", self.index
        if self.current == "analysis":
            item: Any = ResponseReasoningItem(
                type="reasoning",
                id=item_id,
                summary=[],
                content=[Content(type="reasoning_text", text=joined)],
                status="completed",
            )
            self.output.append(item)
            return [
                ResponseReasoningTextDoneEvent(
                    type="response.reasoning_text.done",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    text=joined,
                    sequence_number=self._seq(),
                ),
                ResponseOutputItemDoneEvent(
                    type="response.output_item.done",
                    output_index=index,
                    sequence_number=self._seq(),
                    item=item,
                ),
            ]
        part = ResponseOutputText(type="output_text", text=joined, annotations=[], logprobs=[])
        item = ResponseOutputMessage(
            type="message", id=item_id, role="assistant", status="completed", content=[part]
        )
        self.output.append(item)
        return [
            ResponseTextDoneEvent(
                type="response.output_text.done",
                item_id=item_id,
                output_index=index,
                content_index=0,
                text=joined,
                logprobs=[],
                sequence_number=self._seq(),
            ),
            ResponseContentPartDoneEvent(
                type="response.content_part.done",
                item_id=item_id,
                output_index=index,
                content_index=0,
                part=part,
                sequence_number=self._seq(),
            ),
            ResponseOutputItemDoneEvent(
                type="response.output_item.done",
                output_index=index,
                sequence_number=self._seq(),
                item=item,
            ),
        ]

    def _open_item(self, channel: str) -> list[Any]:
        events = self._close_item() if self.current is not None else []
        self.current, self.index, self.text = channel, self.index + 1, []
        item_id = f"item_{self.index}"
        if channel == "analysis":
            events.append(
                ResponseOutputItemAddedEvent(
                    type="response.output_item.added",
                    output_index=self.index,
                    sequence_number=self._seq(),
                    item=ResponseReasoningItem(
                        type="reasoning", id=item_id, summary=[], status="in_progress"
                    ),
                )
            )
            return events
        events.append(
            ResponseOutputItemAddedEvent(
                type="response.output_item.added",
                output_index=self.index,
                sequence_number=self._seq(),
                item=ResponseOutputMessage(
                    type="message", id=item_id, role="assistant", status="in_progress", content=[]
                ),
            )
        )
        events.append(
            ResponseContentPartAddedEvent(
                type="response.content_part.added",
                item_id=item_id,
                output_index=self.index,
                content_index=0,
                sequence_number=self._seq(),
                part=ResponseOutputText(type="output_text", text="", annotations=[], logprobs=[]),
            )
        )
        return events

    def feed(self, token: int) -> list[Any]:
        """What vLLM does per token: process it, read the parser, build pydantic events."""
        parser = self.parser
        parser.process(token)
        channel = parser.current_channel
        delta = parser.last_content_delta
        events: list[Any] = []
        if channel is not None and channel != self.current and delta is not None:
            events = self._open_item(channel)
        if delta:
            self.text.append(delta)
            if self.current == "analysis":
                events.append(
                    ResponseReasoningTextDeltaEvent(
                        type="response.reasoning_text.delta",
                        item_id=f"item_{self.index}",
                        output_index=self.index,
                        content_index=0,
                        delta=delta,
                        sequence_number=self._seq(),
                    )
                )
            else:
                events.append(
                    ResponseTextDeltaEvent(
                        type="response.output_text.delta",
                        item_id=f"item_{self.index}",
                        output_index=self.index,
                        content_index=0,
                        delta=delta,
                        logprobs=[],
                        sequence_number=self._seq(),
                    )
                )
        return events

    def finish(self) -> list[Any]:
        events = self._close_item() if self.current is not None else []
        events.append(
            ResponseCompletedEvent(
                type="response.completed",
                response=self._response("completed"),
                sequence_number=self._seq(),
            )
        )
        return events


def sse(event: Any) -> bytes:
    """One SSE frame the way vLLM writes it: `model_dump_json` per event."""
    return f"event: {event.type}\ndata: {event.model_dump_json()}\n\n".encode()


def vllm_style_sse(tokens: Iterable[int]) -> int:
    """Every token of one response through the pipeline; the bytes of SSE it makes."""
    stream = HarmonyEvents()
    size = sum(len(sse(event)) for event in stream.start())
    for token in tokens:
        for event in stream.feed(token):
            size += len(sse(event))
    return size + sum(len(sse(event)) for event in stream.finish())
