"""The seam every token source implements: a request in, an async stream of token chunks out.

Engines know nothing of Responses events. They yield `TokenChunk`s as their steps produce them
(one token, or several when speculative decoding or a stream interval batches them), and the
driver in `streamfold.adapters` splits each chunk into single tokens for the reducer.

Cancellation is the consumer closing the iterator: `generate` is an async generator, and its
`finally` block must abort the request in the engine, so a client that goes away leaves no work
running behind it.

Readiness (optional): the iterator `generate` returns may also have `take_ready(limit)`
(`ReadyChunks`), which hands over, without waiting, chunks the source has *already produced*
and holds (a replay without delay holds all of its trace; an engine's per-request queue holds
what its steps made while the consumer was busy). The driver steps those together with the
chunk it just received into one batch of events, so a consumer slower than its source (a busy
server) writes one frame for several chunks instead of one each; a source without the method
gives one chunk per batch, as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import attrs

from streamfold.statemachine import FINISH_REASONS, FinishReason

if TYPE_CHECKING:
    import torch

__all__ = [
    "FINISH_REASONS",
    "DecodingConstraint",
    "FinishReason",
    "GenerationRequest",
    "LogitsConstraint",
    "ReadyChunks",
    "SamplingParams",
    "TokenChunk",
    "TokenSource",
]


def _non_negative(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be >= 0, got {value}")


@attrs.frozen(kw_only=True)
class SamplingParams:
    """Per-request sampling. `temperature=0` means greedy; `top_k=0` means no top-k cut."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = attrs.field(default=0, validator=_non_negative)
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int = attrs.field(default=0, validator=_non_negative)

    def __attrs_post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@runtime_checkable
class LogitsConstraint(Protocol):
    """Which tokens one request may sample next (structured outputs): a per-sequence hook that
    the native engine applies to a whole batch at once.

    Before each sampling step the engine calls `fill_bitmask(bitmask, row)` for every
    constrained sequence of the batch: `bitmask` is the batch's int32 CPU tensor
    [batch, ceil(vocab / 32)], every word preset to -1 (all allowed), and the constraint
    writes its own `row`, where bit `j` of word `w` allows token `32 * w + j` (llguidance's
    layout: `llguidance.torch.fill_next_token_bitmask(matcher, bitmask, row)` is a complete
    implementation). The engine moves the stacked rows to the device in one non-blocking copy
    and masks the batch's logits in one op before sampling; unconstrained rows stay all
    allowed. After sampling, `advance(token_id)` tells the constraint the token its sequence
    took. Logprobs stay the model's own (unmasked) distribution, as vLLM reports them.

    A constraint class may also define a classmethod `fill_batch(bitmask, rows)`, `rows` a
    list of (row, constraint) of that class: the engine then fills all of a step's rows of
    that class in that one call, which returns {row: exception} for the rows that failed.
    On the CPU the engine fills a step's rows in a thread of its own while the forward runs:
    `fill_bitmask`/`fill_batch` and `advance` may be called from different threads, never
    at the same time.

    A constraint is state for one request: never share one between requests. It must allow at
    least one token (an accepting grammar allows the end-of-sequence token). An exception from
    either method ends its request alone with `finish_reason="error"`.
    """

    def fill_bitmask(self, bitmask: torch.Tensor, row: int) -> None: ...

    def advance(self, token_id: int) -> None: ...


@attrs.frozen(kw_only=True)
class DecodingConstraint:
    """A grammar the whole completion must follow, as data.

    `grammar` is llguidance's grammar text (Lark, or its top-level JSON holding several Lark
    grammars), written by the chat format from what the request asked for (`text.format`,
    `tool_choice`, strict tools, custom tool grammars). An engine that can enforce it masks every
    sampled token by it (the native engine through `streamfold.engines.guidance`; vLLM and
    SGLang through their own llguidance backends); an engine that cannot is served as
    `Engine(enforces_constraints=False)`, and the server says so once in its log.
    `summary` names what it enforces, for logs and errors (`"json_schema 'weather' in final"`).
    """

    grammar: str
    summary: str = ""


