"""gpt-oss weights from `.safetensors` files: sharded or not, HF or original names, MXFP4.

Files are opened with `safetensors.safe_open`, which memory-maps them; each tensor is read,
checked against the shape the config implies, and moved to its device and dtype one at a time,
so the whole checkpoint never sits in RAM before placement. Expert matrices are kept in
`F.linear` layout [E, out, in] (the original and MXFP4 layout; HF's dense layout is transposed
on load). MXFP4 experts are either dequantized on load or kept packed and dequantized per
selected expert at run time (`experts="mxfp4"`), which is what lets a 20b checkpoint fit where
its bf16 copy would not.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import attrs
import torch

from .config import GptOssConfig
from .errors import (
    CheckpointError,
    MissingTensorError,
    TensorShapeError,
    UnsupportedDtypeError,
)
from .mxfp4 import dequantize_mxfp4

__all__ = [
    "CheckpointReader",
    "ExpertMode",
    "ExpertWeights",
    "GptOssWeights",
    "LayerWeights",
    "load_weights",
]

ExpertMode = Literal["dequantize", "mxfp4"]
_FLOAT_DTYPES = {"F32", "BF16", "F16", "F64"}


class CheckpointReader:
    """Which file holds which tensor, with each file opened (memory-mapped) once."""

    def __init__(self, model_dir: str | Path) -> None:
        from safetensors import safe_open

        root = Path(model_dir)
        folder = root if any(root.glob("*.safetensors")) else root / "original"
        files = sorted(folder.glob("*.safetensors"))
        if not files:
            raise CheckpointError(
                f"no .safetensors files in {root} (nor in {root / 'original'});"
                " expected model.safetensors or sharded model-0000x-of-0000y.safetensors"
            )
        index_path = folder / "model.safetensors.index.json"
        self._handles: dict[Path, Any] = {}
        self._where: dict[str, Path] = {}
        if index_path.is_file():
            weight_map = json.loads(index_path.read_text()).get("weight_map", {})
            for name, file_name in weight_map.items():
                self._where[name] = folder / file_name
        for path in files:
            handle = safe_open(str(path), framework="pt", device="cpu")
            self._handles[path] = handle
            for name in handle.keys():  # type: ignore[no-untyped-call]
                self._where.setdefault(name, path)
        self.folder = folder

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def names(self) -> list[str]:
        return list(self._where)

    def file_of(self, name: str) -> Path:
        return self._where[name]

    def read(self, name: str, shape: tuple[int, ...], *, packed: bool = False) -> torch.Tensor:
        """The tensor `name` on the CPU in its stored dtype, after checking dtype and shape."""
        if name not in self._where:
            raise MissingTensorError(
                f"tensor {name!r} is in no safetensors file of {self.folder};"
                f" expected shape {list(shape)}. Is the checkpoint complete and for this config?"
            )
        path = self._where[name]
        if path not in self._handles:
            raise CheckpointError(
                f"{path} is named for tensor {name!r} by model.safetensors.index.json"
                " but does not exist; re-download the missing shard"
            )
        view = self._handles[path].get_slice(name)
        dtype, got = view.get_dtype(), tuple(view.get_shape())
        allowed = {"U8"} if packed else _FLOAT_DTYPES
        if dtype not in allowed:
            raise UnsupportedDtypeError(
                f"{path}: tensor {name!r} is stored as {dtype}; expected one of"
                f" {sorted(allowed)}. Only float weights and MXFP4 (uint8) experts load"
            )
        if got != shape:
            raise TensorShapeError(
                f"{path}: tensor {name!r} has shape {list(got)} but the config implies"
                f" {list(shape)}; the config.json does not belong to these weights"
            )
        tensor: torch.Tensor = self._handles[path].get_tensor(name)
        return tensor


@attrs.frozen(kw_only=True)
class ExpertWeights:
    """One layer's experts in [E, out, in] layout; dense or MXFP4-packed."""

    gate_up_bias: torch.Tensor  # [E, 2I], gate and up interleaved
    down_bias: torch.Tensor  # [E, H]
    gate_up: torch.Tensor | None = None  # [E, 2I, H]
    down: torch.Tensor | None = None  # [E, H, I]
    gate_up_packed: tuple[torch.Tensor, torch.Tensor] | None = None
    down_packed: tuple[torch.Tensor, torch.Tensor] | None = None
    dtype: torch.dtype = torch.float32

    def gate_up_of(self, expert: int) -> torch.Tensor:
        if self.gate_up is not None:
            return self.gate_up[expert]
        assert self.gate_up_packed is not None
        blocks, scales = self.gate_up_packed
        return dequantize_mxfp4(blocks[expert], scales[expert], dtype=self.dtype)

    def down_of(self, expert: int) -> torch.Tensor:
        if self.down is not None:
            return self.down[expert]
        assert self.down_packed is not None
        blocks, scales = self.down_packed
        return dequantize_mxfp4(blocks[expert], scales[expert], dtype=self.dtype)


