"""Continuous batching: which sequences run in the next step, and who is preempted.

Every step, each running sequence decodes one token, and waiting sequences are admitted for
prefill while blocks and the token budget allow, so requests join and leave at every step and
prefills and decodes share a step. When a running sequence cannot get a block for its next
token, the newest running sequence is preempted: its blocks are freed and it goes to the front
of the waiting queue, to be recomputed (prefilled again over prompt + tokens so far) when
blocks free up. An admitted sequence starts after the longest prefix the KV pool has cached
(`BlockManager.cached_prefix`; a preempted one usually finds its own blocks there) and
computes only the rest. Requests are never failed for lack of blocks: the engine caps each request's
length at what the pool can hold for it alone, so the oldest sequence can always proceed.
No torch.
"""

from __future__ import annotations

from collections import deque
from typing import Literal

import attrs

from .._source import GenerationRequest
from .kv_blocks import BlockManager

__all__ = ["Scheduler", "Sequence"]

Status = Literal["waiting", "running", "finished"]


@attrs.define(eq=False, kw_only=True)
class Sequence:
    """A request in flight: its tokens so far and how many of them have K/V in the cache."""

    seq_id: int
    request: GenerationRequest
    token_ids: list[int]
    num_prompt: int
    max_tokens: int
    stop_ids: frozenset[int]
    num_cached: int = 0
    status: Status = "waiting"
    preemptions: int = 0
    # Prompt tokens the first admission took from the prefix cache (usage's cached_tokens).
    num_prompt_cached: int | None = None

    @property
    def num_output(self) -> int:
        return len(self.token_ids) - self.num_prompt

    @property
    def num_new(self) -> int:
        """Tokens the next step feeds: the last one (decode) or all of them (prefill)."""
        return len(self.token_ids) - self.num_cached


class Scheduler:
    def __init__(
        self, blocks: BlockManager, *, max_num_seqs: int = 64, max_num_batched_tokens: int = 4096
    ) -> None:
        self.blocks = blocks
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # oldest (lowest seq_id) first
        self.num_preemptions = 0
        # Prefill tokens computed and taken from the prefix cache, over the scheduler's life.
        self.num_prefill_tokens = self.num_cached_tokens = 0
        self.last_prefills: list[Sequence] = []  # admitted by the last `schedule`

    def __bool__(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def remove(self, seq: Sequence) -> None:
        """Take `seq` out (finished or aborted) and free its blocks at once."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.blocks.free(seq.seq_id)
        seq.status = "finished"

    def schedule(self) -> list[Sequence]:
        """The sequences of the next step, decodes first, with their blocks reserved."""
        decodes: list[Sequence] = []
        for seq in list(self.running):
            if seq.status != "running":
                continue  # preempted earlier in this loop
            while not self.blocks.can_reserve(seq.seq_id, len(seq.token_ids)):
                victim = self.running[-1]
                self._preempt(victim)
                if victim is seq:
                    break
            else:
                self.blocks.reserve(seq.seq_id, len(seq.token_ids))
                decodes.append(seq)
        prefills: list[Sequence] = []
        budget = self.max_num_batched_tokens - len(decodes)
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            cached = self.blocks.cached_prefix(seq.seq_id, seq.token_ids)
            length = len(seq.token_ids) - cached  # what the prefill computes
            if length > budget and (prefills or decodes):
                break  # a prompt longer than the budget still runs, alone
            spare = len(self.running)
            if not self.blocks.admit(seq.seq_id, seq.token_ids, cached, spare=spare):
                # A hit holds a sliding group's window before it too: at the pool's limit,
                # the same prompt may still fit computed from scratch.
                whole = len(seq.token_ids)
                if not cached or (whole > budget and (prefills or decodes)):
                    break
                if not self.blocks.admit(seq.seq_id, seq.token_ids, 0, spare=spare):
                    break
                cached, length = 0, whole
            self.waiting.popleft()
            seq.status, seq.num_cached = "running", cached
            if seq.num_prompt_cached is None:  # the first admission's hit is what usage reports
                seq.num_prompt_cached = cached
            self.num_prefill_tokens += length
            self.num_cached_tokens += cached
            self._insert_running(seq)
            prefills.append(seq)
            budget -= length
        self.last_prefills = prefills
        return decodes + prefills

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.blocks.free(seq.seq_id)
        seq.status, seq.num_cached = "waiting", 0
        seq.preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(seq)

    def _insert_running(self, seq: Sequence) -> None:
        index = len(self.running)
        while index and self.running[index - 1].seq_id > seq.seq_id:
            index -= 1
        self.running.insert(index, seq)
