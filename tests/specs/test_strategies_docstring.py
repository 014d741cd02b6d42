"""The usage example in `streamfold.specs.strategies_thinktags`'s docstring runs as written
(issue 36: it passed a `Vocabulary` where `tokenizations` wants a `VocabularyIndex`, and raised
`AttributeError: 'Vocabulary' object has no attribute 'tags'`)."""

from __future__ import annotations

import textwrap
from typing import Any

import streamfold.specs.strategies_thinktags as module


def test_the_docstring_example_runs() -> None:
    doc = module.__doc__ or ""
    start = doc.index("    from hypothesis import given")
    example = textwrap.dedent(doc[start:])
    namespace: dict[str, Any] = {}
    exec(compile(example, "strategies_thinktags example", "exec"), namespace)
    namespace["test_my_server"]()  # hypothesis runs its examples
