"""The error a refused request becomes: the OpenAI error JSON, with the param it names."""

from __future__ import annotations

from typing import Any

from streamfold.statemachine import StreamfoldError

__all__ = ["RequestError"]


class RequestError(StreamfoldError, ValueError):
    """A request the server refuses; becomes the OpenAI error JSON with this HTTP status."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        status: int = 400,
        code: str | None = None,
        type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.status = status
        self.code = code
        self.type = type

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }
