"""`GET /v1/models` and `GET /v1/models/{id}`: the models this server's engine serves, in
openai's `Model` shape (`id`, `object: "model"`, `created`, `owned_by`), so that clients and
UIs can discover them. Replay lists its traces and conversation directories, the native engine
its checkpoint, vLLM and SGLang their model (`Engine.models`)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from ..protocol import RequestError

__all__ = ["list_models", "retrieve_model"]

OWNER = "streamfold"


def _model(model_id: str, created: int) -> dict[str, Any]:
    return {"id": model_id, "object": "model", "created": created, "owned_by": OWNER}


def _served(request: Request) -> tuple[list[str], int]:
    service = request.app.state.streamfold
    models = service.engine.models
    return (list(models()) if models is not None else []), service.started_at


async def list_models(request: Request) -> Any:
    served, created = _served(request)
    return JSONResponse({"object": "list", "data": [_model(m, created) for m in served]})


async def retrieve_model(request: Request) -> Any:
    model_id = request.path_params["model_id"]
    served, created = _served(request)
    if model_id not in served:
        shown = model_id if len(model_id) <= 64 else f"{model_id[:64]}..."
        raise RequestError(
            f"the model {shown!r} does not exist on this server (GET /v1/models lists them)",
            param="model",
            status=404,
            code="model_not_found",
        )
    return JSONResponse(_model(model_id, created))