@attrs.frozen(kw_only=True)
class LayerWeights:
    input_norm: torch.Tensor  # fp32 [H]
    q: torch.Tensor
    q_bias: torch.Tensor
    k: torch.Tensor
    k_bias: torch.Tensor
    v: torch.Tensor
    v_bias: torch.Tensor
    o: torch.Tensor
    o_bias: torch.Tensor
    sinks: torch.Tensor  # fp32 [heads]
    post_norm: torch.Tensor  # fp32 [H]
    router: torch.Tensor
    router_bias: torch.Tensor
    experts: ExpertWeights


@attrs.frozen(kw_only=True)
class GptOssWeights:
    embedding: torch.Tensor  # [V, H]
    layers: tuple[LayerWeights, ...]
    norm: torch.Tensor  # fp32 [H]
    lm_head: torch.Tensor  # [V, H]


def load_weights(
    model_dir: str | Path,
    config: GptOssConfig,
    *,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
    experts: ExpertMode = "dequantize",
) -> GptOssWeights:
    """Load every tensor `config` needs from `model_dir`, in HF or original naming."""
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise UnsupportedDtypeError(
            f"dtype {dtype} is not supported; use torch.float32, torch.bfloat16 or torch.float16"
        )
    if experts not in ("dequantize", "mxfp4"):
        raise ValueError(f"experts must be 'dequantize' or 'mxfp4', got {experts!r}")
    reader = CheckpointReader(model_dir)
    names = _HF if "model.embed_tokens.weight" in reader else _ORIGINAL
    loader = _Loader(reader, config, torch.device(device), dtype, experts, names)
    c = config
    return GptOssWeights(
        embedding=loader.dense(names["embed"], (c.vocab_size, c.hidden_size)),
        layers=tuple(loader.layer(i) for i in range(c.num_hidden_layers)),
        norm=loader.dense(names["norm"], (c.hidden_size,), fp32=True),
        lm_head=loader.dense(names["lm_head"], (c.vocab_size, c.hidden_size)),
    )


# Logical tensor -> name template, per naming scheme. `{i}` is the layer index.
_HF = {
    "embed": "model.embed_tokens.weight",
    "norm": "model.norm.weight",
    "lm_head": "lm_head.weight",
    "input_norm": "model.layers.{i}.input_layernorm.weight",
    "post_norm": "model.layers.{i}.post_attention_layernorm.weight",
    "attn": "model.layers.{i}.self_attn.",
    "sinks": "model.layers.{i}.self_attn.sinks",
    "o": "model.layers.{i}.self_attn.o_proj.",
    "router": "model.layers.{i}.mlp.router.",
    "gate_up": "model.layers.{i}.mlp.experts.gate_up_proj",
    "gate_up_bias": "model.layers.{i}.mlp.experts.gate_up_proj_bias",
    "down": "model.layers.{i}.mlp.experts.down_proj",
    "down_bias": "model.layers.{i}.mlp.experts.down_proj_bias",
    "packed": "{base}_{part}",
}
_ORIGINAL = {
    "embed": "embedding.weight",
    "norm": "norm.scale",
    "lm_head": "unembedding.weight",
    "input_norm": "block.{i}.attn.norm.scale",
    "post_norm": "block.{i}.mlp.norm.scale",
    "attn": "block.{i}.attn.qkv.",
    "sinks": "block.{i}.attn.sinks",
    "o": "block.{i}.attn.out.",
    "router": "block.{i}.mlp.gate.",
    "gate_up": "block.{i}.mlp.mlp1_weight",
    "gate_up_bias": "block.{i}.mlp.mlp1_bias",
    "down": "block.{i}.mlp.mlp2_weight",
    "down_bias": "block.{i}.mlp.mlp2_bias",
    "packed": "{base}.{part}",
}


