"""The official openai SDK as a test oracle: strict validation of wire events."""

from __future__ import annotations

import typing
from typing import Any

import openai.types.responses as sdk
import pydantic

# The SDK's union discriminates on `type` with its own marker, not pydantic's; map it by hand
# so a failure names the fields of the one class that should have matched.
_UNION = typing.get_args(typing.get_args(sdk.ResponseStreamEvent)[0])
SDK_EVENT_CLASSES: dict[str, type[pydantic.BaseModel]] = {
    typing.get_args(cls.model_fields["type"].annotation)[0]: cls for cls in _UNION
}


def validate_with_sdk(wire: dict[str, Any]) -> pydantic.BaseModel:
    """Validate one wire event strictly against the SDK class for its `type`."""
    cls = SDK_EVENT_CLASSES[wire["type"]]
    return cls.model_validate(wire, strict=False)
