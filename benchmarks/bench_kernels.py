"""The Triton kernels against the torch code they replace, per call, on one layer's shapes.

    python benchmarks/bench_kernels.py --device cuda [--dtype bfloat16] [--graphs] [--reps 50]
    python benchmarks/bench_kernels.py --device cpu   # tiny shapes, interpreted: checks only
    python benchmarks/bench_kernels.py --device cpu --shape gpt-oss-20b --dtype bfloat16 \
        --only experts --tokens 1   # 20b's experts interpreted: minutes, for the accuracy

* decode attention: `kernels.decode.decode_attention` against `paged_attention.decode_attention`
  (the torch gather + mask + softmax; STREAMFOLD_KERNELS=torch for it), gpt-oss-20b's heads
  (64 query, 8 KV, head_dim 64), 16-token blocks, batches 1/8/64 at contexts 256/2048/8192,
  for a full layer and a sliding (128) one.
* experts: `kernels.moe.moe_experts` against the model's routed MoE (one expert at a time,
  a host sync for the counts, MXFP4 dequantized per chosen expert) and its fixed-shape MoE
  (the CUDA-graph path), gpt-oss-20b's experts (hidden 2880, intermediate 2880, 32 experts,
  top-4), MXFP4 with random bytes, at 1/8/64/512 tokens.

Each row gives the median time per call over `--reps` after warm-up (CUDA events on CUDA),
the bytes the kernel must read (KV of the visible keys; the packed weights of the experts the
batch chose) and that over the time as a fraction of `--peak-gbps` (H100 SXM: 3350 GB/s), and
how far the outputs are apart: the largest difference between the kernel's and the torch
path's, the largest output, that difference in ulps of `--dtype` at the largest output (in
bf16 an ulp is 2.0 for outputs in [256, 512): a "max diff" of 2.0 there is one rounding step),
and each path's largest difference from float64 (the torch code run in float64 on the same
inputs, weights and routing: exact dequantized MXFP4, the same gates), in the same ulps, so
which side carries an error shows. `--graphs` times each call replayed from a CUDA graph
instead (launch overhead gone; also shows that each captures). On CPU the kernels run through
Triton's interpreter (TRITON_INTERPRET=1 is set here), so only the differences mean anything
there.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from collections.abc import Callable
from types import SimpleNamespace

import attrs
import torch
import torch.nn.functional as F

from streamfold.engines.native import kernels
from streamfold.engines.native.gptoss.config import GptOssConfig
from streamfold.engines.native.gptoss.model import GptOssModel, fixed_shape_experts
from streamfold.engines.native.gptoss.weights import ExpertWeights

Call = Callable[[], torch.Tensor]


def timed(fn: Call, reps: int, device: torch.device, graphs: bool) -> tuple[float, torch.Tensor]:
    """Median seconds per call, and the output of the last call."""
    out = fn()
    if graphs:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()  # warm-up on a side stream, as torch.cuda.graphs asks
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn()
        fn = lambda: (graph.replay(), out)[1]  # noqa: E731
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def accuracy(got: torch.Tensor, refs: list[torch.Tensor], exact: torch.Tensor) -> str:
    """The table's last four cells: the largest |got - refs[0]|, the largest |exact|, that
    difference in ulps of got's dtype at the largest output, and got's and each ref's largest
    difference from `exact` (float64) in the same ulps."""
    largest = exact.abs().max().item()
    ulp = torch.finfo(got.dtype).eps * 2.0 ** math.floor(math.log2(largest)) if largest else 1.0
    diff = (got.double() - refs[0].double()).abs().max().item()
    off = " / ".join(f"{(o.double() - exact).abs().max().item() / ulp:.1f}" for o in (got, *refs))
    return f" | {diff:.2e} | {largest:.3g} | {diff / ulp:.1f} | {off} |"


def attention_rows(args: argparse.Namespace, device: torch.device) -> list[str]:
    from streamfold.engines.native.kernels.decode import decode_attention as kernel
    from streamfold.engines.native.paged_attention import decode_attention as reference

    heads, kv_heads, dim, bs = (64, 8, 64, 16) if args.shape == "gpt-oss-20b" else (8, 2, 16, 4)
    batches, contexts = (
        ((1, 8, 64), (256, 2048, 8192)) if args.shape == "gpt-oss-20b" else ((2,), (9, 40))
    )
    dtype = getattr(torch, args.dtype)
    elem = torch.empty(0, dtype=dtype).element_size()
    rows = []
    gen = torch.Generator(device=device).manual_seed(0)
    for batch in batches:
        for context in contexts:
            blocks_per_seq = -(-context // bs)
            num_blocks = batch * blocks_per_seq + 1  # + the zero sink block, last
            shape = (kv_heads, num_blocks, bs, dim)
            k_pool = torch.randn(shape, generator=gen, device=device, dtype=dtype)
            v_pool = torch.randn(shape, generator=gen, device=device, dtype=dtype)
            k_pool[:, -1] = 0
            v_pool[:, -1] = 0
            q = torch.randn(batch, heads, dim, generator=gen, device=device, dtype=dtype)
            sinks = torch.randn(heads, generator=gen, device=device)
            q_pos = torch.full((batch,), context - 1, device=device)
            for window in (None, 128):
                first = 0 if window is None else max(0, context - window) // bs
                order = torch.randperm(num_blocks - 1, generator=gen, device=device)
                tables = order.view(batch, blocks_per_seq)[:, first:]
                tables = torch.cat((tables, torch.full_like(tables[:, :1], num_blocks - 1)), 1)
                first_pos = torch.full((batch,), first * bs, device=device)
                args_ = (q, k_pool, v_pool, tables, first_pos, q_pos, sinks, window)
                os.environ[kernels.ENV] = "torch"
                t_ref, ref = timed(lambda a=args_: reference(*a), args.reps, device, args.graphs)
                wide = [t.double() if t.is_floating_point() else t for t in args_[:7]]
                exact = reference(*wide, window)
                os.environ[kernels.ENV] = "triton"
                t_ker, got = timed(lambda a=args_: kernel(*a), args.reps, device, args.graphs)
                keys = context - first * bs
                read = 2 * batch * kv_heads * keys * dim * elem
                rows.append(
                    f"| attention B={batch} ctx={context} window={window} | {t_ker * 1e6:.1f} µs"
                    f" | {t_ref * 1e6:.1f} µs | {t_ref / t_ker:.2f}× | {read / 2**20:.1f} MiB"
                    f" | {read / t_ker / 1e9 / args.peak_gbps:.1%}{accuracy(got, [ref], exact)}"
                )
    return rows


def moe_rows(args: argparse.Namespace, device: torch.device) -> list[str]:
    if args.shape == "gpt-oss-20b":
        config, token_counts = GptOssConfig(), (1, 8, 64, 512)
    else:
        config = GptOssConfig(hidden_size=64, intermediate_size=64, num_local_experts=8)
        token_counts = (1, 5, 40)
    token_counts = args.tokens or token_counts
    num, hidden, inter = config.num_local_experts, config.hidden_size, config.intermediate_size
    dtype = getattr(torch, args.dtype)
    gen = torch.Generator(device=device).manual_seed(1)

    def packed(rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
        blocks = torch.randint(0, 256, (num, rows, cols // 32, 16), generator=gen, device=device)
        scales = torch.randint(118, 124, (num, rows, cols // 32), generator=gen, device=device)
        return blocks.to(torch.uint8), scales.to(torch.uint8)

    experts = ExpertWeights(
        gate_up_packed=packed(2 * inter, hidden), down_packed=packed(hidden, inter),
        gate_up_bias=torch.randn(num, 2 * inter, generator=gen, device=device, dtype=dtype),
        down_bias=torch.randn(num, hidden, generator=gen, device=device, dtype=dtype),
        dtype=dtype,
    )  # fmt: skip
    layer = SimpleNamespace(
        router=torch.randn(num, hidden, generator=gen, device=device, dtype=dtype) * 0.1,
        router_bias=torch.zeros(num, device=device, dtype=dtype),
        experts=experts,
    )
    # The model's own `_moe` on a stand-in holding only what it reads (no 20b checkpoint).
    model = SimpleNamespace(config=config, triton_moe=False)
    model._swiglu = lambda h: GptOssModel._swiglu(model, h)  # type: ignore[arg-type]

    def moe(x: torch.Tensor, triton: bool, mode: str) -> torch.Tensor:
        model.triton_moe = triton
        return GptOssModel._moe(model, layer, x, mode)  # type: ignore[arg-type]

    wide = attrs.evolve(
        experts, gate_up_bias=experts.gate_up_bias.double(),
        down_bias=experts.down_bias.double(), dtype=torch.float64,
    )  # fmt: skip

    def moe_float64(x: torch.Tensor) -> torch.Tensor:
        """The fixed-shape path in float64 on the routing and gates `_moe` computes for x."""
        logits = F.linear(x, layer.router, layer.router_bias)
        top_logits, top = torch.topk(logits, config.num_experts_per_tok, dim=-1)
        gates = torch.softmax(top_logits, dim=-1)
        return fixed_shape_experts(x.double(), top, gates.double(), wide, model._swiglu)

    per_expert = (2 * inter * hidden + hidden * inter) * (1 + 1 / 16) / 2  # nibbles + scales
    rows = []
    for tokens in token_counts:
        x = torch.randn(tokens, hidden, generator=gen, device=device, dtype=dtype)
        chosen = torch.topk(x @ layer.router.t(), config.num_experts_per_tok).indices
        read = chosen.unique().numel() * per_expert
        t_ker, got = timed(lambda x=x: moe(x, True, "routed"), args.reps, device, args.graphs)
        t_routed, ref = timed(lambda x=x: moe(x, False, "routed"), args.reps, device, False)
        t_static, static = timed(
            lambda x=x: moe(x, False, "static"), args.reps, device, args.graphs
        )
        exact = moe_float64(x)
        rows.append(
            f"| experts MXFP4 T={tokens} | {t_ker * 1e6:.1f} µs | routed {t_routed * 1e6:.1f} µs,"
            f" fixed-shape {t_static * 1e6:.1f} µs | {min(t_routed, t_static) / t_ker:.2f}×"
            f" | {read / 2**20:.1f} MiB | {read / t_ker / 1e9 / args.peak_gbps:.1%}"
            f"{accuracy(got, [ref, static], exact)}"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default=None, help="bfloat16 on CUDA, float32 on CPU")
    parser.add_argument("--shape", choices=["gpt-oss-20b", "tiny"], default=None)
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--graphs", action="store_true", help="time CUDA-graph replays")
    parser.add_argument("--peak-gbps", type=float, default=3350.0, help="HBM bandwidth")
    parser.add_argument("--only", choices=["attention", "experts"], default=None)
    parser.add_argument(
        "--tokens", type=int, nargs="+", default=None, help="the experts rows' token counts"
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    args.dtype = args.dtype or ("bfloat16" if cuda else "float32")
    args.shape = args.shape or ("gpt-oss-20b" if cuda else "tiny")
    args.reps = args.reps or (50 if cuda else 1)
    if args.graphs and not cuda:
        parser.error("--graphs needs --device cuda")
    if not cuda:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"device: {torch.cuda.get_device_name(device) if cuda else 'cpu (interpreted)'},"
          f" dtype {args.dtype}, shape {args.shape}, graphs {args.graphs}\n")  # fmt: skip
    print(
        "| case | triton | torch | speed-up | must read | of peak HBM | max diff | max out"
        " | max diff in ulps | vs float64 in ulps: triton / torch (routed / fixed-shape) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    with torch.inference_mode():
        for row in [
            *(attention_rows(args, device) if args.only != "experts" else []),
            *(moe_rows(args, device) if args.only != "attention" else []),
        ]:
            print(row, flush=True)


if __name__ == "__main__":
    main()
