"""Hypothesis strategies for agent runs: one response over several generations (issue 12).

`agent_runs()` draws what a server's tool loop goes through: the tools it runs (browser,
python, MCP servers, some requiring approval), the MCP listings, then generations of harmony
text, each but the last ending in a call to a server-side tool, each call's outcome (its output,
or an error), and the prompt length of each generation. `play_agent_run` drives the reducer
through one the way a server's loop does and returns every event with the loop's steps, so a
test can hold the stream to the checker, cut it anywhere, or write it as a trace:

    @given(run=agent_runs())
    def test_my_loop(run): events, entries = play_agent_run(run, grammar, response)
"""

from __future__ import annotations

import json

import attrs
from hypothesis import strategies as st

from streamfold.statemachine import (
    Event,
    Grammar,
    ListToolsStep,
    LoopStep,
    McpServer,
    McpToolInfo,
    NextGenerationStep,
    Response,
    ServerTools,
    ToolResultStep,
    apply_loop_step,
    finish,
    pending_call,
    start,
    step,
)

from .strategies import HarmonyMessage, message_text

__all__ = ["AgentGeneration", "AgentRun", "agent_runs", "play_agent_run"]

_NAME = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True)
LABELS = ("wiki", "bank")  # bank's "transfer" needs approval


@attrs.frozen(kw_only=True)
class AgentGeneration:
    """One generation: its harmony text and tokens, and whether it ends in a server-side call
    (then `outcome` is what the tool said: `("output", text)` or `("error", text)`)."""

    text: str
    tokens: tuple[int, ...]
    input_tokens: int
    outcome: tuple[str, str] | None = None


@attrs.frozen(kw_only=True)
class AgentRun:
    server_tools: ServerTools
    listings: tuple[ListToolsStep, ...]
    generations: tuple[AgentGeneration, ...]
    prompt_tokens: int


def _call(kind: str, name: str, text: str) -> str:
    if kind == "browser":
        return f"<|channel|>analysis to=browser.{name} code<|message|>{text}<|call|>"
    if kind == "python":
        return f"<|channel|>analysis to=python code<|message|>{text}<|call|>"
    return f"<|channel|>commentary to={name} <|constrain|>json<|message|>{text}<|call|>"


@st.composite
def _server_call(draw: st.DrawFn, tools: ServerTools) -> str:
    kinds = [k for k, on in (("browser", tools.browser), ("python", tools.python)) if on]
    kinds += ["mcp"] * bool(tools.mcp)
    kind = draw(st.sampled_from(kinds))
    if kind == "browser":
        query = json.dumps({"query": draw(message_text(16))}, ensure_ascii=False)
        return _call(kind, draw(st.sampled_from(["search", "open", "find"])), query)
    if kind == "python":
        return _call(kind, "", draw(message_text(24)))
    args = json.dumps({draw(_NAME): draw(message_text(8))}, ensure_ascii=False)
    return _call(kind, f"wiki.{draw(_NAME)}", args)


@st.composite
def _plain(draw: st.DrawFn, max_size: int) -> list[str]:
    """Messages that end no generation: reasoning and preambles."""
    headers = {k: HarmonyMessage(kind=k, text="").header() for k in ("reasoning", "preamble")}
    kinds = draw(st.lists(st.sampled_from(sorted(headers)), max_size=max_size))
    return [f"{headers[k]}<|message|>{draw(message_text())}<|end|>" for k in kinds]


@st.composite
def _last(draw: st.DrawFn, tools: ServerTools) -> str:
    """How the last generation ends: an answer, a function call for the client, a call to a
    recipient the server does not run, or a call that needs approval."""
    choice = draw(st.sampled_from(["answer", "answer", "function", "other", "approval"]))
    if choice == "function":
        return _call("mcp", f"functions.{draw(_NAME)}", "{}")
    if choice == "other":
        return _call("mcp", f"elsewhere.{draw(_NAME)}", "{}")
    if choice == "approval" and tools.mcp_server("bank") is not None:
        return _call("mcp", "bank.transfer", '{"eur": 5}')
    end = draw(st.sampled_from(["<|return|>", "<|end|>"]))
    return f"<|channel|>final<|message|>{draw(message_text())}{end}"