@attrs.define
class _Loader:
    reader: CheckpointReader
    config: GptOssConfig
    device: torch.device
    dtype: torch.dtype
    experts: ExpertMode
    names: dict[str, str]

    def place(self, tensor: torch.Tensor, *, fp32: bool = False) -> torch.Tensor:
        return tensor.to(device=self.device, dtype=torch.float32 if fp32 else self.dtype)

    def dense(
        self, name: str, shape: tuple[int, ...], *, fp32: bool = False, optional: bool = False
    ) -> torch.Tensor:
        if optional and name not in self.reader:
            return torch.zeros(shape, device=self.device, dtype=self.dtype)
        return self.place(self.reader.read(name, shape), fp32=fp32)

    def layer(self, i: int) -> LayerWeights:
        c, n = self.config, self.names
        h, q_dim, kv_dim = c.hidden_size, c.q_dim, c.kv_heads_dim
        no_bias = not c.attention_bias
        if n is _HF:
            attn = n["attn"].format(i=i)
            q = self.dense(attn + "q_proj.weight", (q_dim, h))
            k = self.dense(attn + "k_proj.weight", (kv_dim, h))
            v = self.dense(attn + "v_proj.weight", (kv_dim, h))
            qb = self.dense(attn + "q_proj.bias", (q_dim,), optional=no_bias)
            kb = self.dense(attn + "k_proj.bias", (kv_dim,), optional=no_bias)
            vb = self.dense(attn + "v_proj.bias", (kv_dim,), optional=no_bias)
        else:  # one fused qkv, rows [q | k | v]
            qkv_name = n["attn"].format(i=i)
            qkv = self.dense(qkv_name + "weight", (q_dim + 2 * kv_dim, h))
            qkv_b = self.dense(qkv_name + "bias", (q_dim + 2 * kv_dim,), optional=no_bias)
            q, k, v = (t.contiguous() for t in qkv.split((q_dim, kv_dim, kv_dim)))  # type: ignore[no-untyped-call]
            qb, kb, vb = (t.contiguous() for t in qkv_b.split((q_dim, kv_dim, kv_dim)))  # type: ignore[no-untyped-call]
        o = n["o"].format(i=i)
        router = n["router"].format(i=i)
        return LayerWeights(
            input_norm=self.dense(n["input_norm"].format(i=i), (h,), fp32=True),
            q=q, q_bias=qb, k=k, k_bias=kb, v=v, v_bias=vb,
            o=self.dense(o + "weight", (h, q_dim)),
            o_bias=self.dense(o + "bias", (h,), optional=no_bias),
            sinks=self.dense(n["sinks"].format(i=i), (c.num_attention_heads,), fp32=True),
            post_norm=self.dense(n["post_norm"].format(i=i), (h,), fp32=True),
            router=self.dense(router + "weight", (c.num_local_experts, h)),
            router_bias=self.dense(router + "bias", (c.num_local_experts,)),
            experts=self.expert_weights(i),
        )  # fmt: skip

    def expert_weights(self, i: int) -> ExpertWeights:
        c, n = self.config, self.names
        e, h, inter = c.num_local_experts, c.hidden_size, c.intermediate_size
        gate_up, gate_up_packed = self.matrix(n["gate_up"].format(i=i), e, 2 * inter, h)
        down, down_packed = self.matrix(n["down"].format(i=i), e, h, inter)
        return ExpertWeights(
            gate_up_bias=self.dense(n["gate_up_bias"].format(i=i), (e, 2 * inter)),
            down_bias=self.dense(n["down_bias"].format(i=i), (e, h)),
            gate_up=gate_up,
            down=down,
            gate_up_packed=gate_up_packed,
            down_packed=down_packed,
            dtype=self.dtype,
        )

    def matrix(
        self, base: str, experts: int, rows: int, cols: int
    ) -> tuple[torch.Tensor | None, tuple[torch.Tensor, torch.Tensor] | None]:
        """An [E, rows, cols] expert matrix, dense, dequantized, or still packed."""

        def packed_name(part: str) -> str:
            return self.names["packed"].format(base=base, part=part)

        blocks_name = packed_name("blocks")
        if blocks_name not in self.reader:
            if base not in self.reader:
                raise MissingTensorError(
                    f"neither {base!r} nor the MXFP4 pair {blocks_name!r}/"
                    f"{packed_name('scales')!r} is in {self.reader.folder}; expected"
                    f" {[experts, rows, cols]} dense or {[experts, rows, cols // 32, 16]} packed"
                )
            if self.names is _HF:  # HF stores x @ W: [E, in, out]
                raw = self.reader.read(base, (experts, cols, rows)).transpose(1, 2)
            else:
                raw = self.reader.read(base, (experts, rows, cols))
            return self.place(raw.contiguous()), None
        if cols % 32:
            raise TensorShapeError(
                f"{self.reader.file_of(blocks_name)}: MXFP4 tensor {blocks_name!r} needs an input"
                f" width that is a multiple of 32, but the config implies {cols}"
            )
        blocks = self.reader.read(blocks_name, (experts, rows, cols // 32, 16), packed=True)
        scales = self.reader.read(packed_name("scales"), (experts, rows, cols // 32), packed=True)
        blocks, scales = blocks.to(self.device), scales.to(self.device)
        if self.experts == "mxfp4":
            return None, (blocks, scales)
        # One expert at a time bounds the temporary index tensors of the dequantizer.
        dense = torch.stack(
            [dequantize_mxfp4(b, s, dtype=self.dtype) for b, s in zip(blocks, scales, strict=True)]
        )
        return dense, None
