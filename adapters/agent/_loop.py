"""The agent loop: many generations, one response, tools run by the server in between.

Theory of operation
-------------------
`AgentGeneration` has the driver's `Generation` surface (`batches()`, `close()`, `finished`),
so the server runs an agent response exactly as any other: the same backpressure, the same
cancellation, the same log. It is the driver underneath: one `Generation` holds the reducer
state, runs each generation (its chunk-to-step loop, the compiled fast path, coalescing) to
its finish or to the server-side call it leaves pending, and takes the loop's steps between
generations as `LoopStep` values (`ListToolsStep`, `ApprovedCallStep`, `ToolResultStep`,
`NextGenerationStep`), which a recording keeps as they are. The loop makes no protocol
decision; the reducer's pure calls do. The phases:

1. *Start*: `response.created` and `response.in_progress` go out at once, before any I/O.
2. *Listing*: each MCP server's tools, one server after another, each `mcp_list_tools` item
   sent in progress before its server is asked (bounded by the MCP connect timeout and the
   call limit). A server that fails is listed with its error and not offered to the model;
   the response goes on. One `ListToolsStep` per MCP server listed. A response that ends
   while a server lists ends that item failed first. A server whose tools the request's
   context already lists (an earlier `mcp_list_tools` item: an approval follow-up, a later
   turn) is not asked again and gets no new item, as the API does (`AgentRun.listed`).
3. *Approvals*: each approved `mcp_approval_response` of the request runs its call
   (`ApprovedCallStep` -> tool -> `ToolResultStep`); a declined one tells the model so.
4. *Generations*: the prompt is rendered by `prompts` (the server's renderer: worker
   processes, its time limit and input-token limit), then generated from; a generation that
   ends in a server-side call leaves that call pending: run the tool, `ToolResultStep`, append
   the generated tokens and the tool's message to the prompt (`prompts.continuation`),
   `NextGenerationStep`, generate again. No pending call: finish (an approval request also
   ends here). A prompt the renderer refuses ends the response `failed`, saying why.

Limits: calls beyond `max_tool_calls` are not run (the item's error says so and the model reads
it, as the API ignores further calls); after `max_iterations` tool rounds a still-pending call
gets that error and the response ends `incomplete` (`LIMIT_REASON`). A tool that fails or
times out is an error result, never an exception. Cancellation (client gone, cancel, shutdown)
propagates through a running tool, which stops (the python tool kills its processes); the
server then closes the response with `close("abort", ...)`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

import anyio
import attrs

from streamfold.engines import DecodingConstraint, GenerationRequest, TokenChunk, TokenSource
from streamfold.statemachine import (
    ApprovedCallStep,
    CodeInterpreterOutputLogs,
    Event,
    FinishReason,
    Grammar,
    ListToolsStep,
    LoopStep,
    McpServer,
    McpToolInfo,
    NextGenerationStep,
    PendingCall,
    Response,
    ResponseState,
    ServerTools,
    StreamfoldError,
    ToolResultStep,
    list_tools,
    pending_call,
)

from ..driver import Generation
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
from ._tool import ListedTool, ReusesListing, ToolInfo, ToolResult, run_tool

__all__ = ["LIMIT_REASON", "AgentGeneration", "InlinePrompts", "Prompts", "generation_for"]

#: How a response that hit the server's tool-round limit ends (see the module docstring).
LIMIT_REASON: FinishReason = "tool_limit"


class Prompts(Protocol):
    """Where the loop's prompts are rendered. The server passes its renderer (worker
    processes, size caps, time limit, the input-token limit: what a plain request gets);
    `InlinePrompts` renders in the caller (`streamfold record`). A refusal raises a
    `StreamfoldError` whose message says why (the response then ends `failed`)."""

    async def prompt(self, namespaces: Sequence[Any], after: Sequence[Any]) -> tuple[int, ...]:
        """The first generation's prompt: the request with the server tools' `namespaces`
        (openai-harmony `ToolNamespaceConfig`s), then the harmony messages `after` it."""
        ...

    async def continuation(self, message: Any, prompt_tokens: int) -> tuple[int, ...]:
        """The tokens after a call: the tool's `message`, then the assistant's next turn;
        `prompt_tokens`, the length of the prompt they extend (a limit counts the whole)."""
        ...


@attrs.frozen
class InlinePrompts:
    """`Prompts` rendered in the caller, with no limits (for `streamfold record`)."""

    request: CreateRequest

    async def prompt(self, namespaces: Sequence[Any], after: Sequence[Any]) -> tuple[int, ...]:
        return render_prompt(self.request, namespaces, after)

    async def continuation(self, message: Any, prompt_tokens: int) -> tuple[int, ...]:
        return continuation(message)


class AgentGeneration:
    """One agent response: its tools, its prompt, and the driver that holds its state."""

    def __init__(
        self,
        source: TokenSource,
        request: CreateRequest,
        generation: GenerationRequest,
        grammar: Grammar,
        response: Response,
        run: AgentRun,
        *,
        prompts: Prompts | None = None,
        clock: Callable[[], float] | None = None,
        record: list[TokenChunk | LoopStep] | None = None,
        after_call: DecodingConstraint | None = None,
    ) -> None:
        self.request = request
        self.generation = generation
        # The grammar of a generation after a call the server ran (`generation.decoding` is
        # the first one's): `required` or a named tool would never let the loop end there.
        self.after_call = after_call
        self.run = run
        self.prompts = prompts if prompts is not None else InlinePrompts(request)
        # The one chunk-to-step loop; `clock` stamps `completed_at`, as on a plain response.
        self.driver = Generation(
            source,
            generation,
            grammar,
            response,
            input_tokens=0,
            clock=clock,
            restore_stop=message_end_tokens(),
        )
        self.calls = 0  # tool calls run (max_tool_calls counts these)
        self.rounds = 0  # generations that ended in a server-side call
        # When recording (`streamfold record`): every chunk as the reducer took it and every
        # loop step, in order; `server_tools` as given to `start`; `finished` the last finish.
        self.record = record
        self.server_tools = self._server_tools({})
        # The listing in progress (its label and the events sent), and the steps of those done.
        self._listing: tuple[str, list[Event]] | None = None
        self._steps: list[ListToolsStep] = []
        # Each MCP server's tools (listed now, or taken from the context's earlier listing),
        # or why it could not be listed.
        self._tools_of: dict[str, tuple[ToolInfo, ...] | str] = {}
        self.finished_with: tuple[FinishReason, str | None] | None = None

    @property
    def state(self) -> ResponseState | None:
        return self.driver.state

    @property
    def finished(self) -> bool:
        return self.driver.finished

    def close(self, reason: FinishReason, message: str | None = None) -> list[Event]:
        """Finish the response now (if it is not finished) and return its closing events."""
        if self.driver.finished:
            return self.driver.close(reason, message)
        events: list[Event] = []
        if self._listing is not None:  # its item is in progress: it ends failed, saying why
            label = self._listing[0]
            events = self._listed(label, f"the response ended before {label!r} listed its tools")
        self.finished_with = (reason, message)
        return events + self.driver.close(reason, message)

    # --- phases -------------------------------------------------------------------------

    async def _list_one(self, tool: ListedTool) -> tuple[ToolInfo, ...] | str:
        """The server's tools, or why they could not be listed."""
        try:
            with anyio.fail_after(self.run.limits.call_seconds):
                return await tool.list_tools()
        except TimeoutError:
            return (
                f"listing the tools of MCP server {tool.namespace!r} took longer than "
                f"{self.run.limits.call_seconds:g} s"
            )
        except Exception as exc:  # ToolListError, or a connector's own failure
            return describe_error(exc)

    def _server_tools(self, listed: dict[str, tuple[ToolInfo, ...] | str]) -> ServerTools:
        """The server tools as `start` takes them; an MCP server not listed (yet) is named
        with no approval policy (one is only read while generating)."""
        mcp = []
        for tool in self.run.mcp:
            tools = listed.get(tool.namespace, ())
            names = () if isinstance(tools, str) else tuple(t.name for t in tools)
            needing = frozenset(name for name in names if tool.needs_approval(name))
            # "always" also covers a name the model invents (it is refused once approved).
            policy: Any = needing
            if not needing:
                policy = "never"
            elif needing == frozenset(names):
                policy = "always"
            mcp.append(McpServer(server_label=tool.namespace, require_approval=policy))
        return ServerTools(
            browser=self.run.tool("browser") is not None,
            python=self.run.tool("python") is not None,
            mcp=tuple(mcp),
        )

    async def _listings(self) -> AsyncIterator[list[Event]]:
        """Each MCP server listed in turn, its `mcp_list_tools` item in progress (sent) while
        it lists: `output_item.added` and `.in_progress` go out first, the rest of its
        `ListToolsStep`'s events once the server has answered.

        Those first two events are `list_tools`'s own, made ahead from the same state: they
        depend on neither the tools nor the error (checked when the step is applied). The
        approval policies do depend on the listing, and `start` takes them: the state is
        begun again with them once every server is listed, and the steps applied again (no
        event goes out twice: `start`'s and `list_tools`'s do not depend on the policies)."""
        listed = self._tools_of
        for tool in self.run.mcp:
            earlier = self.run.listed.get(tool.namespace)
            if earlier is not None and isinstance(tool, ReusesListing):
                if tool.reuse_listing(earlier):
                    listed[tool.namespace] = earlier
                    continue
            state = self.driver.state
            assert state is not None
            _, ahead = list_tools(state, tool.namespace)
            self._listing = (tool.namespace, ahead[:2])
            yield ahead[:2]
            listed[tool.namespace] = await self._list_one(tool)
            yield self._listed(tool.namespace, listed[tool.namespace])
        self.server_tools = self._server_tools(listed)
        self.driver.open(self.server_tools)
        for step in self._steps:
            self.driver.apply(step)

    def _listed(self, label: str, tools: tuple[ToolInfo, ...] | str) -> list[Event]:
        """The `ListToolsStep` of the server being listed: its events but the two sent."""
        error = tools if isinstance(tools, str) else None
        infos = () if isinstance(tools, str) else tuple(_info(t) for t in tools)
        step = ListToolsStep(server_label=label, tools=infos, error=error)
        assert self._listing is not None and self._listing[0] == label
        sent = self._listing[1]
        self._listing = None
        self._steps.append(step)
        events = self._apply(step)
        if events[:2] != sent:
            raise RuntimeError(f"list_tools({label!r}) began with other events than it sent")
        return events[2:]

    def _apply(self, step: LoopStep) -> list[Event]:
        """One step of the loop on the reducer, kept in `record` when recording (a trace
        replays them in order)."""
        if self.record is not None:
            self.record.append(step)
        return self.driver.apply(step)

    async def _run_call(self, call: PendingCall) -> ToolResult:
        """The tool's result for a pending call (an error result when it cannot run)."""
        if self.calls >= self.run.max_tool_calls:
            return ToolResult(
                error=f"max_tool_calls ({self.run.max_tool_calls}) reached: this call was not "
                "run; answer with what you have"
            )
        namespace, _, name = call.recipient.partition(".")
        if call.kind == "mcp_call":
            namespace, name = call.server_label or "", call.name or ""
        tool = self.run.tool(namespace)
        if tool is None:
            return ToolResult(error=f"no tool {call.recipient!r} is offered to this response")
        self.calls += 1
        return await run_tool(tool, name or None, call.arguments, self.run.limits)

    def _answer(self, call: PendingCall, result: ToolResult) -> list[Event]:
        outputs = None
        if call.kind == "code_interpreter_call":
            logs = result.logs if result.logs is not None else result.text
            outputs = (CodeInterpreterOutputLogs(logs=logs),)
        if result.error is not None:
            step = ToolResultStep(item_id=call.item_id, error=result.error, outputs=outputs)
        else:
            step = ToolResultStep(item_id=call.item_id, output=result.output or "", outputs=outputs)
        return self._apply(step)

    async def _generate(self, prompt: tuple[int, ...]) -> AsyncIterator[list[Event]]:
        """One generation on the driver: its events, batched as the driver batches them; the
        driver's `end` and `taken` say how it ended and what it generated."""
        limit = self.request.max_output_tokens
        state = self.driver.state
        assert state is not None
        if limit is not None and state.output_tokens >= limit:
            self.driver.end = ("length", None)
            self.driver.taken = []
            return
        request = attrs.evolve(
            self.generation,
            request_id=f"{self.generation.request_id}-{self.rounds}",
            prompt_token_ids=prompt,
            max_output_tokens=None if limit is None else limit - state.output_tokens,
            decoding=self.generation.decoding if self.rounds == 0 else self.after_call,
        )
        async with contextlib.aclosing(self.driver.generate(request)) as batches:
            async for batch in batches:
                yield batch
        if self.record is not None and self.driver.taken:
            self.record += self.driver.taken  # what the reducer took, no more

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
            step = ApprovedCallStep(
                approval_request_id=asked.id,
                server_label=asked.server_label,
                name=asked.name,
                arguments=asked.arguments,
            )
            events = self._apply(step)
            yield events, []
            call = self._pending()
            result = await self._run_call(call)
            messages = [
                call_message(recipient, asked.arguments),
                tool_message(recipient, result.text),
            ]
            yield self._answer(call, result), messages

    def _pending(self) -> PendingCall:
        state = self.driver.state
        assert state is not None
        call = pending_call(state)
        assert call is not None  # an approved call is pending until its result
        return call

    async def batches(self) -> AsyncGenerator[list[Event], None]:
        """The response's events, in batches (see the module docstring)."""
        # Before any I/O: the client has the id at once.
        yield self.driver.open(self._server_tools({}))
        async for events in self._listings():
            yield events
        listed = {label for label, tools in self._tools_of.items() if not isinstance(tools, str)}
        namespaces = [tool.describe() for tool in self.run.builtins] + [
            tool.describe() for tool in self.run.mcp if tool.namespace in listed
        ]
        after: list[Any] = []
        async for events, messages in self._approvals():
            after += messages
            if events:
                yield events
        try:
            prompt = await self.prompts.prompt(namespaces, after)
        except StreamfoldError as exc:
            yield self.close("error", str(exc))
            return
        self._apply(NextGenerationStep(input_tokens=len(prompt)))
        while True:
            async for batch in self._generate(prompt):
                yield batch
            reason, message = self.driver.end
            state = self.driver.state
            assert state is not None
            call = pending_call(state)
            if reason != "stop" or call is None:
                yield self.close(reason, message)
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
            generated = [token for chunk in self.driver.taken or () for token in chunk.token_ids]
            channel = call_channel(generated, call.recipient)
            if generated and generated[-1] in message_end_tokens():
                generated = generated[:-1]
            generated.append(call_token())
            message = tool_message(call.recipient, result.text, channel)
            try:
                following = await self.prompts.continuation(message, len(prompt) + len(generated))
            except StreamfoldError as exc:
                yield self.close("error", str(exc))
                return
            prompt = (*prompt, *generated, *following)
            self._apply(NextGenerationStep(input_tokens=len(prompt)))


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
    prompts: Prompts | None = None,
    after_call: DecodingConstraint | None = None,
    before_held: Callable[[], Awaitable[object]] | None = None,
) -> Generation | AgentGeneration:
    """The driver's plain `Generation`, or the agent loop when the request has server tools.

    `clock` stamps `completed_at` on a completed response; `prompts` renders the agent
    loop's prompts (the server's renderer); `before_held`: see `Generation`."""
    if agent is None:
        return Generation(
            source, generation, grammar, response, clock=clock, before_held=before_held
        )
    return AgentGeneration(
        source,
        request,
        generation,
        grammar,
        response,
        agent,
        prompts=prompts,
        clock=clock,
        after_call=after_call,
    )
