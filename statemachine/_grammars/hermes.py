"""Reading a Hermes tool call body, `{"name": …, "arguments": {…}}`, as it streams.

The think-tag grammar hands over the text between `<tool_call>` and `</tool_call>` piece by
piece. Two paths, so that a call streams when it can and is still found when it cannot:

* *streaming*: once the body's start reads `{"name": "<string>", "arguments": ` followed by
  `{` or `[` (checked on at most `HEAD_LIMIT` characters, so the answer depends on the text
  alone, never on how it was chunked), the name is known and the arguments value streams as
  it arrives; `ArgumentsScan` follows brackets and strings to see where the value ends.
* *buffered*: any other shape (arguments first, arguments as a JSON string, a `parameters`
  key, ...) waits for the whole body and is read with `json.loads` by `parse_call`.

A custom tool's call (`chat_tools.py`: one string parameter, `input`) streams its input rather
than its arguments: once the arguments read `{"input": "` (`input_start`), `StringScan`
decodes the JSON string as it arrives, holding back an escape cut between tokens, up to its
closing quote. Arguments of another shape are read whole, as above.
"""

from __future__ import annotations

import json
import re

import attrs

__all__ = ["HEAD_LIMIT", "ArgumentsScan", "StringScan", "input_start", "match_head", "parse_call"]

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


_INPUT_OPENING = ("{", '"input"', ":", '"')
_BLANKS = " \t\r\n"


def input_start(arguments: str) -> int | None:
    """Where a custom tool's input string starts in `arguments` (just past its opening quote,
    the arguments reading `{"input": "`), -1 when they cannot read so, or None while the text
    is too short to say."""
    at = 0
    for piece in _INPUT_OPENING:
        while at < len(arguments) and arguments[at] in _BLANKS:
            at += 1
        rest = arguments[at : at + len(piece)]
        if len(rest) < len(piece):
            return None if piece.startswith(rest) else -1
        if rest != piece:
            return -1
        at += len(piece)
    return at


_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_SPECIAL = re.compile(r'["\\]')
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
#: What may still become the `\uXXXX` of a low surrogate.
_PARTIAL_LOW = re.compile(r"\\(?:u[0-9a-fA-F]{0,3})?")


@attrs.frozen(kw_only=True)
class StringScan:
    """A JSON string's content being decoded as it streams: `pending` is an escape cut between
    tokens (at most a surrogate pair's twelve characters), held until it can be read."""

    pending: str = ""

    def feed(self, text: str) -> tuple[StringScan, str, int, bool]:
        """Decode `text`; returns the new scan, the decoded characters, how much of `text`
        belongs to the string (all of it, or up to and including its closing quote) and
        whether that quote came. An escape JSON does not have is kept as written; a lone
        surrogate becomes U+FFFD (UTF-8 cannot carry it)."""
        source = self.pending + text
        held = len(self.pending)
        out: list[str] = []
        at = 0
        while True:
            found = _SPECIAL.search(source, at)
            if found is None:
                out.append(source[at:])
                return StringScan(), "".join(out), len(text), False
            where = found.start()
            out.append(source[at:where])
            if source[where] == '"':
                return StringScan(), "".join(out), where + 1 - held, True
            kind = source[where + 1 : where + 2]
            size = 2
            if kind == "u":
                char, size = _unicode(source, where)
                out.append(char)
            elif kind:
                out.append(_ESCAPES.get(kind, "\\" + kind))
            if not kind or size == 0:  # cut inside the escape: wait for the rest
                return StringScan(pending=source[where:]), "".join(out), len(text), False
            at = where + size


def _unicode(source: str, at: int) -> tuple[str, int]:
    """The character a `\\u` escape at `at` stands for and its length; size 0: not yet
    known (the text ends inside it)."""
    digits = source[at + 2 : at + 6]
    if len(digits) < 4:
        return ("", 0) if _HEX4.fullmatch(digits.ljust(4, "0")) else ("\\u", 2)
    if not _HEX4.fullmatch(digits):
        return "\\u", 2  # not an escape JSON has: as written
    code = int(digits, 16)
    if 0xDC00 <= code < 0xE000:
        return "\ufffd", 6
    if not 0xD800 <= code < 0xDC00:
        return chr(code), 6
    low = source[at + 6 : at + 12]
    if not low or (len(low) < 6 and _PARTIAL_LOW.fullmatch(low) is not None):
        return "", 0
    if len(low) == 6 and low[:2] == "\\u" and _HEX4.fullmatch(low[2:]):
        second = int(low[2:], 16)
        if 0xDC00 <= second < 0xE000:
            return chr(0x10000 + ((code - 0xD800) << 10) + (second - 0xDC00)), 12
    return "\ufffd", 6
