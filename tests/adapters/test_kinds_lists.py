"""The per-kind lists outside the reducer read its kinds table (`statemachine/_kinds.py`) or
are held to it here (issue 28, part 7), so adding a kind cannot leave one of them behind."""

from __future__ import annotations

from typing import get_args

from streamfold.adapters.agent import ItemKind as ToolItemKind
from streamfold.adapters.protocol import (
    CARRIED_ITEM_TYPES,
    INPUT_ITEM_PREFIX,
    INPUT_ITEM_TYPES,
)
from streamfold.statemachine._kinds import KINDS, CallKind, ItemKind


def test_the_item_kind_type_names_the_tables_rows() -> None:
    assert set(get_args(ItemKind)) == set(KINDS)
    assert set(get_args(CallKind)) <= set(KINDS)
    assert ToolItemKind is CallKind  # a tool's item kind is the table's, not a copy


def test_every_output_kind_can_be_sent_back_as_input() -> None:
    assert set(KINDS) <= set(INPUT_ITEM_TYPES)
    assert CARRIED_ITEM_TYPES <= set(INPUT_ITEM_TYPES)


def test_every_input_item_type_has_a_listing_prefix_and_output_kinds_keep_theirs() -> None:
    """`GET /input_items` names an item sent without an id by its kind's prefix; a type with
    none would fail the listing with a KeyError."""
    assert set(INPUT_ITEM_PREFIX) == set(INPUT_ITEM_TYPES)
    assert all(INPUT_ITEM_PREFIX[name] == kind.prefix for name, kind in KINDS.items())
    assert len(set(INPUT_ITEM_PREFIX.values())) == len(INPUT_ITEM_PREFIX)
