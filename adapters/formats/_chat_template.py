"""Think-tag models (Qwen3, DeepSeek-R1, Hermes-style tool callers) served with their own chat
template: `ChatTemplateFormat`.

The prompt is the model's Hugging Face chat template (`tokenizer_config.json`'s
`chat_template`, or `chat_template.jinja` beside it) rendered by `transformers`'
`apply_chat_template`, the renderer those templates are written for (its sandboxed jinja2
environment, `tojson`, `raise_exception`), so what the server sends is what vLLM's or SGLang's
own chat endpoint would send. `transformers` is imported only when a format is loaded
(`pip install 'streamfold[chat-template]'`; vLLM and SGLang install it anyway).

A request becomes the template's messages as the OpenAI chat convention has them: the
`instructions` and any `system`/`developer` messages, joined, as one leading `system` message;
user and assistant messages in order; an earlier `function_call` as an assistant message's
`tool_calls` entry (its `arguments` parsed to an object where they are JSON, as templates
expect); a `function_call_output` as a `tool` message.

Tools: every tool the client runs is shown as a function in the template's `tools` (none under
`tool_choice: "none"`), named as `statemachine/_grammars/chat_tools.py`'s table says, the table
the think-tag grammar routes the model's calls back by: the request's function and custom
tools, a namespace's tools as `NS__NAME` (vLLM's flattening; Codex's MCP servers), the tools of
`additional_tools` items (a code-mode model's `functions` namespace: under their own names) and
of `tool_search_output` items, and a client-run `tool_search`. A custom tool takes one string
parameter, `input`. Earlier calls of them are `tool_calls` entries under the same names (a
custom call's arguments `{"input": ...}`, a tool search's its query); their outputs, and a tool
search's (`{"loaded": [names]}`, as harmony is shown it), `tool` messages. Two tools shown under
one name are a 400 naming `tools`.

Reasoning items go to the template too: a reasoning item's text is the next assistant
message's `reasoning_content` (and `reasoning`: vLLM's chat endpoint hands templates both), the
message its answer or its tool calls make. Whether it is shown is the template's decision, as
when vLLM serves the model: Qwen3's shows it after the last user query, so inside a tool loop
the model continues after a tool's output with its own reasoning in view (interleaved
thinking), and drops it before; DeepSeek-R1's never reads it. Consecutive reasoning
items join, one a line; reasoning that no assistant message follows before the next user
message, tool output or the end of the input has no message to ride on and is left out. A
sent-back item with only its `encrypted_content` is opened by the server before this
(`server/_reasoning_keys.py`), as for harmony; an item still sealed has no text to show.

Stop ids: the tokenizer's end-of-sequence token, and the chat templates' turn end tokens
(`<|im_end|>`, `<|endoftext|>`, `<|eot_id|>`, `<｜end▁of▁sentence｜>`) the vocabulary has.

One call: with `parallel_tool_calls: false` (and tools shown) a generation also stops at
`</tool_call>` (`stop_token_ids_for`), so it ends with its first call however many the model
would write; unconstrained requests included (a constraint's grammar allows one call anyway).
The tag is a stop id only where it is one token of the vocabulary (Qwen3's and Hermes' are
added tokens); where it is not, no stop id can say it and the engines take none other (a
`GenerationRequest` has no stop strings), so such a model may still write several calls, all
of which come back. A `</tool_call>` token the model writes inside its reasoning ends the
generation there too: the response completes with that reasoning and no call.

The grammar is the `ThinkTagGrammar` on the model's own `tokenizer.json`, reading from
reasoning when the template opens `<think>` in the prompt (DeepSeek-R1).

Structured outputs and `tool_choice`: `constraint_for` writes the request's `Shape` as one
grammar over the completion (`structured.thinktags_grammar`): free reasoning inside
`<think>…</think>`, bounded by the budget as harmony's is, then the JSON answer `text.format`
asks for, or a Hermes `<tool_call>` to a function the request shows the model (`required`,
a named function or custom tool), by its shown name, its arguments following a strict tool's
schema; a custom tool's are `{"input": "<string>"}`, the string held to the tool's `regex`
grammar (a Lark one is not enforced inside it).

Not yet: server-side tools (`namespaces`, `after`: the agent loop) are harmony only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import attrs

from streamfold.engines import DecodingConstraint
from streamfold.statemachine import (
    CustomTool,
    CustomToolGrammar,
    StreamfoldError,
    ThinkTagGrammar,
    ToolSearchTool,
)
from streamfold.statemachine._grammar import Grammar
from streamfold.statemachine._grammars.chat_tools import (
    CUSTOM_INPUT,
    TOOL_SEARCH,
    FlatTool,
    flat_name,
    flat_tools,
)

from ..protocol import (
    CreateRequest,
    CustomToolCallInput,
    CustomToolCallOutputInput,
    FunctionCallInput,
    FunctionCallOutputInput,
    MessageInput,
    ReasoningInput,
    RequestError,
    ToolSearchCallInput,
    ToolSearchOutputInput,
)
from ..structured import (
    Body,
    JsonBody,
    RegexBody,
    ThinkTagTokens,
    budget_shape,
    shape_for,
    thinktags_grammar,
)
from ._harmony_prompt import search_function

__all__ = [
    "ChatTemplateError",
    "ChatTemplateFormat",
    "chat_messages",
    "chat_tools",
    "shown_tools",
    "writes_harmony",
]

#: Turn end tokens of the common chat templates; those the vocabulary has are stop ids.
TURN_END_TOKENS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<｜end▁of▁sentence｜>")


class ChatTemplateError(StreamfoldError, ValueError):
    """A chat template model cannot be loaded or cannot render this request; the message says
    what to install, pass or leave out."""


def _arguments(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return text  # the model's own text, as it wrote it
    return value if isinstance(value, dict) else text


def chat_messages(request: CreateRequest) -> list[dict[str, Any]]:
    """`request`'s conversation as chat template messages (see the module docstring)."""
    system = [request.instructions] if request.instructions else []
    messages: list[dict[str, Any]] = []
    reasoning: list[str] = []  # reasoning items waiting for their assistant message
    items = (
        (MessageInput(role="user", content=request.input),)
        if isinstance(request.input, str)
        else request.input
    )
    for item in items:
        if isinstance(item, ReasoningInput):
            if item.text:
                reasoning.append(item.text)
            continue
        if isinstance(item, MessageInput):
            if item.role in ("system", "developer"):
                system.append(item.text)
                continue
            messages.append({"role": item.role, "content": item.text})
        elif isinstance(item, FunctionCallInput | CustomToolCallInput | ToolSearchCallInput):
            _add_call(messages, _tool_call(item))
        elif isinstance(item, FunctionCallOutputInput | CustomToolCallOutputInput):
            messages.append({"role": "tool", "content": item.text, "tool_call_id": item.call_id})
        elif isinstance(item, ToolSearchOutputInput):
            # The tools it loaded are shown with the request's (`chat_tools`); its output
            # names them, as harmony's does.
            loaded = json.dumps({"loaded": [tool.name for tool in item.tools]}, ensure_ascii=False)
            messages.append({"role": "tool", "content": loaded, "tool_call_id": item.call_id})
        else:
            continue  # other items have no chat message (`additional_tools`: see `chat_tools`)
        if messages[-1]["role"] == "assistant":
            _attach(messages[-1], reasoning)
        reasoning = []  # a user message or a tool's output ends the turn it thought in
    if system:
        messages.insert(0, {"role": "system", "content": "\n\n".join(system)})
    return messages


