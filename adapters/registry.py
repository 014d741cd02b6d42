"""Engines the server can run, by name: a token source, the chat format it speaks, and the
grammar for a model name.

`streamfold serve --engine NAME` and `streamfold record --engine NAME` look NAME up in
`ENGINES`; each entry builds an `Engine` from the parsed command line (the options are defined
in `streamfold/_options.py`). `replay` (the default for serve) replays recorded traces, so the
server works on a fresh machine with nothing else; `native`, `vllm` and `sglang` run models.
The `Engine` value itself, what the server reads of any engine, is `_engine.py`'s (re-exported
here with its errors and `require_engine`).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import attrs

from streamfold.engines import (
    GenerationRequest,
    ReplaySource,
    TokenChunk,
    TraceDirectorySource,
    TraceFormatError,
    read_trace,
)
from streamfold.statemachine import StreamfoldError
from streamfold.statemachine._grammar import Grammar

from ._engine import Engine, NotAnEngineError, UnknownModelError, require_engine
from ._loading import LoadingSource
from .formats import HARMONY, ChatFormat, ChatTemplateError, ChatTemplateFormat, writes_harmony
from .replay_turns import ROLE_MARKERS, conversation_turn, role_marker, turn_files

__all__ = [
    "ENGINES",
    "NATIVE_MAX_OUTPUT_TOKENS",
    "Engine",
    "EngineFactory",
    "EngineSetupError",
    "LoadingSource",
    "NotAnEngineError",
    "ReplayEngine",
    "UnknownModelError",
    "bundled_traces_dir",
    "native_engine_options",
    "replay_engine",
    "require_engine",
]


logger = logging.getLogger("streamfold.server")


#: `--engine native`'s cap on a request without `max_output_tokens` (`--default-max-output-tokens`).
NATIVE_MAX_OUTPUT_TOKENS = 4096


EngineFactory = Callable[[argparse.Namespace], Engine]


def bundled_traces_dir() -> Path:
    """The traces shipped in `streamfold.specs` (`specs/traces/`)."""
    return Path(str(resources.files("streamfold.specs").joinpath("traces")))


@attrs.frozen
class _Replayed:
    """What replaying one model takes: a source per turn, the grammar that reads its tokens,
    whether each turn's trace carries logprobs, and the chat format its prompts are in."""

    sources: tuple[ReplaySource, ...]
    grammar: Grammar
    with_logprobs: tuple[bool, ...]
    chat_format: ChatFormat


def _template_format(conversation: Path, traces: Sequence[Any]) -> ChatFormat:
    """A think-tag conversation's chat format: its directory is the model's (`tokenizer.json`,
    `tokenizer_config.json` with the `chat_template`), and its traces' token ids come from
    that `tokenizer.json`, so that each request is prompted as the model was."""
    own = (conversation / "tokenizer.json").resolve()
    for trace in traces:
        named = trace.header.get("tokenizer")
        if not isinstance(named, str) or (conversation / named).resolve() != own:
            raise TraceFormatError(
                "a think-tag conversation directory is its model's directory: each turn's "
                'header says "tokenizer": "tokenizer.json" (the one beside it, whose '
                "tokenizer_config.json holds the chat template its prompts are rendered in)"
            )
    try:
        chat_format = ChatTemplateFormat(conversation)
        chat_format.load()
    except ChatTemplateError as exc:
        raise TraceFormatError(str(exc)) from exc
    return chat_format


