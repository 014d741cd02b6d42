"""`streamfold record`: run one request on an engine and write its trace.

The trace is what `streamfold replay` replays and `streamfold serve --engine replay` serves: the
recorded engine output, so a production stream can be reproduced byte for byte without the
engine. A `--prompt` is rendered as a harmony conversation (system message with the reasoning
effort, developer message with `--instructions`), exactly as the server renders requests.

With `--mcp LABEL=URL` or `--python-tool` it records an *agent run*: the server's tool loop on
that engine (the MCP servers listed and called, the code run), every generation's chunks and
every tool result in order, so `streamfold replay` gives the same events offline.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

__all__ = ["add_record_parser", "run_record"]


def add_record_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ._options import add_engine_options

    p = subparsers.add_parser(
        "record",
        help="run one request on an engine and write its trace (JSON lines)",
        description="Run one request on an engine and write the trace that `streamfold replay` "
        "replays. Example: streamfold record --engine native --model DIR --prompt 'Hi' -o t.jsonl",
    )
    add_engine_options(p, default_engine="native", model_required=True)
    prompt = p.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", help="user message, rendered as a harmony conversation")
    prompt.add_argument("--prompt-token-ids", help="the prompt as comma-separated token ids")
    p.add_argument("--instructions", help="developer instructions (with --prompt)")
    p.add_argument("--reasoning-effort", choices=("low", "medium", "high"), default=None)
    p.add_argument("--max-output-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=1.0, help="0 is greedy")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=None, help="makes sampling reproducible")
    p.add_argument("--logprobs", action="store_true", help="record each token's logprob")
    p.add_argument("-o", "--output", required=True, type=Path, help="trace file to write")
    agent = p.add_argument_group("agent run", "record the server's tool loop (needs --prompt)")
    agent.add_argument(
        "--mcp",
        action="append",
        default=[],
        metavar="LABEL=URL",
        help="an MCP server the model may call (repeatable; its tools need no approval here)",
    )
    agent.add_argument("--python-tool", action="store_true", help="offer the python tool")
    agent.add_argument("--max-tool-calls", type=int, default=None, metavar="N")
    p.set_defaults(run=run_record)


def _prompt_ids(args: argparse.Namespace) -> tuple[int, ...]:
    if args.prompt_token_ids is not None:
        try:
            return tuple(int(t) for t in args.prompt_token_ids.split(",") if t.strip())
        except ValueError as exc:
            raise ValueError(
                f"--prompt-token-ids must be comma-separated integers, got "
                f"{args.prompt_token_ids!r}"
            ) from exc
    from streamfold.adapters.formats import render_prompt
    from streamfold.adapters.protocol import parse_create_request

    body: dict[str, Any] = {"model": args.model, "input": args.prompt}
    if args.instructions:
        body["instructions"] = args.instructions
    if args.reasoning_effort:
        body["reasoning"] = {"effort": args.reasoning_effort}
    return render_prompt(parse_create_request(body))


class _Progress:
    """A token source that shows on the terminal how many tokens went by: a long recording
    (17 s for 2000 tokens on a CPU) was otherwise silent (issue 19)."""

    def __init__(self, source: Any, limit: int) -> None:
        self._source, self._limit = source, limit

    def generate(self, request: Any) -> AsyncIterator[Any]:
        return self._counted(self._source.generate(request))

    async def _counted(self, stream: AsyncIterator[Any]) -> AsyncIterator[Any]:
        count, shown = 0, 0.0
        try:
            async for chunk in stream:
                count += len(chunk.token_ids)
                if time.monotonic() - shown >= 0.5:
                    shown = time.monotonic()
                    print(f"\rrecording: {count}/{self._limit} tokens", end="", file=sys.stderr)
                yield chunk
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
            if shown:
                print(f"\rrecording: {count} tokens", file=sys.stderr)


async def _record(args: argparse.Namespace, run: Callable[[Any], Awaitable[str]]) -> str:
    """`run(source)` on the engine the arguments name: the engines `serve` runs, built the same
    way (vLLM's inside this running loop, as its AsyncLLM binds its output handler to it)."""
    from streamfold.adapters.registry import ENGINES

    def shown(source: Any) -> Any:
        return _Progress(source, args.max_output_tokens) if sys.stderr.isatty() else source

    source = ENGINES[args.engine](args).source
    try:
        return await run(shown(source))
    finally:
        close = getattr(source, "close", None)
        if callable(close):
            close()


def _plain_run(
    args: argparse.Namespace, request: Any, header: dict[str, Any]
) -> Callable[[Any], Awaitable[str]]:
    from streamfold.engines import record_trace

    def run(source: Any) -> Awaitable[str]:
        return record_trace(source, request, args.output, header)

    return run


def _agent_run(args: argparse.Namespace, header: dict[str, Any]) -> Callable[[Any], Awaitable[str]]:
    """The agent loop on a source, recorded (see the module docstring)."""
    from streamfold.adapters.agent import AgentConfig, PythonTool
    from streamfold.adapters.agent._trace import record_agent_run
    from streamfold.engines import SamplingParams

    if args.prompt is None:
        raise ValueError("an agent run (--mcp, --python-tool) needs --prompt")
    tools: list[dict[str, Any]] = []
    for spec in args.mcp:
        label, sep, url = spec.partition("=")
        if not sep or not label or not url:
            raise ValueError(f"--mcp takes LABEL=URL, got {spec!r}")
        tools.append(
            {"type": "mcp", "server_label": label, "server_url": url, "require_approval": "never"}
        )
    if args.python_tool:
        tools.append({"type": "code_interpreter"})
    body: dict[str, Any] = {
        "model": args.model,
        "input": args.prompt,
        "tools": tools,
        "max_output_tokens": args.max_output_tokens,
    }
    if args.instructions:
        body["instructions"] = args.instructions
    if args.reasoning_effort:
        body["reasoning"] = {"effort": args.reasoning_effort}
    if args.max_tool_calls is not None:
        body["max_tool_calls"] = args.max_tool_calls
    config = AgentConfig(mcp_allow=("*",), python=PythonTool() if args.python_tool else None)
    sampling = SamplingParams(
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
        logprobs=args.logprobs,
    )

    def run(source: Any) -> Awaitable[str]:
        return record_agent_run(source, body, config, args.output, header, sampling=sampling)

    return run


def run_record(args: argparse.Namespace) -> int:
    import anyio

    from streamfold.engines import GenerationRequest, SamplingParams
    from streamfold.statemachine import StreamfoldError

    if getattr(args, "chat_format", "harmony") != "harmony":
        # A recording is a harmony trace (its prompt, its header); think-tag models are
        # served with their chat template (`serve --chat-format chat-template`), not recorded.
        print(
            "streamfold record: --chat-format chat-template is for `streamfold serve`; record "
            "records gpt-oss (harmony) traces",
            file=sys.stderr,
        )
        return 2
    if args.engine == "native":
        from streamfold.engines._extras import missing_torch_extra

        missing = missing_torch_extra("record --engine native")
        if missing:
            print(f"streamfold record: {missing}", file=sys.stderr)
            return 2
    try:
        prompt = _prompt_ids(args)
        from streamfold.adapters.formats import stop_token_ids

        request = GenerationRequest(
            request_id=f"rec-{uuid.uuid4().hex[:12]}",
            prompt_token_ids=prompt,
            model=args.model,
            max_output_tokens=args.max_output_tokens,
            sampling=SamplingParams(
                temperature=args.temperature,
                top_p=args.top_p,
                top_k=args.top_k,
                seed=args.seed,
                logprobs=args.logprobs,
            ),
            # The server's own stop set, so a recording is the request `serve` would make.
            stop_token_ids=stop_token_ids(),
        )
        header = {
            "trace": 1,
            "grammar": "harmony",
            "encoding": "o200k_harmony",
            "response_id": f"resp_{uuid.uuid4().hex}",
            "model": Path(str(args.model)).name,
            "created_at": int(time.time()),
            "request": {
                "engine": args.engine,
                "max_output_tokens": args.max_output_tokens,
                "temperature": args.temperature,
                "top_p": args.top_p,
                "top_k": args.top_k,
                "seed": args.seed,
            },
        }
        agent = bool(args.mcp or args.python_tool)
        run = _agent_run(args, header) if agent else _plain_run(args, request, header)
        reason = anyio.run(_record, args, run)
    except (StreamfoldError, ValueError, OSError, ImportError) as exc:
        print(f"streamfold record: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.output} (finish_reason: {reason})", file=sys.stderr)
    return 0
