"""Offline feasibility probe of XQA's mapping for 12-16 query tokens (72-96 rows).

Not a kernel to run: one warpgroup walks K/V tiles with plain loads (no ring,
no producer) so that the SASS of its loop shows what the consumer of that
mapping would issue per tile, next to the series' consumer.

Mapping (design note "12-16 tokens" in README.md):
* Q.K with the tile's tokens on wgmma's M axis: S^T[TILE, N] = K Q^T, K the
  shared-memory A operand straight from the copy, Q^T the B operand; Gluon
  wants power-of-two shapes, so 96 rows are two parts (N = 64 + 32), each
  with its high and low int8 parts chained in one int32 accumulator;
* softmax per column (query row) over the M axis (the compiler's cross-warp
  reduction through shared memory);
* P.V with output channels on M: O^T[CH, N] += V^T[CH, TILE] P^T[TILE, N],
  the widened V^T the A operand, P^T (fp16, written to shared memory) the B
  operand; a consumer holds CH = 128 of the 256 channels (the other
  consumer of a full kernel the other half).

Usage (no GPU):
    CUDA_VISIBLE_DEVICES= .venv/bin/python experiments/int8_verify_gluon/xqa_probe.py
prints registers, spills, shared memory and the loop's SASS histogram for
64-token tiles and row parts (64, 32) (16 tokens), (64, 16) (12 tokens) and
(64,), with and without the probe's own K/V loads in the loop.  (32-token
tiles cannot be expressed: wgmma's M is 64.)
"""

import re
import sys

sys.path.insert(0, "experiments/int8_verify_gluon")

from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_wait,
)

# The series kernel's int8 -> fp16 widening.
from vllm.v1.attention.ops.triton_int8_split_kv_wgmma import _widen  # noqa: E402


