"""Per-request sampling: greedy, temperature, top-k, top-p, seeded, with logprobs.

Each request owns a `torch.Generator`, so a seeded request draws the same numbers whatever else
shares its batch, and a preempted request continues its own stream after recompute. Reported
logprobs are the model's own distribution (log-softmax of the raw logits), as vLLM reports
them by default, not the temperature-scaled or truncated one the token was drawn from.
"""

from __future__ import annotations

import attrs
import torch

from .._source import SamplingParams

__all__ = ["Sample", "make_generator", "sample"]


@attrs.frozen(kw_only=True)
class Sample:
    token_id: int
    logprob: float
    top_logprobs: tuple[tuple[int, float], ...] | None = None


def make_generator(params: SamplingParams, device: torch.device | str = "cpu") -> torch.Generator:
    generator = torch.Generator(device=device)
    if params.seed is None:
        generator.seed()
    else:
        generator.manual_seed(params.seed)
    return generator


def sample(
    logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator]
) -> list[Sample]:
    """One token per row of `logits` [B, vocab] (float32), each by its own params."""
    chosen = logits.argmax(dim=-1)
    for row, p in enumerate(params):
        if p.temperature > 0:
            chosen[row] = _draw(logits[row], p, generators[row])
    ids = chosen.tolist()
    if not any(p.logprobs or p.top_logprobs for p in params):
        # Nobody asked: skip a log-softmax over the whole vocabulary (the Sample's logprob
        # is then NaN and the engine does not report it).
        return [Sample(token_id=i, logprob=float("nan")) for i in ids]
    logprobs = torch.log_softmax(logits, dim=-1)
    picked = logprobs.gather(1, chosen[:, None])[:, 0].tolist()
    out = []
    for row, p in enumerate(params):
        top = None
        if p.top_logprobs:
            values, indices = logprobs[row].topk(p.top_logprobs)
            top = tuple(zip(indices.tolist(), values.tolist(), strict=True))
        out.append(Sample(token_id=ids[row], logprob=picked[row], top_logprobs=top))
    return out


def _draw(logits: torch.Tensor, p: SamplingParams, generator: torch.Generator) -> torch.Tensor:
    scaled = logits / p.temperature
    if p.top_k:
        kth = scaled.topk(min(p.top_k, scaled.shape[-1])).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if p.top_p < 1:
        sorted_logits, order = scaled.sort(descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        # Drop a token when the tokens ranked above it already reach top_p; keep at least one.
        drop = (cumulative - sorted_logits.softmax(-1)) >= p.top_p
        scaled = scaled.scatter(0, order[drop], float("-inf"))
    # Inverse-CDF draw: one uniform per token, where torch.multinomial over a 201k vocabulary
    # took ~30 ms on CPU.
    cumulative = scaled.softmax(-1).cumsum(-1)
    u = torch.rand(1, generator=generator, device=logits.device) * cumulative[-1]
    return torch.searchsorted(cumulative, u).clamp(max=cumulative.shape[-1] - 1)[0]
