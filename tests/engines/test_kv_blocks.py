"""Block accounting: tables grow per block, sliding groups free what leaves the window."""

from __future__ import annotations

import pytest

from streamfold.engines.native.kv_blocks import FREED, BlockManager, OutOfBlocksError


def test_full_group_takes_one_block_per_block_size_tokens_and_frees_all() -> None:
    blocks = BlockManager(num_blocks=10, block_size=4, windows=(None,))
    blocks.reserve(0, 4)
    assert len(blocks.table(0, 0)) == 1
    blocks.reserve(0, 5)  # the fifth token opens a second block
    assert len(blocks.table(0, 0)) == 2 and blocks.num_free == 8
    blocks.free(0)
    assert blocks.num_free == 10 and 0 not in blocks.tables


def test_sliding_group_keeps_only_the_blocks_the_window_reads() -> None:
    blocks = BlockManager(num_blocks=20, block_size=4, windows=(8, None))
    blocks.reserve(0, 30)
    sliding, full = blocks.table(0, 0), blocks.table(0, 1)
    # The last query (position 29) reads positions 22..29: blocks 5..7.
    assert [b == FREED for b in sliding] == [True] * 5 + [False] * 3
    assert len(full) == 8 and FREED not in full
    assert blocks.num_free == 20 - 3 - 8


def test_reserve_counts_blocks_it_will_free_as_available() -> None:
    blocks = BlockManager(num_blocks=4, block_size=2, windows=(2,))
    blocks.reserve(0, 4)  # positions 2..3 -> blocks 1 only; block 0 freed
    assert blocks.num_free == 3
    for length in range(5, 40):
        assert blocks.can_reserve(0, length)
        blocks.reserve(0, length)
        assert blocks.blocks_in_use() <= 2


def test_reserving_past_the_pool_raises_instead_of_corrupting() -> None:
    blocks = BlockManager(num_blocks=2, block_size=4, windows=(None,))
    blocks.reserve(0, 8)
    assert not blocks.can_reserve(1, 1)
    with pytest.raises(OutOfBlocksError, match="sequence 1 needs 1 blocks"):
        blocks.reserve(1, 1)
    assert blocks.num_free == 0 and 1 not in blocks.tables
