"""Warp-specialised wgmma verify kernel (experiment, outside the series).

The series' kernel (one warpgroup, 2 programs per SM) spends ~3,100 cycles per 32-token tile, latency bound: each
warpgroup issues its own cp.async copies (~720 cycles), widens V (with a CTA barrier before P.V), runs Q.K, the
softmax and P.V in one dependent chain.  Here one CTA per SM has three warpgroups:

* the default partition (producer, 4 warps, few registers) issues the cp.async copies of K, V and the scales into a
  ring of STAGES int8 stages, waits for them, widens V into a ring of VH_STAGES fp16 tiles and signals `ready`;
* two consumer warpgroups (worker partitions) run Q.K (int8 wgmma, Q in shared memory), the softmax and P.V (fp16
  wgmma) and release the int8 stage after Q.K (`kfree`) and the fp16 tile after P.V (`vhfree`).

TILE_SPLIT=1 (up to 64 rows, e.g. 6-10 tokens x 6 heads): both consumers hold the same 64 rows and take alternate
tiles, each writing its own partial (2 partials per segment).  TILE_SPLIT=0 (65-128 rows, 12-16 tokens): consumer c
holds rows 64c..64c+63 and both consume every tile.

`ws_launch` launches it (plus the series' reduce kernel) on a benchmark Case.
"""
import functools

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from vllm.v1.attention.ops.triton_int8_split_kv_wgmma import (
    _issue_tile,
    _run_bases,
    _tile_blocks,
    _widen,
)


@gluon.jit
def _issue_tma(
    k_desc, v_desc, k_smem, v_runs, ks_smem, vs_smem, tbar, stage, tile, blocks, kv_head_idx,
    ks_head_ptr, vs_head_ptr, t_s, stride_scale_page,
    HEAD_SIZE: gl.constexpr, TILE_SIZE: gl.constexpr, BLOCK_SIZE: gl.constexpr,
):
    # K and V^T of each 16-token run by TMA (one thread issues; the mbarrier counts the bytes), the scales by
    # cp.async (128 bytes per operand and tile, waited with the copy group).
    RUN_COUNT: gl.constexpr = TILE_SIZE // 16
    bar = tbar.index(stage)
    # The stage's previous contents were read through the generic proxy.
    fence_async_shared()
    mbarrier.expect(bar, RUN_COUNT * 2 * 16 * HEAD_SIZE)
    runs = gl.arange(0, RUN_COUNT, layout=blocks.type.layout)
    for r in gl.static_range(RUN_COUNT):
        block = gl.sum(gl.where(runs == r, blocks, 0), axis=0)
        in_block = (tile * TILE_SIZE + 16 * r) % BLOCK_SIZE
        tma.async_copy_global_to_shared(
            k_desc, [block, kv_head_idx, in_block, 0], bar, k_smem.index(stage).slice(16 * r, 16)
        )
        tma.async_copy_global_to_shared(
            v_desc, [block, kv_head_idx, 0, in_block], bar, v_runs.index(stage * RUN_COUNT + r)
        )
    s_off = _run_bases(blocks, tile, t_s, stride_scale_page, 1, TILE_SIZE, BLOCK_SIZE) + (t_s % 16)
    async_copy.async_copy_global_to_shared(ks_smem.index(stage), ks_head_ptr + s_off)
    async_copy.async_copy_global_to_shared(vs_smem.index(stage), vs_head_ptr + s_off)