@gluon.jit
def _part_scores(k_tile, q_hi, q_lo, zero):
    s = warpgroup_mma(k_tile, q_hi.permute([1, 0]), zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(0, deps=[s])
    s = warpgroup_mma(k_tile, q_lo.permute([1, 0]), s * 254, use_acc=True, is_async=True)
    return warpgroup_mma_wait(0, deps=[s])


@gluon.jit
def _part_softmax(s_int, k_scale, row_scale, m_i, l_i):
    # Columns are query rows: the reductions run over axis 0 (tokens).
    S = s_int.to(gl.float32) * gl.expand_dims(k_scale, 1) * gl.expand_dims(row_scale, 0)
    m_new = gl.maximum(m_i, gl.max(S, axis=0))
    alpha = gl.exp2(m_i - m_new)
    P = gl.exp2(S - gl.expand_dims(m_new, 0))
    l_i = l_i * alpha + gl.sum(P, axis=0)
    return P, alpha, m_new, l_i


@gluon.jit
def kernel_xqa_probe(
    out_ptr,  # [N0 + N1, CH] fp32
    k_ptr,  # [n_tiles * TILE, HEAD] int8
    vt_ptr,  # [CH, n_tiles * TILE] int8 (V^T)
    ks_ptr,  # [n_tiles * TILE] fp32
    q_ptr,  # [N0 + N1, HEAD] int8 (high parts; low parts follow)
    n_tiles,
    HEAD: gl.constexpr,
    TILE: gl.constexpr,
    CH: gl.constexpr,
    N0: gl.constexpr,
    N1: gl.constexpr,
    LOADS: gl.constexpr,  # load and widen K/V in the loop (else reuse the smem)
):
    NW: gl.constexpr = gl.num_warps()
    LOAD: gl.constexpr = gl.BlockedLayout([1, 16], [2, 16], [NW, 1], [1, 0])
    s0_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, N0, 32]
    )
    o0_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, N0, 16]
    )
    k_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([TILE, HEAD], gl.int8)
    q0_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([N0, HEAD], gl.int8)
    vh_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([CH, TILE], gl.float16)
    p0_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([TILE, N0], gl.float16)
    k_smem = gl.allocate_shared_memory(gl.int8, [TILE, HEAD], k_sl)
    vh_smem = gl.allocate_shared_memory(gl.float16, [CH, TILE], vh_sl)
    q0_hi = gl.allocate_shared_memory(gl.int8, [N0, HEAD], q0_sl)
    q0_lo = gl.allocate_shared_memory(gl.int8, [N0, HEAD], q0_sl)
    p0_smem = gl.allocate_shared_memory(gl.float16, [TILE, N0], p0_sl)

    r0 = gl.arange(0, N0, layout=gl.SliceLayout(1, LOAD))
    d = gl.arange(0, HEAD, layout=gl.SliceLayout(0, LOAD))
    q_off0 = gl.expand_dims(r0, 1) * HEAD + gl.expand_dims(d, 0)
    q0_hi.store(gl.load(q_ptr + q_off0))
    q0_lo.store(gl.load(q_ptr + (N0 + N1) * HEAD + q_off0))
    if N1 > 0:
        s1_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, N1, 32]
        )
        o1_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, N1, 16]
        )
        q1_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([N1, HEAD], gl.int8)
        p1_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([TILE, N1], gl.float16)
        q1_hi = gl.allocate_shared_memory(gl.int8, [N1, HEAD], q1_sl)
        q1_lo = gl.allocate_shared_memory(gl.int8, [N1, HEAD], q1_sl)
        p1_smem = gl.allocate_shared_memory(gl.float16, [TILE, N1], p1_sl)
        r1 = gl.arange(0, N1, layout=gl.SliceLayout(1, LOAD))
        q_off1 = gl.expand_dims(N0 + r1, 1) * HEAD + gl.expand_dims(d, 0)
        q1_hi.store(gl.load(q_ptr + q_off1))
        q1_lo.store(gl.load(q_ptr + (N0 + N1) * HEAD + q_off1))
        m1 = gl.full([N1], -3.0e38, gl.float32, gl.SliceLayout(0, s1_layout))
        l1 = gl.zeros([N1], gl.float32, gl.SliceLayout(0, s1_layout))
        acc1 = gl.zeros([CH, N1], gl.float32, o1_layout)
        rs1 = gl.full([N1], 0.01, gl.float32, gl.SliceLayout(0, s1_layout))
        z1 = gl.zeros([TILE, N1], gl.int32, s1_layout)
    fence_async_shared()
    gl.thread_barrier()

    m0 = gl.full([N0], -3.0e38, gl.float32, gl.SliceLayout(0, s0_layout))
    l0 = gl.zeros([N0], gl.float32, gl.SliceLayout(0, s0_layout))
    acc0 = gl.zeros([CH, N0], gl.float32, o0_layout)
    rs0 = gl.full([N0], 0.01, gl.float32, gl.SliceLayout(0, s0_layout))
    z0 = gl.zeros([TILE, N0], gl.int32, s0_layout)
    t = gl.arange(0, TILE, layout=gl.SliceLayout(1, LOAD))
    c = gl.arange(0, CH, layout=gl.SliceLayout(1, LOAD))
    tv = gl.arange(0, TILE, layout=gl.SliceLayout(0, LOAD))
    for j in range(n_tiles):
        if LOADS or j == 0:
            k_smem.store(
                gl.load(
                    k_ptr + gl.expand_dims(j * TILE + t, 1) * HEAD + gl.expand_dims(d, 0)
                )
            )
            v8 = gl.load(
                vt_ptr
                + gl.expand_dims(c, 1) * (n_tiles * TILE)
                + gl.expand_dims(j * TILE + tv, 0)
            )
            vh_smem.store(_widen(v8))
        fence_async_shared()
        gl.thread_barrier()
        s0 = _part_scores(k_smem, q0_hi, q0_lo, z0)
        ks0 = gl.load(ks_ptr + j * TILE + gl.arange(0, TILE, gl.SliceLayout(1, s0_layout)))
        P0, a0, m0, l0 = _part_softmax(s0, ks0, rs0, m0, l0)
        p0_smem.store(P0.to(gl.float16))
        acc0 = acc0 * gl.expand_dims(gl.convert_layout(a0, gl.SliceLayout(0, o0_layout)), 0)
        if N1 > 0:
            s1 = _part_scores(k_smem, q1_hi, q1_lo, z1)
            ks1 = gl.convert_layout(ks0, gl.SliceLayout(1, s1_layout))
            P1, a1, m1, l1 = _part_softmax(s1, ks1, rs1, m1, l1)
            p1_smem.store(P1.to(gl.float16))
            acc1 = acc1 * gl.expand_dims(
                gl.convert_layout(a1, gl.SliceLayout(0, o1_layout)), 0
            )
        fence_async_shared()
        gl.thread_barrier()
        acc0 = warpgroup_mma(vh_smem, p0_smem, acc0, is_async=True)
        if N1 > 0:
            acc1 = warpgroup_mma(vh_smem, p1_smem, acc1, is_async=True)
            acc0, acc1 = warpgroup_mma_wait(0, deps=[acc0, acc1])
        else:
            acc0 = warpgroup_mma_wait(0, deps=[acc0])
        gl.thread_barrier()

    oc = gl.arange(0, CH, layout=gl.SliceLayout(1, o0_layout))
    on0 = gl.arange(0, N0, layout=gl.SliceLayout(0, o0_layout))
    l0o = gl.convert_layout(l0, gl.SliceLayout(0, o0_layout))
    gl.store(
        out_ptr + gl.expand_dims(on0, 0) * CH + gl.expand_dims(oc, 1),
        acc0 / gl.expand_dims(l0o, 0),
    )
    if N1 > 0:
        oc1 = gl.arange(0, CH, layout=gl.SliceLayout(1, o1_layout))
        on1 = gl.arange(0, N1, layout=gl.SliceLayout(0, o1_layout))
        l1o = gl.convert_layout(l1, gl.SliceLayout(0, o1_layout))
        gl.store(
            out_ptr + gl.expand_dims(N0 + on1, 0) * CH + gl.expand_dims(oc1, 1),
            acc1 / gl.expand_dims(l1o, 0),
        )


def main() -> None:
    from sass_stats import build, loop_stats, sass

    cases = [(64, 64, 32, 1), (64, 64, 32, 0), (64, 64, 16, 0), (64, 64, 0, 0)]
    for tile, n0, n1, loads in cases:
        consts = dict(HEAD=256, TILE=tile, CH=128, N0=n0, N1=n1, LOADS=loads)
        try:
            c = build(
                sys.modules[__name__],
                kernel_xqa_probe,
                consts,
                extra_ptrs={"k_ptr": "*i8", "vt_ptr": "*i8", "q_ptr": "*i8"},
                types={"n_tiles": "i32"},
                gluon=True,
            )
        except Exception as e:  # noqa: BLE001
            print(f"TILE={tile} N={n0}+{n1}: does not compile: {str(e)[:300]}")
            continue
        u, s = sass(c)
        print(
            f"TILE={tile} N={n0}+{n1} loads in loop {loads}:",
            re.findall(r"REG:\d+ STACK:\d+ SHARED:\d+", u),
            "smem",
            c.metadata.shared,
        )
        for lo, hi, n, ops in loop_stats(s):
            print(f"  loop {hex(lo)}-{hex(hi)}: {n} instructions", dict(ops.most_common(14)))


if __name__ == "__main__":
    main()
