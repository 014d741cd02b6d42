"""The options of every subcommand that runs an engine (`serve`, `record`), defined once.

`--engine` picks an entry of `streamfold.adapters.registry.ENGINES`, which builds the engine
from the parsed arguments; `--engine-arg KEY=VALUE` passes an option through to vLLM or SGLang
untouched (`engine_args.parse_engine_args` reads it); the native engine's own flags are in
`_init_model.add_native_engine_arguments`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_engine_options"]


def add_engine_options(
    parser: argparse.ArgumentParser, *, default_engine: str, model_required: bool
) -> None:
    from streamfold.adapters.registry import ENGINES

    from ._init_model import add_native_engine_arguments

    parser.add_argument(
        "--engine", choices=sorted(ENGINES), default=default_engine, help="token source"
    )
    parser.add_argument(
        "--model",
        required=model_required,
        help="native: checkpoint directory; vllm, sglang: model name or path to load; "
        "replay: a trace name in --traces",
    )
    parser.add_argument(
        "--traces",
        type=Path,
        default=None,
        help="replay: directory of trace files (default: the traces bundled with streamfold)",
    )
    parser.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="vllm, sglang: an engine option passed through (repeatable; VALUE is JSON when it "
        "parses, else a string)",
    )
    parser.add_argument(
        "--chat-format",
        choices=("harmony", "chat-template"),
        default="harmony",
        help="vllm, sglang: how the model is prompted and read: harmony (gpt-oss), or "
        "chat-template (a think-tag model such as Qwen3 or DeepSeek-R1: its own chat template "
        "from --model, a local directory, and the think-tag grammar; docs/chat-formats.md)",
    )
    add_native_engine_arguments(parser)
