"""KV cache bookkeeping: fixed-size blocks from one pool, a block table per sequence and group,
and the prefix cache over them.

Layers are grouped by attention window (gpt-oss: the sliding layers and the full layers). A
physical block holds `block_size` tokens of K and V for every layer of *one* group, so the two
groups draw from the same pool with the same page size (as vLLM's hybrid allocator does). A
sequence has one block table per group, indexed by logical block (`position // block_size`).

A sliding group needs only the keys the next query can see. Before a step that brings a
sequence to `length` tokens, its last query sits at `length - 1` and sees positions
`>= length - window`, so logical blocks wholly below that are freed and marked `FREED` in the
table; the table keeps its indices so a position still finds its block by division.

Prefix cache (`prefix_cache=True`, vLLM's automatic prefix caching over this pool): once a
block is full and its K/V computed (`commit`), it is registered under a key made of its group
and a hash chain: `h(i) = sha256(h(i - 1) + tokens of block i)`, `h(-1)` = the pool's `salt`
(the model's identity). So a key names a block's content *and* everything before it. Blocks
are reference-counted; a block whose count drops to 0 stays registered and is "evictable":
it still counts as free, and a new sequence with the same prefix takes it back (`admit`);
allocation takes never-registered blocks first, then evicts the least recently freed
registered one (LRU). A registered block is never written again: sequences write only
positions at or past their computed length, which lie in blocks not yet full, and a prefix hit
always leaves at least one token to compute, in a fresh block. A hit of `n` blocks needs, in
full groups, blocks `0..n-1` registered, and in a sliding group only those its first new query
reads (the window before position `n * block_size`). No torch.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict, deque

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

    def __init__(
        self,
        *,
        num_blocks: int,
        block_size: int,
        windows: tuple[int | None, ...],
        prefix_cache: bool = False,
        salt: bytes = b"",
    ):
        if block_size < 1 or num_blocks < 1:
            raise ValueError(
                f"need block_size >= 1 and num_blocks >= 1, got {block_size}, {num_blocks}"
            )
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.groups = tuple(_Group(window=w) for w in windows)
        self.prefix_cache = prefix_cache
        self.salt = salt
        self._free: deque[int] = deque(range(num_blocks))  # count 0, not registered
        self._evictable: OrderedDict[int, None] = OrderedDict()  # count 0, registered; LRU first
        self.refs = [0] * num_blocks
        self.key_of: list[tuple[int, bytes] | None] = [None] * num_blocks
        self.cached: dict[tuple[int, bytes], int] = {}  # (group, chain hash) -> block
        self._hashes: dict[int, list[bytes]] = {}  # per sequence: its full blocks' chain hashes
        self._committed: dict[int, int] = {}  # per sequence: full blocks registered so far
        self.tables: dict[int, list[list[int]]] = {}
        self.num_evictions = 0

    @property
    def num_free(self) -> int:
        """Blocks an allocation can take: never registered, or registered and unreferenced."""
        return len(self._free) + len(self._evictable)

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

    # --- counting and moving single blocks -----------------------------------------------

    def _take(self) -> int:
        """A block for a new write: a never-registered one, else evict the LRU registered one."""
        if self._free:
            block = self._free.popleft()
        else:
            block, _ = self._evictable.popitem(last=False)
            key = self.key_of[block]
            assert key is not None
            del self.cached[key]
            self.key_of[block] = None
            self.num_evictions += 1
        self.refs[block] = 1
        return block

    def _share(self, block: int) -> None:
        """One more reference to a registered block (a prefix hit)."""
        assert self.key_of[block] is not None, f"block {block} was evicted before its hit"
        if self.refs[block] == 0:
            del self._evictable[block]
        self.refs[block] += 1

    def _release(self, block: int) -> None:
        self.refs[block] -= 1
        if self.refs[block] == 0:
            if self.key_of[block] is None:
                self._free.append(block)
            else:
                self._evictable[block] = None

    # --- decode steps ----------------------------------------------------------------------

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
        """Blocks `reserve` would free: those leaving the window that no one else holds."""
        tables = self.tables.get(seq_id)
        if not tables:
            return 0
        plan = self._plan(seq_id, length)
        return sum(
            sum(1 for b in tables[g][:first] if b != FREED and self.refs[b] == 1)
            for g, (first, _, _) in enumerate(plan)
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
            self._drop_below(table, first)
            table.extend([FREED] * max(0, first - len(table)))
            while len(table) < end:
                table.append(self._take())

    def _drop_below(self, table: list[int], first: int) -> None:
        for logical in range(min(first, len(table))):
            if table[logical] != FREED:
                self._release(table[logical])
                table[logical] = FREED

    def free(self, seq_id: int) -> None:
        """Drop all of a sequence's blocks (end, abort or preemption); registered ones stay
        cached until evicted. The tail goes first, so the LRU evicts it first: a prefix is
        more likely to be shared than a sequence's own end."""
        for table in self.tables.pop(seq_id, []):
            for block in reversed(table):
                if block != FREED:
                    self._release(block)
        self._hashes.pop(seq_id, None)
        self._committed.pop(seq_id, None)

    def blocks_in_use(self) -> int:
        return self.num_blocks - self.num_free

    # --- the prefix cache ------------------------------------------------------------------

    def _chain(self, seq_id: int, tokens: list[int]) -> list[bytes]:
        """The chain hashes of `tokens`' full blocks (kept per sequence, extended as it grows)."""
        hashes = self._hashes.setdefault(seq_id, [])
        bs = self.block_size
        for i in range(len(hashes), len(tokens) // bs):
            parent = hashes[-1] if hashes else self.salt
            block = array("q", tokens[i * bs : (i + 1) * bs]).tobytes()
            hashes.append(hashlib.sha256(parent + block).digest())
        return hashes

    def _first_read(self, group: int, position: int) -> int:
        """The first logical block a query at `position` reads in `group`."""
        return self.first_needed_position(group, position + 1) // self.block_size

    def cached_prefix(self, seq_id: int, tokens: list[int]) -> int:
        """How many leading tokens of `tokens` a new sequence can take from the cache: a whole
        number of blocks, always leaving at least one token to compute."""
        if not self.prefix_cache:
            return 0
        bs = self.block_size
        hashes = self._chain(seq_id, tokens)
        most = min(len(hashes), (len(tokens) - 1) // bs)
        full = [g for g, group in enumerate(self.groups) if group.window is None]
        n = most
        for g in full:
            hit = 0
            while hit < n and (g, hashes[hit]) in self.cached:
                hit += 1
            n = hit
        sliding = [g for g, group in enumerate(self.groups) if group.window is not None]
        while n > 0 and not all(
            (g, hashes[i]) in self.cached
            for g in sliding
            for i in range(self._first_read(g, n * bs), n)
        ):
            n -= 1
        return n * bs

    def _admit_plan(
        self, tokens: list[int], cached: int, hashes: list[bytes]
    ) -> list[tuple[list[int], int, int, int]]:
        """Per group: (the hit blocks from the first one read, the logical index of the first
        of them, first logical block that must get a fresh block, end logical block)."""
        bs, length = self.block_size, len(tokens)
        n = cached // bs
        plan = []
        for g in range(len(self.groups)):
            first_hit = self._first_read(g, cached) if n else 0
            hits = [self.cached[(g, hashes[i])] for i in range(first_hit, n)]
            first_new = max(n, self.first_needed_position(g, length) // bs)
            plan.append((hits, first_hit, first_new, -(-length // bs)))
        return plan

    def admit(self, seq_id: int, tokens: list[int], cached: int, *, spare: int = 0) -> bool:
        """Reserve a prefill of `tokens` whose first `cached` tokens come from the cache
        (`cached_prefix`): share the hit blocks, take fresh ones for the rest. False (and
        nothing taken) when the pool cannot hold it now.

        With the prefix cache on, a sliding group also gets blocks for the positions its
        window will not need after this step, when the pool has room for them beyond `spare`
        blocks: the step writes their K/V, `commit` registers them and lets them go, and a
        later sequence that shares this prompt's start can reuse them (its first new query
        reads the window before it). Without room they are skipped, as with the cache off."""
        if seq_id in self.tables:
            raise ValueError(f"sequence {seq_id} already holds blocks; free it before admit")
        hashes = self._chain(seq_id, tokens) if cached else []
        plan = self._admit_plan(tokens, cached, hashes)
        n = cached // self.block_size
        shared = {b for hits, _, _, _ in plan for b in hits if self.refs[b] == 0}
        need = len(shared) + sum(end - first_new for _, _, first_new, end in plan)
        if need > self.num_free:
            return False
        extra = sum(first_new - n for _, _, first_new, _ in plan) if self.prefix_cache else 0
        if need + extra + spare > self.num_free:
            extra = 0
        # Every group's hits first: a fresh block for one group must not evict a hit of
        # another (the same hit block cannot serve two groups: their keys differ).
        for hits, _, _, _ in plan:
            for block in hits:
                self._share(block)
        tables = []
        for hits, first_hit, first_new, end in plan:
            table = [FREED] * first_hit + hits
            if extra:
                first_new = n
            table.extend([FREED] * (first_new - len(table)))
            table.extend(self._take() for _ in range(end - first_new))
            tables.append(table)
        self.tables[seq_id] = tables
        self._committed[seq_id] = n
        return True

    def commit(self, seq_id: int, tokens: list[int], computed: int) -> None:
        """After a step: `tokens[:computed]` have their K/V in the pool. Register each newly
        full block under its key, then let a sliding group's blocks below the window go
        (registered, they stay cached)."""
        if not self.prefix_cache or seq_id not in self.tables:
            return
        tables = self.tables[seq_id]
        full = computed // self.block_size
        done = self._committed.get(seq_id, 0)
        if full > done:
            hashes = self._chain(seq_id, tokens[: full * self.block_size])
            for g, table in enumerate(tables):
                for i in range(done, min(full, len(table))):
                    block = table[i]
                    key = (g, hashes[i])
                    if block != FREED and self.key_of[block] is None and key not in self.cached:
                        self.cached[key] = block
                        self.key_of[block] = key
            self._committed[seq_id] = full
        for g, table in enumerate(tables):
            self._drop_below(table, self._first_read(g, computed))