class ReplayEngine:
    """Replays `DIR/<model>.jsonl` for a request whose model is `<model>`, or, when `DIR/<model>/`
    is a conversation directory (`0.jsonl`, `1.jsonl`, ...), the trace of the conversation's
    turn, so a client's tool loop ends with the recorded answer (`replay_turns.py`). A turn's
    header may list `prompt_contains`: texts its request's prompt must hold, else it fails.

    A conversation is prompted in its own family's chat format: harmony for harmony traces; a
    think-tag conversation (`"grammar": "thinktags"` turns) in its model's own chat template,
    its directory being the model's (`tokenizer.json`, and `tokenizer_config.json` with a
    `chat_template`: `_template_format`), so its prompts are what vLLM would have been sent
    and its turns are read from them (ChatML's `<|im_start|>` roles).

    Traces are read once and kept; `delay` seconds pass before each chunk, to stand in for a
    real engine's pace.
    """

    def __init__(self, directory: str | Path, *, delay: float = 0.0) -> None:
        self.directory = TraceDirectorySource(directory, delay=delay)  # checks the directory
        self.delay = delay

    def models(self) -> list[str]:
        root = self.directory.directory
        conversations = [p.name for p in root.iterdir() if p.is_dir() and turn_files(p)]
        return sorted([*self.directory.models(), *conversations])

    @functools.cache  # noqa: B019 - one engine per server; traces are few and small
    def _source(self, model: str) -> _Replayed:
        from streamfold.adapters.grammars import grammar_for

        served = self.models()
        if model not in served:  # also keeps `x.golden` (expected events, not a trace) out
            # Neither the directory (a path on this machine) nor a huge name is echoed back.
            shown = model if len(model) <= 64 else f"{model[:64]}... ({len(model)} characters)"
            listed = ", ".join(served[:50]) + (", ..." if len(served) > 50 else "")
            raise UnknownModelError(
                f"the model {shown!r} does not exist: this replay server serves the traces "
                f"{listed or 'none'}"
            )
        conversation = self.directory.directory / model
        chat_format: ChatFormat = HARMONY
        try:
            if conversation.is_dir():
                traces = [read_trace(path) for path in turn_files(conversation)]
                families = {t.header.get("grammar") for t in traces}
                if families == {"thinktags"}:
                    chat_format = _template_format(conversation, traces)
                elif families != {"harmony"}:
                    raise TraceFormatError(
                        "a conversation directory's turns are all harmony traces or all "
                        "think-tag traces (turns are read from the prompt, in one chat format)"
                    )
                grammar = grammar_for(traces[0].header, conversation)
                if role_marker(grammar.vocabulary) is None:
                    raise TraceFormatError(
                        "a conversation's turns are read from its prompt's role markers "
                        f"({', '.join(ROLE_MARKERS)}), and its vocabulary has none"
                    )
            else:
                traces = [self.directory.trace_for(model)]
                grammar = grammar_for(traces[0].header, self.directory.directory)
        except TraceFormatError as exc:
            # The client is told the model cannot be replayed; the operator, why (a path).
            logger.warning("the trace of model %r cannot be replayed: %s", model, exc)
            raise UnknownModelError(f"the trace of model {model!r} cannot be replayed") from exc
        # Whether each trace carries logprobs: most do not, and their chunks then need no
        # wrapper to drop them (a check per chunk the server streams).
        with_logprobs = tuple(
            any(c.logprobs is not None or c.top_logprobs is not None for c in t.chunks)
            for t in traces
        )
        sources = tuple(ReplaySource(t, delay=self.delay) for t in traces)
        return _Replayed(sources, grammar, with_logprobs, chat_format)

    def grammar(self, model: str) -> Grammar:
        return self._source(model).grammar

    def chat_format(self, model: str) -> ChatFormat:
        return self._source(model).chat_format

    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        replayed = self._source(request.model)
        sources, grammar = replayed.sources, replayed.grammar
        turn = 0
        if len(sources) > 1:
            turn = conversation_turn(request.prompt_token_ids, grammar.vocabulary)
            if turn >= len(sources):
                return _fail(
                    f"the conversation is at turn {turn}, but {request.model!r} recorded "
                    f"{len(sources)} turn(s) (0-{len(sources) - 1}); start a new conversation"
                )
        lacking = _lacking(sources[turn].trace.header, request.prompt_token_ids, grammar)
        if lacking is not None:
            return _fail(
                f"turn {turn} of {request.model!r} expects its prompt to hold {lacking!r} "
                "(the trace header's prompt_contains), and it does not"
            )
        chunks = sources[turn].generate(request)
        sampling = request.sampling
        if sampling.logprobs or sampling.top_logprobs or not replayed.with_logprobs[turn]:
            return chunks
        # A recorded trace may carry logprobs; like a live engine, send them only when asked.
        return _without_logprobs(chunks)

    def engine(self) -> Engine:
        """Prompts are rendered as harmony, but a think-tag conversation's, in its model's chat
        template (`chat_format`): a replayed single trace does not read its prompt, but a
        conversation directory's turn is read from it (`replay_turns.py`)."""
        return Engine(
            source=self,
            format=HARMONY,
            format_for=self.chat_format,
            grammar=self.grammar,
            models=self.models,
        )


def _lacking(header: Any, prompt: Sequence[int], grammar: Grammar) -> str | None:
    """The first of the trace header's `prompt_contains` texts the prompt lacks, or None: a
    conversation turn can say what its request must have carried (a test's assertion that a
    client sent the earlier turn's reasoning back, say), and fails the response if not."""
    expected = header.get("prompt_contains") or ()
    if not expected:
        return None
    vocabulary = grammar.vocabulary
    text = b"".join(vocabulary.bytes_of(t) for t in prompt).decode("utf-8", "replace")
    return next((want for want in expected if want not in text), None)


async def _fail(message: str) -> AsyncIterator[TokenChunk]:
    yield TokenChunk(finish_reason="error", error=message)


def _plain(chunk: TokenChunk) -> TokenChunk:
    if chunk.logprobs is not None or chunk.top_logprobs is not None:
        return attrs.evolve(chunk, logprobs=None, top_logprobs=None)
    return chunk


class _WithoutLogprobs:
    """A replayed stream with its logprobs dropped, keeping the readiness hint of the stream
    it wraps (`ReadyChunks`)."""

    def __init__(self, chunks: AsyncIterator[TokenChunk]) -> None:
        self._chunks = chunks
        take: Callable[[int], list[TokenChunk]] | None = getattr(chunks, "take_ready", None)
        self._take = take

    def __aiter__(self) -> _WithoutLogprobs:
        return self

    async def __anext__(self) -> TokenChunk:
        return _plain(await self._chunks.__anext__())

    def take_ready(self, limit: int) -> list[TokenChunk]:
        return [] if self._take is None else [_plain(c) for c in self._take(limit)]

    async def aclose(self) -> None:
        aclose = getattr(self._chunks, "aclose", None)
        if aclose is not None:
            await aclose()


