"""`init_model`: write a small random gpt-oss checkpoint, so the engine runs on a fresh machine.

The vocabulary is gpt-oss's full 201088 so every harmony token id is valid; everything else is
small, so the checkpoint is tens of MB (bf16) and a CPU step takes milliseconds. The output is
noise with harmony-shaped ids, which is what end-to-end tests of the pipeline need.

The checkpoint is written into a temporary directory beside `model_dir` and renamed into place
when complete, so a failure or a kill never leaves half a checkpoint (a lone `config.json`
that the engine then refuses, issue 19). Files get the usual `0644`-under-umask modes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Literal

import torch

from ..core import GPT_OSS_STOP_TOKEN_IDS
from .mxfp4 import quantize_mxfp4

__all__ = ["CHECKPOINT_FILES", "CheckpointExistsError", "init_model"]

CHECKPOINT_FILES = ("config.json", "generation_config.json", "model.safetensors")


def init_model(
    model_dir: str | Path,
    *,
    vocab_size: int = 201088,
    hidden_size: int = 32,
    intermediate_size: int = 32,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    head_dim: int = 16,
    num_experts: int = 4,
    experts_per_token: int = 2,
    sliding_window: int = 128,
    seed: int = 0,
    dtype: Literal["bfloat16", "float32"] = "bfloat16",
    mxfp4: bool = False,
    overwrite: bool = False,
) -> Path:
    """Write `config.json`, `generation_config.json` and `model.safetensors` to `model_dir`."""
    from safetensors.torch import save_file

    root = Path(model_dir)
    _check_target(root, overwrite)
    if mxfp4 and (hidden_size % 32 or intermediate_size % 32):
        raise ValueError("MXFP4 experts need hidden_size and intermediate_size multiples of 32")
    gen = torch.Generator().manual_seed(seed)
    store = getattr(torch, dtype)

    def draw(*shape: int, std: float, mean: float = 0.0) -> torch.Tensor:
        return (mean + std * torch.randn(shape, generator=gen)).to(store)

    h, q_dim, kv_dim = hidden_size, num_heads * head_dim, num_kv_heads * head_dim
    e, i2 = num_experts, 2 * intermediate_size
    t: dict[str, torch.Tensor] = {
        "model.embed_tokens.weight": draw(vocab_size, h, std=1.0),
        "model.norm.weight": draw(h, std=0.0, mean=1.0).float(),
        "lm_head.weight": draw(vocab_size, h, std=h**-0.5),
    }
    for n in range(num_layers):
        p = f"model.layers.{n}."
        t[p + "input_layernorm.weight"] = draw(h, std=0.0, mean=1.0).float()
        t[p + "post_attention_layernorm.weight"] = draw(h, std=0.0, mean=1.0).float()
        for name, rows in (("q", q_dim), ("k", kv_dim), ("v", kv_dim)):
            t[p + f"self_attn.{name}_proj.weight"] = draw(rows, h, std=h**-0.5)
            t[p + f"self_attn.{name}_proj.bias"] = draw(rows, std=0.1)
        t[p + "self_attn.o_proj.weight"] = draw(h, q_dim, std=q_dim**-0.5)
        t[p + "self_attn.o_proj.bias"] = draw(h, std=0.1)
        t[p + "self_attn.sinks"] = draw(num_heads, std=0.5)
        t[p + "mlp.router.weight"] = draw(e, h, std=h**-0.5)
        t[p + "mlp.router.bias"] = draw(e, std=0.1)
        gate_up = draw(e, i2, h, std=h**-0.5)  # [E, out, in]
        down = draw(e, h, intermediate_size, std=intermediate_size**-0.5)
        x = p + "mlp.experts."
        if mxfp4:
            t[x + "gate_up_proj_blocks"], t[x + "gate_up_proj_scales"] = quantize_mxfp4(gate_up)
            t[x + "down_proj_blocks"], t[x + "down_proj_scales"] = quantize_mxfp4(down)
        else:  # HF's dense layout is [E, in, out]
            t[x + "gate_up_proj"] = gate_up.transpose(1, 2).contiguous()
            t[x + "down_proj"] = down.transpose(1, 2).contiguous()
        t[x + "gate_up_proj_bias"] = draw(e, i2, std=0.1)
        t[x + "down_proj_bias"] = draw(e, h, std=0.1)
    config = {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "vocab_size": vocab_size,
        "hidden_size": h,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": head_dim,
        "num_local_experts": e,
        "num_experts_per_tok": experts_per_token,
        "sliding_window": sliding_window,
        "layer_types": [
            "sliding_attention" if n % 2 == 0 else "full_attention" for n in range(num_layers)
        ],
        "rms_norm_eps": 1e-5,
        "swiglu_alpha": 1.702,
        "swiglu_limit": 7.0,
        "rope_parameters": {
            "rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
            "beta_slow": 1.0, "original_max_position_embeddings": 4096, "truncate": False,
        },
        "max_position_embeddings": 131072,
        "attention_bias": True,
        "tie_word_embeddings": False,
        "eos_token_id": 200002,
        "pad_token_id": 199999,
        "dtype": dtype,
    }  # fmt: skip
    if mxfp4:
        config["quantization_config"] = {"quant_method": "mxfp4"}
    generation = {"bos_token_id": 199998, "eos_token_id": list(GPT_OSS_STOP_TOKEN_IDS),
                  "pad_token_id": 199999}  # fmt: skip
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{root.name}.partial-"))
    try:
        (staging / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        (staging / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
        save_file(t, str(staging / "model.safetensors"), metadata={"format": "pt"})
        _publish(staging, root)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return root


class CheckpointExistsError(FileExistsError):
    """The target directory is not empty and `overwrite` was not given. Its message names the
    API's argument; `streamfold init-model` says `--force` instead (`root`, `present`)."""

    def __init__(self, root: Path, present: list[str]) -> None:
        self.root, self.present = root, present
        super().__init__(
            f"{root} is not empty ({', '.join(present)}); pass overwrite=True to replace the "
            "checkpoint in it"
        )


def _check_target(root: Path, overwrite: bool) -> None:
    """Refuse to write over anything but an empty directory or (with `overwrite`) a checkpoint
    this function wrote."""
    if not root.exists():
        return
    if not root.is_dir():
        raise FileExistsError(f"{root} exists and is not a directory")
    present = sorted(p.name for p in root.iterdir())
    if not present:
        return
    if not overwrite:
        raise CheckpointExistsError(root, present)
    others = [name for name in present if name not in CHECKPOINT_FILES]
    if others:
        raise FileExistsError(
            f"{root} holds files that are not a random checkpoint's "
            f"({', '.join(others)}); choose an empty directory"
        )


def _publish(staging: Path, root: Path) -> None:
    """Give the files their usual modes, then rename the staging directory to `root`."""
    umask = os.umask(0)
    os.umask(umask)
    for path in staging.iterdir():
        path.chmod(0o666 & ~umask)
    staging.chmod(0o777 & ~umask)  # mkdtemp made it 0700
    if root.exists() and any(root.iterdir()):  # an old checkpoint, replaced (checked above)
        old = Path(tempfile.mkdtemp(dir=root.parent, prefix=f".{root.name}.old-"))
        root.rename(old / root.name)
        staging.rename(root)
        shutil.rmtree(old)
    else:
        staging.replace(root)  # a new or an empty directory
