"""Think-tag models served with their own chat template (issue 36, item 3): `ChatTemplateFormat`
renders a request as `transformers`' `apply_chat_template` does on the same tokenizer, token for
token; `streamfold serve --engine vllm --chat-format chat-template` sends a stand-in vLLM engine
that prompt and the template's stop ids, and reads its think-tag answer with the think-tag
grammar. The model directory is built offline (`chat_template_model.py`)."""

from __future__ import annotations

import argparse
import importlib.util
import logging
import pickle
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfold.adapters import SGLangTokenSource, VLLMTokenSource, engine_args
from streamfold.adapters.driver import fold
from streamfold.adapters.formats import ChatTemplateError, ChatTemplateFormat, chat_messages
from streamfold.adapters.protocol import parse_create_request
from streamfold.adapters.registry import ENGINES, Engine, EngineSetupError
from streamfold.adapters.server import create_app
from streamfold.engines import GenerationRequest, TokenChunk
from streamfold.statemachine import Response
from tests.server.serving import serve

from . import fakes_sglang, fakes_vllm
from .chat_template_model import (
    HF_TOOLS,
    QWEN3_TEMPLATE,
    R1_OPENING,
    TOOLS,
    build_model_dir,
    hf_prompt,
)

transformers = pytest.importorskip("transformers")


# (Responses request, the same conversation as chat template messages written by hand, tools)
CONVERSATIONS: dict[str, tuple[dict[str, Any], list[dict[str, Any]], Any]] = {
    "plain": ({"input": "What is 42?"}, [{"role": "user", "content": "What is 42?"}], None),
    "instructions": (
        {"instructions": "Be brief.", "input": "Hi"},
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        None,
    ),
    "tools, a call, its output and earlier turns": (
        {
            "instructions": "You answer weather questions.",
            "tools": TOOLS,
            "input": [
                {"role": "user", "content": "Hello"},
                {"role": "assistant", "content": "Hi! Ask me."},
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "type": "function_call",
                    "call_id": "call_1",
                    "name": "get_weather",
                    "arguments": '{"city": "Paris"}',
                },
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"},
            ],
        },
        [
            {"role": "system", "content": "You answer weather questions."},
            {"role": "user", "content": "Hello"},
            {"role": "assistant", "content": "Hi! Ask me."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "type": "function",
                        "id": "call_1",
                        "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                    }
                ],
            },
            {"role": "tool", "content": "sunny, 21 C", "tool_call_id": "call_1"},
        ],
        HF_TOOLS,
    ),
    "tool_choice none shows no tools": (
        {"tools": TOOLS, "tool_choice": "none", "input": "Hi"},
        [{"role": "user", "content": "Hi"}],
        None,
    ),
}


@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_render_is_apply_chat_template_token_for_token(model_dir: Path, name: str) -> None:
    body, messages, tools = CONVERSATIONS[name]
    request = parse_create_request({"model": "qwenish", **body})
    chat_format = ChatTemplateFormat(model_dir)
    assert list(chat_format.render(request)) == hf_prompt(model_dir, messages, tools)
    # A render worker gets the format pickled: it loads the tokenizer itself, renders alike.
    again = pickle.loads(pickle.dumps(chat_format))
    assert again.render(request) == chat_format.render(request)


def test_stop_ids_are_the_templates_turn_ends(model_dir: Path) -> None:
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    stops = ChatTemplateFormat(model_dir).stop_token_ids()
    assert tokenizer.convert_ids_to_tokens(list(stops)) == ["<|im_end|>", "<|endoftext|>"]