def _tool_call(item: FunctionCallInput | CustomToolCallInput | ToolSearchCallInput) -> Any:
    """An earlier call as a `tool_calls` entry, named as its tool is shown (`chat_tools`)."""
    if isinstance(item, ToolSearchCallInput):
        name, arguments = TOOL_SEARCH, item.arguments if item.arguments is not None else {}
    elif isinstance(item, CustomToolCallInput):
        name, arguments = flat_name(item.namespace, item.name), {CUSTOM_INPUT: item.input}
    else:
        name, arguments = flat_name(item.namespace, item.name), _arguments(item.arguments)
    return {
        "type": "function",
        "id": item.call_id,
        "function": {"name": name, "arguments": arguments},
    }


def _add_call(messages: list[dict[str, Any]], call: Any) -> None:
    """`call` on the assistant message before it, or on a new one."""
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant" and "tool_calls" in last:
        last["tool_calls"].append(call)
    elif last is not None and last["role"] == "assistant":
        last["tool_calls"] = [call]
    else:
        messages.append({"role": "assistant", "content": "", "tool_calls": [call]})


def _attach(message: dict[str, Any], reasoning: list[str]) -> None:
    """`reasoning` as `message`'s, after any it carries (a call joining a message that had
    its own); under both names templates read, as vLLM passes them."""
    if not reasoning:
        return
    earlier = message.get("reasoning_content")
    text = "\n".join([earlier, *reasoning] if earlier else reasoning)
    message["reasoning_content"] = message["reasoning"] = text


