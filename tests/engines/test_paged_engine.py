"""Paged KV cache, continuous batching and preemption give the dense/transformers answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from gptoss_tiny import WINDOW, greedy_request, hf_greedy, random_prompts
from paged_harness import scattered_paged_cache

from streamfold.engines import GenerationRequest, SamplingParams, TokenChunk
from streamfold.engines.native.core import EngineCore
from streamfold.engines.native.gptoss.model import DenseAttention, GptOssModel
from streamfold.engines.native.paged_attention import StepSequence

ATOL = 1e-4


def _tokens(chunks: list[TokenChunk]) -> list[int]:
    return [t for c in chunks for t in c.token_ids]


def _dense_greedy(model: GptOssModel, prompt: list[int], n: int) -> list[int]:
    cache = DenseAttention(model)
    ids, out = torch.tensor(prompt), []
    positions = torch.arange(len(prompt))
    for _ in range(n):
        cache.begin(positions)
        out.append(int(model(ids, positions, cache)[-1].argmax()))
        positions = torch.tensor([cache.length])
        ids = torch.tensor(out[-1:])
    return out


@pytest.mark.parametrize("block_size", [1, 3, 16])
def test_paged_prefill_and_decode_logits_match_transformers(
    hf_model: Any, model: GptOssModel, block_size: int
) -> None:
    cache, attention = scattered_paged_cache(
        model, num_blocks=64, block_size=block_size, seed=block_size
    )
    # 6 ends exactly on a block boundary for block sizes 1 and 3; both cross the window.
    seqs = random_prompts([6, 2 * WINDOW + 1], seed=block_size)
    full = [s + random_prompts([WINDOW + 3], seed=10 + i)[0] for i, s in enumerate(seqs)]
    with torch.no_grad():
        expected = [hf_model(torch.tensor(f)[None]).logits[0] for f in full]
    cached = [0, 0]
    lengths = [len(s) for s in seqs]
    while lengths[0] < len(full[0]):
        step = [
            StepSequence(seq_id=i, num_cached=cached[i], num_new=lengths[i] - cached[i])
            for i in range(2)
        ]
        for s in step:
            cache.blocks.reserve(s.seq_id, s.num_cached + s.num_new)
        positions = attention.prepare(step)
        ids = torch.tensor([t for i in range(2) for t in full[i][cached[i] : lengths[i]]])
        logits = model(ids, positions, attention)
        row = 0
        for i in range(2):
            rows = slice(row, row + lengths[i] - cached[i])
            torch.testing.assert_close(
                logits[rows], expected[i][cached[i] : lengths[i]], atol=ATOL, rtol=ATOL
            )
            row = rows.stop
            cached[i], lengths[i] = lengths[i], lengths[i] + 1


@pytest.mark.parametrize("prefix_cache", [False, True])
def test_sliding_layers_keep_only_window_blocks(model: GptOssModel, prefix_cache: bool) -> None:
    engine = EngineCore(model, block_size=2, num_blocks=256, prefix_cache=prefix_cache)
    engine.add_request(greedy_request(0, random_prompts([40])[0], 8))
    engine.step()
    sliding, full = (engine.blocks.table(0, g) for g in range(2))
    assert engine.cache.windows == (WINDOW, None)
    live = [b for b in sliding if b >= 0]
    assert len(live) == WINDOW // 2  # the last 8 of 40 tokens, in blocks of 2
    assert len(full) == 20 and min(full) >= 0  # all 40 tokens kept
    engine.step()  # the decode at position 40 sees positions 33..40: blocks 16..20
    live = [b for b in engine.blocks.table(0, 0) if b >= 0]
    # With the prefix cache, a step's end (`commit`) lets go of what the next query (41,
    # seeing 34..41) will not read: block 16 goes at once (still cached) instead of next step.
    assert len(live) == WINDOW // 2 + (not prefix_cache)
    assert engine.blocks.blocks_in_use() == len(live) + len(full)


def test_batched_generation_matches_one_at_a_time_and_transformers(
    hf_model: Any, model: GptOssModel
) -> None:
    lengths = [3, 7, 8, 9, 17, 30, 1, 12]
    prompts = random_prompts(lengths, seed=1)
    n = 24
    engine = EngineCore(model, block_size=4, num_blocks=512)
    batched = engine.run_to_completion([greedy_request(i, p, n) for i, p in enumerate(prompts)])
    for i, prompt in enumerate(prompts):
        assert _tokens(batched[f"r{i}"]) == hf_greedy(hf_model, prompt, n), f"request {i}"
        assert _tokens(batched[f"r{i}"]) == _dense_greedy(model, prompt, n)
        assert batched[f"r{i}"][-1].finish_reason == "length"
    assert engine.blocks.blocks_in_use() == 0


def test_preempted_requests_recompute_to_the_same_tokens(model: GptOssModel) -> None:
    prompts = random_prompts([5, 9, 14, 6, 11, 20], seed=2)
    n = 20
    roomy = EngineCore(model, block_size=4, num_blocks=512)
    expected = roomy.run_to_completion([greedy_request(i, p, n) for i, p in enumerate(prompts)])
    assert roomy.scheduler.num_preemptions == 0
    tight = EngineCore(model, block_size=4, num_blocks=18)  # room for about two sequences
    got = tight.run_to_completion([greedy_request(i, p, n) for i, p in enumerate(prompts)])
    assert tight.scheduler.num_preemptions > 0
    for key in expected:
        assert _tokens(got[key]) == _tokens(expected[key]), key
        assert got[key][-1].finish_reason == "length"
    assert tight.blocks.blocks_in_use() == 0


def test_abort_frees_blocks_at_once(model: GptOssModel) -> None:
    engine = EngineCore(model, block_size=4, num_blocks=64)
    for i, p in enumerate(random_prompts([10, 12], seed=3)):
        engine.add_request(greedy_request(i, p, 50))
    engine.step()
    engine.step()
    in_use = engine.blocks.blocks_in_use()
    assert engine.abort("r0")
    assert engine.blocks.blocks_in_use() < in_use
    assert engine.abort("r1") and engine.blocks.blocks_in_use() == 0
    assert not engine.abort("r1") and not engine.has_work()


def test_stop_ids_end_with_the_stop_token_included(model: GptOssModel) -> None:
    prompt = random_prompts([9], seed=4)[0]
    free_run = _dense_greedy(model, prompt, 10)
    stop = free_run[4]
    engine = EngineCore(model, block_size=4, num_blocks=64)
    request = GenerationRequest(
        request_id="s",
        prompt_token_ids=tuple(prompt),
        max_output_tokens=10,
        sampling=SamplingParams(temperature=0.0),
        stop_token_ids=(stop,),
    )
    chunks = engine.run_to_completion([request])["s"]
    assert _tokens(chunks) == free_run[: free_run.index(stop) + 1]
    assert chunks[-1].finish_reason == "stop" and chunks[-1].stop_reason == stop


def test_gpt_oss_stop_ids_are_on_by_default(model: GptOssModel) -> None:
    engine = EngineCore(model, num_blocks=8)
    engine.add_request(greedy_request(0, [1, 2, 3], 4))
    seq = engine.scheduler.waiting[0]
    assert {200002, 200012, 199999} <= seq.stop_ids


def _sampled(model: GptOssModel, seed: int | None, others: int) -> list[TokenChunk]:
    engine = EngineCore(model, block_size=4, num_blocks=256)
    params = SamplingParams(temperature=0.9, top_p=0.9, top_k=50, seed=seed, top_logprobs=3)
    requests = [
        GenerationRequest(
            request_id="x", prompt_token_ids=(5, 6, 7), max_output_tokens=16, sampling=params
        )
    ]
    fillers = random_prompts([4] * others, seed=5)
    requests += [greedy_request(i, p, 8) for i, p in enumerate(fillers)]
    return engine.run_to_completion(requests)["x"]


def test_a_seed_reproduces_a_sampled_run_whatever_shares_the_batch(model: GptOssModel) -> None:
    alone = _sampled(model, seed=123, others=0)
    crowded = _sampled(model, seed=123, others=5)
    assert _tokens(alone) == _tokens(crowded)
    assert _tokens(_sampled(model, seed=124, others=0)) != _tokens(alone)
    for chunk in alone:
        assert chunk.logprobs is not None and chunk.top_logprobs is not None
        (top,) = chunk.top_logprobs
        assert len(top) == 3 and top[0][1] >= top[1][1] >= top[2][1]
        assert chunk.logprobs[0] <= top[0][1] + 1e-6


def test_requests_that_can_never_fit_finish_with_an_error(model: GptOssModel) -> None:
    engine = EngineCore(model, block_size=4, num_blocks=6)
    chunk = engine.add_request(greedy_request(0, list(range(100)), 4))
    assert chunk is not None and chunk.finish_reason == "error"
    assert "KV cache budget" in (chunk.error or "")
    bad = engine.add_request(greedy_request(1, [999999], 4))
    assert bad is not None and bad.finish_reason == "error" and "outside" in (bad.error or "")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the CUDA path needs a CUDA GPU")
def test_the_cuda_path_generates_what_the_cpu_path_does(hf_dir: Path, model: GptOssModel) -> None:
    """Where a GPU is: the same checkpoint on cuda (fp32, no TF32) gives the CPU engine's logits
    and greedy tokens, batched and paged."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cuda = GptOssModel.from_pretrained(hf_dir, device="cuda")
    prompt = random_prompts([21], seed=5)[0]
    logits = {}
    for name, m in (("cpu", model), ("cuda", cuda)):
        cache = DenseAttention(m)
        positions = torch.arange(len(prompt), device=m.device)
        cache.begin(positions)
        with torch.no_grad():
            logits[name] = m(torch.tensor(prompt, device=m.device), positions, cache).cpu()
    assert torch.allclose(logits["cuda"], logits["cpu"], atol=1e-3)

    prompts = random_prompts([3, 9, 17, 30], seed=4)

    def greedy(m: GptOssModel) -> dict[str, list[int]]:
        engine = EngineCore(m, block_size=4, num_blocks=512)
        done = engine.run_to_completion([greedy_request(i, p, 16) for i, p in enumerate(prompts)])
        return {request_id: _tokens(chunks) for request_id, chunks in done.items()}

    assert greedy(cuda) == greedy(model)