def test_stop_ids_read_the_vocabulary_once(
    model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server asks each request's stop ids; `get_vocab()` builds the whole vocabulary as a
    dict (45 ms for Qwen3's 151k tokens, on the event loop): once per format, not per request."""
    chat_format = ChatTemplateFormat(model_dir)
    tokenizer = chat_format._tokenizer_now()
    reads: list[int] = []
    get_vocab = tokenizer.get_vocab

    def counted() -> dict[str, int]:
        reads.append(1)
        return get_vocab()  # type: ignore[no-any-return]

    monkeypatch.setattr(tokenizer, "get_vocab", counted)
    request = parse_create_request({"model": "qwenish", "input": "Hi"})
    first = chat_format.stop_token_ids_for(request)
    assert chat_format.stop_token_ids_for(request) == first == chat_format.stop_token_ids()
    assert len(reads) == 1


@pytest.mark.parametrize(
    ("fields", "one_call"),
    [
        ({"tools": TOOLS, "parallel_tool_calls": False}, True),
        ({"tools": TOOLS}, False),  # parallel_tool_calls defaults to true
        ({"parallel_tool_calls": False}, False),  # no tools shown
        ({"tools": TOOLS, "tool_choice": "none", "parallel_tool_calls": False}, False),
    ],
)
def test_a_request_allowed_one_call_stops_at_its_end(
    model_dir: Path, fields: dict[str, Any], one_call: bool
) -> None:
    """Bug: `parallel_tool_calls: false` without a constraint was not enforced; the generation
    now stops at the first call's `</tool_call>` (one token of this vocabulary)."""
    chat_format = ChatTemplateFormat(model_dir)
    request = parse_create_request({"model": "qwenish", "input": "Hi", **fields})
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    stops = tokenizer.convert_ids_to_tokens(list(chat_format.stop_token_ids_for(request)))
    turn_ends = ["<|im_end|>", "<|endoftext|>"]
    assert stops == ([*turn_ends, "</tool_call>"] if one_call else turn_ends)


def answer_ids(model_dir: Path, text: str) -> list[int]:
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    return list(tokenizer.encode(text, add_special_tokens=False))


@pytest.mark.parametrize("opening", ["", R1_OPENING])
def test_the_grammar_reads_the_models_think_tags(tmp_path: Path, opening: str) -> None:
    model_dir = build_model_dir(tmp_path / "m", opening=opening)
    chat_format = ChatTemplateFormat(model_dir)
    prefix = "" if opening else "<think>\n"  # R1's prompt opened <think> already
    ids = answer_ids(model_dir, f"{prefix}Let me think.\n</think>\n\nThe answer is 42.<|im_end|>")
    response = Response(id="resp_t", created_at=1, model="m", status="in_progress")
    chunks = [TokenChunk(token_ids=(t,)) for t in ids]
    events = list(fold(chat_format.grammar(), response, chunks, "stop"))
    final = events[-1].response
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert final.output[1].content[0].text == "The answer is 42."


def test_a_directory_without_a_tokenizer_is_refused_saying_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(ChatTemplateError, match=r"tokenizer\.json"):
        ChatTemplateFormat(tmp_path)


def vllm_args(model: Path) -> argparse.Namespace:
    return argparse.Namespace(model=str(model), engine_arg=[], chat_format="chat-template")


@pytest.fixture
def standin_vllm(monkeypatch: pytest.MonkeyPatch, model_dir: Path) -> fakes_vllm.FakeAsyncLLM:
    """`--engine vllm` builds a stand-in engine that answers with a think-tag completion."""
    steps = [[t] for t in answer_ids(model_dir, "<think>\nHm.\n</think>\n\nSunny.<|im_end|>")]
    engine = fakes_vllm.FakeAsyncLLM({}, default=fakes_vllm.Script(steps=steps))
    monkeypatch.setitem(
        engine_args.ENGINE_BUILDERS,
        "vllm",
        lambda model, **options: VLLMTokenSource(engine, api=fakes_vllm.API),
    )
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *rest: object() if name == "vllm" else real_find_spec(name, *rest),
    )
    return engine


def test_serve_vllm_with_chat_template_prompts_in_the_models_own_template(
    standin_vllm: fakes_vllm.FakeAsyncLLM, model_dir: Path
) -> None:
    """Bug: the server rendered every model's prompt as harmony ("You are ChatGPT...") with
    harmony's stop ids; a think-tag model could not be prompted."""
    engine = ENGINES["vllm"](vllm_args(model_dir))
    body, messages, tools = CONVERSATIONS["tools, a call, its output and earlier turns"]
    with serve(create_app(engine)) as url:
        reply = httpx.post(f"{url}/v1/responses", json={"model": "qwenish", **body}, timeout=30)
        listed = httpx.get(f"{url}/v1/models", timeout=30).json()
    # Issue 31: `GET /v1/models` lists vLLM's `--model` (no test ran it for vLLM or SGLang).
    assert [m["id"] for m in listed["data"]] == [str(model_dir)]
    answer = reply.json()
    assert reply.status_code == 200, answer
    [prompt] = standin_vllm.prompts.values()
    assert list(prompt["prompt_token_ids"]) == hf_prompt(model_dir, messages, tools)
    [params] = standin_vllm.params.values()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    stops = tokenizer.convert_ids_to_tokens(list(params.stop_token_ids))
    assert stops == ["<|im_end|>", "<|endoftext|>"]
    assert [item["type"] for item in answer["output"]] == ["reasoning", "message"]
    assert answer["output"][1]["content"][0]["text"] == "Sunny."


def test_chat_template_needs_a_local_model_directory(
    standin_vllm: fakes_vllm.FakeAsyncLLM, tmp_path: Path
) -> None:
    with pytest.raises(EngineSetupError, match="local model directory"):
        ENGINES["vllm"](vllm_args(tmp_path / "Qwen/Qwen3-8B"))


def test_serve_sglang_with_chat_template_prompts_in_the_models_own_template(
    monkeypatch: pytest.MonkeyPatch, model_dir: Path
) -> None:
    steps = [[t] for t in answer_ids(model_dir, "<think>\nHm.\n</think>\n\nSunny.<|im_end|>")]
    script = fakes_sglang.Script(steps=steps)
    engine = fakes_sglang.FakeSGLangEngine({}, default=script)
    monkeypatch.setitem(
        engine_args.ENGINE_BUILDERS, "sglang", lambda model, **options: SGLangTokenSource(engine)
    )
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *rest: object() if name == "sglang" else real_find_spec(name, *rest),
    )
    served = ENGINES["sglang"](vllm_args(model_dir))
    body, messages, tools = CONVERSATIONS["instructions"]
    with serve(create_app(served)) as url:
        reply = httpx.post(f"{url}/v1/responses", json={"model": "qwenish", **body}, timeout=30)
        model = httpx.get(f"{url}/v1/models/{model_dir}", timeout=30).json()
    assert model == {"id": str(model_dir), "object": "model", "created": model["created"],
                     "owned_by": "streamfold"}  # fmt: skip
    assert reply.status_code == 200, reply.text
    [call] = engine.calls.values()
    assert list(call["input_ids"]) == hf_prompt(model_dir, messages, tools)
    assert reply.json()["output"][-1]["content"][0]["text"] == "Sunny."


