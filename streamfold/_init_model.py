"""CLI glue for the native engine: `streamfold init-model`, engine options, trace recording.

`streamfold/cli.py` wires these in (this module adds no sub-command by itself):
* `add_init_model_parser(subparsers)` / `run_init_model(args)` for `streamfold init-model DIR`;
* `add_native_engine_arguments(parser)` and `native_engine_options(args)` for the flags that
  `record --engine native` and `serve --engine native` share, and
  `build_native_engine(model_dir, **options)` to build the engine from them;
* `record_trace(source, request, path, header)` writes the JSON-lines trace `replay` reads.
Importing this module does not import torch.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamfold.engines._source import GenerationRequest, TokenSource

if TYPE_CHECKING:
    from streamfold.engines.native.engine import NativeEngine

__all__ = [
    "add_init_model_parser",
    "add_native_engine_arguments",
    "build_native_engine",
    "native_engine_options",
    "record_trace",
    "run_init_model",
]


def add_init_model_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "init-model",
        help="write a small random gpt-oss checkpoint for the native engine",
        description="Write config.json and model.safetensors of a random gpt-oss model with the"
        " full harmony vocabulary (201088 ids), so `--engine native` runs end to end.",
    )
    parser.add_argument("model_dir", metavar="DIR", help="directory to create")
    parser.add_argument("--hidden-size", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--experts", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--mxfp4", action="store_true", help="store experts as MXFP4")
    parser.add_argument("--force", action="store_true", help="overwrite an existing checkpoint")
    parser.set_defaults(run=run_init_model)
    return parser


def run_init_model(args: argparse.Namespace) -> int:
    from streamfold.engines.native.gptoss.init_model import init_model

    root = init_model(
        args.model_dir,
        hidden_size=args.hidden_size,
        intermediate_size=args.hidden_size,
        num_layers=args.layers,
        num_experts=args.experts,
        seed=args.seed,
        dtype=args.dtype,
        mxfp4=args.mxfp4,
        overwrite=args.force,
    )
    size = sum(p.stat().st_size for p in root.iterdir()) / 2**20
    print(f"wrote a random gpt-oss checkpoint to {root} ({size:.1f} MiB)")
    return 0


def add_native_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags for `--engine native` (the caller adds `--model`)."""
    group = parser.add_argument_group("native engine")
    group.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    group.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    group.add_argument("--kv-cache-mb", type=int, default=None, help="KV pool size (MiB)")
    group.add_argument("--block-size", type=int, default=16, help="tokens per KV block")
    group.add_argument("--max-num-seqs", type=int, default=64, help="most sequences per step")
    group.add_argument(
        "--experts",
        choices=("dequantize", "mxfp4"),
        default="dequantize",
        help="MXFP4 experts: dequantize on load, or keep packed and dequantize per use",
    )


def native_engine_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "device": args.device,
        "dtype": args.dtype,
        "kv_cache_mb": args.kv_cache_mb,
        "block_size": args.block_size,
        "max_num_seqs": args.max_num_seqs,
        "experts": args.experts,
    }


def build_native_engine(
    model_dir: str | Path,
    *,
    device: str = "cpu",
    dtype: str = "float32",
    kv_cache_mb: int | None = None,
    block_size: int = 16,
    max_num_seqs: int = 64,
    experts: str = "dequantize",
) -> NativeEngine:
    """Load `model_dir` and return a `NativeEngine` (close it, or use it as a context manager)."""
    import torch

    from streamfold.engines.native.core import EngineCore
    from streamfold.engines.native.engine import NativeEngine

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in torch_dtype:
        raise ValueError(f"dtype {dtype!r} is not one of {sorted(torch_dtype)}")
    core = EngineCore.from_pretrained(
        model_dir,
        device=device,
        dtype=torch_dtype[dtype],
        experts=experts,  # type: ignore[arg-type]
        block_size=block_size,
        kv_cache_bytes=None if kv_cache_mb is None else kv_cache_mb * 2**20,
        max_num_seqs=max_num_seqs,
    )
    return NativeEngine(core)


async def record_trace(
    source: TokenSource, request: GenerationRequest, path: str | Path, header: dict[str, Any]
) -> str:
    """Run `request` on `source` and write its trace to `path`; returns the finish reason.

    Line 1 is `header` plus `prompt_token_ids`; then one `{"token_ids": [...]}` line per chunk
    (with `"logprobs"` when the chunk has them); last `{"finish_reason": ...}` (plus `"error"`
    for an error). Each line is flushed as it is made, so a cut-off run leaves a trace that
    replay can tell was cut off.
    """
    first = {k: v for k, v in header.items() if k != "request"}
    first["prompt_token_ids"] = list(request.prompt_token_ids)
    if "request" in header:
        first["request"] = header["request"]
    finish: dict[str, Any] = {"finish_reason": "error", "error": "the stream ended without one"}
    with open(path, "w", encoding="utf-8") as out:
        out.write(json.dumps(first) + "\n")
        out.flush()
        stream = source.generate(request)
        try:
            async for chunk in stream:
                if chunk.token_ids:
                    line: dict[str, Any] = {"token_ids": list(chunk.token_ids)}
                    if chunk.logprobs is not None:
                        line["logprobs"] = list(chunk.logprobs)
                    out.write(json.dumps(line) + "\n")
                    out.flush()
                if chunk.finish_reason is not None:
                    finish = {"finish_reason": chunk.finish_reason}
                    if chunk.error:
                        finish["error"] = chunk.error
                    break
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        out.write(json.dumps(finish) + "\n")
    return str(finish["finish_reason"])
