"""A token source that plays recorded generations, one per iteration of the agent loop.

`scripts[model]` is the list of generations (harmony text) a response of that model makes,
in order: the loop's n-th generation of a response (its request id ends `-n`) plays
`scripts[model][n]`. Every prompt it was given is kept, so tests read what the model saw.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import anyio

from streamfold.engines import GenerationRequest, TokenChunk
from streamfold.engines.vocab import harmony_encoding, load_harmony_vocabulary


def encode(text: str) -> list[int]:
    return list(harmony_encoding().encode(text, allowed_special="all"))


def decode(ids: Sequence[int]) -> str:
    return str(harmony_encoding().decode(list(ids)))


class ScriptedAgentSource:
    def __init__(
        self,
        scripts: Mapping[str, Sequence[str]],
        *,
        per_chunk: int = 3,
        delay: float = 0.0,
        drop_stop_token: bool = False,
        held: bool = False,
    ) -> None:
        self.scripts = dict(scripts)
        self.per_chunk = per_chunk
        self.delay = delay
        self.drop_stop_token = drop_stop_token
        # Held: each generation is produced whole before its consumer reads it (an engine
        # whose consumer lags), and offered through the readiness hint (`ReadyChunks`).
        self.held = held
        self.requests: list[GenerationRequest] = []
        self.open = 0

    def prompts(self, model: str) -> list[str]:
        return [decode(r.prompt_token_ids) for r in self.requests if r.model == model]

    def generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        self.requests.append(request)
        chunks = self._generate(request)
        return _Held(chunks) if self.held else chunks

    async def _generate(self, request: GenerationRequest) -> AsyncIterator[TokenChunk]:
        self.open += 1
        try:
            # The loop's n-th generation has request id `<response id>-n`; a plain one none.
            tail = request.request_id.rsplit("-", 1)[-1]
            index = int(tail) if "-" in request.request_id and tail.isdigit() else 0
            ids = encode(self.scripts[request.model][index])
            if self.drop_stop_token:
                ids = ids[:-1]  # as an engine that leaves its stop token out of the output
            limit = request.max_output_tokens
            for i in range(0, len(ids), self.per_chunk):
                if self.delay:
                    await anyio.sleep(self.delay)
                chunk = tuple(ids[i : i + self.per_chunk])
                if limit is not None and i + len(chunk) >= limit:
                    yield TokenChunk(token_ids=chunk[: limit - i], finish_reason="length")
                    return
                yield TokenChunk(token_ids=chunk)
            # An engine leaving its stop token out names it in stop_reason (as vLLM does).
            stop = encode(self.scripts[request.model][index])[-1] if self.drop_stop_token else None
            yield TokenChunk(finish_reason="stop", stop_reason=stop)
        finally:
            self.open -= 1

    def engine(self) -> Any:
        from streamfold.adapters.registry import Engine
        from streamfold.statemachine import HarmonyGrammar

        grammar = HarmonyGrammar(vocabulary=load_harmony_vocabulary())
        return Engine(source=self, grammar=lambda model: grammar)


class _Held:
    """A generation produced whole at its first read, then handed over on request: one chunk
    by `__anext__`, the rest through `take_ready` (before the first read, none is ready)."""

    def __init__(self, chunks: AsyncIterator[TokenChunk]) -> None:
        self._chunks = chunks
        self._held: collections.deque[TokenChunk] | None = None

    def __aiter__(self) -> _Held:
        return self

    async def __anext__(self) -> TokenChunk:
        if self._held is None:
            self._held = collections.deque([chunk async for chunk in self._chunks])
        if not self._held:
            raise StopAsyncIteration
        return self._held.popleft()

    def take_ready(self, limit: int) -> list[TokenChunk]:
        held = self._held or collections.deque()
        return [held.popleft() for _ in range(min(limit, len(held)))]

    async def aclose(self) -> None:
        await self._chunks.aclose()  # type: ignore[attr-defined]
