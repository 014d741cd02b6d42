"""The tool half of the checker: hosted-tool items and their progress events (R27, R28).

Theory of operation. A hosted tool call (web search, code interpreter, MCP call, MCP tool
listing, file search, image generation) tells the client how it is going through progress
events that carry only `item_id` and `output_index`. They come in stages: `in_progress` first,
then the stage that says the tool runs (`searching`, `interpreting`, `generating`; MCP has
none), then the outcome (`completed`, or for MCP `failed`). R27 holds the order: each stage at
most once and after the earlier ones, nothing after the outcome, and the call's own text (code,
MCP arguments) written before the tool runs. R28 holds the outcome to the done item: a
`completed` item was announced by its `.completed` event; an MCP call that `failed` has an
`error`, one that completed has none; an MCP tool listing has an `error` exactly when it failed.
In an agent loop the stages of one call are spread over the tool's run, so these rules are what
keeps a multi-generation stream honest about which call finished.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from . import _wire as w

__all__ = ["ToolProgress"]

Report = Callable[[str, str], None]

# family -> stage -> rank: in_progress, then the running stage, then the outcome.
_RANKS: dict[str, dict[str, int]] = {
    "web_search_call": {"in_progress": 0, "searching": 1, "completed": 2},
    "file_search_call": {"in_progress": 0, "searching": 1, "completed": 2},
    "code_interpreter_call": {"in_progress": 0, "interpreting": 1, "completed": 2},
    "image_generation_call": {"in_progress": 0, "generating": 1, "completed": 2},
    "mcp_call": {"in_progress": 0, "completed": 2, "failed": 2},
    "mcp_list_tools": {"in_progress": 0, "completed": 2, "failed": 2},
}
_OUTCOME = 2


class ToolProgress:
    """The progress stages seen per output index, checked as they arrive."""

    def __init__(self, report: Report) -> None:
        self._report = report
        self._seen: dict[int, list[str]] = {}
        self._running: set[int] = set()  # indexes past in_progress: `text` reports there

    def stage(self, index: int, family: str, etype: str) -> None:
        """A progress event `response.<family>.<stage>` for the open item at `index`."""
        stage = etype.rpartition(".")[2]
        ranks = _RANKS.get(family)
        if ranks is None or stage not in ranks:
            return
        seen = self._seen.setdefault(index, [])
        if stage in seen:
            self._report("R27", f"{etype} again: each progress stage comes once per item")
        elif seen and ranks[seen[-1]] >= ranks[stage]:
            self._report(
                "R27",
                f"{etype} after response.{family}.{seen[-1]}; the stages "
                f"of a {family} run {' -> '.join(_order(ranks))}",
            )
        seen.append(stage)
        if ranks[stage] > 0:
            self._running.add(index)

    def text(self, index: int, item_type: str | None, etype: str) -> None:
        """A delta or `.done` of the item's own text (code, MCP arguments)."""
        ranks = _RANKS.get(item_type or "")
        seen = self._seen.get(index)
        if ranks is None or not seen:
            return
        ran = [s for s in seen if ranks[s] > 0]
        if ran:
            self._report(
                "R27",
                f"{etype} after response.{item_type}.{ran[0]}: a call's "
                "text is written in full before its tool runs",
            )

    @property
    def running(self) -> AbstractSet[int]:
        """The output indexes whose tool has run (a stage past in_progress): `text` reports a
        delta there, and says nothing anywhere else."""
        return self._running

    def done(self, index: int, item: Mapping[str, Any]) -> None:
        """`output_item.done` of the item at `index`: its outcome agrees with its stages."""
        item_type = w.get_str(item, "type")
        ranks = _RANKS.get(item_type or "")
        if ranks is None:
            return
        seen = self._seen.get(index, [])
        outcome = next((s for s in seen if ranks[s] == _OUTCOME), None)
        status = w.get(item, "status")
        error = w.get(item, "error")
        if status == "completed" and outcome != "completed":
            said = f"its last stage was {outcome!r}" if outcome else "no outcome stage was sent"
            self._report(
                "R28",
                f"{item_type} done as completed, but {said}: send "
                f"response.{item_type}.completed before output_item.done",
            )
        if item_type == "mcp_call":
            if status == "failed" and error is None:
                self._report("R28", "mcp_call done as failed without an `error`")
            if status == "completed" and error is not None:
                self._report("R28", "mcp_call done as completed with an `error`")
            if outcome == "failed" and status == "completed":
                self._report("R28", "mcp_call done as completed after response.mcp_call.failed")
        if item_type == "mcp_list_tools":
            if outcome == "failed" and not error:
                self._report("R28", "mcp_list_tools failed, but its done item has no `error`")
            if outcome == "completed" and error:
                self._report(
                    "R28",
                    "mcp_list_tools completed, but its done item has an "
                    f"`error` ({w.short(error)})",
                )


def _order(ranks: dict[str, int]) -> list[str]:
    by_rank: dict[int, list[str]] = {}
    for stage, rank in ranks.items():
        by_rank.setdefault(rank, []).append(stage)
    return [" | ".join(by_rank[r]) for r in sorted(by_rank)]
