"""Approvals the server issued, each answered once (issue 29, finding 5).

An `mcp_approval_response` names an approval request by id. The request item it names may
come from the client (in `input`, as a stateless client sends the conversation back), so its
copy proves nothing: a client could write its own `mcp_approval_request` (any tool, any
arguments) and approve it in the same body. What counts is the item the server stored: the
id names the response that asked (`mcpr_<response>_<index>`, see `statemachine/_items.py`),
and that response's stored output must hold the same request (label, tool, arguments).

And one approval runs one call: forking the asking response with `previous_response_id` N
times must not run the approved call N times. The store records which response answered each
approval request (`ApprovalStore.claim_approval`), across restarts for the SQLite store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..agent._config import Approval
from ..protocol import INPUT_ITEM_PREFIX, RequestError
from ._store import ApprovalStore, EventStore

__all__ = ["check_approvals"]

#: An approval request's id prefix, the kinds table's (`statemachine/_kinds.py`).
_PREFIX = f"{INPUT_ITEM_PREFIX['mcp_approval_request']}_"


def _asking_response(approval_id: str) -> str | None:
    if not approval_id.startswith(_PREFIX):
        return None
    base, _, index = approval_id.removeprefix(_PREFIX).rpartition("_")
    return f"resp_{base}" if base and index.isdigit() else None


async def _issued(store: EventStore, approval: Approval) -> bool:
    asked = approval.request
    response_id = _asking_response(asked.id)
    stored = None if response_id is None else await store.snapshot(response_id)
    if stored is None or not stored.finished:
        return False
    output: list[Any] = stored.response().get("output") or []
    return any(
        item.get("type") == "mcp_approval_request"
        and item.get("id") == asked.id
        and (item.get("server_label"), item.get("name"), item.get("arguments"))
        == (asked.server_label, asked.name, asked.arguments)
        for item in output
        if isinstance(item, dict)
    )


async def check_approvals(
    store: EventStore, approvals: Sequence[Approval], response_id: str
) -> None:
    """Raises `RequestError` (400, naming the answer) for an approval request this server did
    not issue, or one another response answered already; else records that `response_id`
    answers them."""
    if not approvals:
        return
    if not isinstance(store, ApprovalStore):
        raise RequestError(
            "this server's event store keeps no approvals, so an mcp_approval_response cannot "
            "be checked; approve in a server whose store does",
            param=approvals[0].param,
        )
    for approval in approvals:
        if not await _issued(store, approval):
            raise RequestError(
                f"approval request {approval.request.id!r} was not issued by this server (no "
                "stored response asked it, with that tool and those arguments); only the "
                "server's own mcp_approval_request items can be approved",
                param=approval.param,
            )
    for approval in approvals:
        first = await store.claim_approval(approval.request.id, response_id)
        if first is not None:
            raise RequestError(
                f"approval request {approval.request.id!r} was already answered (by response "
                f"{first}); each approval request is answered once",
                param=approval.param,
            )
