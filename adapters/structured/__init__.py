"""Structured outputs: what a request asks the model to write (`text.format`, `tool_choice`,
strict and custom tools) as one `Shape`, and a chat format's grammar of it over the whole
completion (`harmony_grammar`; `thinktags_grammar` for think-tag models), which the engines
enforce (`streamfold.engines.guidance`)."""

from ._harmony import harmony_grammar
from ._request import check_bodies, shape_for
from ._shape import (
    Body,
    Call,
    JsonBody,
    LarkBody,
    RegexBody,
    Shape,
    TextBody,
    budget_shape,
)
from ._thinktags import ThinkTagTokens, guard_schema, thinktags_grammar, without_tags

__all__ = [
    "Body",
    "Call",
    "JsonBody",
    "LarkBody",
    "RegexBody",
    "Shape",
    "TextBody",
    "ThinkTagTokens",
    "budget_shape",
    "check_bodies",
    "guard_schema",
    "harmony_grammar",
    "shape_for",
    "thinktags_grammar",
    "without_tags",
]
