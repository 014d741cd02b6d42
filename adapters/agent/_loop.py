"""The agent loop: many generations, one response, tools run by the server in between.

Theory of operation
-------------------
`AgentGeneration` has the driver's `Generation` surface (`batches()`, `close()`, `finished`),
so the server runs an agent response exactly as any other: the same backpressure, the same
cancellation, the same log. It makes no protocol decision; the reducer's pure calls do
(`start`, `list_tools`, `step`, `pending_call`, `tool_result`, `approved_call`,
`next_generation`, `finish`). The phases:

1. *Listing* (I/O, before `start`): each MCP server's tools, all servers at once. A server
   that fails is listed with its error and not offered to the model; the response goes on.
2. *Start*: `start(..., server_tools=...)`, then one `list_tools` per MCP server.
3. *Approvals*: each approved `mcp_approval_response` of the request runs its call
   (`approved_call` → tool → `tool_result`); a declined one tells the model so.
4. *Generations*: generate from the prompt; a generation that ends in a server-side call
   leaves that call pending: run the tool, `tool_result`, append the generated tokens and the
   tool's message to the prompt (`_render.continuation`), `next_generation`, generate again.
   No pending call: `finish(stop)` (an approval request also ends here).

Limits: calls beyond `max_tool_calls` are not run (the item's error says so and the model reads
it, as the API ignores further calls); after `max_iterations` tool rounds a still-pending call
gets that error and the response ends `incomplete` (`LIMIT_REASON`). A tool that fails or
times out is an error result, never an exception. Cancellation (client gone, cancel, shutdown)
propagates through a running tool, which stops (the python tool kills its processes); the
server then closes the response with `close("abort", ...)`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import attrs

from streamfold.engines import GenerationRequest, TokenChunk, TokenSource
from streamfold.statemachine import (
    CodeInterpreterOutputLogs,
    Event,
    FinishReason,
    Grammar,
    McpServer,
    McpToolInfo,
    Response,
    ResponseState,
    ServerTools,
    approved_call,
    finish,
    list_tools,
    next_generation,
    pending_call,
    start,
    step,
    tool_result,
)

from ..driver import MAX_BATCH_CHUNKS, NO_FINISH, Generation, close_source
from ..formats import (
    call_channel,
    call_message,
    call_token,
    continuation,
    message_end_tokens,
    render_prompt,
    tool_message,
)
from ..protocol import CreateRequest
from ._config import AgentRun
from ._mcp import describe_error
from ._tool import ListedTool, ToolInfo, ToolResult, run_tool

__all__ = ["LIMIT_REASON", "AgentGeneration", "generation_for"]

#: How a response that hit the server's tool-round limit ends (see the module docstring).
LIMIT_REASON: FinishReason = "tool_limit"


def _tokens(chunk: TokenChunk) -> Iterator[tuple[int, float | None, Any]]:
    logprobs = chunk.logprobs or (None,) * len(chunk.token_ids)
    tops = chunk.top_logprobs or (None,) * len(chunk.token_ids)
    return zip(chunk.token_ids, logprobs, tops, strict=True)


@attrs.define
class _Outcome:
    reason: FinishReason = "error"
    message: str | None = NO_FINISH
    generated: list[int] = attrs.Factory(list)


class AgentGeneration:
    """One agent response: its tools, its prompt, and the reducer state between calls."""

    def __init__(
        self,
        source: TokenSource,
        request: CreateRequest,
        generation: GenerationRequest,
        grammar: Grammar,
        response: Response,
        run: AgentRun,
        *,
        record: list[Any] | None = None,
    ) -> None:
        self.source = source
        self.request = request
        self.generation = generation
        self.grammar = grammar
        self.response = response
        self.run = run
        self.state: ResponseState | None = None
        self.calls = 0  # tool calls run (max_tool_calls counts these)
        self.rounds = 0  # generations that ended in a server-side call
        # When recording (`streamfold record`): every chunk as the reducer took it and every
        # loop step, in order; `server_tools` as given to `start`; `finished` the last finish.
        self.record = record
        self.server_tools: Any = None
        self.finished_with: tuple[FinishReason, str | None] | None = None

    @property
    def finished(self) -> bool:
        return self.state is not None and self.state.finished

    def close(self, reason: FinishReason, message: str | None = None) -> list[Event]:
        """Finish the response now (if it is not finished) and return its closing events."""
        events: list[Event] = []
        if self.state is None:
            self.state, events = start(self.grammar, self.response)
        if self.state.finished:
            return events
        self.state, closing = finish(self.state, reason, message)
        self.finished_with = (reason, message)
        return events + closing

    # --- phases -------------------------------------------------------------------------

    async def _list(self) -> dict[str, tuple[ToolInfo, ...] | str]:
        listed: dict[str, tuple[ToolInfo, ...] | str] = {}

        async def one(tool: ListedTool) -> None:
            try:
                with anyio.fail_after(self.run.limits.call_seconds):
                    listed[tool.namespace] = await tool.list_tools()
            except TimeoutError:
                listed[tool.namespace] = (
                    f"listing the tools of MCP server {tool.namespace!r} took longer than "
                    f"{self.run.limits.call_seconds:g} s"
                )
            except Exception as exc:  # ToolListError, or a connector's own failure
                listed[tool.namespace] = describe_error(exc)

        async with anyio.create_task_group() as group:
            for tool in self.run.mcp:
                group.start_soon(one, tool)
        return listed

    def _start(self, listed: dict[str, tuple[ToolInfo, ...] | str]) -> list[Event]:
        mcp = []
        for tool in self.run.mcp:
            tools = listed[tool.namespace]
            names = () if isinstance(tools, str) else tuple(t.name for t in tools)
            needing = frozenset(name for name in names if tool.needs_approval(name))
            # "always" also covers a name the model invents (it is refused once approved).
            policy: Any = needing
            if not needing:
                policy = "never"
            elif needing == frozenset(names):
                policy = "always"
            mcp.append(McpServer(server_label=tool.namespace, require_approval=policy))
        server_tools = ServerTools(
            browser=self.run.tool("browser") is not None,
            python=self.run.tool("python") is not None,
            mcp=tuple(mcp),
        )
        self.server_tools = server_tools
        self.state, events = start(
            self.grammar, self.response, input_tokens=0, server_tools=server_tools
        )
        for tool in self.run.mcp:
            tools = listed[tool.namespace]
            error = tools if isinstance(tools, str) else None
            infos = () if isinstance(tools, str) else tuple(_info(t) for t in tools)
            events += self._apply(
                "list_tools", server_label=tool.namespace, tools=infos, error=error
            )
        return events

    def _apply(self, kind: str, **fields: Any) -> list[Event]:
        """One step of the loop on the reducer (`list_tools`, `approved_call`, `tool_result`,
        `next_generation`), kept in `record` when recording (a trace replays them in order)."""
        if self.record is not None:
            self.record.append((kind, fields))
        assert self.state is not None
        if kind == "next_generation":
            self.state = next_generation(self.state, **fields)
            return []
        self.state, events = _STEPS[kind](self.state, **fields)
        return list(events)

    async def _run_call(self, call: Any) -> ToolResult:
        """The tool's result for a pending call (an error result when it cannot run)."""
        if self.calls >= self.run.max_tool_calls:
            return ToolResult(
                error=f"max_tool_calls ({self.run.max_tool_calls}) reached: this call was not "
                "run; answer with what you have"
            )
        namespace, _, name = call.recipient.partition(".")
        if call.kind == "mcp_call":
            namespace, name = call.server_label, call.name
        tool = self.run.tool(namespace)
        if tool is None:
            return ToolResult(error=f"no tool {call.recipient!r} is offered to this response")
        self.calls += 1
        return await run_tool(tool, name or None, call.arguments, self.run.limits)

    def _answer(self, call: Any, result: ToolResult) -> list[Event]:
        assert self.state is not None
        outputs = None
        if call.kind == "code_interpreter_call":
            logs = result.logs if result.logs is not None else result.text
            outputs = (CodeInterpreterOutputLogs(logs=logs),)
        if result.error is not None:
            return self._apply(
                "tool_result", item_id=call.item_id, error=result.error, outputs=outputs
            )
        output = result.output or ""
        return self._apply("tool_result", item_id=call.item_id, output=output, outputs=outputs)

    async def _generate(
        self, prompt: tuple[int, ...], outcome: _Outcome
    ) -> AsyncIterator[list[Event]]:
        """One generation: its events, one batch per source chunk, or per run of up to
        `MAX_BATCH_CHUNKS` chunks the source had ready at once (`ReadyChunks`, as `Generation`
        does); the outcome in `outcome`."""
        limit = self.request.max_output_tokens
        assert self.state is not None
        if limit is not None and self.state.output_tokens >= limit:
            outcome.reason, outcome.message = "length", None
            return
        request = attrs.evolve(
            self.generation,
            request_id=f"{self.generation.request_id}-{self.rounds}",
            prompt_token_ids=prompt,
            max_output_tokens=None if limit is None else limit - self.state.output_tokens,
        )
        pending: list[Event] = []
        chunks: AsyncIterator[TokenChunk] | None = None
        try:
            chunks = self.source.generate(request)
            take: Callable[[int], list[TokenChunk]] | None = getattr(chunks, "take_ready", None)
            async for chunk in chunks:
                ready = [chunk]
                if take is not None and chunk.finish_reason is None:
                    ready += take(MAX_BATCH_CHUNKS - 1)
                # Chunk by chunk: a generation that ends mid-batch (a call's end) takes none
                # of the chunks after it, as it would not have read them one at a time.
                if any(self._feed(taken, outcome, pending) for taken in ready):
                    break
                if pending:
                    yield pending
                    pending = []
        except Exception as exc:  # the engine failed: report it in-band, keep what was sent
            outcome.reason = "error"
            outcome.message = f"generation failed: {type(exc).__name__}: {exc}"
        finally:
            if chunks is not None:
                await close_source(chunks)
        if pending:
            yield pending

    def _feed(self, chunk: TokenChunk, outcome: _Outcome, pending: list[Event]) -> bool:
        """Step one chunk's tokens; True when the generation is over."""
        ends = message_end_tokens()
        tokens = list(_tokens(chunk))
        stop = chunk.stop_reason
        if chunk.finish_reason == "stop" and isinstance(stop, int) and stop in ends:
            # An engine that leaves its stop token out of the output (it names it in
            # stop_reason): the reducer needs that <|call|> to see the call end.
            taken = [token for token, _, _ in tokens] or outcome.generated
            if not taken or taken[-1] != stop:
                tokens.append((stop, None, None))
        stepped = 0
        over = False
        for token, logprob, top in tokens:
            assert self.state is not None
            self.state, produced = step(self.state, token, logprob, top)
            outcome.generated.append(token)
            pending.extend(produced)
            stepped += 1
            # A call ended by <|end|> (not a stop token) leaves the engine running: the
            # generation ends here all the same (the reducer takes no token while it is
            # pending), and closing the source stops the engine.
            if token in ends and pending_call(self.state) is not None:
                outcome.reason, outcome.message = "stop", None
                over = True
                break
        if not over and chunk.finish_reason is not None:
            outcome.reason, outcome.message = chunk.finish_reason, chunk.error
            over = True
        if self.record is not None and stepped:
            self.record.append(_stepped(tokens[:stepped]))  # what the reducer took, no more
        return over

    async def _approvals(self) -> AsyncIterator[tuple[list[Event], list[Any]]]:
        """Run each approved call (events) and give the messages the model reads after its
        input: the call, and its result or the refusal."""
        for approval in self.run.approvals:
            asked = approval.request
            recipient = f"{asked.server_label}.{asked.name}"
            if not approval.approve:
                reason = f": {approval.reason}" if approval.reason else ""
                text = f"Error: the user declined this call{reason}"
                yield [], [call_message(recipient, asked.arguments), tool_message(recipient, text)]
                continue
            assert self.state is not None
            events = self._apply(
                "approved_call",
                approval_request_id=asked.id,
                server_label=asked.server_label,
                name=asked.name,
                arguments=asked.arguments,
            )
            yield events, []
            call = pending_call(self.state)
            result = await self._run_call(call)
            messages = [
                call_message(recipient, asked.arguments),
                tool_message(recipient, result.text),
            ]
            yield self._answer(call, result), messages

    async def batches(self) -> AsyncGenerator[list[Event], None]:
        """The response's events, in batches (see the module docstring)."""
        listed = await self._list()
        yield self._start(listed)
        namespaces = [
            tool.describe()
            for tool in (*self.run.builtins, *self.run.mcp)
            if not isinstance(listed.get(tool.namespace), str)
        ]
        after: list[Any] = []
        async for events, messages in self._approvals():
            after += messages
            if events:
                yield events
        prompt = render_prompt(self.request, namespaces, after)
        assert self.state is not None
        self._apply("next_generation", input_tokens=len(prompt))
        while True:
            outcome = _Outcome()
            async for batch in self._generate(prompt, outcome):
                yield batch
            assert self.state is not None
            call = pending_call(self.state)
            if outcome.reason != "stop" or call is None:
                yield self.close(outcome.reason, outcome.message)
                return
            if self.rounds >= self.run.max_iterations:
                limit = (
                    f"this response reached the server's limit of {self.run.max_iterations} "
                    "tool rounds; the call was not run"
                )
                events = self._answer(call, ToolResult(error=limit))
                yield events + self.close(LIMIT_REASON, limit)
                return
            self.rounds += 1
            result = await self._run_call(call)
            yield self._answer(call, result)
            # The call as harmony renders it: ended by <|call|> (an engine may have left its
            # stop token out, or the model ended the call with <|end|>).
            generated = outcome.generated
            if generated and generated[-1] in message_end_tokens():
                generated = generated[:-1]
            generated = [*generated, call_token()]
            channel = call_channel(outcome.generated, call.recipient)
            message = tool_message(call.recipient, result.text, channel)
            prompt = (*prompt, *generated, *continuation(message))
            self._apply("next_generation", input_tokens=len(prompt))


