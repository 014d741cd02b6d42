"""What the server needs from an engine: the `Engine` value, and the errors of asking it.

Contract: an `Engine` is a frozen value holding a token source (`source`), the chat format its
models are prompted in (`format`, or per model `format_for`), and the grammar that reads a
model's tokens (`grammar(model)`); the server asks `reading(model)` for both, which raises
`UnknownModelError` (the message lists what is served) for a model the engine does not serve.
The rest are what the server reads at start-up and per request: `load` and `warm_up` (run
before it reports ready), `max_output_tokens` (the cap on a request that sets none),
`enforces_constraints`, `keeps_prefixes` and `models`. `require_engine` checks that a value
handed to the server is an `Engine`, and says how to wrap a bare token source
(`NotAnEngineError`). `warn_once` logs a warning once per engine (the server's "this engine
does not ..." warnings).

It builds no engine: the engines by name (`ENGINES`, replay, native, vLLM, SGLang) are
`registry.py`'s, which re-exports these names from its own import path.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Awaitable, Callable, Hashable, Sequence

import attrs

from streamfold.engines import TokenSource
from streamfold.statemachine import StreamfoldError
from streamfold.statemachine._grammar import Grammar

from .formats import HARMONY, ChatFormat

__all__ = ["Engine", "NotAnEngineError", "UnknownModelError", "require_engine", "warn_once"]

logger = logging.getLogger("streamfold.server")


class UnknownModelError(StreamfoldError, LookupError):
    """A request named a model the engine does not serve; the message lists what it serves."""


def _format_grammar(engine: Engine) -> Callable[[str], Grammar]:
    chat_format = engine.format
    return lambda model: chat_format.grammar()


@attrs.frozen(kw_only=True)
class Engine:
    """What the server needs from an engine: a source, the chat format its models speak, and
    the grammar for a model name (`grammar(model)` raises `UnknownModelError` for a model it
    does not serve).

    `format` renders the prompt and names the stop ids (`formats.ChatFormat`): the engine
    names its model family, the server does not guess it. `grammar` defaults to the format's
    grammar for every model; an engine that reads models differently (replay: each trace's
    header names its grammar) gives its own, and `format_for`, the chat format of a model
    whose family is not `format`'s (replay: a think-tag conversation's own chat template);
    the server asks `chat_format(model)`.

    `max_output_tokens` caps a request that sets none (None: no cap), so that a model that never
    stops (random weights, a degenerate loop) cannot hold the engine without end.

    `enforces_constraints` says whether the source masks its tokens by a request's
    `GenerationRequest.decoding` (structured outputs, `tool_choice`): the native engine does;
    replay serves what was recorded, and the server says so once in its log.

    `keeps_prefixes` says whether the source keeps a prompt's K/V after its request ends (a
    prefix cache), so that computing a prompt now makes a later one that starts with it
    cheaper: a WebSocket warm-up (`generate: false`) then prefills its prompt (the native
    engine with its prefix cache on). Others accept warm-ups and compute nothing."""

    source: TokenSource
    format: ChatFormat = HARMONY
    grammar: Callable[[str], Grammar] = attrs.field(
        default=attrs.Factory(_format_grammar, takes_self=True)
    )
    # Run once when the server starts, before it reports ready (`GET /health`); None: ready
    # at once. `load` builds the engine (`GET /health` says "loading"), `warm_up` then warms
    # it ("warming").
    warm_up: Callable[[], Awaitable[object]] | None = None
    load: Callable[[], Awaitable[object]] | None = None
    max_output_tokens: int | None = None
    enforces_constraints: bool = False
    keeps_prefixes: bool = False
    #: The model names it serves, for `GET /v1/models`; None: it names none.
    models: Callable[[], Sequence[str]] | None = None
    #: The chat format of a model by name (raises `UnknownModelError`); None: `format`.
    format_for: Callable[[str], ChatFormat] | None = None

    def chat_format(self, model: str) -> ChatFormat:
        """The chat format `model` is prompted in: `format_for(model)`, else `format`."""
        return self.format if self.format_for is None else self.format_for(model)

    def reading(self, model: str) -> tuple[Grammar, ChatFormat]:
        """`model`'s grammar and chat format (`UnknownModelError` for a model not served).
        One format for every model (no `format_for`) and a grammar of another family (a
        think-tag `grammar=`, the format left at harmony) prompts the model in the wrong
        family: logged once per engine and family, naming the fix. Replay (`format_for`)
        picks each model's format, and a replayed single trace does not read its prompt."""
        grammar = self.grammar(model)
        chat_format = self.chat_format(model)
        family = getattr(grammar, "name", None)
        if self.format_for is None and family != chat_format.name:
            warn_once(
                self,
                ("grammar family", family),
                "the engine reads model %r with the %r grammar but prompts it in its chat "
                "format %r (Engine.format): the model gets that family's prompt and stop "
                "ids. Name the model's format: Engine(source=..., format=ChatTemplateFormat"
                "(model_dir)) for a think-tag model (streamfold.adapters.formats)",
                model,
                family,
                chat_format.name,
            )
        return grammar, chat_format


#: What `warn_once` has said of each live engine, by the engine's `id`. An entry goes with its
#: engine (`weakref.finalize` runs as the engine is collected, before its id can be another
#: object's), so a new engine that gets a collected one's id is warned afresh. (Not a
#: WeakKeyDictionary: an `Engine` compares and hashes by value, and two equal engines are two.)
_said: dict[int, set[Hashable]] = {}


def warn_once(engine: Engine, what: Hashable, message: str, *args: object) -> None:
    """Log `message % args` as a warning on `streamfold.server` the first time `what` is said
    of `engine` (not once per request), from where it is called."""
    said = _said.get(id(engine))
    if said is None:
        said = _said[id(engine)] = set()
        weakref.finalize(engine, _said.pop, id(engine), None).atexit = False
    if what not in said:
        said.add(what)
        logger.warning(message, *args, stacklevel=2)


class NotAnEngineError(StreamfoldError, TypeError):
    """Something other than an `Engine` was given where the server wants one (a bare token
    source); the message says how to wrap it."""


def require_engine(engine: object) -> Engine:
    """`engine`, checked to be an `Engine` (else `NotAnEngineError` saying how to make one)."""
    if isinstance(engine, Engine):
        return engine
    hint = ""
    if isinstance(engine, TokenSource):
        hint = (
            ": it is a token source; wrap it as Engine(source=your_source, grammar=...) "
            "(or format=..., see streamfold.adapters.formats), from streamfold.adapters.registry"
        )
    raise NotAnEngineError(
        f"create_app() takes a streamfold.adapters.registry.Engine, got "
        f"{type(engine).__name__}{hint}"
    )