def shown_tools(request: CreateRequest) -> tuple[FlatTool, ...]:
    """The functions a chat template model is shown for `request` (`chat_tools.py`'s table):
    its function and custom tools, the tools of its namespaces, of `additional_tools` and
    `tool_search_output` items, and a `tool_search` it runs itself. None under
    `tool_choice: "none"`. Two that would be shown under one name are refused (400)."""
    if request.tool_choice == "none":
        return ()
    searches = (t for t in request.tools if isinstance(t, ToolSearchTool))
    shown = tuple(flat_tools((*request.client_tools, *searches)))
    seen: set[str] = set()
    for tool in shown:
        if tool.flat in seen:
            raise RequestError(
                f"two tools would be shown to this chat template model as the function "
                f"{tool.flat!r} (a namespace's tool is shown as NAMESPACE__TOOL); rename one",
                param="tools",
            )
        seen.add(tool.flat)
    return shown


def _described(tool: FlatTool) -> dict[str, Any]:
    """One shown function in the chat templates' `tools` shape."""
    # A tool search is described as harmony describes it (`functions.tool_search`).
    inner = search_function(tool.tool) if isinstance(tool.tool, ToolSearchTool) else tool.tool
    parameters: Any
    if isinstance(inner, CustomTool):
        description, parameters = custom_description(inner), CUSTOM_PARAMETERS
    else:
        description = inner.description or ""
        parameters = inner.parameters or {"type": "object", "properties": {}}
    function = {"name": tool.flat, "description": description, "parameters": parameters}
    return {"type": "function", "function": function}


#: A custom tool's one parameter, its free-text input.
CUSTOM_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {CUSTOM_INPUT: {"type": "string", "description": "the tool's input, as text"}},
    "required": [CUSTOM_INPUT],
}


def custom_description(tool: CustomTool) -> str:
    lines = [tool.description] if tool.description else []
    lines.append(f"Freeform tool: pass its whole input as the string `{CUSTOM_INPUT}`.")
    if isinstance(tool.format, CustomToolGrammar):
        lines.append(f"The input must follow this {tool.format.syntax} grammar:")
        lines += tool.format.definition.splitlines()
    return "\n".join(lines)


def chat_tools(request: CreateRequest) -> list[dict[str, Any]] | None:
    """The functions `request` shows the model (`shown_tools`) in the chat templates' `tools`
    shape (None: no tools)."""
    return [_described(tool) for tool in shown_tools(request)] or None


def writes_harmony(model_dir: str | Path) -> bool | None:
    """Whether a local model directory's own chat template writes harmony (gpt-oss's writes
    `<|channel|>`): None where there is none to read (a hub id, no template). Read from
    `chat_template.jinja` or `tokenizer_config.json`'s `chat_template` (a string, or named
    templates), without loading a tokenizer."""
    directory = Path(model_dir)
    template: Any = None
    try:
        if (directory / "chat_template.jinja").is_file():
            template = (directory / "chat_template.jinja").read_text(encoding="utf-8")
        elif (directory / "tokenizer_config.json").is_file():
            config = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
            template = config.get("chat_template") if isinstance(config, dict) else None
    except (OSError, ValueError):
        return None
    if isinstance(template, list):
        template = " ".join(str(t.get("template", "")) for t in template if isinstance(t, dict))
    if not isinstance(template, str) or not template:
        return None
    return "<|channel|>" in template


