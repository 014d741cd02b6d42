"""A custom tool's Lark grammar, inlined into the completion's grammar under its own names.

The completion's grammar is one Lark grammar so that every engine reads it: llguidance itself,
vLLM's `structured_outputs.grammar` and SGLang's `ebnf` (both llguidance Lark, neither takes
llguidance's top-level JSON of several grammars). A custom tool's grammar (Codex's
`apply_patch`) therefore joins it as rules of its own: every rule and terminal name gets the
tool's prefix (`start` becomes `g0_start`, `LF` becomes `G0_LF`), so two tools' `start` or a
tool's `hunk` can never meet a name of the completion's grammar. Names brought in by
`%import common.X` stay as they are (they mean the same everywhere) and the import moves to
the top once.

`inline_lark` returns None for what it will not rewrite (a grammar with `%ignore`, whose effect
would leak into the whole completion, or one it cannot lex); the caller then nests the grammar
instead (llguidance's top-level JSON), which only the native engine reads.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["COMPACT", "compact_json", "inline_lark", "lark_literal"]

#: JSON written without free whitespace: its length is bounded by what the schema allows.
COMPACT = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":"}


def lark_literal(text: str) -> str:
    """`text` as a Lark string literal (which takes JSON's escapes)."""
    return json.dumps(text, ensure_ascii=False)


def compact_json(schema: Any) -> str:
    """`%json` of `schema`, written compactly (`COMPACT`) unless its `x-guidance` says else."""
    merged = dict(schema) if isinstance(schema, dict) else {}
    guidance = dict(merged.get("x-guidance") or {})
    merged["x-guidance"] = {**COMPACT, **guidance}
    return "%json " + json.dumps(merged, ensure_ascii=False)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_IMPORT = re.compile(r"^\s*%import\s+common\.([A-Za-z_][A-Za-z0-9_]*)\s*(?:->\s*\w+\s*)?$")
_DEFINITION = re.compile(r"^(\s*\??)([A-Za-z_][A-Za-z0-9_-]*)(\s*\[[^\]\n]*\])?(\s*:)")


def _skip_string(text: str, i: int, quote: str) -> int:
    i += 1
    while i < len(text) and text[i] != quote:
        i += 2 if text[i] == "\\" else 1
    return i + 1


def _skip_json(text: str, i: int) -> int:
    """From the `{` of a `%json {...}`, past its matching `}`."""
    depth = 0
    while i < len(text):
        char = text[i]
        if char == '"':
            i = _skip_string(text, i, '"')
            continue
        depth += {"{": 1, "}": -1}.get(char, 0)
        i += 1
        if depth == 0:
            return i
    raise ValueError("unterminated %json")


def _rename(body: str, prefix: str, keep: set[str]) -> str:
    out: list[str] = []
    i = 0
    while i < len(body):
        char = body[i]
        if char == '"':
            end = _skip_string(body, i, '"')
        elif body.startswith("//", i) or char == "#":
            end = body.find("\n", i)
            end = len(body) if end < 0 else end
        elif char == "/":
            end = _skip_string(body, i, "/")
            while end < len(body) and body[end].isalpha():  # flags
                end += 1
        elif body.startswith("%json", i):
            brace = body.index("{", i)
            end = _skip_json(body, brace)
        elif body.startswith(("<|", "<["), i):
            end = body.index(">", i) + 1
        elif char == "%":
            raise ValueError("a directive inside a rule")
        elif (match := _NAME.match(body, i)) is not None and not (
            i > 0 and (body[i - 1].isalnum() or body[i - 1] == "_")
        ):
            name = match.group()
            if name in keep:
                out.append(name)
            else:
                out.append((prefix.upper() if name[0].isupper() else prefix) + name)
            i = match.end()
            continue
        else:
            end = i + 1
        out.append(body[i:end])
        i = end
    return "".join(out)


def inline_lark(definition: str, prefix: str) -> tuple[str, str, tuple[str, ...]] | None:
    """`(start rule name, the rules renamed, the common names imported)`, or None when the
    grammar is one this will not rewrite (see the module docstring)."""
    imports: list[str] = []
    lines: list[str] = []
    for line in definition.splitlines():
        imported = _IMPORT.match(line)
        if imported is not None:
            imports.append(imported.group(1))
            continue
        if line.lstrip().startswith("%"):
            return None  # %ignore (it would hold the whole completion), %llguidance, ...
        lines.append(line)
    keep = set(imports)
    renamed: list[str] = []
    try:
        for line in lines:
            head = _DEFINITION.match(line)
            if head is None:
                renamed.append(_rename(line, prefix, keep))
                continue
            lead, name, attrs, colon = head.groups()
            new = (prefix.upper() if name[0].isupper() else prefix) + name
            rest = _rename(line[head.end() :], prefix, keep)
            renamed.append(f"{lead}{new}{attrs or ''}{colon}{rest}")
    except (ValueError, IndexError):
        return None
    return prefix + "start", "\n".join(renamed), tuple(imports)
