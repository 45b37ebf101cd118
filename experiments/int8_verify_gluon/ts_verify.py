# SPDX-License-Identifier: Apache-2.0
"""The token-split verify kernel (issue 20): 65-96 query rows of a KV head in
one program, XQA's orientation, V^T as the register A operand of P.V.

Outside the series (an experiment; `xqa_rega_probe.py` and the README's
"register-A token split" sections are its offline history).  One program
per (KV head, request, segment), 128-token tiles, three warpgroups:

* a producer (default partition) copies each tile's K rows, V^T and scales
  by ``cp.async`` into a ring of ``STAGES`` stages (no widening);
* consumer ``c`` computes ``S^T = K Q^T`` for tokens ``64 c .. 64 c + 63``
  of the tile with the tokens on wgmma's M axis and all query rows on N
  (``N0 = 64`` plus ``N1 = 16 / 32`` columns), the query's int8 high and low
  parts chained as in the series; turns them into P against per-row
  references that move only when a score exceeds them by
  ``RESCALE_THRESHOLD`` (a rare path that exchanges the column maxima of both
  consumers); stores its half of ``P^T`` (fp16, scaled by the tokens' V
  scales) to shared memory; then, after both halves are there, runs
  ``O^T[128 c .. 128 c + 127, rows] += V^T P^T`` over all 128 tokens with
  the int8 V^T slice widened in registers as the A operand (each 16-token
  K step's tokens relabelled so that a thread's A elements are 4 contiguous
  bytes, P^T's rows relabelled the same way);
* the row sums leave the registers every tile: each consumer folds its P
  over the tokens it holds and adds the folds to its own shared buffer.

Partials have the series' layout (one per segment), so the series' reduce
merges them.  `TokenSplitVerify` stands in for the series' verify kernel in
its launcher (grid and arguments unchanged) for 65-96 rows.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from vllm.v1.attention.ops.triton_int8_split_kv_wgmma import (
    _issue_tile,
    _tile_blocks,
    _widen,
)

TILE = gl.constexpr(128)


@gluon.jit
def _relabel_rows(x, SIGMA: gl.constexpr = True):
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
def _sync(bar, phase):
    # Both consumers: everything this partition wrote before is visible to
    # the other one after the wait.
    # (Gluon's arrive syncs the partition's warps first.)
    mbarrier.arrive(bar)
    mbarrier.wait(bar, phase)
    return phase ^ 1


@gluon.jit
def _part_scores(k_tile, q_hi, q_lo, zero, QPAIR: gl.constexpr):
    s = warpgroup_mma(k_tile, q_hi.permute([1, 0]), zero, use_acc=False, is_async=True)
    s = warpgroup_mma_wait(0, deps=[s])
    if QPAIR:
        s = warpgroup_mma(
            k_tile, q_lo.permute([1, 0]), s * 254, use_acc=True, is_async=True
        )
        s = warpgroup_mma_wait(0, deps=[s])
    return s


@gluon.jit
def _part_logits(
    k_tile, q_hi, q_lo, ks, col0, pos, q_start_pos, kv_end,
    causal, MASKED: gl.constexpr, s_layout: gl.constexpr, N: gl.constexpr,
    G: gl.constexpr, QPAIR: gl.constexpr,
):
    # S^T of this consumer's 64 tokens for one part of the rows times the
    # tokens' K scales (the rows' scales are applied later); invisible keys
    # -inf.
    zero = gl.zeros([64, N], gl.int32, s_layout)
    s = _part_scores(k_tile, q_hi, q_lo, zero, QPAIR)
    y = s.to(gl.float32) * gl.expand_dims(ks, 1)
    if MASKED:
        r = col0 + gl.arange(0, N, layout=gl.SliceLayout(0, s_layout))
        limit = gl.where(causal != 0, q_start_pos + r // G + 1, kv_end)
        vis = gl.expand_dims(pos, 1) < gl.expand_dims(limit, 0)
        y = gl.where(vis, y, float("-inf"))
    return y


@gluon.jit
def _fold(p):
    # Sum of p over the tokens a thread holds (its two rows) and over one
    # lane bit: [64, N] -> [16, N].
    N: gl.constexpr = p.shape[1]
    f = gl.sum(gl.reshape(p, [4, 2, 2, 4, N]), axis=1)
    f = gl.sum(f, axis=1)
    return gl.reshape(f, [16, N])


@gluon.jit
def _part_probs(y, qsc_smem, ref_smem, vfac, P_LOG2_SCALE: gl.constexpr,
                SIGMA: gl.constexpr):
    # P against the row references (P <= 2**(P_LOG2_SCALE + threshold)
    # unless a reference must move), its fold, and P scaled by the tokens'
    # V-scale factors (fp16, rows relabelled for P.V's B operand).
    col: gl.constexpr = gl.SliceLayout(0, y.type.layout)
    qsc = qsc_smem.load(col)
    b = P_LOG2_SCALE - ref_smem.load(col)
    y, qsc2 = gl.broadcast(y, gl.expand_dims(qsc, 0))
    y, b2 = gl.broadcast(y, gl.expand_dims(b, 0))
    p = gl.exp2(gl.fma(y, qsc2, b2))
    pv = _relabel_rows((p * gl.expand_dims(vfac, 1)).to(gl.float16), SIGMA)
    return _fold(p), pv


@gluon.jit
def _col_max(y, qsc_smem):
    qsc = qsc_smem.load(gl.SliceLayout(0, y.type.layout))
    return gl.max(y * gl.expand_dims(qsc, 0), axis=0)


@gluon.jit
def _move_refs(x, cm_smem, ref_smem, C: gl.constexpr, RESCALE_THRESHOLD: gl.constexpr):
    # Rare path, second half (after both consumers stored their column
    # maxima): the new references, stored; returns the factor each column's
    # accumulator and sums take.
    col: gl.constexpr = gl.SliceLayout(0, x.type.layout)
    cm = gl.maximum(cm_smem.index(0).load(col), cm_smem.index(1).load(col))
    ref = ref_smem.load(col)
    # The flag fires when some fold of 4 P exceeds 2**(P_LOG2_SCALE +
    # threshold), so some score exceeds its reference by threshold - 2:
    # every such column moves, or the flag would fire again.
    new = gl.where(cm > ref + (RESCALE_THRESHOLD - 2.0), cm, ref)
    # (Every warp holds every column: all read before any writes.)
    gl.thread_barrier()
    ref_smem.store(new)
    return gl.exp2(ref - new)


@gluon.jit
def _scale_sums(sums_smem, alpha, fold_layout: gl.constexpr):
    s = sums_smem.load(fold_layout)
    a = gl.convert_layout(alpha, gl.SliceLayout(0, fold_layout))
    sums_smem.store(s * gl.expand_dims(a, 0))


@gluon.jit
def _producer(
    k_smem, v_smem, ks_smem, vs_smem, ready, kfree,
    block_table_row, k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr,
    seq_len, tile_lo, n_tiles, stride_page, stride_scale_page,
    HEAD_SIZE: gl.constexpr, BLOCK_SIZE: gl.constexpr,
    STAGES: gl.constexpr, AHEAD: gl.constexpr,
):
    NUM_WARPS: gl.constexpr = gl.num_warps()
    TILE_SIZE: gl.constexpr = TILE
    ROW_LOAD: gl.constexpr = gl.BlockedLayout(
        [1, 16], [32 * 16 // HEAD_SIZE, HEAD_SIZE // 16], [NUM_WARPS, 1], [1, 0]
    )
    V_LOAD: gl.constexpr = gl.BlockedLayout(
        [1, 16], [32 * 16 // TILE_SIZE, TILE_SIZE // 16], [NUM_WARPS, 1], [1, 0]
    )
    S_LOAD: gl.constexpr = gl.BlockedLayout([1], [32], [NUM_WARPS], [0])
    RUNS: gl.constexpr = gl.BlockedLayout([TILE_SIZE // 16], [32], [NUM_WARPS], [0])
    t_k = gl.arange(0, TILE_SIZE, layout=gl.SliceLayout(1, ROW_LOAD))
    d_k = gl.arange(0, HEAD_SIZE, layout=gl.SliceLayout(0, ROW_LOAD))
    k_offs = gl.expand_dims((t_k % 16) * HEAD_SIZE, 1) + gl.expand_dims(d_k, 0)
    t_v = gl.arange(0, TILE_SIZE, layout=gl.SliceLayout(0, V_LOAD))
    d_v = gl.arange(0, HEAD_SIZE, layout=gl.SliceLayout(1, V_LOAD))
    v_offs = gl.expand_dims(d_v * BLOCK_SIZE, 1) + gl.expand_dims(t_v % 16, 0)
    t_s = gl.arange(0, TILE_SIZE, layout=S_LOAD)
    blocks = _tile_blocks(block_table_row, tile_lo, seq_len, TILE_SIZE, BLOCK_SIZE, RUNS)
    for nxt in range(n_tiles + AHEAD):
        if nxt < n_tiles:
            mbarrier.wait(kfree.index(nxt % STAGES), ((nxt // STAGES) & 1) ^ 1)
            _issue_tile(
                k_smem, v_smem, ks_smem, vs_smem, nxt % STAGES, tile_lo + nxt, blocks,
                k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr,
                k_offs, v_offs, t_k, t_v, t_s, stride_page, stride_scale_page,
                HEAD_SIZE, TILE_SIZE, BLOCK_SIZE,
            )
        async_copy.commit_group()
        blocks = _tile_blocks(
            block_table_row, tile_lo + nxt + 1, seq_len, TILE_SIZE, BLOCK_SIZE, RUNS
        )
        i = nxt - AHEAD
        if i >= 0:
            async_copy.wait_group(AHEAD)
            gl.thread_barrier()
            fence_async_shared()
            mbarrier.arrive(ready.index(i % STAGES))
    async_copy.wait_group(0)


@gluon.jit
def _tile_step(
    i, tile_lo, seq_len, causal, q_start_pos, acc0, acc1, v_ref, xphase,
    q_hi0, q_lo0, q_hi1, q_lo1, qsc0_smem, qsc1_smem,
    k_smem, v_smem, ks_smem, vs_smem, p0_smem, p1_smem,
    sums0, sums1, ref0, ref1, cm0_smem, cm1_smem, flag_smem,
    ready, kfree, xbar, G: gl.constexpr, STAGES: gl.constexpr,
    s0_l: gl.constexpr, s1_l: gl.constexpr, fold0_l: gl.constexpr,
    fold1_l: gl.constexpr, P_LOG2_SCALE: gl.constexpr,
    RESCALE_THRESHOLD: gl.constexpr, INFLIGHT: gl.constexpr, C: gl.constexpr,
    MASKED: gl.constexpr, SIGMA: gl.constexpr, QPAIR: gl.constexpr,
):
    # One 128-token tile (see the module docstring); MASKED: the tile holds
    # keys some query row must not see (the context's end, causality).
    NW: gl.constexpr = gl.num_warps()
    N0: gl.constexpr = acc0.shape[1]
    N1: gl.constexpr = acc1.shape[1]
    CH: gl.constexpr = acc0.shape[0]
    KSTEP: gl.constexpr = 16
    o0_l: gl.constexpr = acc0.type.layout
    o1_l: gl.constexpr = acc1.type.layout
    a0_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o0_l, k_width=2)
    a1_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o1_l, k_width=2)
    # a0_l composed with the token relabelling, a thread's 4 contiguous
    # tokens first among its registers ([128 channels, 16 tokens], 4 warps).
    v_l: gl.constexpr = gl.DistributedLinearLayout(
        reg_bases=[[0, 1], [0, 2], [8, 0], [64, 0]],
        lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
        warp_bases=[[16, 0], [32, 0]],
        block_bases=[],
        shape=[CH, KSTEP],
    )
    FLAT: gl.constexpr = gl.BlockedLayout([1], [32], [NW], [0])
    tok0: gl.constexpr = gl.SliceLayout(1, s0_l)
    tok1: gl.constexpr = gl.SliceLayout(1, s1_l)
    T_FLAG: gl.constexpr = 2.0 ** (P_LOG2_SCALE + RESCALE_THRESHOLD)
    t_all = gl.arange(0, TILE, layout=FLAT)
    t_own = 64 * C + gl.arange(0, 64, layout=tok0)
    s = i % STAGES
    j = tile_lo + i
    mbarrier.wait(ready.index(s), (i // STAGES) & 1)
    k_half = k_smem.index(s).slice(64 * C, 64, dim=0)
    pos = j * TILE + t_own
    ks = ks_smem.index(s).slice(64 * C, 64).load(tok0)
    vs = vs_smem.index(s).slice(64 * C, 64).load(tok0)
    vs_all = vs_smem.index(s).load(FLAT)
    if MASKED:
        ks = gl.where(pos < seq_len, ks, 0.0)
        vs = gl.where(pos < seq_len, vs, 0.0)
        vs_all = gl.where(j * TILE + t_all < seq_len, vs_all, 0.0)
    new_v_ref = gl.maximum(gl.max(vs_all, axis=0), v_ref)
    if new_v_ref > v_ref:
        acc0 = acc0 * (v_ref / new_v_ref)
        acc1 = acc1 * (v_ref / new_v_ref)
    v_ref = new_v_ref
    vfac0 = vs / v_ref
    vfac1 = gl.convert_layout(vfac0, tok1)
    ks1 = gl.convert_layout(ks, tok1)
    pos1 = gl.convert_layout(pos, tok1)

    x0 = _part_logits(k_half, q_hi0, q_lo0, ks, 0, pos, q_start_pos,
                      seq_len, causal, MASKED, s0_l, N0, G, QPAIR)
    f0, pv0 = _part_probs(x0, qsc0_smem, ref0, vfac0, P_LOG2_SCALE, SIGMA)
    x1 = _part_logits(k_half, q_hi1, q_lo1, ks1, N0, pos1, q_start_pos,
                      seq_len, causal, MASKED, s1_l, N1, G, QPAIR)
    f1, pv1 = _part_probs(x1, qsc1_smem, ref1, vfac1, P_LOG2_SCALE, SIGMA)
    # Some P above 2**(P_LOG2_SCALE + threshold) in either consumer: a
    # reference moves (every column's fold is at least its largest P).
    mine = gl.maximum(gl.max(gl.max(f0, axis=1), axis=0),
                      gl.max(gl.max(f1, axis=1), axis=0))
    flag_smem.index(C).store(gl.full([32], mine, gl.float32, FLAT))
    # (Also: the other consumer's P.V of the previous tile is done, so
    # P^T may be overwritten.)
    xphase = _sync(xbar, xphase)
    theirs = gl.max(flag_smem.index(1 - C).load(FLAT), axis=0)
    if gl.maximum(mine, theirs) > T_FLAG:
        x0 = _part_logits(k_half, q_hi0, q_lo0, ks, 0, pos, q_start_pos,
                          seq_len, causal, MASKED, s0_l, N0, G, QPAIR)
        x1 = _part_logits(k_half, q_hi1, q_lo1, ks1, N0, pos1,
                          q_start_pos, seq_len, causal, MASKED, s1_l, N1, G, QPAIR)
        cm0_smem.index(C).store(_col_max(x0, qsc0_smem))
        cm1_smem.index(C).store(_col_max(x1, qsc1_smem))
        xphase = _sync(xbar, xphase)
        a0 = _move_refs(x0, cm0_smem, ref0, C, RESCALE_THRESHOLD)
        a1 = _move_refs(x1, cm1_smem, ref1, C, RESCALE_THRESHOLD)
        acc0 = acc0 * gl.expand_dims(gl.convert_layout(a0, gl.SliceLayout(0, o0_l)), 0)
        acc1 = acc1 * gl.expand_dims(gl.convert_layout(a1, gl.SliceLayout(0, o1_l)), 0)
        _scale_sums(sums0, a0, fold0_l)
        _scale_sums(sums1, a1, fold1_l)
        gl.thread_barrier()
        f0, pv0 = _part_probs(x0, qsc0_smem, ref0, vfac0, P_LOG2_SCALE, SIGMA)
        f1, pv1 = _part_probs(x1, qsc1_smem, ref1, vfac1, P_LOG2_SCALE, SIGMA)
    sums0.store(sums0.load(fold0_l) + f0)
    sums1.store(sums1.load(fold1_l) + f1)
    p0_smem.slice(64 * C, 64, dim=0).store(pv0)
    p1_smem.slice(64 * C, 64, dim=0).store(pv1)
    fence_async_shared()
    xphase = _sync(xbar, xphase)

    vt = v_smem.index(s).slice(CH * C, CH, dim=0)
    for kk in gl.static_range(TILE // KSTEP):
        if SIGMA:
            a0v = gl.convert_layout(
                _relabel_cols(_widen(vt.slice(kk * KSTEP, KSTEP, dim=1).load(v_l))), a0_l
            )
        else:
            a0v = _widen(vt.slice(kk * KSTEP, KSTEP, dim=1).load(a0_l))
        acc0 = warpgroup_mma(a0v, p0_smem.slice(kk * KSTEP, KSTEP, dim=0), acc0,
                             is_async=True)
        a1v = gl.convert_layout(a0v, a1_l)
        acc1 = warpgroup_mma(a1v, p1_smem.slice(kk * KSTEP, KSTEP, dim=0), acc1,
                             is_async=True)
        if INFLIGHT >= 0:
            acc0, acc1 = warpgroup_mma_wait(INFLIGHT, deps=[acc0, acc1])
    acc0, acc1 = warpgroup_mma_wait(0, deps=[acc0, acc1])
    mbarrier.arrive(kfree.index(s))

    return acc0, acc1, v_ref, xphase


@gluon.jit
def _consumer(
    q_hi0, q_lo0, q_hi1, q_lo1, qsc0_smem, qsc1_smem,
    k_smem, v_smem, ks_smem, vs_smem, p0_smem, p1_smem,
    sums0_smem, sums1_smem, ref0_smem, ref1_smem, cm0_smem, cm1_smem, flag_smem,
    ready, kfree, xbar,
    out_ptr, segm_out_ptr, segm_max_ptr, segm_expsum_ptr, q_ptr, qk_scale,
    q_start, q_len, seq_len, kv_head_idx, segm_idx, num_segments,
    tile_lo, n_tiles, full_hi, causal,
    num_query_heads: gl.constexpr, q_stride_0, q_stride_1, out_stride_0, out_stride_1,
    G: gl.constexpr, HEAD_SIZE: gl.constexpr, STAGES: gl.constexpr,
    N1: gl.constexpr, P_LOG2_SCALE: gl.constexpr, RESCALE_THRESHOLD: gl.constexpr,
    INFLIGHT: gl.constexpr, C: gl.constexpr, SIGMA: gl.constexpr,
    QPAIR: gl.constexpr,
):
    NW: gl.constexpr = gl.num_warps()
    N0: gl.constexpr = 64
    CH: gl.constexpr = HEAD_SIZE // 2
    gl.static_assert(NW == 4)
    gl.static_assert(CH == 128)
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
    ROW_LOAD: gl.constexpr = gl.BlockedLayout([1, 16], [2, 16], [NW, 1], [1, 0])

    # Initial state: this consumer's sums and references; its part of Q.
    zf0 = _fold(gl.zeros([64, N0], gl.float32, s0_l))
    zf1 = _fold(gl.zeros([64, N1], gl.float32, s1_l))
    fold0_l: gl.constexpr = zf0.type.layout
    fold1_l: gl.constexpr = zf1.type.layout
    sums0 = sums0_smem.index(C)
    sums1 = sums1_smem.index(C)
    sums0.store(zf0)
    sums1.store(zf1)
    ref0 = ref0_smem.index(C)
    ref1 = ref1_smem.index(C)
    ref0.store(gl.full([N0], -3.0e38, gl.float32, gl.SliceLayout(0, s0_l)))
    ref1.store(gl.full([N1], -3.0e38, gl.float32, gl.SliceLayout(0, s1_l)))
    if C == 0:
        NQ: gl.constexpr = N0
        qh = q_hi0
        ql = q_lo0
        qs = qsc0_smem
    else:
        NQ: gl.constexpr = N1
        qh = q_hi1
        ql = q_lo1
        qs = qsc1_smem
    r_q = C * N0 + gl.arange(0, NQ, layout=gl.SliceLayout(1, ROW_LOAD))
    d_q = gl.arange(0, HEAD_SIZE, layout=gl.SliceLayout(0, ROW_LOAD))
    tok_q = r_q // G
    head_q = kv_head_idx * G + r_q % G
    Q = gl.load(
        q_ptr
        + gl.expand_dims((q_start + tok_q).to(gl.int64) * q_stride_0, 1)
        + gl.expand_dims(head_q * q_stride_1, 1)
        + gl.expand_dims(d_q, 0),
        mask=gl.expand_dims(tok_q < q_len, 1),
        other=0.0,
    ).to(gl.float32)
    q_amax = gl.max(gl.abs(Q), axis=1)
    q_scale = gl.where(q_amax > 0.0, q_amax / 127.0, 1.0)
    Q = Q / gl.expand_dims(q_scale, 1)
    q_hi = gl.floor(Q + 0.5)
    qh.store(q_hi.to(gl.int8))
    if QPAIR:
        ql.store(gl.floor((Q - q_hi) * 254.0 + 0.5).to(gl.int8))
        qs.store(q_scale * (qk_scale / 254.0))
    else:
        qs.store(q_scale * qk_scale)
    fence_async_shared()
    xphase = _sync(xbar, q_len * 0)

    q_start_pos = seq_len - q_len
    v_ref = qk_scale * 0.0 + 1e-30
    acc0 = gl.zeros([CH, N0], gl.float32, o0_l)
    acc1 = gl.zeros([CH, N1], gl.float32, o1_l)
    n_full = gl.minimum(gl.maximum(full_hi - tile_lo, 0), n_tiles)
    for i in range(n_full):
        acc0, acc1, v_ref, xphase = _tile_step(
            i, tile_lo, seq_len, causal, q_start_pos, acc0, acc1, v_ref, xphase,
            q_hi0, q_lo0, q_hi1, q_lo1, qsc0_smem, qsc1_smem,
            k_smem, v_smem, ks_smem, vs_smem, p0_smem, p1_smem,
            sums0, sums1, ref0, ref1, cm0_smem, cm1_smem, flag_smem,
            ready, kfree, xbar, G, STAGES, s0_l, s1_l, fold0_l, fold1_l,
            P_LOG2_SCALE, RESCALE_THRESHOLD, INFLIGHT, C, False, SIGMA, QPAIR,
        )
    for i in range(n_full, n_tiles):
        acc0, acc1, v_ref, xphase = _tile_step(
            i, tile_lo, seq_len, causal, q_start_pos, acc0, acc1, v_ref, xphase,
            q_hi0, q_lo0, q_hi1, q_lo1, qsc0_smem, qsc1_smem,
            k_smem, v_smem, ks_smem, vs_smem, p0_smem, p1_smem,
            sums0, sums1, ref0, ref1, cm0_smem, cm1_smem, flag_smem,
            ready, kfree, xbar, G, STAGES, s0_l, s1_l, fold0_l, fold1_l,
            P_LOG2_SCALE, RESCALE_THRESHOLD, INFLIGHT, C, True, SIGMA, QPAIR,
        )

    # Row sums of both consumers, then this consumer's channels of every row.
    xphase = _sync(xbar, xphase)
    l0 = gl.sum(sums0_smem.index(0).load(fold0_l) + sums0_smem.index(1).load(fold0_l), axis=0)
    l1 = gl.sum(sums1_smem.index(0).load(fold1_l) + sums1_smem.index(1).load(fold1_l), axis=0)
    _store_part(acc0, gl.convert_layout(l0, gl.SliceLayout(0, o0_l)),
                ref0.load(gl.SliceLayout(0, o0_l)), v_ref, 0,
                out_ptr, segm_out_ptr, segm_max_ptr, segm_expsum_ptr,
                q_start, q_len, kv_head_idx, segm_idx, num_segments, num_query_heads,
                out_stride_0, out_stride_1, G, HEAD_SIZE, C)
    _store_part(acc1, gl.convert_layout(l1, gl.SliceLayout(0, o1_l)),
                ref1.load(gl.SliceLayout(0, o1_l)), v_ref, N0,
                out_ptr, segm_out_ptr, segm_max_ptr, segm_expsum_ptr,
                q_start, q_len, kv_head_idx, segm_idx, num_segments, num_query_heads,
                out_stride_0, out_stride_1, G, HEAD_SIZE, C)


@gluon.jit
def _store_part(
    acc, l, ref, v_ref, col0,
    out_ptr, segm_out_ptr, segm_max_ptr, segm_expsum_ptr,
    q_start, q_len, kv_head_idx, segm_idx, num_segments,
    num_query_heads: gl.constexpr, out_stride_0, out_stride_1,
    G: gl.constexpr, HEAD_SIZE: gl.constexpr, C: gl.constexpr,
):
    layout: gl.constexpr = acc.type.layout
    CH: gl.constexpr = acc.shape[0]
    N: gl.constexpr = acc.shape[1]
    rows = col0 + gl.arange(0, N, layout=gl.SliceLayout(0, layout))
    q_tok = rows // G
    q_head = kv_head_idx * G + rows % G
    row_mask = q_tok < q_len
    token_idx = (q_start + q_tok).to(gl.int64)
    ch = C * CH + gl.arange(0, CH, layout=gl.SliceLayout(1, layout))
    if num_segments == 1:
        inv_l = gl.where(l > 0.0, v_ref / l, 0.0)
        gl.store(
            out_ptr
            + gl.expand_dims(token_idx * out_stride_0 + q_head * out_stride_1, 0)
            + gl.expand_dims(ch, 1),
            (acc * gl.expand_dims(inv_l, 0)).to(out_ptr.dtype.element_ty),
            mask=gl.expand_dims(row_mask, 0),
        )
    else:
        partial = (token_idx * num_segments + segm_idx) * num_query_heads + q_head
        gl.store(
            segm_out_ptr + gl.expand_dims(partial * HEAD_SIZE, 0) + gl.expand_dims(ch, 1),
            acc * v_ref,
            mask=gl.expand_dims(row_mask, 0),
        )
        if C == 0:
            gl.store(segm_max_ptr + partial, gl.where(l > 0.0, ref, float("-inf")),
                     mask=row_mask)
            gl.store(segm_expsum_ptr + partial, l, mask=row_mask)


CONSUMER_REGISTERS = 224
MAX_REGISTERS = 168


@gluon.jit(do_not_specialize=["num_segments", "block_table_stride", "causal"])
def kernel_int8_verify_token_split(
    out_ptr, segm_out_ptr, segm_max_ptr, segm_expsum_ptr, q_ptr,
    k_cache_ptr, v_cache_ptr, k_scale_ptr, v_scale_ptr,
    block_table_ptr, seq_lens_ptr, query_start_loc_ptr,
    qk_scale, num_segments, causal,
    num_query_heads: gl.constexpr,
    q_stride_0: gl.int64, q_stride_1: gl.int64,
    out_stride_0: gl.int64, out_stride_1: gl.int64,
    block_table_stride: gl.int64, stride_page: gl.int64, stride_head: gl.int64,
    stride_scale_page: gl.int64, stride_scale_head: gl.int64,
    NUM_QUERIES_PER_KV: gl.constexpr, HEAD_SIZE: gl.constexpr, BLOCK_SIZE: gl.constexpr,
    N1: gl.constexpr, STAGES: gl.constexpr, AHEAD: gl.constexpr,
    P_LOG2_SCALE: gl.constexpr, RESCALE_THRESHOLD: gl.constexpr,
    INFLIGHT: gl.constexpr, CONSUMER_REGS: gl.constexpr, SIGMA: gl.constexpr,
    QPAIR: gl.constexpr,
):
    N0: gl.constexpr = 64
    kv_head_idx = gl.program_id(0)
    seq_idx = gl.program_id(1)
    segm_idx = gl.program_id(2)
    q_start = gl.load(query_start_loc_ptr + seq_idx)
    q_len = gl.load(query_start_loc_ptr + seq_idx + 1) - q_start
    seq_len = gl.load(seq_lens_ptr + seq_idx)
    num_tiles = gl.cdiv(seq_len, TILE)
    tiles_per_segment = gl.cdiv(num_tiles, num_segments)
    tile_lo = segm_idx * tiles_per_segment
    tile_hi = gl.minimum(tile_lo + tiles_per_segment, num_tiles)
    seen = gl.where(causal != 0, seq_len - q_len + 1, seq_len)
    full_hi = gl.minimum(tile_hi, seen // TILE)
    n_tiles = gl.maximum(tile_hi - tile_lo, 0)

    q0_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([N0, HEAD_SIZE], gl.int8)
    q1_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([N1, HEAD_SIZE], gl.int8)
    k_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([TILE, HEAD_SIZE], gl.int8)
    vt_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HEAD_SIZE, TILE], gl.int8)
    p0_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([TILE, N0], gl.float16)
    p1_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([TILE, N1], gl.float16)
    flat_sl: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    sums_sl: gl.constexpr = gl.SwizzledSharedLayout(2, 1, 8, [1, 0])
    bar_l: gl.constexpr = mbarrier.MBarrierLayout()
    q_hi0 = gl.allocate_shared_memory(gl.int8, [N0, HEAD_SIZE], q0_sl)
    q_lo0 = gl.allocate_shared_memory(gl.int8, [N0, HEAD_SIZE], q0_sl)
    q_hi1 = gl.allocate_shared_memory(gl.int8, [N1, HEAD_SIZE], q1_sl)
    q_lo1 = gl.allocate_shared_memory(gl.int8, [N1, HEAD_SIZE], q1_sl)
    qsc0 = gl.allocate_shared_memory(gl.float32, [N0], flat_sl)
    qsc1 = gl.allocate_shared_memory(gl.float32, [N1], flat_sl)
    k_smem = gl.allocate_shared_memory(gl.int8, [STAGES, TILE, HEAD_SIZE], k_sl)
    v_smem = gl.allocate_shared_memory(gl.int8, [STAGES, HEAD_SIZE, TILE], vt_sl)
    ks_smem = gl.allocate_shared_memory(gl.float32, [STAGES, TILE], flat_sl)
    vs_smem = gl.allocate_shared_memory(gl.float32, [STAGES, TILE], flat_sl)
    p0_smem = gl.allocate_shared_memory(gl.float16, [TILE, N0], p0_sl)
    p1_smem = gl.allocate_shared_memory(gl.float16, [TILE, N1], p1_sl)
    sums0 = gl.allocate_shared_memory(gl.float32, [2, 16, N0], sums_sl)
    sums1 = gl.allocate_shared_memory(gl.float32, [2, 16, N1], sums_sl)
    ref0 = gl.allocate_shared_memory(gl.float32, [2, N0], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    ref1 = gl.allocate_shared_memory(gl.float32, [2, N1], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    cm0 = gl.allocate_shared_memory(gl.float32, [2, N0], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    cm1 = gl.allocate_shared_memory(gl.float32, [2, N1], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    flag = gl.allocate_shared_memory(gl.float32, [2, 32], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_l)
    kfree = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_l)
    xbar = gl.allocate_shared_memory(gl.int64, [1, 1], bar_l)
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(kfree.index(s), count=2)
    mbarrier.init(xbar.index(0), count=2)

    block_table_row = block_table_ptr + seq_idx.to(gl.int64) * block_table_stride
    k_head_ptr = k_cache_ptr + kv_head_idx * stride_head
    v_head_ptr = v_cache_ptr + kv_head_idx * stride_head
    ks_head_ptr = k_scale_ptr + kv_head_idx * stride_scale_head
    vs_head_ptr = v_scale_ptr + kv_head_idx * stride_scale_head
    gl.warp_specialize(
        [
            (
                _producer,
                (
                    k_smem, v_smem, ks_smem, vs_smem, ready, kfree,
                    block_table_row, k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr,
                    seq_len, tile_lo, n_tiles, stride_page, stride_scale_page,
                    HEAD_SIZE, BLOCK_SIZE, STAGES, AHEAD,
                ),
            ),
            (
                _consumer,
                (
                    q_hi0, q_lo0, q_hi1, q_lo1, qsc0, qsc1,
                    k_smem, v_smem, ks_smem, vs_smem, p0_smem, p1_smem,
                    sums0, sums1, ref0, ref1, cm0, cm1, flag,
                    ready, kfree, xbar.index(0),
                    out_ptr, segm_out_ptr, segm_max_ptr, segm_expsum_ptr, q_ptr, qk_scale,
                    q_start, q_len, seq_len, kv_head_idx, segm_idx, num_segments,
                    tile_lo, n_tiles, full_hi, causal,
                    num_query_heads, q_stride_0, q_stride_1, out_stride_0, out_stride_1,
                    NUM_QUERIES_PER_KV, HEAD_SIZE, STAGES, N1, P_LOG2_SCALE,
                    RESCALE_THRESHOLD, INFLIGHT, 0, SIGMA, QPAIR,
                ),
            ),
            (
                _consumer,
                (
                    q_hi0, q_lo0, q_hi1, q_lo1, qsc0, qsc1,
                    k_smem, v_smem, ks_smem, vs_smem, p0_smem, p1_smem,
                    sums0, sums1, ref0, ref1, cm0, cm1, flag,
                    ready, kfree, xbar.index(0),
                    out_ptr, segm_out_ptr, segm_max_ptr, segm_expsum_ptr, q_ptr, qk_scale,
                    q_start, q_len, seq_len, kv_head_idx, segm_idx, num_segments,
                    tile_lo, n_tiles, full_hi, causal,
                    num_query_heads, q_stride_0, q_stride_1, out_stride_0, out_stride_1,
                    NUM_QUERIES_PER_KV, HEAD_SIZE, STAGES, N1, P_LOG2_SCALE,
                    RESCALE_THRESHOLD, INFLIGHT, 1, SIGMA, QPAIR,
                ),
            ),
        ],
        [4, 4],
        [CONSUMER_REGS, CONSUMER_REGS],
    )


# Launch settings the A/B uses (env overrides in ts_ab.py).
SETTINGS = dict(STAGES=2, AHEAD=1, INFLIGHT=0, SIGMA=1, QPAIR=1)


class TokenSplitVerify:
    """Stands in for the series' ``kernel_int8_split_kv_verify_wgmma`` in its
    launcher: 65-96-row launches (one program per KV head, ``TILE_SPLIT``
    off) run the token-split kernel on the same grid and arguments; any other
    launch goes to the series' kernel."""

    def __init__(self, series_kernel, rows: int, **settings):
        self.series = series_kernel
        self.rows = rows
        self.settings = {**SETTINGS, **settings}

    def __getitem__(self, grid):
        def launch(*args, **kw):
            if kw["TILE_SPLIT"] or kw["ROW_SPLITS"] != 1 or not 64 < self.rows <= 96:
                return self.series[grid](*args, **kw)
            regs = self.settings.get("CONSUMER_REGS", CONSUMER_REGISTERS)
            return kernel_int8_verify_token_split[grid](
                *args,
                num_query_heads=kw["num_query_heads"],
                q_stride_0=kw["q_stride_0"],
                q_stride_1=kw["q_stride_1"],
                out_stride_0=kw["out_stride_0"],
                out_stride_1=kw["out_stride_1"],
                block_table_stride=kw["block_table_stride"],
                stride_page=kw["stride_page"],
                stride_head=kw["stride_head"],
                stride_scale_page=kw["stride_scale_page"],
                stride_scale_head=kw["stride_scale_head"],
                NUM_QUERIES_PER_KV=kw["NUM_QUERIES_PER_KV"],
                HEAD_SIZE=kw["HEAD_SIZE"],
                BLOCK_SIZE=kw["BLOCK_SIZE"],
                N1=16 if self.rows <= 80 else 32,
                STAGES=self.settings["STAGES"],
                AHEAD=self.settings["AHEAD"],
                P_LOG2_SCALE=kw["P_LOG2_SCALE"],
                RESCALE_THRESHOLD=kw["RESCALE_THRESHOLD"],
                INFLIGHT=self.settings["INFLIGHT"],
                CONSUMER_REGS=regs,
                SIGMA=bool(self.settings["SIGMA"]),
                QPAIR=bool(self.settings["QPAIR"]),
                num_warps=4,
                maxnreg=MAX_REGISTERS,
            )

        return launch