@gluon.jit
def _producer(
    k_smem, v_smem, v_read, ks_smem, vs_smem, vh_smem, tbar, ready, kfree, vhfree,
    block_table_row, k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr, k_desc, v_desc, kv_head_idx,
    seq_len, tile_lo, n_tiles, stride_page, stride_scale_page,
    HEAD_SIZE: gl.constexpr, TILE_SIZE: gl.constexpr, BLOCK_SIZE: gl.constexpr,
    STAGES: gl.constexpr, VH_STAGES: gl.constexpr, AHEAD: gl.constexpr, USE_TMA: gl.constexpr,
    vready, SPLIT_READY: gl.constexpr,
):
    # SPLIT_READY: ready[s] means tile i's K and scales have landed (Q.K may start while V is widened) and
    # vready[h] that its widened V is in vh_smem[h]; otherwise ready[s] means both and vready is unused.
    # USE_TMA: v_smem holds one [1, 1, HEAD_SIZE, 16] TMA box per run (v_read: the same bytes as [HEAD_SIZE, 16]
    # tiles) and tbar counts each stage's TMA bytes; otherwise v_smem is the [HEAD_SIZE, TILE_SIZE] cp.async stage
    # and v_read, tbar, k_desc, v_desc are unused.
    NUM_WARPS: gl.constexpr = gl.num_warps()
    RUN_COUNT: gl.constexpr = TILE_SIZE // 16
    ROW_LOAD: gl.constexpr = gl.BlockedLayout(
        [1, 16], [32 * 16 // HEAD_SIZE, HEAD_SIZE // 16], [NUM_WARPS, 1], [1, 0]
    )
    V_LOAD: gl.constexpr = gl.BlockedLayout(
        [1, 16], [32 * 16 // TILE_SIZE, TILE_SIZE // 16], [NUM_WARPS, 1], [1, 0]
    )
    V_RUN: gl.constexpr = gl.BlockedLayout([1, 16], [32, 1], [NUM_WARPS, 1], [1, 0])
    S_LOAD: gl.constexpr = gl.BlockedLayout([1], [32], [NUM_WARPS], [0])
    RUNS: gl.constexpr = gl.BlockedLayout([RUN_COUNT], [32], [NUM_WARPS], [0])
    t_k = gl.arange(0, TILE_SIZE, layout=gl.SliceLayout(1, ROW_LOAD))
    d_k = gl.arange(0, HEAD_SIZE, layout=gl.SliceLayout(0, ROW_LOAD))
    k_offs = gl.expand_dims((t_k % 16) * HEAD_SIZE, 1) + gl.expand_dims(d_k, 0)
    t_v = gl.arange(0, TILE_SIZE, layout=gl.SliceLayout(0, V_LOAD))
    d_v = gl.arange(0, HEAD_SIZE, layout=gl.SliceLayout(1, V_LOAD))
    v_offs = gl.expand_dims(d_v * BLOCK_SIZE, 1) + gl.expand_dims(t_v % 16, 0)
    t_s = gl.arange(0, TILE_SIZE, layout=S_LOAD)

    # Copies run AHEAD tiles ahead of the widening; stage s of tile i is free
    # once the consumers have run Q.K on tile i - STAGES (kfree) and this
    # partition has widened its V (program order).  Tile AHEAD + i's copies
    # are issued in iteration i (the prologue issues the first AHEAD), its
    # block-table entries read one iteration before.
    blocks = _tile_blocks(block_table_row, tile_lo, seq_len, TILE_SIZE, BLOCK_SIZE, RUNS)
    for nxt in range(n_tiles + AHEAD):
        if nxt < n_tiles:
            s_n = nxt % STAGES
            mbarrier.wait(kfree.index(s_n), ((nxt // STAGES) & 1) ^ 1)
            if USE_TMA:
                _issue_tma(
                    k_desc, v_desc, k_smem, v_smem, ks_smem, vs_smem, tbar, s_n, tile_lo + nxt, blocks,
                    kv_head_idx, ks_head_ptr, vs_head_ptr, t_s, stride_scale_page, HEAD_SIZE, TILE_SIZE, BLOCK_SIZE,
                )
            else:
                _issue_tile(
                    k_smem, v_smem, ks_smem, vs_smem, s_n, tile_lo + nxt, blocks,
                    k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr, k_offs, v_offs, t_k, t_v, t_s,
                    stride_page, stride_scale_page, HEAD_SIZE, TILE_SIZE, BLOCK_SIZE,
                )
        async_copy.commit_group()
        blocks = _tile_blocks(block_table_row, tile_lo + nxt + 1, seq_len, TILE_SIZE, BLOCK_SIZE, RUNS)
        i = nxt - AHEAD
        if i >= 0:
            s = i % STAGES
            h = i % VH_STAGES
            if USE_TMA:
                mbarrier.wait(tbar.index(s), (i // STAGES) & 1)
            async_copy.wait_group(AHEAD)
            gl.thread_barrier()
            if SPLIT_READY:
                fence_async_shared()
                mbarrier.arrive(ready.index(s))
            if USE_TMA:
                mbarrier.wait(vhfree.index(h), ((i // VH_STAGES) & 1) ^ 1)
                for r in gl.static_range(RUN_COUNT):
                    vh_smem.index(h).slice(16 * r, 16, dim=1).store(
                        _widen(v_read.index(s * RUN_COUNT + r).load(V_RUN))
                    )
            else:
                v8 = v_smem.index(s).load(V_LOAD)
                mbarrier.wait(vhfree.index(h), ((i // VH_STAGES) & 1) ^ 1)
                vh_smem.index(h).store(_widen(v8))
            fence_async_shared()
            if SPLIT_READY:
                mbarrier.arrive(vready.index(h))
            else:
                mbarrier.arrive(ready.index(s))
    async_copy.wait_group(0)


@gluon.jit
def _softmax_tile(
    s_hi, s_lo, k_scale, v_scale, j, m_i, l_i, acc, v_ref,
    row_qk_scale, t_col, seq_len, q_pos, kv_limit, full_lo, full_hi,
    TILE_SIZE: gl.constexpr, P_LOG2_SCALE: gl.constexpr, RESCALE_THRESHOLD: gl.constexpr,
    SLIDING_WINDOW: gl.constexpr, CHAINED: gl.constexpr = False,
):
    """Tile j's scores -> P (fp16, the A operand of P.V); the running state (m_i, l_i, acc, v_ref) moved along."""
    row_o: gl.constexpr = gl.SliceLayout(1, acc.type.layout)
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc.type.layout, k_width=2)
    pos = j * TILE_SIZE + t_col
    masked = (j >= full_hi) | (j < full_lo)
    if masked:
        k_scale = gl.where(pos < seq_len, k_scale, 0.0)
        v_scale = gl.where(pos < seq_len, v_scale, 0.0)
    if CHAINED:
        s_int = s_hi
    else:
        s_int = s_hi * 254 + s_lo
    S = (
        s_int.to(gl.float32)
        * gl.expand_dims(row_qk_scale, 1)
        * gl.expand_dims(k_scale, 0)
    )
    if masked:
        kv_pos = gl.expand_dims(pos, 0)
        visible = kv_pos < gl.expand_dims(kv_limit, 1)
        if SLIDING_WINDOW > 0:
            distance = gl.expand_dims(q_pos, 1) - kv_pos
            visible &= (distance < SLIDING_WINDOW) & (-distance < SLIDING_WINDOW)
        S = gl.where(visible, S, float("-inf"))
    tile_max = gl.max(S, axis=1)
    new_v_ref = gl.maximum(gl.max(v_scale, axis=0), v_ref)
    m_new = gl.where(tile_max > m_i + RESCALE_THRESHOLD, tile_max, m_i)
    alpha = gl.exp2(m_i - m_new)
    l_i = l_i * alpha
    acc = acc * gl.expand_dims(gl.convert_layout(alpha * (v_ref / new_v_ref), row_o), 1)
    P = gl.exp2(S - gl.expand_dims(m_new - P_LOG2_SCALE, 1))
    l_i += gl.sum(P, axis=1)
    P_v = gl.convert_layout((P * gl.expand_dims(v_scale / new_v_ref, 0)).to(gl.float16), p_layout)
    return P_v, acc, m_new, l_i, new_v_ref


@gluon.jit
def _consumer(
    q_hi_smem, q_lo_smem, k_smem, ks_smem, vs_smem, vh_smem, ready, kfree, vhfree,
    out_ptr, segm_out_ptr, segm_max_ptr, segm_expsum_ptr, q_ptr,
    qk_scale, q_start, q_len, seq_len, kv_head_idx, row0, segm_idx, num_segments,
    tile_lo, n_tiles, full_lo, full_hi, causal,
    num_query_heads: gl.constexpr,
    q_stride_0, q_stride_1, out_stride_0, out_stride_1,
    NUM_QUERIES_PER_KV: gl.constexpr, HEAD_SIZE: gl.constexpr, TILE_SIZE: gl.constexpr,
    STAGES: gl.constexpr, VH_STAGES: gl.constexpr,
    P_LOG2_SCALE: gl.constexpr, RESCALE_THRESHOLD: gl.constexpr, SLIDING_WINDOW: gl.constexpr,
    TILE_SPLIT: gl.constexpr, PINGPONG: gl.constexpr, turn, C: gl.constexpr,
    vready, SPLIT_READY: gl.constexpr,
):
    NUM_WARPS: gl.constexpr = gl.num_warps()
    ROWS: gl.constexpr = 16 * NUM_WARPS
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, TILE_SIZE, 32]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, HEAD_SIZE, 16]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    col_s: gl.constexpr = gl.SliceLayout(0, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    col_o: gl.constexpr = gl.SliceLayout(0, o_layout)
    ROW_LOAD: gl.constexpr = gl.BlockedLayout(
        [1, 16], [32 * 16 // HEAD_SIZE, HEAD_SIZE // 16], [NUM_WARPS, 1], [1, 0]
    )
    if TILE_SPLIT:
        my_row0 = row0
    else:
        my_row0 = row0 + C * ROWS

    r_q = my_row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, ROW_LOAD))
    d_q = gl.arange(0, HEAD_SIZE, layout=gl.SliceLayout(0, ROW_LOAD))
    tok_q = r_q // NUM_QUERIES_PER_KV
    head_q = kv_head_idx * NUM_QUERIES_PER_KV + r_q % NUM_QUERIES_PER_KV
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
    q_lo = gl.floor((Q - q_hi) * 254.0 + 0.5).to(gl.int8)
    q_hi_smem.store(q_hi.to(gl.int8))
    q_lo_smem.store(q_lo)
    fence_async_shared()
    gl.thread_barrier()
    row_qk_scale = gl.convert_layout(q_scale * (qk_scale / 254.0), row_s)
    q_pos = seq_len - q_len + (my_row0 + gl.arange(0, ROWS, layout=row_s)) // NUM_QUERIES_PER_KV
    kv_limit = gl.where(causal != 0, q_pos + 1, seq_len)

    m_i = gl.full([ROWS], -3.0e38, gl.float32, row_s)
    l_i = gl.zeros([ROWS], gl.float32, row_s)
    acc = gl.zeros([ROWS, HEAD_SIZE], gl.float32, o_layout)
    s_zero = gl.zeros([ROWS, TILE_SIZE], gl.int32, s_layout)
    v_ref = 1e-30
    t_col = gl.arange(0, TILE_SIZE, layout=col_s)
    if TILE_SPLIT:
        my_tiles = (n_tiles - C + 1) // 2
        other_tiles = (n_tiles - (1 - C) + 1) // 2
    else:
        my_tiles = n_tiles
        other_tiles = n_tiles
    if PINGPONG == 1:
        # A consumer waits for its next tile while its P.V reads the current
        # widened V: the producer must not need that buffer for the next one.
        gl.static_assert(VH_STAGES > (2 if TILE_SPLIT else 1))
        # The two consumers take turns on the tensor cores: a consumer's
        # GEMM phase (P.V of its tile and Q.K of its next tile) runs while
        # the other one computes its softmax.  Phase k of consumer 0 follows
        # phase k - 1 of consumer 1, phase k of consumer 1 follows phase k
        # of consumer 0; a consumer with t tiles has t + 1 phases (none
        # without tiles).
        other_phases = gl.where(other_tiles > 0, other_tiles + 1, 0)
        if my_tiles > 0:
            i = C if TILE_SPLIT else 0
            s = i % STAGES
            if C == 0:
                mbarrier.wait(turn.index(0), 1)
            else:
                mbarrier.wait(turn.index(1), 0)
            mbarrier.wait(ready.index(s), (i // STAGES) & 1)
            k_t = k_smem.index(s).permute([1, 0])
            s_hi = warpgroup_mma(q_hi_smem, k_t, s_zero, use_acc=False, is_async=True)
            s_lo = warpgroup_mma(q_lo_smem, k_t, s_zero, use_acc=False, is_async=True)
            k_scale = ks_smem.index(s).load(col_s)
            v_scale = vs_smem.index(s).load(col_s)
            s_hi, s_lo = warpgroup_mma_wait(0, deps=[s_hi, s_lo])
            mbarrier.arrive(kfree.index(s))
            mbarrier.arrive(turn.index(1 - C))
            for it in range(my_tiles):
                if TILE_SPLIT:
                    i = 2 * it + C
                else:
                    i = it
                h = i % VH_STAGES
                P_v, acc, m_i, l_i, v_ref = _softmax_tile(
                    s_hi, s_lo, k_scale, v_scale, tile_lo + i, m_i, l_i, acc, v_ref,
                    row_qk_scale, t_col, seq_len, q_pos, kv_limit, full_lo, full_hi,
                    TILE_SIZE, P_LOG2_SCALE, RESCALE_THRESHOLD, SLIDING_WINDOW,
                )
                # GEMM phase it + 1.
                if C == 0:
                    mbarrier.wait(turn.index(0), it & 1, pred=it < other_phases)
                else:
                    mbarrier.wait(turn.index(1), (it + 1) & 1)
                acc = warpgroup_mma(P_v, vh_smem.index(h).permute([1, 0]), acc, is_async=True)
                has_next = it + 1 < my_tiles
                if TILE_SPLIT:
                    i_n = i + 2
                else:
                    i_n = i + 1
                s_n = i_n % STAGES
                # After the last tile this Q.K reads a stage that may be
                # refilling; its result is not used.
                mbarrier.wait(ready.index(s_n), (i_n // STAGES) & 1, pred=has_next)
                k_t = k_smem.index(s_n).permute([1, 0])
                s_hi = warpgroup_mma(q_hi_smem, k_t, s_zero, use_acc=False, is_async=True)
                s_lo = warpgroup_mma(q_lo_smem, k_t, s_zero, use_acc=False, is_async=True)
                k_scale = ks_smem.index(s_n).load(col_s)
                v_scale = vs_smem.index(s_n).load(col_s)
                acc, s_hi, s_lo = warpgroup_mma_wait(0, deps=[acc, s_hi, s_lo])
                mbarrier.arrive(vhfree.index(h))
                mbarrier.arrive(kfree.index(s_n), pred=has_next)
                mbarrier.arrive(turn.index(1 - C))
    elif PINGPONG == 3:
        # Chained Q.K with FlashAttention-3's intra-warpgroup overlap: the
        # next tile's high product runs on the tensor cores during this
        # tile's softmax, its low product alongside this tile's P.V.  After
        # the last tile the "next" products read a stage that may be
        # refilling; their result is not used.
        if TILE_SPLIT:
            STEP: gl.constexpr = 2
        else:
            STEP: gl.constexpr = 1
        # A consumer waits for its next tile while holding this tile's widened
        # V (as with turns): the producer must not need that buffer, unless
        # the next tile's K is signalled before the widening (SPLIT_READY).
        if not SPLIT_READY:
            gl.static_assert(VH_STAGES > STEP)
        i = C if TILE_SPLIT else 0
        s_int = s_zero
        k_scale = gl.zeros([TILE_SIZE], gl.float32, col_s)
        v_scale = gl.zeros([TILE_SIZE], gl.float32, col_s)
        if my_tiles > 0:
            s = i % STAGES
            mbarrier.wait(ready.index(s), (i // STAGES) & 1)
            k_t = k_smem.index(s).permute([1, 0])
            s_int = warpgroup_mma(q_hi_smem, k_t, s_zero, use_acc=False, is_async=True)
            k_scale = ks_smem.index(s).load(col_s)
            v_scale = vs_smem.index(s).load(col_s)
            s_int = warpgroup_mma_wait(0, deps=[s_int])
            s_int = warpgroup_mma(q_lo_smem, k_t, s_int * 254, use_acc=True, is_async=True)
            s_int = warpgroup_mma_wait(0, deps=[s_int])
            mbarrier.arrive(kfree.index(s))
        for it in range(my_tiles):
            has_next = it + 1 < my_tiles
            i_n = i + STEP
            s_n = i_n % STAGES
            h = i % VH_STAGES
            mbarrier.wait(ready.index(s_n), (i_n // STAGES) & 1, pred=has_next)
            k_n = k_smem.index(s_n).permute([1, 0])
            s_nxt = warpgroup_mma(q_hi_smem, k_n, s_zero, use_acc=False, is_async=True)
            P_v, acc, m_i, l_i, v_ref = _softmax_tile(
                s_int, s_int, k_scale, v_scale, tile_lo + i, m_i, l_i, acc, v_ref,
                row_qk_scale, t_col, seq_len, q_pos, kv_limit, full_lo, full_hi,
                TILE_SIZE, P_LOG2_SCALE, RESCALE_THRESHOLD, SLIDING_WINDOW, True,
            )
            k_scale = ks_smem.index(s_n).load(col_s)
            v_scale = vs_smem.index(s_n).load(col_s)
            s_nxt = warpgroup_mma_wait(0, deps=[s_nxt])
            s_nxt = warpgroup_mma(q_lo_smem, k_n, s_nxt * 254, use_acc=True, is_async=True)
            if SPLIT_READY:
                mbarrier.wait(vready.index(h), (i // VH_STAGES) & 1)
            acc = warpgroup_mma(P_v, vh_smem.index(h).permute([1, 0]), acc, is_async=True)
            acc, s_int = warpgroup_mma_wait(0, deps=[acc, s_nxt])
            mbarrier.arrive(vhfree.index(h))
            mbarrier.arrive(kfree.index(s_n), pred=has_next)
            i = i_n
    else:
        for it in range(my_tiles):
            if TILE_SPLIT:
                i = 2 * it + C
            else:
                i = it
            s = i % STAGES
            h = i % VH_STAGES
            mbarrier.wait(ready.index(s), (i // STAGES) & 1)
            k_t = k_smem.index(s).permute([1, 0])
            if PINGPONG == 2:
                # One int32 accumulator: 254 * (q_hi . K), then + q_lo . K
                # (half the score registers, two dependent products).
                s_hi = warpgroup_mma(q_hi_smem, k_t, s_zero, use_acc=False, is_async=True)
                k_scale = ks_smem.index(s).load(col_s)
                v_scale = vs_smem.index(s).load(col_s)
                s_hi = warpgroup_mma_wait(0, deps=[s_hi])
                s_hi = warpgroup_mma(q_lo_smem, k_t, s_hi * 254, use_acc=True, is_async=True)
                s_hi = warpgroup_mma_wait(0, deps=[s_hi])
                s_lo = s_hi
            else:
                s_hi = warpgroup_mma(q_hi_smem, k_t, s_zero, use_acc=False, is_async=True)
                s_lo = warpgroup_mma(q_lo_smem, k_t, s_zero, use_acc=False, is_async=True)
                k_scale = ks_smem.index(s).load(col_s)
                v_scale = vs_smem.index(s).load(col_s)
                s_hi, s_lo = warpgroup_mma_wait(0, deps=[s_hi, s_lo])
            mbarrier.arrive(kfree.index(s))
            P_v, acc, m_i, l_i, v_ref = _softmax_tile(
                s_hi, s_lo, k_scale, v_scale, tile_lo + i, m_i, l_i, acc, v_ref,
                row_qk_scale, t_col, seq_len, q_pos, kv_limit, full_lo, full_hi,
                TILE_SIZE, P_LOG2_SCALE, RESCALE_THRESHOLD, SLIDING_WINDOW, PINGPONG == 2,
            )
            if SPLIT_READY:
                mbarrier.wait(vready.index(h), (i // VH_STAGES) & 1)
            acc = warpgroup_mma(P_v, vh_smem.index(h).permute([1, 0]), acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=[acc])
            mbarrier.arrive(vhfree.index(h))


    rows = my_row0 + gl.arange(0, ROWS, layout=row_o)
    q_tok = rows // NUM_QUERIES_PER_KV
    q_head = kv_head_idx * NUM_QUERIES_PER_KV + rows % NUM_QUERIES_PER_KV
    row_mask = q_tok < q_len
    token_idx = (q_start + q_tok).to(gl.int64)
    l_o = gl.convert_layout(l_i, row_o)
    offs_d = gl.arange(0, HEAD_SIZE, layout=col_o)
    acc = acc * v_ref
    if TILE_SPLIT:
        n_part = 2 * num_segments
        part = 2 * segm_idx + C
    else:
        n_part = num_segments
        part = segm_idx
    if n_part == 1:
        inv_l = gl.where(l_o > 0.0, 1.0 / l_o, 0.0)
        gl.store(
            out_ptr
            + gl.expand_dims(token_idx * out_stride_0 + q_head * out_stride_1, 1)
            + gl.expand_dims(offs_d, 0),
            (acc * gl.expand_dims(inv_l, 1)).to(out_ptr.dtype.element_ty),
            mask=gl.expand_dims(row_mask, 1),
        )
    else:
        partial = (token_idx * n_part + part) * num_query_heads + q_head
        gl.store(
            segm_out_ptr + gl.expand_dims(partial * HEAD_SIZE, 1) + gl.expand_dims(offs_d, 0),
            acc,
            mask=gl.expand_dims(row_mask, 1),
        )
        m_o = gl.convert_layout(m_i, row_o)
        gl.store(segm_max_ptr + partial, gl.where(l_o > 0.0, m_o, float("-inf")), mask=row_mask)
        gl.store(segm_expsum_ptr + partial, l_o, mask=row_mask)


@gluon.jit(do_not_specialize=["num_segments", "block_table_stride", "causal"])
def kernel_int8_split_kv_verify_ws(
    out_ptr, segm_out_ptr, segm_max_ptr, segm_expsum_ptr, q_ptr,
    k_cache_ptr, v_cache_ptr, k_scale_ptr, v_scale_ptr,
    block_table_ptr, seq_lens_ptr, query_start_loc_ptr,
    qk_scale, num_segments, causal,
    num_query_heads: gl.constexpr,
    q_stride_0: gl.int64, q_stride_1: gl.int64, out_stride_0: gl.int64, out_stride_1: gl.int64,
    block_table_stride: gl.int64, stride_page: gl.int64, stride_head: gl.int64,
    stride_scale_page: gl.int64, stride_scale_head: gl.int64,
    NUM_QUERIES_PER_KV: gl.constexpr, ROW_SPLITS: gl.constexpr, HEAD_SIZE: gl.constexpr,
    BLOCK_SIZE: gl.constexpr, TILE_SIZE: gl.constexpr,
    P_LOG2_SCALE: gl.constexpr, RESCALE_THRESHOLD: gl.constexpr, SLIDING_WINDOW: gl.constexpr,
    TILE_SPLIT: gl.constexpr, STAGES: gl.constexpr, VH_STAGES: gl.constexpr, AHEAD: gl.constexpr,
    CONSUMER_REGS: gl.constexpr, PINGPONG: gl.constexpr,
    USE_TMA: gl.constexpr, k_desc, v_desc, SPLIT_READY: gl.constexpr = False,
):
    if SPLIT_READY:
        gl.static_assert(not USE_TMA)
        gl.static_assert(PINGPONG != 1)
    ROWS: gl.constexpr = 64
    if TILE_SPLIT:
        PROGRAM_ROWS: gl.constexpr = ROWS
        FREE_COUNT: gl.constexpr = 1
    else:
        PROGRAM_ROWS: gl.constexpr = 2 * ROWS
        FREE_COUNT: gl.constexpr = 2
    kv_head_idx = gl.program_id(0) // ROW_SPLITS
    row0 = gl.program_id(0) % ROW_SPLITS * PROGRAM_ROWS
    seq_idx = gl.program_id(1)
    segm_idx = gl.program_id(2)
    q_start = gl.load(query_start_loc_ptr + seq_idx)
    q_len = gl.load(query_start_loc_ptr + seq_idx + 1) - q_start
    seq_len = gl.load(seq_lens_ptr + seq_idx)

    num_tiles = gl.cdiv(seq_len, TILE_SIZE)
    first_tile = 0
    if SLIDING_WINDOW > 0:
        first_tile = gl.maximum(seq_len - q_len - SLIDING_WINDOW + 1, 0) // TILE_SIZE
    tiles_per_segment = gl.cdiv(num_tiles - first_tile, num_segments)
    tile_lo = first_tile + segm_idx * tiles_per_segment
    tile_hi = gl.minimum(tile_lo + tiles_per_segment, num_tiles)
    full_lo = tile_lo
    if SLIDING_WINDOW > 0:
        full_lo = gl.cdiv(gl.maximum(seq_len - SLIDING_WINDOW, 0), TILE_SIZE)
    seen = gl.where(causal != 0, seq_len - q_len + 1, seq_len)
    if SLIDING_WINDOW > 0:
        seen = gl.minimum(seen, seq_len - q_len + SLIDING_WINDOW)
    full_hi = gl.minimum(tile_hi, seen // TILE_SIZE)
    n_tiles = gl.maximum(tile_hi - tile_lo, 0)
    # Programs past the request's rows do nothing (every partition skips its
    # loop) but still store empty partials for their rows (all masked).
    n_tiles = gl.where(row0 < q_len * NUM_QUERIES_PER_KV, n_tiles, 0)

    q_shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, HEAD_SIZE], gl.int8)
    k_shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for([TILE_SIZE, HEAD_SIZE], gl.int8)
    v_shared: gl.constexpr = gl.SwizzledSharedLayout(16, 1, 1, [1, 0])
    vh_shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HEAD_SIZE, TILE_SIZE], gl.float16)
    s_shared: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    q_hi0 = gl.allocate_shared_memory(gl.int8, [ROWS, HEAD_SIZE], q_shared)
    q_lo0 = gl.allocate_shared_memory(gl.int8, [ROWS, HEAD_SIZE], q_shared)
    q_hi1 = gl.allocate_shared_memory(gl.int8, [ROWS, HEAD_SIZE], q_shared)
    q_lo1 = gl.allocate_shared_memory(gl.int8, [ROWS, HEAD_SIZE], q_shared)
    k_smem = gl.allocate_shared_memory(gl.int8, [STAGES, TILE_SIZE, HEAD_SIZE], k_shared)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    if USE_TMA:
        RUN_COUNT: gl.constexpr = TILE_SIZE // 16
        v_smem = gl.allocate_shared_memory(gl.int8, [STAGES * RUN_COUNT, 1, 1, HEAD_SIZE, 16], v_desc.layout)
        # 16-byte rows: no swizzle, so the boxes read back as [HEAD_SIZE, 16] tiles.
        v_read = v_smem._reinterpret(
            gl.int8, [STAGES * RUN_COUNT, HEAD_SIZE, 16], gl.NVMMASharedLayout.get_default_for([HEAD_SIZE, 16], gl.int8)
        )
        tbar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        for s in gl.static_range(STAGES):
            mbarrier.init(tbar.index(s), count=1)
    else:
        v_smem = gl.allocate_shared_memory(gl.int8, [STAGES, HEAD_SIZE, TILE_SIZE], v_shared)
        v_read = v_smem  # unused
        tbar = ready  # unused
    ks_smem = gl.allocate_shared_memory(gl.float32, [STAGES, TILE_SIZE], s_shared)
    vs_smem = gl.allocate_shared_memory(gl.float32, [STAGES, TILE_SIZE], s_shared)
    vh_smem = gl.allocate_shared_memory(gl.float16, [VH_STAGES, HEAD_SIZE, TILE_SIZE], vh_shared)
    kfree = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    vhfree = gl.allocate_shared_memory(gl.int64, [VH_STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(kfree.index(s), count=FREE_COUNT)
    vready = gl.allocate_shared_memory(gl.int64, [VH_STAGES, 1], mbarrier.MBarrierLayout())
    for h in gl.static_range(VH_STAGES):
        mbarrier.init(vhfree.index(h), count=FREE_COUNT)
        mbarrier.init(vready.index(h), count=1)
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for c in gl.static_range(2):
        mbarrier.init(turn.index(c), count=1)

    block_table_row = block_table_ptr + seq_idx.to(gl.int64) * block_table_stride
    k_head_ptr = k_cache_ptr + kv_head_idx * stride_head
    v_head_ptr = v_cache_ptr + kv_head_idx * stride_head
    ks_head_ptr = k_scale_ptr + kv_head_idx * stride_scale_head
    vs_head_ptr = v_scale_ptr + kv_head_idx * stride_scale_head

    # (Tuples are written out: a tuple held in a variable loses its constexprs.)
    gl.warp_specialize(
        [
            (_producer, (
        k_smem, v_smem, v_read, ks_smem, vs_smem, vh_smem, tbar, ready, kfree, vhfree,
        block_table_row, k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr, k_desc, v_desc, kv_head_idx,
        seq_len, tile_lo, n_tiles, stride_page, stride_scale_page,
        HEAD_SIZE, TILE_SIZE, BLOCK_SIZE, STAGES, VH_STAGES, AHEAD, USE_TMA, vready, SPLIT_READY,
            )),
            (_consumer, (
        q_hi0, q_lo0, k_smem, ks_smem, vs_smem, vh_smem, ready, kfree, vhfree,
        out_ptr, segm_out_ptr, segm_max_ptr, segm_expsum_ptr, q_ptr,
        qk_scale, q_start, q_len, seq_len, kv_head_idx, row0, segm_idx, num_segments,
        tile_lo, n_tiles, full_lo, full_hi, causal,
        num_query_heads, q_stride_0, q_stride_1, out_stride_0, out_stride_1,
        NUM_QUERIES_PER_KV, HEAD_SIZE, TILE_SIZE, STAGES, VH_STAGES,
        P_LOG2_SCALE, RESCALE_THRESHOLD, SLIDING_WINDOW, TILE_SPLIT, PINGPONG, turn, 0, vready, SPLIT_READY,
            )),
            (_consumer, (
        q_hi1, q_lo1, k_smem, ks_smem, vs_smem, vh_smem, ready, kfree, vhfree,
        out_ptr, segm_out_ptr, segm_max_ptr, segm_expsum_ptr, q_ptr,
        qk_scale, q_start, q_len, seq_len, kv_head_idx, row0, segm_idx, num_segments,
        tile_lo, n_tiles, full_lo, full_hi, causal,
        num_query_heads, q_stride_0, q_stride_1, out_stride_0, out_stride_1,
        NUM_QUERIES_PER_KV, HEAD_SIZE, TILE_SIZE, STAGES, VH_STAGES,
        P_LOG2_SCALE, RESCALE_THRESHOLD, SLIDING_WINDOW, TILE_SPLIT, PINGPONG, turn, 1, vready, SPLIT_READY,
            )),
        ],
        [4, 4],
        [CONSUMER_REGS, CONSUMER_REGS],
    )


@functools.cache
def _num_sms(device_index):
    import torch

    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _tma_descriptors(k_cache, v_cache, head_size, use_tma):
    """TMA descriptors over the planar caches: [block, KV head, token, channel] (K) and [block, KV head, channel,
    token] (V^T), the views' own strides permuted; 16-token boxes."""
    if not use_tma:
        return dict(k_desc=None, v_desc=None)
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    lay = gl.NVMMASharedLayout.get_default_for
    kv, vv = k_cache.permute(0, 2, 1, 3), v_cache.permute(0, 2, 3, 1)
    return dict(
        k_desc=TensorDescriptor.from_tensor(kv, [1, 1, 16, head_size], lay([1, 1, 16, head_size], gl.int8)),
        v_desc=TensorDescriptor.from_tensor(vv, [1, 1, head_size, 16], lay([1, 1, head_size, 16], gl.int8)),
    )


def ws_launch(q, k_cache, v_cache, k_scale_cache, v_scale_cache, out, cu_seqlens_q, seqused_k, block_table,
              max_query_len, max_seq_len, softmax_scale, segm_output, segm_max, segm_expsum,
              num_segments=None, stages=4, vh_stages=3, ahead=2, consumer_regs=224, maxnreg=168, causal=True, pingpong=1, use_tma=False,
              tile=32, split_ready=False):
    """Launch the warp-specialised kernel and the series' reduce kernel (no checks beyond the series' own); returns
    the number of segments launched."""
    from vllm.v1.attention.ops import triton_int8_split_kv_attention as M

    num_tokens, num_query_heads, head_size = q.shape
    _, block_size, num_kv_heads, _ = k_cache.shape
    num_seqs = seqused_k.shape[0]
    g = num_query_heads // num_kv_heads
    rows = g * max_query_len
    tile_split = rows <= 64
    program_rows = 64 if tile_split else 128
    row_splits = triton.cdiv(rows, program_rows)
    if num_segments is None:
        sms = _num_sms(q.device.index)
        num_segments = 1
        # One wave of one-CTA-per-SM programs, at least 4 tiles per consumer.
        while (
            num_kv_heads * row_splits * num_seqs * num_segments * 2 <= sms
            and max_seq_len // (num_segments * 2 * tile * (2 if tile_split else 1)) >= 4
        ):
            num_segments *= 2
    n_part = num_segments * (2 if tile_split else 1)
    assert n_part == 1 or num_tokens * n_part <= segm_output.shape[0]
    kernel_int8_split_kv_verify_ws[(num_kv_heads * row_splits, num_seqs, num_segments)](
        out, segm_output, segm_max, segm_expsum, q, k_cache, v_cache, k_scale_cache, v_scale_cache,
        block_table, seqused_k, cu_seqlens_q, softmax_scale * 1.4426950408889634, num_segments, int(causal),
        num_query_heads=num_query_heads,
        q_stride_0=q.stride(0), q_stride_1=q.stride(1), out_stride_0=out.stride(0), out_stride_1=out.stride(1),
        block_table_stride=block_table.stride(0), stride_page=k_cache.stride(0), stride_head=k_cache.stride(2),
        stride_scale_page=k_scale_cache.stride(0), stride_scale_head=k_scale_cache.stride(2),
        NUM_QUERIES_PER_KV=g, ROW_SPLITS=row_splits, HEAD_SIZE=head_size, BLOCK_SIZE=block_size, TILE_SIZE=tile,
        P_LOG2_SCALE=M.P_LOG2_SCALE, RESCALE_THRESHOLD=M.RESCALE_THRESHOLD, SLIDING_WINDOW=0,
        TILE_SPLIT=tile_split, STAGES=stages, VH_STAGES=vh_stages, AHEAD=ahead, CONSUMER_REGS=consumer_regs, PINGPONG=pingpong,
        USE_TMA=use_tma, SPLIT_READY=split_ready, **_tma_descriptors(k_cache, v_cache, head_size, use_tma),
        num_warps=4, maxnreg=maxnreg,
    )
    if n_part > 1:
        head_block = min(64, head_size)
        M.kernel_int8_split_kv_reduce[(num_tokens, num_query_heads, head_size // head_block)](
            out, segm_output, segm_max, segm_expsum, cu_seqlens_q, num_seqs, n_part,
            num_query_heads=num_query_heads, out_stride_0=out.stride(0), out_stride_1=out.stride(1),
            HEAD_SIZE=head_size, HEAD_BLOCK=head_block, SEGMENT_CHUNK=32,
        )
    return num_segments
