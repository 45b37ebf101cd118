# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Prototype, never run on a GPU (Gluon): INT8 split-KV verify with each warp
owning 16 query rows and one widened V tile shared by all warps through shared
memory.  Not part of the series; see README.md beside this file.

Per (request, KV head, segment) program: K/V tiles of TILE tokens arrive in a
ring of STAGES shared-memory stages by cp.async (sm_80+); each tile's V^T is
widened once (all threads, 1/num_threads each) into an fp16 tile that every
warp reads as its P.V operand; Q.K runs as two int8 mma.sync dots (hi/lo
query) per warp on its own rows, so the softmax never leaves the warp.
Partials use the layout of the Triton split-KV kernels (reduce reused).
"""

import torch

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2


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
def _scale(accs, f):
    out = ()
    for c in gl.static_range(len(accs)):
        out = out + (accs[c] * f,)
    return out


@gluon.jit
def _issue_tile(k_smem, v_smem, ks_smem, vs_smem, stage, tile, seq_len, block_table_row,
                k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr, stride_page, stride_scale_page,
                HEAD: gl.constexpr, TILE: gl.constexpr, BLOCK_SIZE: gl.constexpr,
                K_LOAD: gl.constexpr, V_LOAD: gl.constexpr, S_LOAD: gl.constexpr):
    # A 32-token tile is two 16-token runs, each inside one cache block:
    # two block-table entries, read as scalars.
    start = tile * TILE
    e0 = gl.load(block_table_row + start // BLOCK_SIZE).to(gl.int64)
    if TILE == 32:
        last = gl.cdiv(seq_len, 16) * 16 - 16
        e1 = gl.load(block_table_row + gl.minimum(start + 16, last) // BLOCK_SIZE).to(gl.int64)
    else:
        e1 = e0
    base0 = e0 * stride_page + start % BLOCK_SIZE
    base1 = e1 * stride_page + (start + 16) % BLOCK_SIZE
    # K rows: [TILE, HEAD].
    t_k = gl.arange(0, TILE, layout=gl.SliceLayout(1, K_LOAD))
    d_k = gl.arange(0, HEAD, layout=gl.SliceLayout(0, K_LOAD))
    k_row = gl.where(t_k < 16, e0 * stride_page + (start % BLOCK_SIZE + t_k) * HEAD,
                     e1 * stride_page + ((start + 16) % BLOCK_SIZE + t_k - 16) * HEAD)
    k_ptrs = k_head_ptr + gl.expand_dims(k_row, 1) + gl.expand_dims(d_k, 0)
    k_ptrs = gl.max_contiguous(gl.multiple_of(k_ptrs, [1, 16]), [1, 16])
    valid_k = start + t_k < seq_len
    async_copy.async_copy_global_to_shared(k_smem.index(stage), k_ptrs, mask=gl.expand_dims(valid_k, 1))
    # V^T: [HEAD, TILE]; each run is 16 contiguous bytes of a channel row.
    t_v = gl.arange(0, TILE, layout=gl.SliceLayout(0, V_LOAD))
    d_v = gl.arange(0, HEAD, layout=gl.SliceLayout(1, V_LOAD))
    v_col = gl.where(t_v < 16, base0 + t_v, base1 + (t_v - 16))
    v_ptrs = v_head_ptr + gl.expand_dims(d_v * BLOCK_SIZE, 1) + gl.expand_dims(v_col, 0)
    v_ptrs = gl.max_contiguous(gl.multiple_of(v_ptrs, [1, 16]), [1, 16])
    run_ok = start + (t_v // 16) * 16 < seq_len
    async_copy.async_copy_global_to_shared(v_smem.index(stage), v_ptrs, mask=gl.expand_dims(run_ok, 0))
    # Scales: [TILE] fp32 each.
    t_s = gl.arange(0, TILE, layout=S_LOAD)
    s_off = gl.where(t_s < 16, e0 * stride_scale_page + start % BLOCK_SIZE + t_s,
                     e1 * stride_scale_page + (start + 16) % BLOCK_SIZE + (t_s - 16))
    valid_s = start + t_s < seq_len
    async_copy.async_copy_global_to_shared(ks_smem.index(stage), ks_head_ptr + s_off, mask=valid_s)
    async_copy.async_copy_global_to_shared(vs_smem.index(stage), vs_head_ptr + s_off, mask=valid_s)


@gluon.jit
def kernel_int8_verify_rows_gluon(
    out_ptr, segm_out_ptr, segm_max_ptr, segm_expsum_ptr, q_ptr, k_cache_ptr, v_cache_ptr,
    k_scale_ptr, v_scale_ptr, block_table_ptr, seq_lens_ptr, query_start_loc_ptr, qk_scale,
    num_segments, block_table_stride, stride_page, stride_head, stride_scale_page,
    stride_scale_head, q_stride_0, q_stride_1, out_stride_0, out_stride_1,
    num_query_heads: gl.constexpr, NUM_QUERIES_PER_KV: gl.constexpr, ROW_SPLITS: gl.constexpr,
    HEAD: gl.constexpr, BLOCK_SIZE: gl.constexpr, TILE: gl.constexpr, STAGES: gl.constexpr,
    P_LOG2_SCALE: gl.constexpr, RESCALE_THRESHOLD: gl.constexpr, LAZY: gl.constexpr = 1,
    DK: gl.constexpr = 64, DV: gl.constexpr = 64,
):
    NW: gl.constexpr = gl.num_warps()
    ROWS: gl.constexpr = 16 * NW
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[NW, 1],
                                                  instr_shape=[16, 8])
    q_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=4)
    k_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=4)
    p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    v_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
    row_l: gl.constexpr = gl.SliceLayout(1, mma)
    col_l: gl.constexpr = gl.SliceLayout(0, mma)
    blk2: gl.constexpr = gl.BlockedLayout([1, 16], [2, 16], [NW, 1], [1, 0])
    K_LOAD: gl.constexpr = gl.BlockedLayout([1, 16], [2, 16], [NW, 1], [1, 0])
    # One 16-byte run per thread per channel row: no two threads load (and
    # widen) the same bytes.
    V_LOAD: gl.constexpr = gl.BlockedLayout([1, 16], [32 * 16 // TILE, TILE // 16], [NW, 1], [1, 0])
    S_LOAD: gl.constexpr = gl.BlockedLayout([1], [32], [NW], [0])
    k_sl: gl.constexpr = gl.SwizzledSharedLayout(16, 1, 8, [1, 0])
    v_sl: gl.constexpr = gl.SwizzledSharedLayout(16, 1, 1, [1, 0])
    vh_sl: gl.constexpr = gl.SwizzledSharedLayout(8, 1, 8, [1, 0])
    q_sl: gl.constexpr = gl.SwizzledSharedLayout(16, 1, 8, [1, 0])
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

    # Query rows -> int8 hi/lo parts in shared memory (read per tile).
    r_b = row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(1, blk2))
    d_b = gl.arange(0, HEAD, layout=gl.SliceLayout(0, blk2))
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
    row_qk = gl.convert_layout(q_scale * (qk_scale / 254.0), row_l)

    rows = row0 + gl.arange(0, ROWS, layout=row_l)
    q_tok = rows // NUM_QUERIES_PER_KV
    q_head = kv_head * NUM_QUERIES_PER_KV + rows % NUM_QUERIES_PER_KV
    row_mask = q_tok < q_len
    token_idx = (q_start + q_tok).to(gl.int64)
    kv_limit = seq_len - q_len + 1 + q_tok

    num_tiles = gl.cdiv(seq_len, TILE)
    per_seg = gl.cdiv(num_tiles, num_segments)
    tile_lo = segm_idx * per_seg
    tile_hi = gl.minimum(tile_lo + per_seg, num_tiles)
    full_hi = gl.minimum(tile_hi, (seq_len - q_len + 1) // TILE)

    k_smem = gl.allocate_shared_memory(gl.int8, [STAGES, TILE, HEAD], k_sl)
    v_smem = gl.allocate_shared_memory(gl.int8, [STAGES, HEAD, TILE], v_sl)
    ks_smem = gl.allocate_shared_memory(gl.float32, [STAGES, TILE], s_sl)
    vs_smem = gl.allocate_shared_memory(gl.float32, [STAGES, TILE], s_sl)
    vh_smem = gl.allocate_shared_memory(gl.float16, [HEAD, TILE], vh_sl)

    block_table_row = block_table_ptr + seq_idx.to(gl.int64) * block_table_stride
    k_head_ptr = k_cache_ptr + kv_head * stride_head
    v_head_ptr = v_cache_ptr + kv_head * stride_head
    ks_head_ptr = k_scale_ptr + kv_head * stride_scale_head
    vs_head_ptr = v_scale_ptr + kv_head * stride_scale_head

    for p in gl.static_range(STAGES - 1):
        if tile_lo + p < tile_hi:
            _issue_tile(k_smem, v_smem, ks_smem, vs_smem, p, tile_lo + p, seq_len, block_table_row,
                        k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr, stride_page,
                        stride_scale_page, HEAD, TILE, BLOCK_SIZE, K_LOAD, V_LOAD, S_LOAD)
        async_copy.commit_group()

    m_i = gl.full([ROWS], -3.0e38, gl.float32, row_l)
    l_i = gl.zeros([ROWS], gl.float32, row_l)
    accs = (gl.zeros([ROWS, DV], gl.float32, mma),) * (HEAD // DV)
    v_ref = 1e-30
    t_col = gl.arange(0, TILE, layout=col_l)
    for j in range(tile_lo, tile_hi):
        stage = (j - tile_lo) % STAGES
        async_copy.wait_group(STAGES - 2)
        gl.thread_barrier()
        nxt = j + STAGES - 1
        if nxt < tile_hi:
            _issue_tile(k_smem, v_smem, ks_smem, vs_smem, (nxt - tile_lo) % STAGES, nxt, seq_len,
                        block_table_row, k_head_ptr, v_head_ptr, ks_head_ptr, vs_head_ptr,
                        stride_page, stride_scale_page, HEAD, TILE, BLOCK_SIZE, K_LOAD, V_LOAD, S_LOAD)
        async_copy.commit_group()
        # Widen this tile's V^T once, into the tile every warp reads.
        v8 = v_smem.index(stage).load(V_LOAD)
        vh_smem.store(_widen(v8))
        # Q.K on this warp's rows.
        s_int = gl.zeros([ROWS, TILE], gl.int32, mma)
        for c in gl.static_range(HEAD // DK):
            kt = k_smem.index(stage).slice(c * DK, DK, dim=1).permute([1, 0]).load(k_op)
            s_int = mma_v2(q_hi_smem.slice(c * DK, DK, dim=1).load(q_op), kt, s_int)
        s_int = s_int * 254
        for c in gl.static_range(HEAD // DK):
            kt = k_smem.index(stage).slice(c * DK, DK, dim=1).permute([1, 0]).load(k_op)
            s_int = mma_v2(q_lo_smem.slice(c * DK, DK, dim=1).load(q_op), kt, s_int)
        k_scale = ks_smem.index(stage).load(col_l)
        v_scale = vs_smem.index(stage).load(col_l)
        pos = j * TILE + t_col
        if j >= full_hi:
            # Slots past the context hold whatever an earlier tile left.
            k_scale = gl.where(pos < seq_len, k_scale, 0.0)
            v_scale = gl.where(pos < seq_len, v_scale, 0.0)
        S = s_int.to(gl.float32) * gl.expand_dims(row_qk, 1) * gl.expand_dims(k_scale, 0)
        if j >= full_hi:
            S = gl.where(gl.expand_dims(pos, 0) < gl.expand_dims(kv_limit, 1), S, float("-inf"))
        tile_max = gl.max(S, axis=1)
        v_max = gl.max(v_scale, axis=0)
        if LAZY:
            if gl.max(tile_max - m_i, axis=0) > RESCALE_THRESHOLD or v_max > v_ref:
                new_v_ref = gl.maximum(v_max, v_ref)
                m_new = gl.maximum(tile_max, m_i)
                alpha = gl.exp2(m_i - m_new)
                l_i = l_i * alpha
                f = gl.expand_dims(alpha * (v_ref / new_v_ref), 1)
                accs = _scale(accs, f)
                m_i = m_new
                v_ref = new_v_ref
        else:
            new_v_ref = gl.maximum(v_max, v_ref)
            m_new = gl.where(tile_max > m_i + RESCALE_THRESHOLD, tile_max, m_i)
            alpha = gl.exp2(m_i - m_new)
            l_i = l_i * alpha
            accs = _scale(accs, gl.expand_dims(alpha * (v_ref / new_v_ref), 1))
            m_i = m_new
            v_ref = new_v_ref
        P = gl.exp2(S - gl.expand_dims(m_i - P_LOG2_SCALE, 1))
        l_i += gl.sum(P, axis=1)
        P_v = (P * gl.expand_dims(v_scale / v_ref, 0)).to(gl.float16)
        gl.thread_barrier()
        p_a = gl.convert_layout(P_v, p_op)
        new_accs = ()
        for c in gl.static_range(HEAD // DV):
            v_c = vh_smem.slice(c * DV, DV, dim=0).permute([1, 0]).load(v_op)
            new_accs = new_accs + (mma_v2(p_a, v_c, accs[c]),)
        accs = new_accs
    async_copy.wait_group(0)

    inv_l = gl.where(l_i > 0.0, 1.0 / l_i, 0.0)
    partial = (token_idx * num_segments + segm_idx) * num_query_heads + q_head
    for c in gl.static_range(HEAD // DV):
        d_o = c * DV + gl.arange(0, DV, layout=col_l)
        acc = accs[c] * v_ref
        if num_segments == 1:
            gl.store(out_ptr + gl.expand_dims(token_idx * out_stride_0 + q_head * out_stride_1, 1)
                     + gl.expand_dims(d_o, 0),
                     (acc * gl.expand_dims(inv_l, 1)).to(out_ptr.dtype.element_ty),
                     mask=gl.expand_dims(row_mask, 1))
        else:
            gl.store(segm_out_ptr + gl.expand_dims(partial * HEAD, 1) + gl.expand_dims(d_o, 0), acc,
                     mask=gl.expand_dims(row_mask, 1))
    if num_segments > 1:
        gl.store(segm_max_ptr + partial, gl.where(l_i > 0.0, m_i, float("-inf")), mask=row_mask)
        gl.store(segm_expsum_ptr + partial, l_i, mask=row_mask)
