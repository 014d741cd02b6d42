"""The gpt-oss architecture as read from a Hugging Face style `config.json`.

Two dialects exist: the HF one (`num_local_experts`, `rope_parameters` or `rope_scaling`,
`layer_types`) and the "original" one of openai/gpt-oss (`num_experts`, `experts_per_token`,
`rope_scaling_factor`, `rope_ntk_alpha/beta`, `initial_context_length`). Both are parsed into
one frozen `GptOssConfig`, so the model code never looks at raw JSON. No torch here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from .errors import ConfigError, UnsupportedQuantizationError

__all__ = ["GptOssConfig", "RopeConfig", "load_config"]

SLIDING = "sliding_attention"
FULL = "full_attention"


@attrs.frozen(kw_only=True)
class RopeConfig:
    """Rotary embedding with optional YaRN scaling (`factor == 1` means plain RoPE)."""

    theta: float = 150000.0
    factor: float = 1.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    original_max_position_embeddings: int = 4096
    truncate: bool = True
    attention_factor: float | None = None

    @property
    def concentration(self) -> float:
        """The factor YaRN multiplies cos and sin by (1.3466 for gpt-oss's factor 32)."""
        if self.attention_factor is not None:
            return self.attention_factor
        return 1.0 if self.factor <= 1 else 0.1 * math.log(self.factor) + 1.0


@attrs.frozen(kw_only=True)
class GptOssConfig:
    """Every constant the gpt-oss forward pass needs. Defaults are gpt-oss-20b's."""

    vocab_size: int = 201088
    hidden_size: int = 2880
    intermediate_size: int = 2880
    num_hidden_layers: int = 24
    num_attention_heads: int = 64
    num_key_value_heads: int = 8
    head_dim: int = 64
    num_local_experts: int = 32
    num_experts_per_tok: int = 4
    sliding_window: int = 128
    layer_types: tuple[str, ...] = ()
    rms_norm_eps: float = 1e-5
    swiglu_alpha: float = 1.702
    swiglu_limit: float = 7.0
    rope: RopeConfig = RopeConfig(factor=32.0, truncate=False)
    max_position_embeddings: int = 131072
    attention_bias: bool = True
    tie_word_embeddings: bool = False
    quantization: str | None = None
    eos_token_ids: tuple[int, ...] = ()

    def __attrs_post_init__(self) -> None:
        if not self.layer_types:
            # gpt-oss: even layers slide, odd layers see everything.
            types = tuple(SLIDING if i % 2 == 0 else FULL for i in range(self.num_hidden_layers))
            object.__setattr__(self, "layer_types", types)
        if len(self.layer_types) != self.num_hidden_layers:
            raise ConfigError(
                f"layer_types has {len(self.layer_types)} entries but num_hidden_layers is"
                f" {self.num_hidden_layers}; give one type per layer"
            )
        for kind in self.layer_types:
            if kind not in (SLIDING, FULL):
                raise ConfigError(
                    f"layer type {kind!r} is not supported; use {SLIDING!r} or {FULL!r}"
                )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ConfigError(
                f"num_attention_heads {self.num_attention_heads} is not a multiple of"
                f" num_key_value_heads {self.num_key_value_heads}"
            )
        if self.head_dim % 2:
            raise ConfigError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        if not 0 < self.num_experts_per_tok <= self.num_local_experts:
            raise ConfigError(
                f"num_experts_per_tok {self.num_experts_per_tok} must be in"
                f" 1..num_local_experts ({self.num_local_experts})"
            )
        if self.tie_word_embeddings:
            raise ConfigError("tie_word_embeddings=true is not gpt-oss; its lm_head is separate")

    def is_sliding(self, layer: int) -> bool:
        return self.layer_types[layer] == SLIDING

    @property
    def kv_heads_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], *, source: str = "config") -> GptOssConfig:
        """Parse either config dialect. `source` names the file in error messages."""
        return _parse(raw, source)


