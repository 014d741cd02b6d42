"""gpt-oss-20b's real shapes with random weights, for `bench_engine.py --shape gpt-oss-20b`.

No hub download: the weights are drawn on the device in the native layout, bf16, with the
experts either bf16 or MXFP4-packed (random nibbles, scales near 2**-6 so values stay small).
The transformers peer shares the native tensors where the layouts agree (views, so the 20b
shapes fit on one GPU twice over); with MXFP4 experts it gets its own bf16 copy of the
dequantized experts (transformers' MXFP4 path needs hub kernels).

Also here: the bytes of weights one decoded token reads, and the memory bandwidth measured
on the device, for the roofline fraction.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from collections.abc import Callable
from typing import Any

import torch

from streamfold.engines import GenerationRequest, SamplingParams
from streamfold.engines.native.core import EngineCore
from streamfold.engines.native.gptoss.config import GptOssConfig
from streamfold.engines.native.gptoss.model import GptOssModel
from streamfold.engines.native.gptoss.weights import ExpertWeights, GptOssWeights, LayerWeights
from streamfold.engines.native.paged_attention import PagedKVCache

# openai/gpt-oss-20b config.json (layers adjustable).
GPT_OSS_20B: dict[str, Any] = dict(
    hidden_size=2880, intermediate_size=2880, num_attention_heads=64, num_key_value_heads=8,
    head_dim=64, num_local_experts=32, num_experts_per_tok=4, vocab_size=201088,
    sliding_window=128, max_position_embeddings=131072, rms_norm_eps=1e-5,
    rope_parameters={
        "rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0, "beta_fast": 32.0,
        "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 4096,
    },
)  # fmt: skip


def hf_config(layers: int) -> Any:
    from transformers import GptOssConfig as HfConfig

    return HfConfig(num_hidden_layers=layers, **GPT_OSS_20B)


def build_models(layers: int, experts: str, device: str, seed: int = 0) -> tuple[GptOssModel, Any]:
    """The native model and a transformers model over the same weights (see module doc)."""
    from transformers import GptOssForCausalLM
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssRotaryEmbedding

    hf_cfg = hf_config(layers)
    config = GptOssConfig.from_dict(hf_cfg.to_dict())
    gen = torch.Generator(device=device).manual_seed(seed)
    bf16 = torch.bfloat16

    def rand(*shape: int, scale: float = 0.02) -> torch.Tensor:
        out = torch.empty(shape, device=device, dtype=bf16)
        return out.normal_(0, scale, generator=gen)

    def packed(e: int, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
        blocks = torch.randint(0, 256, (e, rows, cols // 32, 16), generator=gen, device=device)
        scales = torch.randint(119, 123, (e, rows, cols // 32), generator=gen, device=device)
        return blocks.to(torch.uint8), scales.to(torch.uint8)

    h, inter, e = config.hidden_size, config.intermediate_size, config.num_local_experts
    layer_weights = []
    for _ in range(layers):
        if experts == "mxfp4":
            expert = ExpertWeights(
                gate_up_bias=rand(e, 2 * inter), down_bias=rand(e, h),
                gate_up_packed=packed(e, 2 * inter, h), down_packed=packed(e, h, inter), dtype=bf16,
            )  # fmt: skip
        else:
            expert = ExpertWeights(
                gate_up_bias=rand(e, 2 * inter), down_bias=rand(e, h),
                gate_up=rand(e, 2 * inter, h), down=rand(e, h, inter), dtype=bf16,
            )  # fmt: skip
        layer_weights.append(
            LayerWeights(
                input_norm=(1 + rand(h, scale=0.1)).float(), q=rand(config.q_dim, h),
                q_bias=rand(config.q_dim), k=rand(config.kv_heads_dim, h),
                k_bias=rand(config.kv_heads_dim), v=rand(config.kv_heads_dim, h),
                v_bias=rand(config.kv_heads_dim), o=rand(h, config.q_dim), o_bias=rand(h),
                sinks=rand(config.num_attention_heads, scale=0.5).float(),
                post_norm=(1 + rand(h, scale=0.1)).float(), router=rand(e, h, scale=0.2),
                router_bias=rand(e), experts=expert,
            )
        )  # fmt: skip
    weights = GptOssWeights(
        embedding=rand(config.vocab_size, h, scale=1.0), layers=tuple(layer_weights),
        norm=(1 + rand(h, scale=0.1)).float(), lm_head=rand(config.vocab_size, h),
    )  # fmt: skip
    model = GptOssModel(config, weights)

    with torch.device("meta"):
        hf = GptOssForCausalLM(hf_cfg)
    w = model.weights
    state: dict[str, torch.Tensor] = {
        "model.embed_tokens.weight": w.embedding,
        "model.norm.weight": w.norm.to(bf16),
        "lm_head.weight": w.lm_head,
    }
    for i, lw in enumerate(w.layers):
        p = f"model.layers.{i}."
        state.update({
            p + "input_layernorm.weight": lw.input_norm.to(bf16),
            p + "post_attention_layernorm.weight": lw.post_norm.to(bf16),
            p + "self_attn.sinks": lw.sinks.to(bf16),
            p + "mlp.router.weight": lw.router, p + "mlp.router.bias": lw.router_bias,
            p + "mlp.experts.gate_up_proj_bias": lw.experts.gate_up_bias,
            p + "mlp.experts.down_proj_bias": lw.experts.down_bias,
        })  # fmt: skip
        for name in ("q", "k", "v", "o"):
            state[p + f"self_attn.{name}_proj.weight"] = getattr(lw, name)
            state[p + f"self_attn.{name}_proj.bias"] = getattr(lw, name + "_bias")
        # transformers keeps experts as x @ W, [E, in, out]: the native [E, out, in] transposed.
        gate_up = lw.experts.gate_up
        down = lw.experts.down
        if gate_up is None or down is None:  # MXFP4: the peer gets dequantized bf16 copies
            gate_up = torch.stack([lw.experts.gate_up_of(x) for x in range(e)])
            down = torch.stack([lw.experts.down_of(x) for x in range(e)])
        state[p + "mlp.experts.gate_up_proj"] = gate_up.transpose(1, 2)
        state[p + "mlp.experts.down_proj"] = down.transpose(1, 2)
    hf.load_state_dict(state, assign=True, strict=True)
    hf.model.rotary_emb = GptOssRotaryEmbedding(hf_cfg).to(device)
    return model, hf.eval()


def weight_bytes_per_token(model: GptOssModel) -> int:
    """Bytes of weights one decode step of one sequence reads: every layer's attention,
    router and norms, its top-k experts (packed bytes when MXFP4), the final norm, one
    embedding row and the whole unembedding. KV-cache reads are not counted."""
    c = model.config

    def size(t: torch.Tensor | None) -> int:
        return 0 if t is None else t.numel() * t.element_size()

    total = size(model.weights.norm) + size(model.lm_head_t)
    total += c.hidden_size * model.weights.embedding.element_size()
    for lw in model.weights.layers:
        total += sum(
            size(t)
            for t in (lw.input_norm, lw.q, lw.q_bias, lw.k, lw.k_bias, lw.v, lw.v_bias, lw.o,
                      lw.o_bias, lw.sinks, lw.post_norm, lw.router, lw.router_bias)
        )  # fmt: skip
        ex = lw.experts
        per_expert = (size(ex.gate_up_bias) + size(ex.down_bias)) // c.num_local_experts
        for dense, pair in ((ex.gate_up, ex.gate_up_packed), (ex.down, ex.down_packed)):
            if dense is not None:
                per_expert += size(dense) // c.num_local_experts
            elif pair is not None:
                per_expert += (size(pair[0]) + size(pair[1])) // c.num_local_experts
        total += c.num_experts_per_tok * per_expert
    return total


def copy_bandwidth(device: str, mib: int = 512, reps: int = 5) -> float:
    """Bytes per second a device-to-device copy moves (read + written), best of `reps`."""
    n = mib * 2**20 // 4
    src = torch.ones(n, device=device)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(reps):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        dst.copy_(src)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * n * 4 / best


Jobs = list[tuple[list[int], int]]  # (prompt, output length) per request


def _timed(fn: Callable[[], object], device: str) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _requests(jobs: list[tuple[list[int], int]], tag: str) -> list[GenerationRequest]:
    greedy = SamplingParams(temperature=0.0)
    return [
        GenerationRequest(
            request_id=f"{tag}{i}", prompt_token_ids=tuple(p), max_output_tokens=n, sampling=greedy
        )
        for i, (p, n) in enumerate(jobs)
    ]


def _hf_generate(hf: Any, jobs: list[tuple[list[int], int]], device: str) -> list[list[int]]:
    """One left-padded batch to the longest output (a static-batch server's waste included)."""
    width = max(len(p) for p, _ in jobs)
    ids = torch.tensor([[0] * (width - len(p)) + p for p, _ in jobs], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in jobs], device=device)
    longest = max(n for _, n in jobs)
    with torch.no_grad():
        out = hf.generate(
            ids, attention_mask=mask, max_new_tokens=longest, min_new_tokens=longest,
            do_sample=False, pad_token_id=0,
        )  # fmt: skip
    return [row[width : width + n] for row, (_, n) in zip(out.tolist(), jobs, strict=True)]


