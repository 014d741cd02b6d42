"""The prefix cache in the paged KV pool (issue 34): a new sequence reuses the full blocks an
earlier one computed for the same prefix, computes only the rest, and generates exactly what it
generates without the cache; the pool never frees a referenced block nor writes a cached one."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from gptoss_tiny import greedy_request, hf_greedy, random_prompts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamfold.engines import TokenChunk
from streamfold.engines.native.core import EngineCore
from streamfold.engines.native.gptoss.model import GptOssModel
from streamfold.engines.native.kv_blocks import FREED, BlockManager

BS = 4  # the tiny model's window is 8: two blocks
N = 5  # tokens generated per request


def _tokens(chunks: list[TokenChunk]) -> list[int]:
    return [t for c in chunks for t in c.token_ids]


def test_a_shared_prefix_is_reused_and_greedy_matches_transformers(
    hf_model: Any, model: GptOssModel
) -> None:
    """A system-prompt-like prefix, then an agent's next turn: the prompt so far, the answer,
    and a tool result. Later requests take every full block of what they share from the cache
    (a whole prompt hit still computes its last block), and every request's greedy tokens are
    transformers' and the cache-off engine's."""
    prefix = random_prompts([23], seed=11)[0]
    first = [*prefix, 7, 8, 9]
    engine = EngineCore(model, block_size=BS, num_blocks=128)
    (turn1,) = engine.run_to_completion([greedy_request(0, first, N)]).values()
    assert turn1[-1].cached_tokens == 0
    turn2 = first + _tokens(turn1) + [300, 301, 302]
    sibling = [*prefix, 44, 45]
    again = list(first)
    requests = [
        greedy_request(1, turn2, N),
        greedy_request(2, sibling, N),
        greedy_request(3, again, N),
    ]
    got = engine.run_to_completion(requests)
    # turn 2 shares first + the answer but the last answer token (its K/V never computed).
    shared = len(first) + N - 1
    assert got["r1"][-1].cached_tokens == shared // BS * BS
    assert got["r2"][-1].cached_tokens == len(prefix) // BS * BS
    assert got["r3"][-1].cached_tokens == (len(again) - 1) // BS * BS
    plain = EngineCore(model, block_size=BS, num_blocks=128, prefix_cache=False)
    expected = plain.run_to_completion(requests)
    for request in requests:
        key, prompt = request.request_id, list(request.prompt_token_ids)
        assert _tokens(got[key]) == _tokens(expected[key]) == hf_greedy(hf_model, prompt, N), key
        assert expected[key][-1].cached_tokens == 0
    assert engine.blocks.blocks_in_use() == 0 and engine.blocks.cached


def test_a_long_suffix_after_a_hit_reads_the_window_from_the_pool(
    hf_model: Any, model: GptOssModel
) -> None:
    """The suffix after the hit is longer than the window, so the sliding layers' first new
    query reads cached blocks that the step's own reservation no longer covers."""
    prefix = random_prompts([16], seed=12)[0]
    engine = EngineCore(model, block_size=BS, num_blocks=128)
    engine.run_to_completion([greedy_request(0, [*prefix, 1], N)])
    long = prefix + random_prompts([21], seed=13)[0]
    got = engine.run_to_completion([greedy_request(1, long, N)])["r1"]
    assert got[-1].cached_tokens == 16
    assert _tokens(got) == hf_greedy(hf_model, long, N)


def test_prefix_cache_off_reports_nothing_and_keeps_nothing(model: GptOssModel) -> None:
    prompt = random_prompts([17], seed=14)[0]
    engine = EngineCore(model, block_size=BS, num_blocks=64, prefix_cache=False)
    for i in range(2):
        chunks = engine.run_to_completion([greedy_request(i, prompt, N)])[f"r{i}"]
        assert chunks[-1].cached_tokens == 0
    assert not engine.blocks.cached and engine.scheduler.num_cached_tokens == 0


def test_evicted_and_preempted_sequences_still_generate_the_same_tokens(
    model: GptOssModel,
) -> None:
    """A pool too small for the batch: sequences are preempted and recomputed (from their own
    cached blocks where those survive), cached blocks are evicted, and no token changes."""
    prompts = [p + s for p in random_prompts([12, 9], seed=15) for s in random_prompts([3, 6, 2])]
    requests = [greedy_request(i, p, 12) for i, p in enumerate(prompts)]
    roomy = EngineCore(model, block_size=BS, num_blocks=256, prefix_cache=False)
    expected = roomy.run_to_completion(requests)
    tight = EngineCore(model, block_size=BS, num_blocks=20)
    got = tight.run_to_completion(requests)
    assert tight.scheduler.num_preemptions > 0 and tight.blocks.num_evictions > 0
    assert tight.scheduler.num_cached_tokens > 0
    for key in expected:
        assert _tokens(got[key]) == _tokens(expected[key]), key


