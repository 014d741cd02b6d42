"""Reading a Hermes tool call body, `{"name": …, "arguments": {…}}`, as it streams.

The think-tag grammar hands over the text between `<tool_call>` and `</tool_call>` piece by
piece. Two paths, so that a call streams when it can and is still found when it cannot:

* *streaming*: once the body's start reads `{"name": "<string>", "arguments": ` followed by
  `{` or `[` (checked on at most `HEAD_LIMIT` characters, so the answer depends on the text
  alone, never on how it was chunked), the name is known and the arguments value streams as
  it arrives; `ArgumentsScan` follows brackets and strings to see where the value ends.
* *buffered*: any other shape (arguments first, arguments as a JSON string, a `parameters`
  key, ...) waits for the whole body and is read with `json.loads` by `parse_call`.
"""

from __future__ import annotations

import json
import re

import attrs

__all__ = ["HEAD_LIMIT", "ArgumentsScan", "match_head", "parse_call"]

#: The name and the `"arguments":` key must appear within this many characters of the body.
HEAD_LIMIT = 512

_HEAD = re.compile(
    r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=[\[{])',
    re.DOTALL,
)
_STRUCTURE = re.compile(r'[\[\]{}"\\]')


def match_head(head: str) -> tuple[str, int] | None:
    """`(name, where the arguments value starts)` if `head` opens a streamable call."""
    found = _HEAD.match(head)
    if found is None:
        return None
    try:
        name = json.loads(found.group(1))
    except ValueError:  # a bad escape such as "\x": the buffered path decides
        return None
    if not name:
        return None
    return name, found.end()


def parse_call(body: str) -> tuple[str, str] | None:
    """`(name, arguments JSON text)` of a whole body, or None when it is not a tool call."""
    try:
        call = json.loads(body)
    except ValueError:
        return None
    if not isinstance(call, dict):
        return None
    name = call.get("name")
    if not isinstance(name, str) or not name:
        return None
    arguments = call.get("arguments", call.get("parameters", {}))
    if isinstance(arguments, str):  # some models send the arguments already encoded
        return name, arguments
    return name, json.dumps(arguments, ensure_ascii=False)


@attrs.frozen(kw_only=True)
class ArgumentsScan:
    """Where a streaming JSON value stands: bracket depth, inside a string, after a backslash."""

    depth: int = 0
    in_string: bool = False
    escape: bool = False

    def feed(self, text: str) -> tuple[ArgumentsScan, int]:
        """Scan `text`; returns the new scan and the length of `text` that belongs to the
        value (all of it, or up to and including the bracket that closes it)."""
        if not self.escape and _STRUCTURE.search(text) is None:
            return self, len(text)  # nothing that moves the scan: share it
        depth, in_string = self.depth, self.in_string
        skip_until = 1 if self.escape else 0
        for found in _STRUCTURE.finditer(text):
            at = found.start()
            if at < skip_until:
                continue
            char = found.group()
            if in_string:
                if char == "\\":
                    skip_until = at + 2
                elif char == '"':
                    in_string = False
            elif char == '"':
                in_string = True
            elif char in "[{":
                depth += 1
            elif char in "]}":
                depth -= 1
                if depth == 0:
                    return ArgumentsScan(), at + 1
        escape = skip_until > len(text)
        return ArgumentsScan(depth=depth, in_string=in_string, escape=escape), len(text)
