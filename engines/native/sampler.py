"""Per-request sampling: greedy, temperature, top-k, top-p, seeded, with logprobs.

Each request owns a `torch.Generator`, so a seeded request draws the same numbers whatever else
shares its batch, and a preempted request continues its own stream after recompute. Reported
logprobs are the model's own distribution (log-softmax of the raw logits), as vLLM reports
them by default, not the temperature-scaled or truncated one the token was drawn from.

`sample_batch` is what the engine runs: the whole batch as tensor ops on the logits' device
(per-row temperature, top-k and top-p as tensors, one inverse-CDF draw per sampled row from
its own generator, stop-id checks and logprobs), then ONE transfer to the host of everything
the chunks need. `sample` is the row-by-row reference it is tested against (same generators,
same draws, same tokens).
"""

from __future__ import annotations

import attrs
import torch

from .._source import SamplingParams
from .bitmask import apply_token_bitmask, apply_token_bitmask_

__all__ = ["Sample", "apply_token_bitmask", "make_generator", "sample", "sample_batch"]


@attrs.frozen(kw_only=True)
class Sample:
    token_id: int
    logprob: float
    top_logprobs: tuple[tuple[int, float], ...] | None = None
    stopped: bool = False  # the token is one of the row's stop ids (`sample_batch` only)


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


def sample_batch(
    logits: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator],
    stop_ids: list[frozenset[int]] | None = None,
    *,
    bitmask: torch.Tensor | None = None,
) -> list[Sample]:
    """`sample`'s tokens and logprobs for every row of `logits` [B, vocab] (float32), as batch
    tensor ops, plus whether each token is in its row's `stop_ids`; one host transfer.

    `logits` is the step's own buffer, which the next step overwrites, and is used as the
    draw's scratch: its values after the call are unspecified. (At 16 rows of a 201k
    vocabulary each [B, vocab] temporary is 13 MB; glibc gave them back to the system between
    steps, so every step page-faulted them in again: 8,000-12,000 faults a step, as much
    system time as the sampling's own.)

    `bitmask` [B, ceil(vocab / 32)] (int32, on the logits' device; see `bitmask`) restricts
    which tokens each row may draw; the reported logprobs stay the model's own, taken before
    the mask.

    Python branches read only the params (host values), never a tensor, so nothing waits for
    the device before the final transfer.
    """
    device = logits.device
    want = any(p.logprobs or p.top_logprobs for p in params)
    logprobs = torch.log_softmax(logits, dim=-1) if want else None
    if bitmask is not None:
        apply_token_bitmask_(logits, bitmask)
    drawn_rows = [row for row, p in enumerate(params) if p.temperature > 0]
    # One uniform per drawn row from the row's own generator, as `_draw` takes it.
    u = [torch.rand(1, generator=generators[r], device=device) for r in drawn_rows]
    drawn_params = [params[r] for r in drawn_rows]
    if len(drawn_rows) == len(params):  # every row draws: in place, no copy, no argmax
        chosen = _draw_rows(logits, drawn_params, torch.cat(u))
    else:  # greedy rows take the argmax, the drawn rows' entries are replaced
        chosen = logits.argmax(dim=-1)
        if drawn_rows:
            rows = torch.tensor(drawn_rows, device=device)
            drawn = _draw_rows(logits.index_select(0, rows), drawn_params, torch.cat(u))
            chosen = chosen.index_copy(0, rows, drawn)
    columns = [chosen.to(torch.float32)[:, None]]  # ids < 2**24 are exact in float32
    if stop_ids is not None:
        width = max(1, max(len(s) for s in stop_ids))
        table = torch.tensor([sorted(s) + [-1] * (width - len(s)) for s in stop_ids], device=device)
        columns.append((chosen[:, None] == table).any(dim=1, keepdim=True).to(torch.float32))
    top = max((p.top_logprobs for p in params), default=0)
    if logprobs is not None:
        columns.append(logprobs.gather(1, chosen[:, None]))
        if top:
            values, indices = logprobs.topk(top, dim=-1)
            columns += [indices.to(torch.float32), values]
    packed = torch.cat(columns, dim=1).tolist()  # the step's one device-to-host transfer
    out = []
    at = 1 + (stop_ids is not None)
    for row, p in enumerate(params):
        values_row = packed[row]
        top_row = None
        if p.top_logprobs:
            ids = values_row[at + 1 : at + 1 + p.top_logprobs]
            vals = values_row[at + 1 + top : at + 1 + top + p.top_logprobs]
            top_row = tuple((int(i), v) for i, v in zip(ids, vals, strict=True))
        out.append(
            Sample(
                token_id=int(values_row[0]),
                logprob=values_row[at] if want else float("nan"),
                top_logprobs=top_row,
                stopped=stop_ids is not None and values_row[1] > 0,
            )
        )
    return out


def _draw_rows(logits: torch.Tensor, params: list[SamplingParams], u: torch.Tensor) -> torch.Tensor:
    """`_draw` for each row of logits [R, vocab] with uniforms u [R], as batch ops; `logits`
    is overwritten (with the rows' cumulative distributions, where no top-k or top-p cut
    makes a new tensor first)."""
    device, vocab = logits.device, logits.shape[-1]
    temperature = torch.tensor([p.temperature for p in params], device=device)
    scaled = logits.div_(temperature.to(logits.dtype)[:, None])
    if any(p.top_k for p in params):
        k = [min(p.top_k, vocab) if p.top_k else 1 for p in params]
        best = scaled.topk(max(k), dim=-1).values
        kth = best.gather(1, torch.tensor(k, device=device)[:, None] - 1)
        cut = torch.tensor([bool(p.top_k) for p in params], device=device)[:, None]
        scaled = scaled.masked_fill(cut & (scaled < kth), float("-inf"))
    if any(p.top_p < 1 for p in params):
        sorted_logits, order = scaled.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        cumulative = probs.cumsum(-1)
        # A row without a top-p cut gets an unreachable bar: its drop mask is all False.
        bar = torch.tensor(
            [p.top_p if p.top_p < 1 else float("inf") for p in params], device=device
        )
        drop = (cumulative - probs) >= bar.to(probs.dtype)[:, None]
        scaled = scaled.scatter(1, order, sorted_logits.masked_fill(drop, float("-inf")))
    # softmax(-1).cumsum(-1) of `_draw`, in place: the same kernels, the same values (CPU's
    # softmax writes each row after reading it; elsewhere it gets its own output).
    if scaled.device.type == "cpu":
        cumulative = torch.softmax(scaled, -1, out=scaled).cumsum_(-1)
    else:
        cumulative = scaled.softmax(-1).cumsum_(-1)
    target = (u.to(cumulative.dtype) * cumulative[:, -1])[:, None]
    return torch.searchsorted(cumulative, target).clamp(max=vocab - 1)[:, 0]
