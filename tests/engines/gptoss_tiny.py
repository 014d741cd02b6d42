"""Tiny random gpt-oss checkpoints built with transformers, the oracle for the native engine.

transformers' default init zeroes every bias and leaves sinks near 0, which would hide bugs in
exactly the parts that make gpt-oss different, so everything is re-drawn with visible scales.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import torch

from streamfold.engines import GenerationRequest, SamplingParams

WINDOW = 8


def tiny_hf_config(**overrides: Any) -> Any:
    from transformers import GptOssConfig

    fields: dict[str, Any] = dict(
        num_hidden_layers=4,
        hidden_size=64,
        intermediate_size=64,
        head_dim=16,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        vocab_size=512,
        sliding_window=WINDOW,
    )
    fields.update(overrides)
    return GptOssConfig(**fields)


def randomize(model: Any, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if "layernorm" in name or name.endswith("norm.weight"):
                param.copy_(1 + 0.1 * noise)
            elif "bias" in name or "sinks" in name:
                param.copy_(0.4 * noise)
            else:
                param.copy_(0.15 * noise)


def make_hf_model(seed: int = 0, **overrides: Any) -> Any:
    from transformers import GptOssForCausalLM

    torch.manual_seed(seed)
    model = GptOssForCausalLM(tiny_hf_config(**overrides))
    randomize(model, seed)
    return model.eval()


def save(model: Any, path: Path) -> Path:
    model.save_pretrained(path)
    return path


def random_prompts(lengths: list[int], seed: int = 0) -> list[list[int]]:
    """Prompts of the given lengths over the tiny model's first 512 token ids."""
    rng = random.Random(seed)
    return [[rng.randrange(512) for _ in range(n)] for n in lengths]


def hf_greedy(hf_model: Any, prompt: list[int], n: int) -> list[int]:
    """Exactly `n` greedy tokens from transformers' `generate` after `prompt`."""
    with torch.no_grad():
        out = hf_model.generate(
            torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False,
            pad_token_id=0,
        )  # fmt: skip
    return list(out[0, len(prompt) :].tolist())


def greedy_request(i: int, prompt: list[int], n: int) -> GenerationRequest:
    """Request `r{i}`: `prompt`, then `n` greedy tokens."""
    return GenerationRequest(
        request_id=f"r{i}", prompt_token_ids=tuple(prompt), max_output_tokens=n,
        sampling=SamplingParams(temperature=0.0),
    )  # fmt: skip
