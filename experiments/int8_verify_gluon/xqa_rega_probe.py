"""Offline probe of the "token split with V widened in the consumers'
registers" candidate (README, fourth session of 2026-12-04) for 16 query
tokens (96 rows per KV head).

Not a kernel to run: one consumer warpgroup of that design walks 128-token
tiles of K / V^T already in shared memory (no copy stage), so that the SASS
of its loop shows what such a consumer issues per tile and whether it fits
its registers:
* Q.K for its own 64 tokens with tokens on wgmma's M axis: S^T[64, 64 + 32]
  (two parts of N), the query's high and low int8 parts chained in one int32
  accumulator each;
* no column reductions: P = exp2(S - reference) against loop-invariant
  per-row references (the design's common path, the vote and its rare
  rescale left out), the row sums kept as full tensors (an upper bound: the
  design folds them to 24 per thread);
* its P^T half stored to shared memory as fp16;
* P.V over all 128 tokens for its 128 output channels with V^T as the
  register A operand: each 16-token K step loads the int8 V^T slice from
  shared memory straight into wgmma's A-operand layout and widens it there.
Prints registers, spills, shared memory and the loop's instruction count
per warp and per 32 tokens, to hold against the series' 563 (its 128-row
consumer, `offline_series_wgmma.py 16 0`, no spills).

    CUDA_VISIBLE_DEVICES= .venv/bin/python experiments/int8_verify_gluon/xqa_rega_probe.py
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

from vllm.v1.attention.ops.triton_int8_split_kv_wgmma import _widen  # noqa: E402
from xqa_probe import _part_scores  # noqa: E402  (Q.K of one row part)


@gluon.jit
def _probs(s_int, k_scale, row_ref):
    S = s_int.to(gl.float32) * gl.expand_dims(k_scale, 1)
    return gl.exp2(S - gl.expand_dims(row_ref, 0))


@gluon.jit
def _relabel_rows(x, SIGMA: gl.constexpr):
    # Row k of the result is row sigma(k) of x within each 16-row group:
    # (t3, t2, t1, t0) -> (k3, k2, k1, k0) = (t1, t3, t2, t0).
    if SIGMA:
        R: gl.constexpr = x.shape[0]
        N: gl.constexpr = x.shape[1]
        y = x.reshape([R // 16, 2, 2, 2, 2, N]).permute([0, 3, 1, 2, 4, 5])
        return y.reshape([R, N])
    else:
        return x


@gluon.jit
def _relabel_cols(x):
    C: gl.constexpr = x.shape[0]
    y = x.reshape([C, 2, 2, 2, 2]).permute([0, 3, 1, 2, 4])
    return y.reshape([C, 16])


@gluon.jit
def kernel_rega_probe(
    out_ptr,  # [N0 + N1, CH] fp32
    k_ptr,  # [TILE, HEAD] int8
    vt_ptr,  # [CH, TILE] int8 (V^T)
    ks_ptr,  # [n_tiles * TILE] fp32
    q_ptr,  # [2, N0 + N1, HEAD] int8 (high parts, then low parts)
    n_tiles,
    HEAD: gl.constexpr,
    TILE: gl.constexpr,  # 128 tokens; this consumer's Q.K half is TILE // 2
    CH: gl.constexpr,
    N0: gl.constexpr,
    N1: gl.constexpr,
    KSTEP: gl.constexpr,
    L_MODE: gl.constexpr,  # row sums: 0 none, 1 full tensors, 2 column sums per tile, 3 per-thread folds
    SIGMA: gl.constexpr,  # relabel the tokens of each 16-token K step (README): 32-bit V^T loads
    INFLIGHT: gl.constexpr,  # P.V wgmmas left in flight after each K step (-1: no bound)
    REF_SMEM: gl.constexpr,  # reload the row references from shared memory every tile
):
    NW: gl.constexpr = gl.num_warps()
    HALF: gl.constexpr = TILE // 2
    LOAD: gl.constexpr = gl.BlockedLayout([1, 16], [2, 16], [NW, 1], [1, 0])
    s0_l: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, N0, 32]
    )
    s1_l: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, N1, 32]
    )
    o0_l: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, N0, 16]
    )
    o1_l: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, N1, 16]
    )
    a0_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o0_l, k_width=2)
    a1_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o1_l, k_width=2)
    # a0_l composed with the relabelling, with a thread's 4 contiguous tokens
    # first among its registers (KSTEP 16, CH 128, 4 warps).
    v_l: gl.constexpr = gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [8, 0], [64, 0]],
        lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
        warp_bases=[[16, 0], [32, 0]],
        block_bases=[],
        shape=[CH, KSTEP],
    )

    k_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HALF, HEAD], gl.int8)
    vt_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([CH, TILE], gl.int8)
    q0_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([N0, HEAD], gl.int8)
    q1_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([N1, HEAD], gl.int8)
    p0_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([TILE, N0], gl.float16)
    p1_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([TILE, N1], gl.float16)
    k_smem = gl.allocate_shared_memory(gl.int8, [HALF, HEAD], k_sl)
    vt_smem = gl.allocate_shared_memory(gl.int8, [CH, TILE], vt_sl)
    q0_hi = gl.allocate_shared_memory(gl.int8, [N0, HEAD], q0_sl)
    q0_lo = gl.allocate_shared_memory(gl.int8, [N0, HEAD], q0_sl)
    q1_hi = gl.allocate_shared_memory(gl.int8, [N1, HEAD], q1_sl)
    q1_lo = gl.allocate_shared_memory(gl.int8, [N1, HEAD], q1_sl)
    p0_smem = gl.allocate_shared_memory(gl.float16, [TILE, N0], p0_sl)
    p1_smem = gl.allocate_shared_memory(gl.float16, [TILE, N1], p1_sl)

    d = gl.arange(0, HEAD, layout=gl.SliceLayout(0, LOAD))
    r0 = gl.arange(0, N0, layout=gl.SliceLayout(1, LOAD))
    r1 = gl.arange(0, N1, layout=gl.SliceLayout(1, LOAD))
    NR: gl.constexpr = N0 + N1
    q0_hi.store(gl.load(q_ptr + gl.expand_dims(r0, 1) * HEAD + gl.expand_dims(d, 0)))
    q0_lo.store(gl.load(q_ptr + NR * HEAD + gl.expand_dims(r0, 1) * HEAD + gl.expand_dims(d, 0)))
    q1_hi.store(gl.load(q_ptr + gl.expand_dims(N0 + r1, 1) * HEAD + gl.expand_dims(d, 0)))
    q1_lo.store(
        gl.load(q_ptr + NR * HEAD + gl.expand_dims(N0 + r1, 1) * HEAD + gl.expand_dims(d, 0))
    )
    t = gl.arange(0, HALF, layout=gl.SliceLayout(1, LOAD))
    k_smem.store(gl.load(k_ptr + gl.expand_dims(t, 1) * HEAD + gl.expand_dims(d, 0)))
    c = gl.arange(0, CH, layout=gl.SliceLayout(1, LOAD))
    tv = gl.arange(0, TILE, layout=gl.SliceLayout(0, LOAD))
    vt_smem.store(gl.load(vt_ptr + gl.expand_dims(c, 1) * TILE + gl.expand_dims(tv, 0)))
    fence_async_shared()
    gl.thread_barrier()

    # Each row's softmax reference (running state in a full kernel): from
    # memory, so that it costs what it would (a constant folds away).
    ref0 = gl.load(ks_ptr + gl.arange(0, N0, gl.SliceLayout(0, s0_l)))
    ref1 = gl.load(ks_ptr + N0 + gl.arange(0, N1, gl.SliceLayout(0, s1_l)))
    if REF_SMEM:
        ref_sl: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
        ref0_smem = gl.allocate_shared_memory(gl.float32, [N0], ref_sl)
        ref1_smem = gl.allocate_shared_memory(gl.float32, [N1], ref_sl)
        ref0_smem.store(ref0)
        ref1_smem.store(ref1)
        gl.thread_barrier()
    if L_MODE == 2:
        l0 = gl.zeros([N0], gl.float32, gl.SliceLayout(0, s0_l))
        l1 = gl.zeros([N1], gl.float32, gl.SliceLayout(0, s1_l))
    elif L_MODE == 3:
        # Rows w * 16 + h * 8 + lane // 4: h is in a thread's registers, so
        # summing over it folds a thread's two rows without shuffles.
        l0 = gl.sum(gl.reshape(gl.zeros([HALF, N0], gl.float32, s0_l), [NW, 2, 8, N0]), axis=1)
        l1 = gl.sum(gl.reshape(gl.zeros([HALF, N1], gl.float32, s1_l), [NW, 2, 8, N1]), axis=1)
    else:
        l0 = gl.zeros([HALF, N0], gl.float32, s0_l)
        l1 = gl.zeros([HALF, N1], gl.float32, s1_l)
    acc0 = gl.zeros([CH, N0], gl.float32, o0_l)
    acc1 = gl.zeros([CH, N1], gl.float32, o1_l)
    for j in range(n_tiles):
        ks0 = gl.load(ks_ptr + j * TILE + gl.arange(0, HALF, gl.SliceLayout(1, s0_l)))
        # (zero accumulators made in the loop: kept across it, they held 48
        # registers)
        z0 = gl.zeros([HALF, N0], gl.int32, s0_l)
        if REF_SMEM:
            ref0 = ref0_smem.load(gl.SliceLayout(0, s0_l))
        P0 = _probs(_part_scores(k_smem, q0_hi, q0_lo, z0), ks0, ref0)
        if L_MODE == 1:
            l0 += P0
        if L_MODE == 2:
            l0 += gl.sum(P0, axis=0)
        if L_MODE == 3:
            l0 += gl.sum(gl.reshape(P0, [NW, 2, 8, N0]), axis=1)
        p0_smem.slice(0, HALF, dim=0).store(_relabel_rows(P0.to(gl.float16), SIGMA))
        ks1 = gl.convert_layout(ks0, gl.SliceLayout(1, s1_l))
        z1 = gl.zeros([HALF, N1], gl.int32, s1_l)
        if REF_SMEM:
            ref1 = ref1_smem.load(gl.SliceLayout(0, s1_l))
        P1 = _probs(_part_scores(k_smem, q1_hi, q1_lo, z1), ks1, ref1)
        if L_MODE == 1:
            l1 += P1
        if L_MODE == 2:
            l1 += gl.sum(P1, axis=0)
        if L_MODE == 3:
            l1 += gl.sum(gl.reshape(P1, [NW, 2, 8, N1]), axis=1)
        p1_smem.slice(0, HALF, dim=0).store(_relabel_rows(P1.to(gl.float16), SIGMA))
        fence_async_shared()
        gl.thread_barrier()
        for kk in gl.static_range(TILE // KSTEP):
            v_slice = vt_smem.slice(kk * KSTEP, KSTEP, dim=1)
            if SIGMA:
                a0 = gl.convert_layout(_relabel_cols(_widen(v_slice.load(v_l))), a0_l)
            else:
                a0 = _widen(v_slice.load(a0_l))
            acc0 = warpgroup_mma(
                a0, p0_smem.slice(kk * KSTEP, KSTEP, dim=0), acc0, is_async=True
            )
            a1 = gl.convert_layout(a0, a1_l)
            acc1 = warpgroup_mma(
                a1, p1_smem.slice(kk * KSTEP, KSTEP, dim=0), acc1, is_async=True
            )
            if INFLIGHT >= 0:
                # Register A operands stay live until their wgmma retires:
                # bound the wgmmas in flight.
                acc0, acc1 = warpgroup_mma_wait(INFLIGHT, deps=[acc0, acc1])
        acc0, acc1 = warpgroup_mma_wait(0, deps=[acc0, acc1])
        gl.thread_barrier()

    if L_MODE == 2:
        s0 = gl.convert_layout(l0, gl.SliceLayout(0, o0_l))
        s1 = gl.convert_layout(l1, gl.SliceLayout(0, o1_l))
    elif L_MODE == 3:
        s0 = gl.convert_layout(gl.sum(gl.sum(l0, axis=0), axis=0), gl.SliceLayout(0, o0_l))
        s1 = gl.convert_layout(gl.sum(gl.sum(l1, axis=0), axis=0), gl.SliceLayout(0, o1_l))
    else:
        s0 = gl.convert_layout(gl.sum(l0, axis=0), gl.SliceLayout(0, o0_l))
        s1 = gl.convert_layout(gl.sum(l1, axis=0), gl.SliceLayout(0, o1_l))
    oc = gl.arange(0, CH, layout=gl.SliceLayout(1, o0_l))
    on0 = gl.arange(0, N0, layout=gl.SliceLayout(0, o0_l))
    gl.store(
        out_ptr + gl.expand_dims(on0, 0) * CH + gl.expand_dims(oc, 1),
        acc0 / gl.expand_dims(s0, 0),
    )
    oc1 = gl.arange(0, CH, layout=gl.SliceLayout(1, o1_l))
    on1 = gl.arange(0, N1, layout=gl.SliceLayout(0, o1_l))
    gl.store(
        out_ptr + gl.expand_dims(N0 + on1, 0) * CH + gl.expand_dims(oc1, 1),
        acc1 / gl.expand_dims(s1, 0),
    )


# MAXNREG=240: the registers a consumer warpgroup of a warp-specialised kernel
# gets (two consumers and a producer, as the series' kernel).
MAXNREG = None


def main() -> None:
    from sass_stats import build, loop_stats, sass

    cases = [
        (64, 32, 16, 1, 0),
        (64, 32, 16, 0, 0),
        (64, 32, 16, 2, 0),
        (64, 32, 16, 3, 0),
        (64, 16, 16, 1, 0),
        (64, 32, 16, 3, 1),
        (64, 32, 16, 0, 1),
        (64, 16, 16, 3, 1),
        (64, 8, 16, 3, 1),
    ]
    cases = [(*c, -1, 0) for c in cases] + [(64, 32, 16, 3, 1, n, 0) for n in (0, 2, 4)]
    cases += [(64, 32, 16, 3, 1, 0, 1), (64, 32, 16, 0, 1, 0, 1)]
    # About one program of rows split 64 / 32 across two programs (N1 = 8 is
    # wgmma's smallest N: a stand-in for none).
    cases += [(64, 8, 16, 3, 1, 0, 1), (64, 8, 16, 3, 1, 0, 0)]
    cases = [c for c in cases if not sys.argv[1:] or "".join(map(str, c[3:])) in sys.argv[1:]]
    for n0, n1, kstep, l_mode, sigma, inflight, ref_smem in cases:
        consts = dict(
            HEAD=256,
            TILE=128,
            CH=128,
            N0=n0,
            N1=n1,
            KSTEP=kstep,
            L_MODE=l_mode,
            SIGMA=sigma,
            INFLIGHT=inflight,
            REF_SMEM=ref_smem,
        )
        try:
            c = build(
                sys.modules[__name__],
                kernel_rega_probe,
                consts,
                extra_ptrs={"k_ptr": "*i8", "vt_ptr": "*i8", "q_ptr": "*i8"},
                types={"n_tiles": "i32"},
                gluon=True,
                maxnreg=MAXNREG,
            )
        except Exception as e:  # noqa: BLE001
            print(f"N={n0}+{n1} KSTEP={kstep} L_MODE={l_mode} SIGMA={sigma} INFLIGHT={inflight} REF_SMEM={ref_smem}: does not compile: {str(e)[:600]}")
            continue
        u, s = sass(c)
        print(
            f"N={n0}+{n1} KSTEP={kstep} L_MODE={l_mode} SIGMA={sigma} INFLIGHT={inflight}"
            f" REF_SMEM={ref_smem}:",
            re.findall(r"REG:\d+ STACK:\d+ SHARED:\d+", u),
            "smem",
            c.metadata.shared,
        )
        for lo, hi, n, ops in loop_stats(s):
            # One loop iteration is a 128-token tile; per 32 tokens:
            print(
                f"  loop {hex(lo)}-{hex(hi)}: {n} instructions per warp and tile,"
                f" {n / 4:.0f} per 32 tokens",
                dict(ops.most_common(14)),
            )


if __name__ == "__main__":
    import os

    MAXNREG = int(os.environ["MAXNREG"]) if os.environ.get("MAXNREG") else None
    main()