def _without_logprobs(chunks: AsyncIterator[TokenChunk]) -> AsyncIterator[TokenChunk]:
    return _WithoutLogprobs(chunks)


def _harmony_only(args: argparse.Namespace, engine: str) -> None:
    if getattr(args, "chat_format", "harmony") != "harmony":
        raise EngineSetupError(
            f"--engine {engine} serves gpt-oss (harmony) only; --chat-format chat-template is "
            "for --engine vllm or sglang"
        )


def replay_engine(args: argparse.Namespace) -> Engine:
    _harmony_only(args, "replay")
    directory = getattr(args, "traces", None) or bundled_traces_dir()
    return ReplayEngine(directory, delay=getattr(args, "replay_delay", 0.0)).engine()


class EngineSetupError(StreamfoldError, ValueError):
    """`serve --engine X` cannot build X here; the message says what to install or pass."""


def _gpu_engine(name: str) -> EngineFactory:
    def factory(args: argparse.Namespace) -> Engine:
        from .engine_args import EngineArgumentError, build_engine_source, parse_engine_args

        if importlib.util.find_spec(name) is None:
            raise EngineSetupError(
                f"--engine {name} needs the {name!r} package: pip install 'streamfold[{name}]' "
                "on a machine with a CUDA GPU"
            )
        model = getattr(args, "model", None)
        if not model:
            raise EngineSetupError(f"--engine {name} needs --model NAME_OR_PATH")
        try:
            options = parse_engine_args(getattr(args, "engine_arg", []) or [])
        except EngineArgumentError as exc:
            raise EngineSetupError(str(exc)) from exc
        chat_format = _chat_format(getattr(args, "chat_format", "harmony"), model, name)
        # Built at start-up in a worker thread, not in the event loop (see `_loading`); the
        # server's `close()` of the source shuts the engine down.
        source = LoadingSource(lambda: build_engine_source(name, model, **options), name=name)
        # They enforce a request's grammar through their llguidance backends (vLLM: the
        # guidance structured-outputs backend; SGLang: `--grammar-backend llguidance`).
        return Engine(
            source=source,
            format=chat_format,
            load=source.load,
            enforces_constraints=True,
            models=lambda: (model,),
        )

    return factory


def _chat_format(choice: str, model: str, engine: str) -> ChatFormat:
    """`--chat-format`: harmony (gpt-oss), or the model's own chat template (think tags).
    Chosen by the operator, never guessed from the model's name."""
    if choice == "harmony":
        if writes_harmony(model) is False:  # the operator's choice stands, but not silently
            logger.warning(
                "--engine %s prompts %s in harmony (gpt-oss), but its own chat template does "
                "not write harmony; for a think-tag model (Qwen3, DeepSeek-R1) pass "
                "--chat-format chat-template (docs/chat-formats.md)",
                engine,
                model,
            )
        return HARMONY

    try:
        chat_format = ChatTemplateFormat(model)
        chat_format.load()
    except ChatTemplateError as exc:
        raise EngineSetupError(f"--engine {engine} --chat-format chat-template: {exc}") from exc
    return chat_format


def native_engine_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "device": args.device,
        "dtype": args.dtype,
        "kv_cache_mb": args.kv_cache_mb,
        "block_size": args.block_size,
        "max_num_seqs": args.max_num_seqs,
        "experts": args.experts,
        "threads": getattr(args, "threads", None),
        "prefix_cache": not getattr(args, "no_prefix_cache", False),
    }


def native_engine(args: argparse.Namespace) -> Engine:
    """The native gpt-oss engine on `--model DIR` (a checkpoint; `streamfold init-model`)."""
    _harmony_only(args, "native")
    from streamfold.engines.native import build_native_engine

    model = getattr(args, "model", None)
    if not model:
        raise EngineSetupError(
            "--engine native needs --model DIR (a gpt-oss checkpoint; `streamfold init-model "
            "DIR` writes a small random one)"
        )
    from streamfold.engines._extras import missing_torch_extra

    missing = missing_torch_extra("--engine native")
    if missing:
        raise EngineSetupError(missing)
    cap = getattr(args, "default_max_output_tokens", None)
    if cap is not None and cap < 0:
        raise EngineSetupError(f"--default-max-output-tokens must be 0 (no cap) or more, got {cap}")
    options = native_engine_options(args)
    engine = build_native_engine(model, **options)
    return Engine(
        source=engine,
        format=HARMONY,
        warm_up=engine.warm_up,
        max_output_tokens=NATIVE_MAX_OUTPUT_TOKENS if cap is None else (cap or None),
        enforces_constraints=True,
        keeps_prefixes=bool(options["prefix_cache"]),  # what the engine was built with
        models=lambda: (model,),
    )


ENGINES: dict[str, EngineFactory] = {
    "replay": replay_engine,
    "native": native_engine,
    "vllm": _gpu_engine("vllm"),
    "sglang": _gpu_engine("sglang"),
}
