"""Per-token cost of the vLLM and SGLang adapters themselves.

Each engine here yields pre-built outputs in the real shapes (one token per output, the worst
case for per-output overhead), so the time measured is the adapter's: reading the output,
slicing logprobs, building the `TokenChunk`. Run: `python benchmarks/adapter_overhead.py`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import anyio

from streamfold.adapters import SGLangTokenSource, VLLMApi, VLLMTokenSource
from streamfold.engines import GenerationRequest, SamplingParams

N = 20_000
TOP = 5
API = VLLMApi(sampling_params=dict, output_kinds={"delta": 1, "cumulative": 0})


@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class Completion:
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None
    stop_reason: int | None = None


@dataclass
class Output:
    outputs: list[Completion]
    finished: bool
    request_id: str = "r"


def position(token_id: int) -> dict[int, Logprob]:
    entries = {token_id: Logprob(-0.1, 1)}
    entries.update({900_000 + j: Logprob(-1.0 - j, j + 2) for j in range(TOP)})
    return entries


@dataclass
class VLLMEngine:
    logprobs: bool
    outs: list[Output] = field(init=False)

    def __post_init__(self) -> None:
        self.outs = [
            Output(
                [
                    Completion(
                        [i % 1000],
                        [position(i % 1000)] if self.logprobs else None,
                        "length" if i == N - 1 else None,
                    )
                ],
                i == N - 1,
            )
            for i in range(N)
        ]

    async def generate(self, prompt: Any, params: Any, request_id: str) -> Any:
        for out in self.outs:
            yield out

    async def abort(self, request_id: str) -> None:
        pass


class TokenizerManager:
    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        pass


@dataclass
class SGLangEngine:
    logprobs: bool
    tokenizer_manager: TokenizerManager = field(default_factory=TokenizerManager)
    outs: list[dict[str, Any]] = field(init=False)

    def __post_init__(self) -> None:
        self.outs = []
        for i in range(N):
            meta: dict[str, Any] = {
                "id": "r",
                "finish_reason": {"type": "length", "length": N} if i == N - 1 else None,
                "completion_tokens": i + 1,
            }
            if self.logprobs:
                meta["output_token_logprobs"] = [(-0.1, i % 1000, None)]
                meta["output_top_logprobs"] = [[(-1.0 - j, 900_000 + j, None) for j in range(TOP)]]
            self.outs.append({"text": "x", "output_ids": [i % 1000], "meta_info": meta})

    async def async_generate(self, **kwargs: Any) -> Any:
        async def stream() -> Any:
            for out in self.outs:
                yield out

        return stream()


async def tokens_per_second(source: Any, logprobs: bool) -> float:
    sampling = SamplingParams(logprobs=logprobs, top_logprobs=TOP if logprobs else 0)
    request = GenerationRequest(request_id="r", prompt_token_ids=(1,), sampling=sampling)
    start = time.perf_counter()
    count = 0
    async for chunk in source.generate(request):
        count += len(chunk.token_ids)
    return count / (time.perf_counter() - start)


async def main() -> None:
    print(f"{N} one-token outputs, best of 3")
    for logprobs in (False, True):
        label = f"top-{TOP} logprobs" if logprobs else "no logprobs"
        for name, source in (
            ("vLLM", VLLMTokenSource(VLLMEngine(logprobs), api=API)),
            ("SGLang", SGLangTokenSource(SGLangEngine(logprobs))),
        ):
            best = max([await tokens_per_second(source, logprobs) for _ in range(3)])
            print(f"{name:7s} {label:17s} {best / 1e3:6.0f}k tokens/s  {1e6 / best:5.1f} us/token")


if __name__ == "__main__":
    anyio.run(main)