def _recipient(tool: FlatTool) -> str:
    """The harmony recipient `structured.shape_for` names a shown function's calls by."""
    return f"{tool.namespace or 'functions'}.{tool.name or TOOL_SEARCH}"


def _custom_body(body: Body) -> JsonBody:
    """A custom tool's arguments: its input as one string. A `regex` grammar holds that string
    (a JSON Schema `pattern`: llguidance matches the decoded string, escapes and all, against
    it); a `lark` grammar is not enforced inside the JSON string."""
    text: dict[str, Any] = {"type": "string"}
    if isinstance(body, RegexBody):
        text["pattern"] = f"^(?:{body.pattern})$"
    return JsonBody(
        schema={
            "type": "object",
            "properties": {CUSTOM_INPUT: text},
            "required": [CUSTOM_INPUT],
            "additionalProperties": False,
        }
    )


class ChatTemplateFormat:
    """A think-tag model's chat format, from its directory (`tokenizer.json` and
    `tokenizer_config.json` with a `chat_template`): see the module docstring.

    Picklable: a render worker process gets the directory and loads the tokenizer itself."""

    name = "thinktags"

    def __init__(self, model_dir: str | Path, *, name: str = "thinktags") -> None:
        self.model_dir = Path(model_dir)
        self.name = name
        if not (self.model_dir / "tokenizer.json").is_file():
            raise ChatTemplateError(
                f"{self.model_dir} has no tokenizer.json: a chat template model is served from a "
                "local model directory (tokenizer.json, tokenizer_config.json); download it "
                "first (huggingface-cli download MODEL --local-dir DIR) and pass DIR"
            )
        self._tokenizer: Any = None
        self._grammar: ThinkTagGrammar | None = None
        self._tags: ThinkTagTokens | None = None
        self._stops: tuple[int, ...] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"model_dir": self.model_dir, "name": self.name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["model_dir"], name=state["name"])  # type: ignore[misc]

    def load(self) -> None:
        self._tokenizer_now()

    def _tokenizer_now(self) -> Any:
        if self._tokenizer is None:
            try:
                from transformers import PreTrainedTokenizerFast
            except ImportError as exc:
                raise ChatTemplateError(
                    "a chat template model needs transformers to render its prompts: "
                    "pip install 'streamfold[chat-template]'"
                ) from exc
            tokenizer = PreTrainedTokenizerFast.from_pretrained(str(self.model_dir))
            if not tokenizer.chat_template:
                raise ChatTemplateError(
                    f"{self.model_dir}'s tokenizer_config.json has no chat_template (nor is "
                    "there a chat_template.jinja); this model cannot be prompted as a chat"
                )
            self._tokenizer = tokenizer
        return self._tokenizer

    def render(
        self, request: CreateRequest, namespaces: Sequence[Any] = (), after: Sequence[Any] = ()
    ) -> tuple[int, ...]:
        """The chat template's prompt for the assistant's next turn, as token ids."""
        if namespaces or after:
            raise ChatTemplateError(
                "server-side tools (mcp, code_interpreter, web search) are served for harmony "
                "models only; a chat template model takes function tools"
            )
        return self.render_messages(chat_messages(request), chat_tools(request))

    def render_messages(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> tuple[int, ...]:
        """Chat messages (and tools) as the template renders them, generation prompt included."""
        tokenizer = self._tokenizer_now()
        try:
            text = tokenizer.apply_chat_template(
                messages, tools=tools, add_generation_prompt=True, tokenize=False
            )
        except Exception as exc:  # jinja2's TemplateError, raise_exception() in the template
            raise ChatTemplateError(
                f"{self.model_dir}'s chat template refused the conversation: {exc}"
            ) from exc
        # As apply_chat_template(tokenize=True) encodes it: the template wrote the specials.
        return tuple(tokenizer.encode(text, add_special_tokens=False))

    def stop_token_ids(self) -> tuple[int, ...]:
        # Found once: the server asks for every request, and `get_vocab()` builds the whole
        # vocabulary as a dict each time (45 ms for 151k tokens, on the event loop).
        if self._stops is None:
            tokenizer = self._tokenizer_now()
            vocab = tokenizer.get_vocab()
            stops = [] if tokenizer.eos_token_id is None else [tokenizer.eos_token_id]
            stops += [vocab[t] for t in TURN_END_TOKENS if t in vocab]
            self._stops = tuple(dict.fromkeys(stops))
        return self._stops

    def stop_token_ids_for(self, request: CreateRequest) -> tuple[int, ...]:
        """The turn ends, and `</tool_call>` when `request` allows one call
        (`parallel_tool_calls: false`, tools shown): the generation ends with its first call,
        which the grammar reads at that tag or, where an engine leaves the tag out, at the
        `stop` (see "One call" in the module docstring)."""
        stops = self.stop_token_ids()
        if request.parallel_tool_calls or not shown_tools(request):
            return stops
        tags = self.tag_tokens()
        close = tags.token_ids.get(tags.tool_close)
        return stops if close is None or close in stops else (*stops, close)

    def grammar(self) -> Grammar:
        return self._think_grammar()

    def _think_grammar(self) -> ThinkTagGrammar:
        if self._grammar is None:
            from streamfold.engines.vocab_hf import load_tokenizer_json

            vocabulary = load_tokenizer_json(self.model_dir / "tokenizer.json")
            in_reasoning = self._prompt_ends() == "in_reasoning"
            self._grammar = ThinkTagGrammar(vocabulary, start_in_reasoning=in_reasoning)
        return self._grammar

    def _prompt_ends(self) -> Literal["free", "in_reasoning", "answering"]:
        """Where the template's generation prompt leaves the model: inside `<think>`
        (DeepSeek-R1), past `</think>` (thinking turned off), or free to open it."""
        tokenizer = self._tokenizer_now()
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
        ).rstrip()
        if text.endswith("<think>"):
            return "in_reasoning"
        return "answering" if text.endswith("</think>") else "free"

    def tag_tokens(self) -> ThinkTagTokens:
        """The model's tags, which of them are single tokens, its stop ids and where its
        prompt leaves it: what `thinktags_grammar` writes a constraint with."""
        if self._tags is None:
            grammar = self._think_grammar()
            tags = {
                "think_open": grammar.think_open,
                "think_close": grammar.think_close,
                "tool_open": grammar.tool_open,
                "tool_close": grammar.tool_close,
            }
            special = grammar.vocabulary.special
            self._tags = ThinkTagTokens(
                **tags,
                token_ids={tag: special[tag] for tag in tags.values() if tag in special},
                stop_ids=self.stop_token_ids(),
                prompt=self._prompt_ends(),
            )
        return self._tags

    def constraint_for(
        self, request: CreateRequest, *, after_call: bool = False
    ) -> DecodingConstraint | None:
        """One grammar over the whole completion (`structured.thinktags_grammar`): reasoning
        free and bounded by the budget, then the answer or call the request allows."""
        shape = shape_for(request, after_call=after_call)
        if shape.calls is not None:
            # The model calls the functions it is shown (`shown_tools`) by their shown names:
            # each allowed call (named as harmony names it) becomes a call of that function, a
            # custom tool's input the string `input` of its arguments.
            shown = {_recipient(tool): tool for tool in shown_tools(request)}
            calls = tuple(
                attrs.evolve(
                    call,
                    recipient=f"functions.{shown[call.recipient].flat}",
                    body=_custom_body(call.body)
                    if shown[call.recipient].kind == "custom_tool_call"
                    else call.body,
                )
                for call in shape.calls
                if call.recipient in shown
            )
            if shape.answer is None and not calls:
                raise RequestError(
                    "tool_choice asks for a call to a tool a think-tag model is not shown (it "
                    "is shown the client's function, custom and namespace tools; server-side "
                    "tools are harmony only)",
                    param="tool_choice",
                )
            shape = attrs.evolve(shape, calls=calls)
        # One reasoning block (`<think>…</think>`) takes what harmony splits among messages.
        shape = budget_shape(
            attrs.evolve(shape, reasoning_messages=1, min_reasoning_messages=0),
            request.max_output_tokens,
        )
        if shape.free:
            return None
        grammar = thinktags_grammar(shape, self.tag_tokens())
        return DecodingConstraint(grammar=grammar, summary=shape.summary)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self.model_dir)!r})"