def run_20b(args: argparse.Namespace) -> None:
    device, layers = args.device, args.layers
    load_before = os.getloadavg()[0]
    bandwidth = copy_bandwidth(device)
    start = time.perf_counter()
    model, hf = build_models(layers, args.experts, device, seed=args.seed)
    built = time.perf_counter() - start
    config = model.config
    rng = random.Random(args.seed)
    prompt_len, stream_out = args.stream
    stream = [([rng.randrange(config.vocab_size) for _ in range(prompt_len)], stream_out)]
    batch = [
        (
            [rng.randrange(config.vocab_size) for _ in range(rng.randint(*args.batch_prompt))],
            rng.randint(*args.batch_output),
        )
        for _ in range(args.batch)
    ]
    longest = max(len(p) + n for p, n in stream + batch)
    tokens = sum(len(p) + n for p, n in batch) + longest
    per_block = PagedKVCache.bytes_per_block(config, args.block_size, model.dtype)
    blocks = tokens // args.block_size + 4 * (args.batch + 1) * (128 // args.block_size + 2)
    core = EngineCore(
        model, block_size=args.block_size, num_blocks=blocks, max_num_seqs=max(64, args.batch),
        default_stop_token_ids=(),
    )  # fmt: skip
    counter = iter(range(10**9))

    def native(jobs: list[tuple[list[int], int]]) -> dict[str, list[int]]:
        done = core.run_to_completion(_requests(jobs, f"n{next(counter)}-"))
        return {k: [t for c in v for t in c.token_ids] for k, v in done.items()}

    def hf_run(jobs: list[tuple[list[int], int]]) -> dict[str, list[int]]:
        return {str(i): out for i, out in enumerate(_hf_generate(hf, jobs, device))}

    one_token = [(p, 1) for p, _ in stream]
    rows: list[tuple[str, str, float, float]] = []
    first_tokens: list[list[int]] = []

    def measure(name: str, go: Callable[[Jobs], dict[str, list[int]]]) -> None:
        go(one_token)  # warm-up (CUDA: captures the batch-1 graphs)
        t1 = min(_timed(lambda: go(one_token), device) for _ in range(args.reps))
        tn = min(_timed(lambda: go(stream), device) for _ in range(args.reps))
        rows.append((name, "one stream", stream_out / tn, (stream_out - 1) / max(tn - t1, 1e-9)))
        if args.batch:
            go(batch[: min(4, len(batch))])
            tb = min(_timed(lambda: go(batch), device) for _ in range(args.reps))
            useful = sum(n for _, n in batch)
            rows.append((name, f"{args.batch} requests", useful / tb, float("nan")))
        first_tokens.append(next(iter(go(stream).values()))[:8])

    measure("native engine core", native)
    measure("transformers generate", hf_run)
    read = weight_bytes_per_token(model)
    roof = bandwidth / read
    print(
        f"\ngpt-oss-20b shapes, {layers} of 24 layers, experts {args.experts}, bf16, random"
        f" weights (built in {built:.0f} s); device {device}"
        + (f" ({torch.cuda.get_device_name()})" if device.startswith("cuda") else "")
        + f", {args.threads} threads; one stream: {prompt_len}-token prompt, {stream_out}"
        f" tokens; batch: {args.batch} requests, prompts {args.batch_prompt[0]}.."
        f"{args.batch_prompt[1]}, outputs {args.batch_output[0]}..{args.batch_output[1]};"
        f" best of {args.reps}; load average {load_before:.1f} before,"
        f" {os.getloadavg()[0]:.1f} after\n"
    )
    print("| system | workload | tokens/s (whole request) | decode tokens/s | roofline fraction |")
    print("|---|---|---:|---:|---:|")
    for name, workload, rate, decode in rows:
        frac = f"{decode / roof:.1%}" if decode == decode else ""
        dec = f"{decode:.2f}" if decode == decode else ""
        print(f"| {name} | {workload} | {rate:.2f} | {dec} | {frac} |")
    by = {(n, w): r for n, w, r, _ in rows}
    for workload in {w for _, w, _, _ in rows}:
        ratio = by[("native engine core", workload)] / by[("transformers generate", workload)]
        print(f"\nnative / transformers, {workload}: {ratio:.2f}x")
    print(
        f"\nweights read per decoded token: {read / 2**20:.1f} MiB; measured copy bandwidth"
        f" {bandwidth / 1e9:.1f} GB/s (read + written) -> roofline {roof:.2f} tok/s"
    )
    if args.bandwidth_gbs:
        print(f"stated bandwidth {args.bandwidth_gbs:.0f} GB/s -> roofline"
              f" {args.bandwidth_gbs * 1e9 / read:.1f} tok/s")  # fmt: skip
    print(f"first greedy tokens: native {first_tokens[0]}, transformers {first_tokens[1]}")
    print(f"native KV pool: {blocks} blocks of {per_block / 2**10:.0f} KiB")