# --- random interleavings --------------------------------------------------------------------

PREFIXES = random_prompts([13, 10, 6], seed=16)
SUFFIXES = random_prompts([0, 1, 3, 6, 9], seed=17)


@pytest.fixture(scope="module")
def universe(model: GptOssModel) -> dict[tuple[int, ...], list[int]]:
    """Every prompt the property draws, with its greedy tokens from the cache-off engine:
    prefixes x suffixes, and each one's next agent turn (prompt + answer + two more tokens)."""
    prompts = [p + s for p in PREFIXES for s in SUFFIXES]
    roomy = EngineCore(model, block_size=BS, num_blocks=512, prefix_cache=False)
    first = roomy.run_to_completion([greedy_request(i, p, N) for i, p in enumerate(prompts)])
    answers = {tuple(p): _tokens(first[f"r{i}"]) for i, p in enumerate(prompts)}
    turns = [p + answers[tuple(p)] + [5, 6] for p in prompts]
    second = roomy.run_to_completion([greedy_request(i, p, N) for i, p in enumerate(turns)])
    answers.update({tuple(p): _tokens(second[f"r{i}"]) for i, p in enumerate(turns)})
    return answers


def _turn(which: int, universe: dict[tuple[int, ...], list[int]]) -> list[int]:
    prompt = [p + s for p in PREFIXES for s in SUFFIXES][which]
    return prompt + universe[tuple(prompt)] + [5, 6]


def test_admission_shares_every_groups_hits_before_taking_fresh_blocks(
    model: GptOssModel, universe: dict[tuple[int, ...], list[int]]
) -> None:
    """Found by the property below: a preempted sequence came back to hits in both groups,
    and the fresh block its sliding group took evicted one of its full group's hits, so one
    block served both groups and its fourth token changed."""
    turns = [_turn(0, universe), _turn(7, universe)]
    engine = EngineCore(model, block_size=BS, num_blocks=16)
    got = engine.run_to_completion([greedy_request(i, t, N) for i, t in enumerate(turns)])
    assert engine.scheduler.num_preemptions > 0 and engine.scheduler.num_cached_tokens > 0
    for i, turn in enumerate(turns):
        assert _tokens(got[f"r{i}"]) == universe[tuple(turn)]


def watch_takes(blocks: BlockManager) -> set[int]:
    """The blocks handed out for writing from now on (a registered one only by eviction)."""
    taken: set[int] = set()
    take = blocks._take

    def recording() -> int:
        block = take()
        taken.add(block)
        return block

    blocks._take = recording  # type: ignore[method-assign]
    return taken


def check_pool(
    engine: EngineCore,
    kept: dict[int, tuple[Any, torch.Tensor, torch.Tensor]],
    taken: set[int],
) -> None:
    """The pool's invariants after a step: each block's count is the number of tables holding
    it; free blocks are unheld; the free lists and the held blocks partition the pool; and
    every cached block's K/V is what it was when it was registered, unless the block was
    evicted and handed out again since (it may then hold the same tokens, recomputed, under the
    same key: a sequence whose sliding window missed recomputes full blocks that were cached)."""
    blocks: BlockManager = engine.blocks
    held = Counter(
        b for tables in blocks.tables.values() for table in tables for b in table if b != FREED
    )
    assert blocks.refs == [held[b] for b in range(blocks.num_blocks)]
    free, evictable = list(blocks._free), list(blocks._evictable)
    assert len(set(free) | set(evictable)) == len(free) + len(evictable)
    assert set(free) | set(evictable) | set(held) == set(range(blocks.num_blocks))
    assert not (set(free) | set(evictable)) & set(held)
    assert all(blocks.key_of[b] is None for b in free)
    assert all(blocks.key_of[b] is not None for b in evictable)
    assert all(blocks.key_of[b] == key for key, b in blocks.cached.items())
    k, v = engine.cache.k, engine.cache.v
    for b, (key, old_k, old_v) in list(kept.items()):
        if b in taken or blocks.key_of[b] != key:  # evicted: no longer the same cached block
            del kept[b]
            continue
        assert torch.equal(k[:, :, b], old_k) and torch.equal(v[:, :, b], old_v), b
    taken.clear()
    for key, b in blocks.cached.items():
        kept.setdefault(b, (key, k[:, :, b].clone(), v[:, :, b].clone()))


