"""`/v1/conversations` routes: HTTP only (bodies, query parameters, status codes); what they
do is `_conversations.Conversations`'."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..protocol import RequestError
from ._conversations import DEFAULT_LIMIT, Conversations
from ._guard import OWNER
from ._limits import ServerLimits, body_within, check_body, decode_body, shown

__all__ = ["conversation_routes"]


def _conversations(request: Request) -> Conversations:
    return request.app.state.conversations  # type: ignore[no-any-return]


def _owner(request: Request) -> str | None:
    """Whose conversations the request sees: the hash of its API key (None: no keys; see
    `_guard.py`)."""
    return OWNER.get()


async def _json(request: Request) -> Any:
    limits: ServerLimits = request.app.state.streamfold.limits
    body = decode_body(await body_within(dict(request.headers), request.stream(), limits))
    check_body(body, limits)
    return body


def _include(request: Request) -> list[str]:
    # openai-python writes arrays in a query as `include[]=...`; others repeat `include=`.
    query = request.query_params
    return [*query.getlist("include"), *query.getlist("include[]")]


def _ids(request: Request) -> tuple[str, str]:
    return request.path_params["conversation_id"], request.path_params.get("item_id", "")


async def create(request: Request) -> Any:
    return JSONResponse(await _conversations(request).create(await _json(request), _owner(request)))


async def retrieve(request: Request) -> Any:
    conversation_id, _ = _ids(request)
    return JSONResponse(await _conversations(request).retrieve(conversation_id, _owner(request)))


async def update(request: Request) -> Any:
    conversation_id, _ = _ids(request)
    body = await _json(request)
    return JSONResponse(
        await _conversations(request).update(conversation_id, body, _owner(request))
    )


async def delete(request: Request) -> Any:
    conversation_id, _ = _ids(request)
    return JSONResponse(await _conversations(request).delete(conversation_id, _owner(request)))


async def add_items(request: Request) -> Any:
    conversation_id, _ = _ids(request)
    body = await _json(request)
    return JSONResponse(
        await _conversations(request).add_items(
            conversation_id, body, _include(request), _owner(request)
        )
    )


async def list_items(request: Request) -> Any:
    conversation_id, _ = _ids(request)
    query = request.query_params
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise RequestError(f"order must be asc or desc, got {shown(order)!r}", param="order")
    raw_limit = query.get("limit", str(DEFAULT_LIMIT))
    try:
        limit = int(raw_limit) if len(raw_limit) <= 20 else 0
    except ValueError:
        raise RequestError(
            f"limit must be an integer from 1 to 100, got {shown(raw_limit)!r}", param="limit"
        ) from None
    page = await _conversations(request).list_items(
        conversation_id,
        after=query.get("after") or None,
        limit=limit,
        order=order,  # type: ignore[arg-type]
        include=_include(request),
        owner=_owner(request),
    )
    return JSONResponse(page)


async def retrieve_item(request: Request) -> Any:
    conversation_id, item_id = _ids(request)
    return JSONResponse(
        await _conversations(request).retrieve_item(
            conversation_id, item_id, _include(request), _owner(request)
        )
    )


async def delete_item(request: Request) -> Any:
    conversation_id, item_id = _ids(request)
    return JSONResponse(
        await _conversations(request).delete_item(conversation_id, item_id, _owner(request))
    )


def conversation_routes() -> list[Route]:
    by_id = "/v1/conversations/{conversation_id}"
    item = by_id + "/items/{item_id}"
    return [
        Route("/v1/conversations", create, methods=["POST"]),
        Route(by_id, retrieve, methods=["GET"]),
        Route(by_id, update, methods=["POST"]),
        Route(by_id, delete, methods=["DELETE"]),
        Route(by_id + "/items", add_items, methods=["POST"]),
        Route(by_id + "/items", list_items, methods=["GET"]),
        Route(item, retrieve_item, methods=["GET"]),
        Route(item, delete_item, methods=["DELETE"]),
    ]