@attrs.frozen(kw_only=True)
class GenerationRequest:
    """What a token source needs to generate one completion.

    A source should stop after `max_output_tokens` tokens (finish `"length"`) and at the first
    of `stop_token_ids` it generates (finish `"stop"`, the stop token included in the chunk, or
    named in `stop_reason` where the engine leaves it out). The driver holds the budget anyway:
    tokens past `max_output_tokens` are not stepped, the response ends `incomplete` and the
    source's stream is closed; a source that ignores the budget only wastes its engine's work.
    Stop ids the driver does not enforce: the reducer's grammar reads them, and what a model
    writes after one (a source that ignores them) becomes more output.

    `constraint` (the native engine only) restricts each next token (`LogitsConstraint`);
    `decoding` says what the completion must follow as a grammar (`DecodingConstraint`).
    """

    request_id: str
    prompt_token_ids: tuple[int, ...]
    model: str = ""
    max_output_tokens: int | None = None
    sampling: SamplingParams = SamplingParams()
    stop_token_ids: tuple[int, ...] = ()
    constraint: LogitsConstraint | None = attrs.field(default=None, eq=False, repr=False)
    #: The grammar the whole completion must follow, as data every engine can read (vLLM and
    #: SGLang hand it to their grammar backends; the native engine makes a `constraint` of it).
    decoding: DecodingConstraint | None = None


@attrs.frozen(kw_only=True)
class TokenChunk:
    """One engine output: the tokens one step made, and on the last chunk the finish reason.

    `logprobs`, when present, has one float per token. `top_logprobs`, when present, has one
    tuple of `(token_id, logprob)` pairs per token. A chunk may carry no tokens at all (a final
    chunk that only reports the finish reason). `error` explains a `finish_reason == "error"`.
    `stop_reason`, on a `"stop"` chunk, is what the engine matched (a stop token id or a stop
    string; vLLM gives None for the model's own end-of-sequence token), kept for traces.
    `cached_tokens`, on the last chunk, is how many prompt tokens the source took from its
    prefix cache instead of computing them (`usage.input_tokens_details.cached_tokens`).
    """

    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] | None = None
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...] | None = None
    finish_reason: FinishReason | None = None
    error: str | None = None
    stop_reason: int | str | None = None
    cached_tokens: int = attrs.field(default=0, validator=_non_negative)

    def __attrs_post_init__(self) -> None:
        if self.logprobs is not None and len(self.logprobs) != len(self.token_ids):
            raise ValueError(
                f"TokenChunk has {len(self.token_ids)} tokens but {len(self.logprobs)} logprobs;"
                " give one logprob per token or none"
            )
        if self.top_logprobs is not None and len(self.top_logprobs) != len(self.token_ids):
            raise ValueError(
                f"TokenChunk has {len(self.token_ids)} tokens but {len(self.top_logprobs)}"
                " top_logprobs entries; give one per token or none"
            )
        if self.finish_reason is not None and self.finish_reason not in FINISH_REASONS:
            raise ValueError(
                f"finish_reason must be one of {FINISH_REASONS}, got {self.finish_reason!r}"
            )


@runtime_checkable
class TokenSource(Protocol):
    """Anything that turns a `GenerationRequest` into an async stream of `TokenChunk`s.

    The last chunk carries `finish_reason`. Closing the iterator early (`aclose()`) must abort
    the request and free its resources: write `generate` as an async generator whose `finally`
    aborts. An `await` in that `finally` must be shielded
    (`with anyio.CancelScope(shield=True): await engine.abort(...)`): when the consumer's task is
    cancelled while the source awaits its engine, the `finally` runs inside the cancelled scope
    and an unshielded `await` there is cancelled at once, leaking the request.

    What a source should enforce (see `GenerationRequest`): the budget and the stop ids. What the
    driver guarantees whatever the source does: no more than `max_output_tokens` tokens are
    stepped (the response then ends `incomplete`), every response ends with exactly one terminal
    event, a source that raises ends it `failed` (the exception logged on `streamfold.driver`,
    the client told only that the source failed), and one that ends without a finish reason
    ends it `failed` too.
    """

    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]: ...


@runtime_checkable
class ReadyChunks(Protocol):
    """The optional readiness hint of a chunk stream (see the module docstring)."""

    def take_ready(self, limit: int) -> list[TokenChunk]:
        """Up to `limit` of the next chunks, those the source holds now, in order; `[]` when
        none is ready. Never waits, and never makes a chunk that would not otherwise have been
        made by now (no read-ahead). After the finished chunk it returns `[]`."""