def test_create_app_with_a_think_tag_engine_sends_its_source_the_template_prompt(
    model_dir: Path,
) -> None:
    """Bug: `create_app` with a think-tag engine sent its source a harmony prompt ("You are
    ChatGPT...") and harmony's stop ids, silently; the engine now names its format."""
    seen: list[GenerationRequest] = []
    reply_ids = answer_ids(model_dir, "<think>\nOk.\n</think>\n\nThe answer is 42.<|im_end|>")

    class Source:
        async def generate(self, request: GenerationRequest) -> Any:
            seen.append(request)
            yield TokenChunk(token_ids=tuple(reply_ids), finish_reason="stop")

    engine = Engine(source=Source(), format=ChatTemplateFormat(model_dir))
    body, messages, tools = CONVERSATIONS["plain"]
    with serve(create_app(engine)) as url:
        reply = httpx.post(f"{url}/v1/responses", json={"model": "qwenish", **body}, timeout=30)
    assert reply.status_code == 200, reply.text
    [request] = seen
    assert list(request.prompt_token_ids) == hf_prompt(model_dir, messages, tools)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    stops = tokenizer.convert_ids_to_tokens(list(request.stop_token_ids))
    assert stops == ["<|im_end|>", "<|endoftext|>"]
    output = reply.json()["output"]
    assert [item["type"] for item in output] == ["reasoning", "message"]
    assert output[1]["content"][0]["text"] == "The answer is 42."