@pytest.mark.parametrize("decode", ["auto", None])
def test_step_calls_handoff_once_between_the_layers_and_the_unembedding(
    model: GptOssModel, decode: str | None
) -> None:
    # A served engine posts the previous step's tokens from `handoff`: after the layers (whose
    # many small torch calls each need the GIL) and before the unembedding matmul (on CPU most
    # of a step, without the GIL), so the event loop's Python runs beside that matmul.
    engine = EngineCore(model, block_size=4, num_blocks=64, decode=decode)  # type: ignore[arg-type]
    engine.add_request(greedy_request(0, random_prompts([9])[0], 4))
    engine.add_request(greedy_request(1, random_prompts([5], seed=1)[0], 4))
    seen: list[tuple[bool, bool]] = []

    def handoff() -> None:
        logits = engine._logits_buffer(2)
        seen.append((bool(torch.isnan(logits).all()), not torch.equal(engine.cache.k, k_before)))

    for _ in range(4):  # a prefill step, then decode steps (static ones with "auto")
        engine._logits_buffer(2).fill_(float("nan"))
        k_before = engine.cache.k.clone()
        engine.step(handoff)
    # each time: logits not yet written, this step's K/V already written
    assert seen == [(True, True)] * 4
    assert not engine.has_work() and model.before_unembedding is None