def load_config(model_dir: str | Path) -> GptOssConfig:
    """Read `model_dir/config.json` (or `model_dir/original/config.json`)."""
    root = Path(model_dir)
    for candidate in (root / "config.json", root / "original" / "config.json"):
        if candidate.is_file():
            try:
                raw = json.loads(candidate.read_text())
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{candidate} is not valid JSON: {exc}") from exc
            return GptOssConfig.from_dict(raw, source=str(candidate))
    raise ConfigError(
        f"no config.json in {root}; point --model at a gpt-oss checkpoint directory"
        " or create one with `streamfold init-model DIR`"
    )


def _field(raw: Mapping[str, Any], source: str, *names: str, default: Any = ...) -> Any:
    for name in names:
        if name in raw and raw[name] is not None:
            return raw[name]
    if default is ...:
        raise ConfigError(f"{source}: missing field {names[0]!r}")
    return default


def _int(raw: Mapping[str, Any], source: str, *names: str, default: Any = ...) -> int:
    value = _field(raw, source, *names, default=default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{source}: field {names[0]!r} must be an integer, got {value!r}")
    return value


def _rope(raw: Mapping[str, Any], source: str) -> RopeConfig:
    params = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    theta = float(params.get("rope_theta", raw.get("rope_theta", 150000.0)))
    if "rope_scaling_factor" in raw:  # original dialect
        return RopeConfig(
            theta=theta,
            factor=float(raw["rope_scaling_factor"]),
            beta_fast=float(raw.get("rope_ntk_beta", 32.0)),
            beta_slow=float(raw.get("rope_ntk_alpha", 1.0)),
            original_max_position_embeddings=int(raw.get("initial_context_length", 4096)),
            truncate=False,
        )
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return RopeConfig(theta=theta)
    if kind != "yarn":
        raise ConfigError(f"{source}: rope_type {kind!r} is not supported; gpt-oss uses 'yarn'")
    return RopeConfig(
        theta=theta,
        factor=float(params.get("factor", 32.0)),
        beta_fast=float(params.get("beta_fast") or 32.0),
        beta_slow=float(params.get("beta_slow") or 1.0),
        original_max_position_embeddings=int(params.get("original_max_position_embeddings", 4096)),
        truncate=bool(params.get("truncate", True)),
        attention_factor=params.get("attention_factor"),
    )


def _parse(raw: Mapping[str, Any], source: str) -> GptOssConfig:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: expected a JSON object, got {type(raw).__name__}")
    model_type = raw.get("model_type", "gpt_oss")
    if model_type != "gpt_oss":
        raise ConfigError(f"{source}: model_type {model_type!r} is not 'gpt_oss'")
    quant = raw.get("quantization_config")
    quantization = None
    if quant:
        quantization = quant.get("quant_method")
        if quantization != "mxfp4":
            raise UnsupportedQuantizationError(
                f"{source}: quantization {quantization!r} is not supported; only MXFP4 expert"
                " weights (quant_method 'mxfp4') or unquantized checkpoints load"
            )
    eos = raw.get("eos_token_id")
    eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
    layers = _int(raw, source, "num_hidden_layers")
    layer_types = raw.get("layer_types")
    return GptOssConfig(
        vocab_size=_int(raw, source, "vocab_size"),
        hidden_size=_int(raw, source, "hidden_size"),
        intermediate_size=_int(raw, source, "intermediate_size"),
        num_hidden_layers=layers,
        num_attention_heads=_int(raw, source, "num_attention_heads"),
        num_key_value_heads=_int(raw, source, "num_key_value_heads"),
        head_dim=_int(raw, source, "head_dim", default=64),
        num_local_experts=_int(raw, source, "num_local_experts", "num_experts"),
        num_experts_per_tok=_int(raw, source, "num_experts_per_tok", "experts_per_token"),
        sliding_window=_int(raw, source, "sliding_window", default=128),
        layer_types=tuple(layer_types) if layer_types else (),
        rms_norm_eps=float(_field(raw, source, "rms_norm_eps", default=1e-5)),
        swiglu_alpha=float(_field(raw, source, "swiglu_alpha", default=1.702)),
        swiglu_limit=float(_field(raw, source, "swiglu_limit", default=7.0)),
        rope=_rope(raw, source),
        max_position_embeddings=_int(raw, source, "max_position_embeddings", default=131072),
        attention_bias=bool(raw.get("attention_bias", True)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        quantization=quantization,
        eos_token_ids=eos_ids,
    )
