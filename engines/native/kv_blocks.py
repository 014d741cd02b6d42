"""KV cache bookkeeping: fixed-size blocks from one pool, a block table per sequence and group.

Layers are grouped by attention window (gpt-oss: the sliding layers and the full layers). A
physical block holds `block_size` tokens of K and V for every layer of *one* group, so the two
groups draw from the same pool with the same page size (as vLLM's hybrid allocator does). A
sequence has one block table per group, indexed by logical block (`position // block_size`).

A sliding group needs only the keys the next query can see. Before a step that brings a
sequence to `length` tokens, its last query sits at `length - 1` and sees positions
`>= length - window`, so logical blocks wholly below that are freed and marked `FREED` in the
table; the table keeps its indices so a position still finds its block by division. No torch.
"""

from __future__ import annotations

from collections import deque

import attrs

__all__ = ["FREED", "BlockManager", "OutOfBlocksError"]

FREED = -1


class OutOfBlocksError(RuntimeError):
    """The scheduler asked for more blocks than are free; it should have checked `can_reserve`."""


@attrs.frozen(kw_only=True)
class _Group:
    window: int | None


class BlockManager:
    """Hands out block ids from a pool of `num_blocks` and tracks each sequence's tables."""

    def __init__(self, *, num_blocks: int, block_size: int, windows: tuple[int | None, ...]):
        if block_size < 1 or num_blocks < 1:
            raise ValueError(
                f"need block_size >= 1 and num_blocks >= 1, got {block_size}, {num_blocks}"
            )
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.groups = tuple(_Group(window=w) for w in windows)
        self._free: deque[int] = deque(range(num_blocks))
        self.tables: dict[int, list[list[int]]] = {}

    @property
    def num_free(self) -> int:
        return len(self._free)

    def table(self, seq_id: int, group: int) -> list[int]:
        return self.tables[seq_id][group]

    def first_needed_position(self, group: int, length: int) -> int:
        """The lowest position a step ending at `length` tokens still reads in `group`."""
        window = self.groups[group].window
        return 0 if window is None else max(0, length - window)

    def read_window(self, seq_id: int, group: int, position: int) -> tuple[list[int], int]:
        """The blocks a query at `position` reads in `group` (from the first one its window
        still sees to its own), and the position of that first block's first slot."""
        first = self.first_needed_position(group, position + 1) // self.block_size
        return self.tables[seq_id][group][first:], first * self.block_size

    def _plan(self, seq_id: int, length: int) -> list[tuple[int, int, int]]:
        """Per group: (first live logical block, first new logical block, end logical block)."""
        bs = self.block_size
        tables = self.tables.get(seq_id)
        plan = []
        for g in range(len(self.groups)):
            have = len(tables[g]) if tables else 0
            first = self.first_needed_position(g, length) // bs
            end = -(-length // bs)
            plan.append((first, max(have, first), end))
        return plan

    def blocks_to_reserve(self, seq_id: int, length: int) -> int:
        """New blocks `reserve(seq_id, length)` would take (before it frees any)."""
        return sum(max(0, end - new) for _, new, end in self._plan(seq_id, length))

    def can_reserve(self, seq_id: int, length: int) -> bool:
        return self.blocks_to_reserve(seq_id, length) <= self.num_free + self._reclaimable(
            seq_id, length
        )

    def _reclaimable(self, seq_id: int, length: int) -> int:
        tables = self.tables.get(seq_id)
        if not tables:
            return 0
        plan = self._plan(seq_id, length)
        return sum(
            sum(1 for b in tables[g][:first] if b != FREED) for g, (first, _, _) in enumerate(plan)
        )

    def reserve(self, seq_id: int, length: int) -> None:
        """Make every group's table cover what a step ending at `length` tokens reads/writes."""
        if not self.can_reserve(seq_id, length):
            raise OutOfBlocksError(
                f"sequence {seq_id} needs {self.blocks_to_reserve(seq_id, length)} blocks for"
                f" {length} tokens but {self.num_free} are free"
            )
        tables = self.tables.setdefault(seq_id, [[] for _ in self.groups])
        for g, (first, _, end) in enumerate(self._plan(seq_id, length)):
            table = tables[g]
            for logical in range(min(first, len(table))):
                if table[logical] != FREED:
                    self._free.append(table[logical])
                    table[logical] = FREED
            table.extend([FREED] * max(0, first - len(table)))
            while len(table) < end:
                table.append(self._free.popleft())

    def free(self, seq_id: int) -> None:
        """Return all of a sequence's blocks to the pool (end, abort or preemption)."""
        for table in self.tables.pop(seq_id, []):
            self._free.extend(b for b in reversed(table) if b != FREED)

    def blocks_in_use(self) -> int:
        return self.num_blocks - self.num_free