@pytest.mark.slow  # 20 engines of up to 8 requests: 1.5-2.5 min on 2 loaded cores
@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    picks=st.lists(
        st.tuples(
            st.integers(0, len(PREFIXES) * len(SUFFIXES) - 1),  # which prompt
            st.booleans(),  # its next agent turn instead
            st.integers(0, 6),  # steps to wait before adding it
            st.none() | st.integers(1, 6),  # abort after this many steps, or never
        ),
        min_size=1,
        max_size=8,
    ),
    num_blocks=st.integers(16, 40),
)
def test_random_interleavings_keep_the_pool_sound_and_the_tokens_unchanged(
    model: GptOssModel,
    universe: dict[tuple[int, ...], list[int]],
    picks: list[tuple[int, bool, int, int | None]],
    num_blocks: int,
) -> None:
    engine = EngineCore(model, block_size=BS, num_blocks=num_blocks)
    prompts = [p + s for p in PREFIXES for s in SUFFIXES]
    arrivals: list[tuple[int, int, list[int], int | None]] = []
    at = 0
    for i, (which, turn, wait, abort) in enumerate(picks):
        prompt = prompts[which]
        if turn:
            prompt = prompt + universe[tuple(prompt)] + [5, 6]
        at += wait
        arrivals.append((at, i, prompt, abort))
    made: dict[str, list[int]] = {}
    finished: set[str] = set()
    aborts: dict[int, str] = {}
    kept: dict[int, tuple[Any, torch.Tensor, torch.Tensor]] = {}
    taken = watch_takes(engine.blocks)
    step = 0
    while arrivals or engine.has_work():
        while arrivals and arrivals[0][0] <= step:
            _, i, prompt, abort = arrivals.pop(0)
            made[f"r{i}"] = []
            assert engine.add_request(greedy_request(i, prompt, N)) is None
            if abort is not None:
                aborts[step + abort] = f"r{i}"
        if step in aborts:
            engine.abort(aborts[step])
        for request_id, chunk in engine.step():
            made[request_id] += chunk.token_ids
            if chunk.finish_reason is not None:
                finished.add(request_id)
        check_pool(engine, kept, taken)
        step += 1
    assert engine.blocks.blocks_in_use() == 0
    for (which, turn, _, _), i in zip(picks, range(len(picks)), strict=True):
        prompt = prompts[which]
        if turn:
            prompt = prompt + universe[tuple(prompt)] + [5, 6]
        expected = universe[tuple(prompt)]
        key = f"r{i}"
        if key in finished:
            assert made[key] == expected, key
        else:  # aborted: what it made so far is the start of the same answer
            assert made[key] == expected[: len(made[key])], key


# --- usage ---------------------------------------------------------------------------------


def test_usage_reports_the_cached_prompt_tokens_through_the_driver(model: GptOssModel) -> None:
    """Over the served engine and the driver: a follow-up that shares a prefix says in its
    usage how many prompt tokens came from the cache; the first request says 0."""
    import anyio

    from streamfold.adapters.driver import Generation
    from streamfold.adapters.grammars import grammar_for
    from streamfold.engines import GenerationRequest, SamplingParams
    from streamfold.engines.native.engine import NativeEngine
    from streamfold.statemachine import Response

    prefix = random_prompts([22], seed=18)[0]

    async def usage(engine: NativeEngine, name: str, prompt: list[int]) -> Any:
        request = GenerationRequest(
            request_id=name, prompt_token_ids=tuple(prompt), max_output_tokens=4,
            sampling=SamplingParams(temperature=0.0), stop_token_ids=(),
        )  # fmt: skip
        response = Response(id=name, created_at=1, model="m", status="in_progress")
        generation = Generation(engine, request, grammar_for({"grammar": "harmony"}), response)
        events = [e async for batch in generation.batches() for e in batch]
        return events[-1].response.usage

    async def run() -> tuple[Any, Any]:
        with NativeEngine(EngineCore(model, block_size=BS, num_blocks=128)) as engine:
            first = await usage(engine, "resp_a", [*prefix, 1, 2])
            second = await usage(engine, "resp_b", [*prefix, 3, 4, 5])
        return first, second

    first, second = anyio.run(run)
    assert first.input_tokens_details.cached_tokens == 0
    assert second.input_tokens == 25
    assert second.input_tokens_details.cached_tokens == len(prefix) // BS * BS == 20
