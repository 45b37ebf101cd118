# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Prototype (Gluon, sm_90 only): INT8 split-KV verify on warpgroup MMA.

One warpgroup (4 warps) per (KV head, request, segment, 64-row split) owns
64 query rows, FlashAttention-3's orientation: S = Q K^T with Q (int8 high
and low parts) and the K tile read by wgmma straight from shared memory,
so the softmax is row-local (a row lives in one warp, two lanes' shuffles);
the V^T tile is widened once per tile by all 128 threads into an fp16 tile
that is the B operand of O += P V, with P taken from registers.  K/V tiles
arrive by cp.async in a ring of STAGES stages.  Partials use the layout of
the series' split-KV kernels, whose reduce kernel merges them.

Not part of the series; see README.md beside this file.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_wait,
)


@gluon.jit
def _widen(x):
    return gl.inline_asm_elementwise(
        asm="""{
        .reg .b32 t, m;
        xor.b32 t, $2, 0x80808080;
        mov.b32 m, 0x64806480;
        prmt.b32 $0, t, 0x64646464, 0x5150;
        prmt.b32 $1, t, 0x64646464, 0x5352;
        sub.f16x2 $0, $0, m;
        sub.f16x2 $1, $1, m;
        }""",
        constraints="=r,=r,r",
        args=[x],
        dtype=gl.float16,
        is_pure=True,
        pack=4,
    )


