"""Readiness: load and warm the engine once the server is up, and say so on `GET /health`.

An engine built at start-up (`Engine.load`: vLLM and SGLang, built in a worker thread) answers
503 `{"status": "loading"}` until it is built; requests that arrive meanwhile wait for it, and
the event loop keeps serving. An engine that declares a warm-up (`Engine.warm_up`, the native
engine's full-batch step shapes) is warmed in the background as soon as the app's lifespan
starts, then one small response runs through the whole stack (prompt rendering, the grammar and
its vocabulary, the reducer), unstored. Until both are done `GET /health` answers 503
`{"status": "warming"}`, so a supervisor or load balancer sends traffic only to a warm server;
then 200 `{"status": "ready"}`. A failed load or warm-up answers 503 `{"status": "failed",
"error": ...}` for good: the engine is broken and the server should be restarted. Requests that
arrive while the server warms are served, only not yet at full speed.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Literal

import anyio.to_thread
import attrs
from starlette.requests import Request
from starlette.responses import JSONResponse

from ._service import ResponseService

__all__ = ["Readiness", "health"]

log = logging.getLogger("streamfold.server")

#: The whole-stack warm-up request (not stored; its model name matters to no live engine).
WARM_UP_BODY: dict[str, Any] = {
    "model": "warm-up",
    "input": "Hello",
    "max_output_tokens": 8,
    "temperature": 0,
    "store": False,
}


@attrs.define(kw_only=True)
class Readiness:
    status: Literal["loading", "warming", "ready", "failed"] = "warming"
    error: str | None = None
    seconds: float | None = None

    @classmethod
    def for_service(cls, service: ResponseService) -> Readiness:
        """Ready at once when the engine has no load or warm-up (replay); else loading or
        warming until `run`."""
        engine = service.engine
        if engine.load is not None:
            return cls(status="loading")
        return cls(status="warming" if engine.warm_up is not None else "ready")

    async def run(self, service: ResponseService) -> None:
        """Load `service`'s engine, then warm it and the whole stack; never raises."""
        load, warm_up = service.engine.load, service.engine.warm_up
        started = time.perf_counter()
        if load is not None:
            try:
                await load()
            except Exception as exc:
                log.exception("the engine failed to load; GET /health answers 503")
                self.status, self.error = "failed", f"{type(exc).__name__}: {exc}"
                return
            log.info("engine loaded in %.1f s", time.perf_counter() - started)
        if warm_up is None:
            self.status = "ready"
            return
        self.status = "warming"
        try:
            await warm_up()
            # The grammar's vocabulary takes a second or two to load: in a thread, so that
            # `GET /health` keeps answering meanwhile (prepare below then finds it cached).
            await anyio.to_thread.run_sync(service.engine.grammar, WARM_UP_BODY["model"])
            response = await service.complete(await service.prepare(dict(WARM_UP_BODY)))
            if response["status"] not in ("completed", "incomplete"):
                raise RuntimeError(
                    f"the warm-up response ended {response['status']}: {response.get('error')}"
                )
        except Exception as exc:
            log.exception("the engine's warm-up failed; GET /health answers 503")
            self.status, self.error = "failed", f"{type(exc).__name__}: {exc}"
            return
        self.seconds = time.perf_counter() - started
        self.status = "ready"
        log.info("engine warmed up in %.1f s: ready (GET /health answers 200)", self.seconds)

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"status": self.status}
        if self.error is not None:
            body["error"] = self.error
        if self.seconds is not None:
            body["warm_up_seconds"] = round(self.seconds, 3)
        return body


async def health(request: Request) -> JSONResponse:
    """`GET /health`: 200 when the server is ready for traffic, 503 while it loads, warms, or
    after it failed."""
    readiness: Readiness = request.app.state.readiness
    return JSONResponse(readiness.body(), status_code=200 if readiness.status == "ready" else 503)
