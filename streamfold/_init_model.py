"""`streamfold init-model DIR`, and the native engine's command-line flags.

* `add_init_model_parser(subparsers)` / `run_init_model(args)` for `streamfold init-model DIR`;
* `add_native_engine_arguments(parser)` for the flags that `record --engine native` and
  `serve --engine native` share (`streamfold.adapters.registry.native_engine_options` reads
  them; `streamfold.engines.native.build_native_engine` builds the engine).
Importing this module does not import torch.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = [
    "add_init_model_parser",
    "add_native_engine_arguments",
    "run_init_model",
]


def add_init_model_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "init-model",
        help="write a small random gpt-oss checkpoint for the native engine",
        description="Write config.json and model.safetensors of a random gpt-oss model with the"
        " full harmony vocabulary (201088 ids), so `--engine native` runs end to end.",
    )
    parser.add_argument("model_dir", metavar="DIR", help="directory to create (or empty)")
    parser.add_argument(
        "--hidden-size",
        type=int,
        default=32,
        metavar="N",
        help="hidden and expert width (default %(default)s; gpt-oss-20b: 2880)",
    )
    parser.add_argument(
        "--layers", type=int, default=2, metavar="N", help="decoder layers (default %(default)s)"
    )
    parser.add_argument(
        "--experts",
        type=int,
        default=4,
        metavar="N",
        help="experts per layer (default %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the random weights (default %(default)s)"
    )
    parser.add_argument(
        "--dtype",
        choices=("bfloat16", "float32"),
        default="bfloat16",
        help="dtype of the stored weights (default %(default)s)",
    )
    parser.add_argument(
        "--mxfp4", action="store_true", help="store the experts packed as MXFP4, as gpt-oss ships"
    )
    parser.add_argument(
        "--force", action="store_true", help="overwrite a checkpoint this command wrote there"
    )
    parser.set_defaults(run=run_init_model)
    return parser


def run_init_model(args: argparse.Namespace) -> int:
    from streamfold.engines._extras import missing_torch_extra

    missing = missing_torch_extra("init-model")
    if missing:
        print(f"streamfold init-model: {missing}", file=sys.stderr)
        return 2
    from streamfold.engines.native.gptoss.init_model import CheckpointExistsError, init_model

    if sys.stderr.isatty():
        print(f"writing a random checkpoint to {args.model_dir} ...", file=sys.stderr)
    try:
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
    except CheckpointExistsError as exc:
        print(
            f"streamfold init-model: {exc.root} is not empty ({', '.join(exc.present)}); "
            "pass --force to replace the checkpoint in it",
            file=sys.stderr,
        )
        return 2
    except (OSError, ValueError, ImportError) as exc:
        # Nothing half-written is left behind: init_model writes into a temporary directory.
        print(f"streamfold init-model: {exc}", file=sys.stderr)
        return 2
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
        "--no-prefix-cache",
        action="store_true",
        help="compute every prompt in full instead of reusing the KV blocks of a prefix an"
        " earlier request computed (the cache is shared by every client of the server)",
    )
    group.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="torch threads of the engine (default on CPU: all usable cores but one, which is"
        " left to the server's event loop)",
    )
    group.add_argument(
        "--experts",
        choices=("dequantize", "mxfp4"),
        default="dequantize",
        help="MXFP4 experts: dequantize on load, or keep packed and dequantize per use",
    )