@gluon.jit
def _run_entries(block_table_row, tile, seq_len, TILE: gl.constexpr, BLOCK_SIZE: gl.constexpr, layout: gl.constexpr):
    # Block-table entry of each token's 16-token run (runs never straddle a
    # cache block); runs past the context read entry 0 and are masked.
    t = gl.arange(0, TILE, layout=layout)
    run_pos = tile * TILE + (t // 16) * 16
    return gl.load(block_table_row + run_pos // BLOCK_SIZE, mask=run_pos < seq_len, other=0).to(gl.int64)


@gluon.jit
def _issue_tile(k_smem, v_smem, ks_smem, vs_smem, stage, tile, seq_len, ek, ev, es,
                k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr, stride_page, stride_scale_page,
                HEAD: gl.constexpr, TILE: gl.constexpr, BLOCK_SIZE: gl.constexpr,
                K_LOAD: gl.constexpr, V_LOAD: gl.constexpr, S_LOAD: gl.constexpr):
    start = tile * TILE
    # K rows [TILE, HEAD]: HEAD contiguous bytes per token.
    t_k = gl.arange(0, TILE, layout=gl.SliceLayout(1, K_LOAD))
    d_k = gl.arange(0, HEAD, layout=gl.SliceLayout(0, K_LOAD))
    k_row = ek * stride_page + ((start + t_k) % BLOCK_SIZE) * HEAD
    k_ptrs = k_head_ptr + gl.expand_dims(k_row, 1) + gl.expand_dims(d_k, 0)
    k_ptrs = gl.max_contiguous(gl.multiple_of(k_ptrs, [1, 16]), [1, 16])
    async_copy.async_copy_global_to_shared(k_smem.index(stage), k_ptrs,
                                           mask=gl.expand_dims(start + t_k < seq_len, 1))
    # V^T [HEAD, TILE]: a channel's 16-token run is 16 contiguous bytes.
    t_v = gl.arange(0, TILE, layout=gl.SliceLayout(0, V_LOAD))
    d_v = gl.arange(0, HEAD, layout=gl.SliceLayout(1, V_LOAD))
    v_col = ev * stride_page + (start + t_v) % BLOCK_SIZE
    v_ptrs = v_head_ptr + gl.expand_dims(d_v * BLOCK_SIZE, 1) + gl.expand_dims(v_col, 0)
    v_ptrs = gl.max_contiguous(gl.multiple_of(v_ptrs, [1, 16]), [1, 16])
    run_ok = start + (t_v // 16) * 16 < seq_len
    async_copy.async_copy_global_to_shared(v_smem.index(stage), v_ptrs, mask=gl.expand_dims(run_ok, 0))
    # Scales [TILE] fp32.
    t_s = gl.arange(0, TILE, layout=S_LOAD)
    s_off = es * stride_scale_page + (start + t_s) % BLOCK_SIZE
    valid_s = start + t_s < seq_len
    async_copy.async_copy_global_to_shared(ks_smem.index(stage), ks_head_ptr + s_off, mask=valid_s)
    async_copy.async_copy_global_to_shared(vs_smem.index(stage), vs_head_ptr + s_off, mask=valid_s)


@gluon.jit
def kernel_int8_verify_wgmma(
    out_ptr, segm_out_ptr, segm_max_ptr, segm_expsum_ptr, q_ptr, k_cache_ptr, v_cache_ptr,
    k_scale_ptr, v_scale_ptr, block_table_ptr, seq_lens_ptr, query_start_loc_ptr, qk_scale,
    num_segments, block_table_stride, stride_page, stride_head, stride_scale_page,
    stride_scale_head, q_stride_0, q_stride_1, out_stride_0, out_stride_1,
    num_query_heads: gl.constexpr, NUM_QUERIES_PER_KV: gl.constexpr, ROW_SPLITS: gl.constexpr,
    HEAD: gl.constexpr, BLOCK_SIZE: gl.constexpr, TILE: gl.constexpr, STAGES: gl.constexpr,
    P_LOG2_SCALE: gl.constexpr, RESCALE_THRESHOLD: gl.constexpr, LAZY: gl.constexpr = 1,
    OVERLAP: gl.constexpr = 0, FOLD: gl.constexpr = 0, BARS: gl.constexpr = 1, ISSUE_LATE: gl.constexpr = 0,
):
    NW: gl.constexpr = gl.num_warps()
    ROWS: gl.constexpr = 16 * NW
    FLAG_L: gl.constexpr = gl.BlockedLayout([1], [32], [NW], [0])
    FLAG_ALL: gl.constexpr = gl.BlockedLayout([NW], [32], [NW], [0])
    s_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                  instr_shape=[16, TILE, 32])
    o_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                  instr_shape=[16, HEAD, 16])
    p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_l, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_l)
    col_s: gl.constexpr = gl.SliceLayout(0, s_l)
    row_o: gl.constexpr = gl.SliceLayout(1, o_l)
    col_o: gl.constexpr = gl.SliceLayout(0, o_l)
    blk_q: gl.constexpr = gl.BlockedLayout([1, 16], [2, 16], [NW, 1], [1, 0])
    K_LOAD: gl.constexpr = gl.BlockedLayout([1, 16], [2, 16], [NW, 1], [1, 0])
    V_LOAD: gl.constexpr = gl.BlockedLayout([1, 16], [32 * 16 // TILE, TILE // 16], [NW, 1], [1, 0])
    S_LOAD: gl.constexpr = gl.BlockedLayout([1], [32], [NW], [0])
    q_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, HEAD], gl.int8)
    k_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([TILE, HEAD], gl.int8)
    v_sl: gl.constexpr = gl.SwizzledSharedLayout(16, 1, 1, [1, 0])
    vh_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HEAD, TILE], gl.float16)
    s_sl: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])

    kv_head = gl.program_id(0) // ROW_SPLITS
    row0 = gl.program_id(0) % ROW_SPLITS * ROWS
    seq_idx = gl.program_id(1)
    segm_idx = gl.program_id(2)
    q_start = gl.load(query_start_loc_ptr + seq_idx)
    q_len = gl.load(query_start_loc_ptr + seq_idx + 1) - q_start
    seq_len = gl.load(seq_lens_ptr + seq_idx)
    if row0 >= q_len * NUM_QUERIES_PER_KV:
        return

    # Query rows -> int8 high and low parts in shared memory (wgmma A).
    r_b = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, blk_q))
    d_b = gl.arange(0, HEAD, layout=gl.SliceLayout(0, blk_q))
    tok_b = r_b // NUM_QUERIES_PER_KV
    head_b = kv_head * NUM_QUERIES_PER_KV + r_b % NUM_QUERIES_PER_KV
    qv = gl.load(q_ptr + gl.expand_dims((q_start + tok_b).to(gl.int64) * q_stride_0 + head_b * q_stride_1, 1)
                 + gl.expand_dims(d_b, 0), mask=gl.expand_dims(tok_b < q_len, 1), other=0.0).to(gl.float32)
    q_amax = gl.max(gl.abs(qv), axis=1)
    q_scale = gl.where(q_amax > 0.0, q_amax / 127.0, 1.0)
    qn = qv / gl.expand_dims(q_scale, 1)
    q_hi = gl.floor(qn + 0.5)
    q_lo = gl.floor((qn - q_hi) * 254.0 + 0.5).to(gl.int8)
    q_hi_smem = gl.allocate_shared_memory(gl.int8, [ROWS, HEAD], q_sl, q_hi.to(gl.int8))
    q_lo_smem = gl.allocate_shared_memory(gl.int8, [ROWS, HEAD], q_sl, q_lo)
    row_qk = gl.convert_layout(q_scale * (qk_scale / 254.0), row_s)

    rows_s = row0 + gl.arange(0, ROWS, layout=row_s)
    kv_limit = seq_len - q_len + 1 + rows_s // NUM_QUERIES_PER_KV

    num_tiles = gl.cdiv(seq_len, TILE)
    per_seg = gl.cdiv(num_tiles, num_segments)
    tile_lo = segm_idx * per_seg
    tile_hi = gl.minimum(tile_lo + per_seg, num_tiles)
    full_hi = gl.minimum(tile_hi, (seq_len - q_len + 1) // TILE)

    k_smem = gl.allocate_shared_memory(gl.int8, [STAGES, TILE, HEAD], k_sl)
    v_smem = gl.allocate_shared_memory(gl.int8, [STAGES, HEAD, TILE], v_sl)
    ks_smem = gl.allocate_shared_memory(gl.float32, [STAGES, TILE], s_sl)
    vs_smem = gl.allocate_shared_memory(gl.float32, [STAGES, TILE], s_sl)
    # OVERLAP: two widened V tiles, so that a tile's P.V runs while the
    # next tile's copies are issued, its Q.K runs and its V is widened.
    flag_smem = gl.allocate_shared_memory(gl.int32, [NW], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    vh_bufs = gl.allocate_shared_memory(gl.float16, [1 + OVERLAP, HEAD, TILE], vh_sl)

    block_table_row = block_table_ptr + seq_idx.to(gl.int64) * block_table_stride
    k_head_ptr = k_cache_ptr + kv_head * stride_head
    v_head_ptr = v_cache_ptr + kv_head * stride_head
    ks_head_ptr = k_scale_ptr + kv_head * stride_scale_head
    vs_head_ptr = v_scale_ptr + kv_head * stride_scale_head
    KT_L: gl.constexpr = gl.SliceLayout(1, K_LOAD)
    VT_L: gl.constexpr = gl.SliceLayout(0, V_LOAD)

    for p in gl.static_range(STAGES - 1):
        if tile_lo + p < tile_hi:
            _issue_tile(k_smem, v_smem, ks_smem, vs_smem, p, tile_lo + p, seq_len,
                        _run_entries(block_table_row, tile_lo + p, seq_len, TILE, BLOCK_SIZE, KT_L),
                        _run_entries(block_table_row, tile_lo + p, seq_len, TILE, BLOCK_SIZE, VT_L),
                        _run_entries(block_table_row, tile_lo + p, seq_len, TILE, BLOCK_SIZE, S_LOAD),
                        k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr, stride_page,
                        stride_scale_page, HEAD, TILE, BLOCK_SIZE, K_LOAD, V_LOAD, S_LOAD)
        async_copy.commit_group()
    # Block-table entries of the tile issued next, read one iteration early.
    nxt0 = tile_lo + STAGES - 1
    ek = _run_entries(block_table_row, nxt0, seq_len, TILE, BLOCK_SIZE, KT_L)
    ev = _run_entries(block_table_row, nxt0, seq_len, TILE, BLOCK_SIZE, VT_L)
    es = _run_entries(block_table_row, nxt0, seq_len, TILE, BLOCK_SIZE, S_LOAD)

    m_i = gl.full([ROWS], -3.0e38, gl.float32, row_s)
    l_i = gl.zeros([ROWS], gl.float32, row_s)
    acc = gl.zeros([ROWS, HEAD], gl.float32, o_l)
    s_zero = gl.zeros([ROWS, TILE], gl.int32, s_l)
    v_ref = 1e-30
    t_col = gl.arange(0, TILE, layout=col_s)
    for j in range(tile_lo, tile_hi):
        stage = (j - tile_lo) % STAGES
        async_copy.wait_group(STAGES - 2)
        fence_async_shared()
        if BARS:
            gl.thread_barrier()
        nxt = j + STAGES - 1
        if ISSUE_LATE:
            # Q.K first: the barrier before it also orders the refill below.
            k_t = k_smem.index(stage).permute([1, 0])
            s_hi = warpgroup_mma(q_hi_smem, k_t, s_zero, use_acc=False, is_async=True)
            s_lo = warpgroup_mma(q_lo_smem, k_t, s_zero, use_acc=False, is_async=True)
        if nxt < tile_hi:
            _issue_tile(k_smem, v_smem, ks_smem, vs_smem, (nxt - tile_lo) % STAGES, nxt, seq_len, ek, ev, es,
                        k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr, stride_page,
                        stride_scale_page, HEAD, TILE, BLOCK_SIZE, K_LOAD, V_LOAD, S_LOAD)
        async_copy.commit_group()
        ek = _run_entries(block_table_row, nxt + 1, seq_len, TILE, BLOCK_SIZE, KT_L)
        ev = _run_entries(block_table_row, nxt + 1, seq_len, TILE, BLOCK_SIZE, VT_L)
        es = _run_entries(block_table_row, nxt + 1, seq_len, TILE, BLOCK_SIZE, S_LOAD)
        if not ISSUE_LATE:
            # Q.K on the tensor cores while the threads widen V.
            k_t = k_smem.index(stage).permute([1, 0])
            s_hi = warpgroup_mma(q_hi_smem, k_t, s_zero, use_acc=False, is_async=True)
            s_lo = warpgroup_mma(q_lo_smem, k_t, s_zero, use_acc=False, is_async=True)
        vh_smem = vh_bufs.index((j - tile_lo) % (1 + OVERLAP))
        v8 = v_smem.index(stage).load(V_LOAD)
        vh_smem.store(_widen(v8))
        k_scale = ks_smem.index(stage).load(col_s)
        v_scale = vs_smem.index(stage).load(col_s)
        if OVERLAP:
            s_hi, s_lo, acc = warpgroup_mma_wait(0, deps=[s_hi, s_lo, acc])
        else:
            s_hi, s_lo = warpgroup_mma_wait(0, deps=[s_hi, s_lo])
        pos = j * TILE + t_col
        if j >= full_hi:
            k_scale = gl.where(pos < seq_len, k_scale, 0.0)
            v_scale = gl.where(pos < seq_len, v_scale, 0.0)
        # 254 * S_hi + S_lo is below 2**31 in magnitude: one exact integer FMA.
        if FOLD:
            # The row scale (> 0) goes into the row maximum and the exp2's FMA.
            S = (s_hi * 254 + s_lo).to(gl.float32) * gl.expand_dims(k_scale, 0)
        else:
            S = (s_hi * 254 + s_lo).to(gl.float32) * gl.expand_dims(row_qk, 1) * gl.expand_dims(k_scale, 0)
        if j >= full_hi:
            S = gl.where(gl.expand_dims(pos, 0) < gl.expand_dims(kv_limit, 1), S, float("-inf"))
        tile_max = gl.max(S, axis=1)
        if FOLD:
            tile_max = tile_max * row_qk
        new_v_ref = gl.maximum(gl.max(v_scale, axis=0), v_ref)
        if LAZY == 3:
            # One CTA-wide decision at no extra barrier: each warp posts
            # whether any of its rows (or the V reference) moves, the
            # barrier that publishes the widened V tile publishes the
            # flags too, and every thread reads all of them.
            m_new = gl.where(tile_max > m_i + RESCALE_THRESHOLD, tile_max, m_i)
            grow = gl.where((m_new > m_i) | (new_v_ref > v_ref), 1, 0)
            warp_flag = gl.max(gl.reshape(grow, [NW, 16]), axis=1)
            flag_smem.store(gl.convert_layout(warp_flag, FLAG_L))
            fence_async_shared()
            if BARS:
                gl.thread_barrier()
            if gl.max(flag_smem.load(FLAG_ALL), axis=0) > 0:
                alpha = gl.exp2(m_i - m_new)
                l_i = l_i * alpha
                acc = acc * gl.expand_dims(gl.convert_layout(alpha * (v_ref / new_v_ref), row_o), 1)
                m_i = m_new
                v_ref = new_v_ref
        elif LAZY == 2:
            # One CTA-wide decision: most tiles leave every reference alone
            # and skip the accumulator's 128 multiplies per thread.
            m_new = gl.where(tile_max > m_i + RESCALE_THRESHOLD, tile_max, m_i)
            if gl.max(m_new - m_i, axis=0) > 0.0 or new_v_ref > v_ref:
                alpha = gl.exp2(m_i - m_new)
                l_i = l_i * alpha
                acc = acc * gl.expand_dims(gl.convert_layout(alpha * (v_ref / new_v_ref), row_o), 1)
                m_i = m_new
                v_ref = new_v_ref
        else:
            if LAZY:
                m_new = gl.where(tile_max > m_i + RESCALE_THRESHOLD, tile_max, m_i)
            else:
                m_new = gl.maximum(tile_max, m_i)
            alpha = gl.exp2(m_i - m_new)
            l_i = l_i * alpha
            acc = acc * gl.expand_dims(gl.convert_layout(alpha * (v_ref / new_v_ref), row_o), 1)
            m_i = m_new
            v_ref = new_v_ref
        if FOLD:
            P = gl.exp2(S * gl.expand_dims(row_qk, 1) - gl.expand_dims(m_i - P_LOG2_SCALE, 1))
        else:
            P = gl.exp2(S - gl.expand_dims(m_i - P_LOG2_SCALE, 1))
        l_i += gl.sum(P, axis=1)
        P_v = (P * gl.expand_dims(v_scale / v_ref, 0)).to(gl.float16)
        if LAZY != 3:
            fence_async_shared()
            if BARS:
                gl.thread_barrier()
        acc = warpgroup_mma(gl.convert_layout(P_v, p_op), vh_smem.permute([1, 0]), acc, is_async=True)
        acc = warpgroup_mma_wait(OVERLAP, deps=[acc])
    acc = warpgroup_mma_wait(0, deps=[acc])
    async_copy.wait_group(0)

    rows_o = row0 + gl.arange(0, ROWS, layout=row_o)
    q_tok = rows_o // NUM_QUERIES_PER_KV
    q_head = kv_head * NUM_QUERIES_PER_KV + rows_o % NUM_QUERIES_PER_KV
    row_mask = q_tok < q_len
    token_idx = (q_start + q_tok).to(gl.int64)
    l_o = gl.convert_layout(l_i, row_o)
    m_o = gl.convert_layout(m_i, row_o)
    d_o = gl.arange(0, HEAD, layout=col_o)
    acc = acc * v_ref
    if num_segments == 1:
        inv_l = gl.where(l_o > 0.0, 1.0 / l_o, 0.0)
        gl.store(out_ptr + gl.expand_dims(token_idx * out_stride_0 + q_head * out_stride_1, 1)
                 + gl.expand_dims(d_o, 0),
                 (acc * gl.expand_dims(inv_l, 1)).to(out_ptr.dtype.element_ty),
                 mask=gl.expand_dims(row_mask, 1))
    else:
        partial = (token_idx * num_segments + segm_idx) * num_query_heads + q_head
        gl.store(segm_out_ptr + gl.expand_dims(partial * HEAD, 1) + gl.expand_dims(d_o, 0), acc,
                 mask=gl.expand_dims(row_mask, 1))
        gl.store(segm_max_ptr + partial, gl.where(l_o > 0.0, m_o, float("-inf")), mask=row_mask)
        gl.store(segm_expsum_ptr + partial, l_o, mask=row_mask)