@st.composite
def agent_runs(draw: st.DrawFn, max_generations: int = 4) -> AgentRun:
    """An agent run: tools, listings, generations and the outcome of every call."""
    from streamfold.engines.vocab import harmony_encoding

    mcp = tuple(
        McpServer(server_label=label, require_approval=frozenset({"transfer"}))
        for label in draw(st.lists(st.sampled_from(LABELS), unique=True, max_size=2))
    )
    tools = ServerTools(browser=draw(st.booleans()), python=draw(st.booleans()), mcp=mcp)
    can_call = tools.browser or tools.python or tools.mcp_server("wiki") is not None
    if not can_call:
        tools = attrs.evolve(tools, browser=True)
    listings = tuple(
        ListToolsStep(server_label=s.server_label, error="connection refused")
        if draw(st.booleans())
        else ListToolsStep(
            server_label=s.server_label,
            tools=tuple(McpToolInfo(name=n) for n in draw(st.lists(_NAME, max_size=2))),
        )
        for s in mcp
        if draw(st.booleans())
    )
    if tools.mcp_server("wiki") is None:
        tools_for_calls = attrs.evolve(tools, mcp=())
    else:
        tools_for_calls = tools
    encoding = harmony_encoding()
    generations = []
    count = draw(st.integers(1, max_generations))
    for i in range(count):
        pieces = draw(_plain(2))
        last = i == count - 1
        pieces.append(draw(_last(tools)) if last else draw(_server_call(tools_for_calls)))
        text = "<|start|>assistant".join(pieces)
        outcome = None
        if not last:
            outcome = (draw(st.sampled_from(["output", "error"])), draw(message_text(20)))
        generations.append(
            AgentGeneration(
                text=text,
                tokens=tuple(encoding.encode(text, allowed_special="all")),
                input_tokens=draw(st.integers(0, 500)),
                outcome=outcome,
            )
        )
    return AgentRun(
        server_tools=tools,
        listings=listings,
        generations=tuple(generations),
        prompt_tokens=draw(st.integers(0, 500)),
    )


def play_agent_run(
    run: AgentRun,
    grammar: Grammar,
    response: Response,
    *,
    stop_after: int | None = None,
    reason: str = "error",
) -> tuple[list[Event], list[tuple[int, ...] | LoopStep]]:
    """Drive the reducer through `run` as a server's loop does: every event, and the entries a
    trace of it records (each generation's tokens and the loop's steps, in order).

    `stop_after` cuts the run after that many tokens in all (a limit, a cancel, a crash) and
    finishes it with `reason`; otherwise it finishes `stop`.
    """
    state, events = start(
        grammar, response, input_tokens=run.prompt_tokens, server_tools=run.server_tools
    )
    entries: list[tuple[int, ...] | LoopStep] = []

    def apply(action: LoopStep) -> None:
        nonlocal state
        state, new = apply_loop_step(state, action)
        events.extend(new)
        entries.append(action)

    for listing in run.listings:
        apply(listing)
    budget = stop_after
    for i, generation in enumerate(run.generations):
        if i:
            apply(NextGenerationStep(input_tokens=generation.input_tokens))
        tokens = generation.tokens
        cut = budget is not None and budget < len(tokens)
        if budget is not None:
            tokens = tokens[:budget]
            budget -= len(tokens)
        for token in tokens:
            state, new = step(state, token)
            events.extend(new)
        entries.append(tokens)
        call = pending_call(state)
        if cut or (budget == 0 and call is None):
            break
        if call is None or generation.outcome is None:
            break
        kind, text = generation.outcome
        if kind == "output":
            apply(ToolResultStep(item_id=call.item_id, output=text))
        else:
            apply(ToolResultStep(item_id=call.item_id, error=text))
    state, new = finish(state, "stop" if stop_after is None else reason)  # type: ignore[arg-type]
    events.extend(new)
    return events, entries