def test_a_think_tag_grammar_with_the_default_format_is_not_silent(
    model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Bug (issue 36, item 3): `Engine(source=..., grammar=<a think-tag grammar>)`, the format
    left at its default, sent the source a harmony prompt and harmony's stop ids, and nothing
    said so. The server still answers (the engine named its format), but logs once, on
    `streamfold.server`, which format it prompts in and how to name the model's own."""
    grammar = ChatTemplateFormat(model_dir).grammar()
    reply_ids = tuple(answer_ids(model_dir, "<think>\nOk.\n</think>\n\n42.<|im_end|>"))

    class Source:
        async def generate(self, request: GenerationRequest) -> Any:
            yield TokenChunk(token_ids=reply_ids, finish_reason="stop")

    caplog.set_level(logging.WARNING, logger="streamfold.server")
    engine = Engine(source=Source(), grammar=lambda model: grammar)
    with serve(create_app(engine)) as url:
        for _ in range(2):
            body = {"model": "qwenish", "input": "What is 42?"}
            reply = httpx.post(f"{url}/v1/responses", json=body, timeout=30)
            assert reply.status_code == 200, reply.text
    said = [r.getMessage() for r in caplog.records if "ChatTemplateFormat" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
    assert "'thinktags'" in said[0] and "'harmony'" in said[0] and "'qwenish'" in said[0]


def test_a_large_prompt_renders_in_a_worker_process_alike(model_dir: Path) -> None:
    """Past `inline_render_bytes` the server renders in a worker process, which gets the
    format pickled and loads the tokenizer itself: the same prompt."""
    from streamfold.adapters.limits import ServerLimits

    seen: list[GenerationRequest] = []

    class Source:
        async def generate(self, request: GenerationRequest) -> Any:
            seen.append(request)
            yield TokenChunk(token_ids=tuple(answer_ids(model_dir, "Hi.")), finish_reason="stop")

    text = "What is the weather in Paris? " * 40
    engine = Engine(source=Source(), format=ChatTemplateFormat(model_dir))
    app = create_app(engine, limits=ServerLimits(inline_render_bytes=64))
    with serve(app) as url:
        reply = httpx.post(
            f"{url}/v1/responses", json={"model": "qwenish", "input": text}, timeout=60
        )
    assert reply.status_code == 200, reply.text
    expected = hf_prompt(model_dir, [{"role": "user", "content": text}], None)
    assert list(seen[0].prompt_token_ids) == expected


def test_server_side_tools_are_refused_saying_they_are_harmony_only(model_dir: Path) -> None:
    request = parse_create_request({"model": "qwenish", "input": "Hi"})
    with pytest.raises(ChatTemplateError, match="harmony models only"):
        ChatTemplateFormat(model_dir).render(request, namespaces=[object()])


def test_serve_vllm_in_harmony_says_when_the_models_own_template_is_not_harmony(
    standin_vllm: fakes_vllm.FakeAsyncLLM,
    model_dir: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Bug (issue 36, item 3: 'silently'): `streamfold serve --engine vllm --model QWEN_DIR`
    without `--chat-format chat-template` prompts a Qwen model in harmony, and said nothing.
    The family is still the operator's choice (never guessed), but a local model directory
    whose own chat template does not write harmony gets a warning naming the flag; a gpt-oss
    directory, or a hub id with no local directory, gets none."""
    gpt_oss = tmp_path / "gpt-oss"
    gpt_oss.mkdir()
    harmony_template = "{{- '<|start|>assistant<|channel|>final<|message|>' }}"
    (gpt_oss / "chat_template.jinja").write_text(harmony_template, encoding="utf-8")
    caplog.set_level(logging.WARNING, logger="streamfold.server")
    for model in (gpt_oss, "openai/gpt-oss-20b", model_dir):
        args = argparse.Namespace(model=str(model), engine_arg=[], chat_format="harmony")
        ENGINES["vllm"](args)
    said = [r.getMessage() for r in caplog.records if "--chat-format" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in caplog.records]
    assert str(model_dir) in said[0] and "--chat-format chat-template" in said[0]


@pytest.mark.parametrize("engine", ["replay", "native"])
def test_gpt_oss_engines_refuse_chat_template(engine: str) -> None:
    args = argparse.Namespace(model="x", chat_format="chat-template", traces=None)
    with pytest.raises(EngineSetupError, match="--engine vllm or sglang"):
        ENGINES[engine](args)


def test_serve_vllm_with_chat_template_hands_vllm_the_think_tag_constraint(
    standin_vllm: fakes_vllm.FakeAsyncLLM, model_dir: Path
) -> None:
    """Bug: a think-tag model's `text.format` reached vLLM as nothing (`constraint_for` was
    None); it now gets the grammar over the whole think-tag completion, reasoning first."""
    engine = ENGINES["vllm"](vllm_args(model_dir))
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    text = {"format": {"type": "json_schema", "name": "a", "schema": schema}}
    body = {"model": "qwenish", "input": "Hi", "max_output_tokens": 200, "text": text}
    with serve(create_app(engine)) as url:
        reply = httpx.post(f"{url}/v1/responses", json=body, timeout=30)
    assert reply.status_code == 200, reply.text
    [params] = standin_vllm.params.values()
    expected = ChatTemplateFormat(model_dir).constraint_for(parse_create_request(body))
    assert expected is not None
    assert params.structured_outputs.grammar == expected.grammar
    assert "think[max_tokens=" in expected.grammar


# Interleaved thinking (issue 36's leftover): reasoning items reach the template.
REASONING_1 = "I need the weather tool for Paris."
REASONING_0 = "A greeting; no tool needed."


def reasoning(text: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }


CALL = {
    "type": "function_call",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city": "Paris"}',
}
CALL_OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"}


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("qwen3"), template=QWEN3_TEMPLATE)


def qwen3_prompt(qwen3_dir: Path, items: list[dict[str, Any]]) -> str:
    request = parse_create_request({"model": "qwen3", "tools": TOOLS, "input": items})
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(qwen3_dir))
    text: str = tokenizer.decode(list(ChatTemplateFormat(qwen3_dir).render(request)))
    return text


def test_a_tool_loops_second_turn_shows_the_first_turns_reasoning(qwen3_dir: Path) -> None:
    """Bug: reasoning items were left out of the template's messages, so inside a tool loop
    Qwen3 (whose template keeps `reasoning_content` after the last user query: interleaved
    thinking) continued after the tool's output without its own reasoning in view."""
    user = {"role": "user", "content": "Weather in Paris?"}
    prompt = qwen3_prompt(qwen3_dir, [user, reasoning(REASONING_1), CALL, CALL_OUTPUT])
    shown = (
        f"<|im_start|>assistant\n<think>\n{REASONING_1}\n</think>\n\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n'
        "<|im_start|>user\n<tool_response>\nsunny, 21 C\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert prompt.endswith(shown)


def test_reasoning_before_the_last_user_message_is_passed_and_the_template_drops_it(
    qwen3_dir: Path,
) -> None:
    """The reasoning goes to the template as the assistant message's `reasoning_content` (and
    `reasoning`, as vLLM passes both); Qwen3's template drops it before the last user query."""
    items = [
        {"role": "user", "content": "Hello"},
        reasoning(REASONING_0),
        {"role": "assistant", "content": "Hi! Ask me."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    request = parse_create_request({"model": "qwen3", "input": items})
    assistant = chat_messages(request)[1]
    assert assistant == {
        "role": "assistant",
        "content": "Hi! Ask me.",
        "reasoning_content": REASONING_0,
        "reasoning": REASONING_0,
    }
    prompt = qwen3_prompt(qwen3_dir, items)
    assert REASONING_0 not in prompt
    assert "<|im_start|>assistant\nHi! Ask me.<|im_end|>\n" in prompt


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        pytest.param(
            [reasoning("First."), reasoning("Second."), CALL],
            [{"reasoning_content": "First.\nSecond.", "tool_calls": 1}],
            id="consecutive reasoning items join, in order",
        ),
        pytest.param(
            [reasoning("Why."), {"role": "assistant", "content": "Checking."}, CALL],
            [{"reasoning_content": "Why.", "content": "Checking.", "tool_calls": 1}],
            id="a message and its call are one assistant message with the reasoning",
        ),
        pytest.param(
            [reasoning("Unused.")],
            [],
            id="reasoning followed by nothing is left out",
        ),
        pytest.param(
            [reasoning("Lost."), {"role": "user", "content": "Never mind."}],
            [{"role": "user"}],
            id="reasoning with no answer before the next user message is left out",
        ),
        pytest.param(
            [CALL, CALL_OUTPUT, reasoning("Again."), {**CALL, "call_id": "call_2"}],
            [{"tool_calls": 1}, {"role": "tool"}, {"reasoning_content": "Again.", "tool_calls": 1}],
            id="each step of a tool loop keeps its own reasoning",
        ),
        pytest.param(
            [{"type": "reasoning", "summary": [], "encrypted_content": "sealed"}, CALL],
            [{"tool_calls": 1}],
            id="an unopened encrypted_content-only item has no text to show",
        ),
    ],
)
def test_reasoning_items_attach_to_the_next_assistant_message(
    items: list[dict[str, Any]], expected: list[dict[str, Any]]
) -> None:
    user = {"role": "user", "content": "Weather?"}
    request = parse_create_request({"model": "m", "tools": TOOLS, "input": [user, *items]})
    messages = chat_messages(request)[1:]
    assert len(messages) == len(expected), messages
    for message, want in zip(messages, expected, strict=True):
        assert message["role"] == want.get("role", "assistant")
        assert message.get("reasoning_content") == want.get("reasoning_content")
        assert message.get("reasoning") == want.get("reasoning_content")
        if "content" in want:
            assert message["content"] == want["content"]
        assert len(message.get("tool_calls", ())) == want.get("tool_calls", 0)


ITEM_KINDS = st.lists(st.sampled_from(["user", "reasoning", "assistant", "call", "output"]))


def _items(kinds: list[str]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": "Start."}]
    calls: list[str] = []
    for i, kind in enumerate(kinds):
        if kind == "user":
            items.append({"role": "user", "content": f"Question {i}."})
        elif kind == "reasoning":
            items.append(reasoning(f"thought {i}"))
        elif kind == "assistant":
            items.append({"role": "assistant", "content": f"Answer {i}."})
        elif kind == "call":
            items.append({**CALL, "call_id": f"call_{i}"})
            calls.append(f"call_{i}")
        elif calls:  # an output answers a call made before it
            items.append({**CALL_OUTPUT, "call_id": calls.pop()})
    return items


@settings(max_examples=200, deadline=None)
@given(ITEM_KINDS)
def test_reasoning_rides_on_the_next_assistant_message_and_changes_nothing_else(
    kinds: list[str],
) -> None:
    """Over any conversation: a reasoning item is shown (once, in order) exactly when an
    assistant message or call follows it before a user message or tool output, and taking
    the reasoning keys away leaves the messages of the same input without reasoning items."""
    items = _items(kinds)
    messages = chat_messages(parse_create_request({"model": "m", "input": items}))
    shown = [line for m in messages for line in m.get("reasoning_content", "").split("\n") if line]
    rides = []
    for i, item in enumerate(items):
        if item.get("type") != "reasoning":
            continue
        after = next((later for later in items[i + 1 :] if later.get("type") != "reasoning"), {})
        if after.get("role") == "assistant" or after.get("type") == "function_call":
            rides.append(item["content"][0]["text"])
    assert shown == rides
    assert all(m.get("reasoning") == m.get("reasoning_content") for m in messages)
    bare = [
        {k: v for k, v in m.items() if k not in ("reasoning", "reasoning_content")}
        for m in messages
    ]
    without = [item for item in items if item.get("type") != "reasoning"]
    assert bare == chat_messages(parse_create_request({"model": "m", "input": without}))
