"""Compile every Triton kernel variant for an H100 (sm_90) without a GPU: `python kernel_aot.py`.

Triton's interpreter runs the kernels' Python on numpy and accepts code the compiler refuses
(dtype mixes, dot shapes, scalar branches), so the tests also compile each variant the
launchers use through Triton's whole pipeline down to a cubin (Triton ships ptxas). Nothing
runs. Must run in a process without TRITON_INTERPRET: triton reads it when first imported.
The signatures mirror the launchers' arguments; a launcher that changes its arguments fails
here until this list follows.
"""

from __future__ import annotations

import os
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from streamfold.engines.native.kernels import decode, moe

H100 = GPUTarget("cuda", 90, 32)
I32 = "i32"


def build(fn: object, signature: dict[str, str], constexprs: dict[str, object]) -> str:
    signature = {**signature, **dict.fromkeys(constexprs, "constexpr")}
    kernel = triton.compile(ASTSource(fn, signature, constexprs), target=H100)
    if "cubin" not in kernel.asm:
        raise RuntimeError(f"{fn}: no cubin for sm_90")
    return f"{kernel.name}: cubin {len(kernel.asm['cubin'])} bytes, smem {kernel.metadata.shared}"


def main() -> None:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        sys.exit("run kernel_aot.py without TRITON_INTERPRET")
    ints = dict.fromkeys
    # bf16 is the GPU dtype: every variant. fp32 (the CUDA test's dtype): one of each kernel.
    for dt in ("bf16", "fp32"):
        full = dt == "bf16"
        precision = "ieee" if dt == "fp32" else "tf32"
        signature = {
            **ints(("q_ptr", "k_ptr", "v_ptr", "out_ptr"), f"*{dt}"),
            **ints(("tables_ptr", "first_ptr", "qpos_ptr"), "*i64"),
            **ints(("sinks_ptr", "part_m_ptr", "part_l_ptr", "part_acc_ptr"), "*fp32"),
            "window": I32, "scale_log2": "fp32", "table_width": I32,
            **ints(("stride_qb", "stride_qh", "stride_kh", "stride_kblk", "stride_ks"), I32),
            **ints(("stride_vh", "stride_vblk", "stride_vs", "stride_ob", "stride_oh"), I32),
            "stride_tb": I32,
        }  # fmt: skip
        for block_size, splits in ((16, 1), (3, 1), (16, 8)) if full else ((16, 1),):
            constexprs = dict(
                GROUP=8, GROUP_PAD=16, HEAD_DIM=64, DIM_PAD=64, BLOCK_SIZE=block_size,
                BLOCK_N=64, PRECISION=precision, UPCAST=False, SPLITS=splits,
            )  # fmt: skip
            print(build(decode._decode_kernel, signature, constexprs))
        if full:
            signature = {
                "out_ptr": f"*{dt}", **ints(("part_m_ptr", "part_l_ptr", "part_acc_ptr"), "*fp32"),
                "stride_ob": I32, "stride_oh": I32,
            }  # fmt: skip
            constexprs = dict(HEAD_DIM=64, DIM_PAD=64, SPLITS=8)
            print(build(decode._combine_kernel, signature, constexprs))
        for packed in (True, False) if full else (True,):
            weights = "*u8" if packed else f"*{dt}"
            signature = {
                "a_ptr": f"*{dt}", "w_ptr": weights, "s_ptr": weights,
                **ints(("bias_ptr", "gate_ptr", "out_ptr"), f"*{dt}"),
                **ints(("sorted_ptr", "block_expert_ptr"), "*i64"),
                **ints(("num_pairs", "N", "K", "a_row_div"), I32), "limit": "fp32", "alpha": "fp32",
                **ints(("stride_am", "stride_we", "stride_wn", "stride_wk", "stride_se"), I32),
                **ints(("stride_sn", "stride_be", "stride_om"), I32),
            }  # fmt: skip
            for block_m in (16, 64) if full and packed else (16,):
                for swiglu in (True, False) if full else (True,):
                    constexprs = dict(
                        PACKED=packed, SWIGLU=swiglu, GATED=not swiglu, BLOCK_M=block_m,
                        BLOCK_N=64, BLOCK_K=64, PRECISION=precision, UPCAST=False,
                    )  # fmt: skip
                    print(build(moe._moe_gemm_kernel, signature, constexprs))


if __name__ == "__main__":
    main()
