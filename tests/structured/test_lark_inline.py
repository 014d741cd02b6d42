"""Custom tools' Lark grammars inlined into the completion's grammar (`structured._lark`), so
the grammar stays one Lark text that vLLM's and SGLang's llguidance backends read too."""

from __future__ import annotations

from streamfold.adapters.structured import Call, LarkBody, Shape, harmony_grammar
from streamfold.adapters.structured._lark import inline_lark
from streamfold.engines.guidance import guidance_for
from streamfold.engines.vocab import harmony_encoding, load_harmony_vocabulary

# A patch envelope in the shape of Codex's apply_patch tool (written for this test).
PATCH = """
start: open_patch edit+ close_patch
open_patch: "*** Begin Patch" LF
close_patch: "*** End Patch" LF?
edit: add_file | remove_file
add_file: "*** Add File: " path LF plus_line+
remove_file: "*** Delete File: " path LF
path: /[^\\n]+/
plus_line: "+" /[^\\n]*/ LF -> line
%import common.LF
"""
# Another tool whose rule names collide with the first one's.
SECOND = 'start: path\npath: "x" NUMBER\nNUMBER: /[0-9]+/'
REASON = "<|channel|>analysis<|message|>Edit.<|end|><|start|>assistant"


def _accepts(grammar: str, completion: str) -> bool:
    matcher = guidance_for(load_harmony_vocabulary()).matcher(grammar)
    tokens = harmony_encoding().encode(completion, allowed_special="all")
    return all(matcher.consume_token(t) for t in tokens) and bool(matcher.is_stopped())


def _call(recipient: str, body: str) -> str:
    return f"{REASON}<|channel|>commentary to={recipient}<|message|>{body}<|call|>"


def test_a_patch_grammar_is_inlined_as_plain_lark_and_enforced() -> None:
    shape = Shape(
        answer=None,
        calls=(
            Call(recipient="functions.apply_patch", body=LarkBody(definition=PATCH)),
            Call(recipient="functions.pick", body=LarkBody(definition=SECOND)),
        ),
    )
    grammar = harmony_grammar(shape)
    assert not grammar.startswith("{") and grammar.count("%import common.LF") == 1
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"
    assert _accepts(grammar, _call("functions.apply_patch", patch))
    assert not _accepts(grammar, _call("functions.apply_patch", "*** Begin Nope\n"))
    assert _accepts(grammar, _call("functions.pick", "x42"))
    assert not _accepts(grammar, _call("functions.pick", "*** Begin Patch\n"))


def test_names_are_prefixed_and_imports_kept() -> None:
    start, rules, imports = inline_lark(PATCH, "g0_")  # type: ignore[misc]
    assert start == "g0_start" and imports == ("LF",)
    assert "g0_open_patch:" in rules and "G0_NUMBER" not in rules and " LF" in rules
    assert '"*** Begin Patch"' in rules  # strings untouched


def test_a_grammar_with_ignore_is_nested_instead_and_still_enforced_natively() -> None:
    ignoring = 'start: "a" "b"\n%ignore " "'
    assert inline_lark(ignoring, "g0_") is None
    shape = Shape(
        answer=None, calls=(Call(recipient="functions.f", body=LarkBody(definition=ignoring)),)
    )
    grammar = harmony_grammar(shape)
    assert grammar.startswith("{")  # llguidance's top-level JSON: the native engine reads it
    assert _accepts(grammar, _call("functions.f", "a b"))