_STEPS: dict[str, Any] = {
    "list_tools": list_tools,
    "approved_call": approved_call,
    "tool_result": tool_result,
}


def _stepped(tokens: list[tuple[int, float | None, Any]]) -> TokenChunk:
    logprobs = [logprob for _, logprob, _ in tokens]
    tops = [top for _, _, top in tokens]
    return TokenChunk(
        token_ids=tuple(token for token, _, _ in tokens),
        logprobs=None if None in logprobs else tuple(logprobs),  # type: ignore[arg-type]
        top_logprobs=None if None in tops else tuple(tops),
    )


def _info(tool: ToolInfo) -> McpToolInfo:
    return McpToolInfo(
        name=tool.name,
        description=tool.description,
        input_schema=tool.input_schema,
        annotations=tool.annotations,
    )


def generation_for(
    source: TokenSource,
    request: CreateRequest,
    generation: GenerationRequest,
    grammar: Grammar,
    response: Response,
    agent: AgentRun | None,
    *,
    clock: Callable[[], float] | None = None,
) -> Generation | AgentGeneration:
    """The driver's plain `Generation`, or the agent loop when the request has server tools.

    `clock` stamps `completed_at` on a plain generation's completed response."""
    if agent is None:
        return Generation(source, generation, grammar, response, clock=clock)
    return AgentGeneration(source, request, generation, grammar, response, agent)
