# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Prototype (Gluon, sm_90 only): INT8 split-KV verify on warpgroup MMA, K/V by TMA.

Same as gluon_wgmma.py (LAZY=1, 32-token tiles), except that the K, V and
scale tiles arrive by TMA in 16-token runs (one run never straddles a cache
block) with one mbarrier per stage, instead of per-thread cp.async: the
threads no longer compute per-chunk addresses or hold cp.async registers.
Each run is its own wgmma operand (Q.K: N=16; P.V: K=16).

Original header follows.

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
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma
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
def _page(block_table_row, pos, seq_len, BLOCK_SIZE: gl.constexpr):
    # Cache block of a 16-token run; runs past the context read entry 0 and
    # are masked.
    return gl.load(block_table_row + pos // BLOCK_SIZE, mask=pos < seq_len, other=0)


@gluon.jit
def _issue_run(k_desc, v_desc, ks_desc, vs_desc, k_dst, v_dst, ks_dst, vs_dst, bar, page, pos, kv_head,
               k_page_rows, k_head_rows, v_page_rows, v_head_rows, s_page_rows, s_head_rows,
               BLOCK_SIZE: gl.constexpr):
    off = pos % BLOCK_SIZE
    tma.async_copy_global_to_shared(k_desc, [page * k_page_rows + kv_head * k_head_rows + off, 0], bar, k_dst)
    tma.async_copy_global_to_shared(v_desc, [page * v_page_rows + kv_head * v_head_rows, off], bar, v_dst)
    s_row = page * s_page_rows + kv_head * s_head_rows + off // 16
    tma.async_copy_global_to_shared(ks_desc, [s_row, 0], bar, ks_dst)
    tma.async_copy_global_to_shared(vs_desc, [s_row, 0], bar, vs_dst)


@gluon.jit
def _issue_tile(k_desc, v_desc, ks_desc, vs_desc, k_smem, v_smem, ks_smem, vs_smem, bars, stage, tile, p0, p1,
                kv_head, k_page_rows, k_head_rows, v_page_rows, v_head_rows, s_page_rows, s_head_rows,
                HEAD: gl.constexpr, BLOCK_SIZE: gl.constexpr):
    bar = bars.index(stage)
    mbarrier.expect(bar, 2 * (2 * 16 * HEAD + 2 * 16 * 4))
    _issue_run(k_desc, v_desc, ks_desc, vs_desc, k_smem.index(2 * stage), v_smem.index(2 * stage),
               ks_smem.index(2 * stage), vs_smem.index(2 * stage), bar, p0, tile * 32, kv_head,
               k_page_rows, k_head_rows, v_page_rows, v_head_rows, s_page_rows, s_head_rows, BLOCK_SIZE)
    _issue_run(k_desc, v_desc, ks_desc, vs_desc, k_smem.index(2 * stage + 1), v_smem.index(2 * stage + 1),
               ks_smem.index(2 * stage + 1), vs_smem.index(2 * stage + 1), bar, p1, tile * 32 + 16, kv_head,
               k_page_rows, k_head_rows, v_page_rows, v_head_rows, s_page_rows, s_head_rows, BLOCK_SIZE)


@gluon.jit
def _scores(s_hi, s_lo, row_qk, k_scale):
    # 254 * S_hi + S_lo is below 2**31 in magnitude: one exact integer FMA.
    return (s_hi * 254 + s_lo).to(gl.float32) * gl.expand_dims(row_qk, 1) * k_scale


@gluon.jit
def kernel_int8_verify_wgmma_tma(
    out_ptr, segm_out_ptr, segm_max_ptr, segm_expsum_ptr, q_ptr, k_desc, v_desc, ks_desc, vs_desc,
    block_table_ptr, seq_lens_ptr, query_start_loc_ptr, qk_scale, num_segments, block_table_stride,
    k_page_rows, k_head_rows, v_page_rows, v_head_rows, s_page_rows, s_head_rows,
    q_stride_0, q_stride_1, out_stride_0, out_stride_1,
    num_query_heads: gl.constexpr, NUM_QUERIES_PER_KV: gl.constexpr, ROW_SPLITS: gl.constexpr,
    HEAD: gl.constexpr, BLOCK_SIZE: gl.constexpr, STAGES: gl.constexpr,
    P_LOG2_SCALE: gl.constexpr, RESCALE_THRESHOLD: gl.constexpr,
):
    TILE: gl.constexpr = 32
    NW: gl.constexpr = gl.num_warps()
    ROWS: gl.constexpr = 16 * NW
    s_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1], instr_shape=[16, 16, 32])
    o_l: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[NW, 1],
                                                  instr_shape=[16, HEAD, 16])
    p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_l, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_l)
    col_s: gl.constexpr = gl.SliceLayout(0, s_l)
    row_o: gl.constexpr = gl.SliceLayout(1, o_l)
    col_o: gl.constexpr = gl.SliceLayout(0, o_l)
    blk_q: gl.constexpr = gl.BlockedLayout([1, 16], [2, 16], [NW, 1], [1, 0])
    V_REG: gl.constexpr = gl.BlockedLayout([1, 16], [32, 1], [NW, 1], [1, 0])
    q_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([ROWS, HEAD], gl.int8)
    vh_sl: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HEAD, 16], gl.float16)

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

    # Two 16-token runs per stage.
    k_smem = gl.allocate_shared_memory(gl.int8, [2 * STAGES, 16, HEAD], k_desc.layout)
    v_smem = gl.allocate_shared_memory(gl.int8, [2 * STAGES, HEAD, 16], v_desc.layout)
    ks_smem = gl.allocate_shared_memory(gl.float32, [2 * STAGES, 1, 16], ks_desc.layout)
    vs_smem = gl.allocate_shared_memory(gl.float32, [2 * STAGES, 1, 16], vs_desc.layout)
    bars = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(bars.index(s), count=1)
    vh_smem = gl.allocate_shared_memory(gl.float16, [2, HEAD, 16], vh_sl)

    block_table_row = block_table_ptr + seq_idx.to(gl.int64) * block_table_stride
    for p in gl.static_range(STAGES - 1):
        t = tile_lo + p
        if t < tile_hi:
            _issue_tile(k_desc, v_desc, ks_desc, vs_desc, k_smem, v_smem, ks_smem, vs_smem, bars, p, t,
                        _page(block_table_row, t * TILE, seq_len, BLOCK_SIZE),
                        _page(block_table_row, t * TILE + 16, seq_len, BLOCK_SIZE),
                        kv_head, k_page_rows, k_head_rows, v_page_rows, v_head_rows, s_page_rows, s_head_rows,
                        HEAD, BLOCK_SIZE)
    # Cache blocks of the tile issued next, read one iteration early.
    nxt0 = tile_lo + STAGES - 1
    p0 = _page(block_table_row, nxt0 * TILE, seq_len, BLOCK_SIZE)
    p1 = _page(block_table_row, nxt0 * TILE + 16, seq_len, BLOCK_SIZE)

    m_i = gl.full([ROWS], -3.0e38, gl.float32, row_s)
    l_i = gl.zeros([ROWS], gl.float32, row_s)
    acc = gl.zeros([ROWS, HEAD], gl.float32, o_l)
    s_zero = gl.zeros([ROWS, 16], gl.int32, s_l)
    v_ref = 1e-30
    t_col = gl.expand_dims(gl.arange(0, 16, layout=col_s), 0)
    for j in range(tile_lo, tile_hi):
        i = j - tile_lo
        stage = i % STAGES
        mbarrier.wait(bars.index(stage), (i // STAGES) & 1)
        # Every warp is done with the previous tile's stage and V buffers.
        gl.thread_barrier()
        nxt = j + STAGES - 1
        if nxt < tile_hi:
            _issue_tile(k_desc, v_desc, ks_desc, vs_desc, k_smem, v_smem, ks_smem, vs_smem, bars,
                        (i + STAGES - 1) % STAGES, nxt, p0, p1, kv_head, k_page_rows, k_head_rows,
                        v_page_rows, v_head_rows, s_page_rows, s_head_rows, HEAD, BLOCK_SIZE)
        p0 = _page(block_table_row, (nxt + 1) * TILE, seq_len, BLOCK_SIZE)
        p1 = _page(block_table_row, (nxt + 1) * TILE + 16, seq_len, BLOCK_SIZE)
        # Q.K on the tensor cores while the threads widen V.
        k0 = k_smem.index(2 * stage).permute([1, 0])
        k1 = k_smem.index(2 * stage + 1).permute([1, 0])
        s_hi0 = warpgroup_mma(q_hi_smem, k0, s_zero, use_acc=False, is_async=True)
        s_lo0 = warpgroup_mma(q_lo_smem, k0, s_zero, use_acc=False, is_async=True)
        s_hi1 = warpgroup_mma(q_hi_smem, k1, s_zero, use_acc=False, is_async=True)
        s_lo1 = warpgroup_mma(q_lo_smem, k1, s_zero, use_acc=False, is_async=True)
        vh_smem.index(0).store(_widen(v_smem.index(2 * stage).load(V_REG)))
        vh_smem.index(1).store(_widen(v_smem.index(2 * stage + 1).load(V_REG)))
        ks0 = ks_smem.index(2 * stage).load(s_l)
        ks1 = ks_smem.index(2 * stage + 1).load(s_l)
        vs0 = vs_smem.index(2 * stage).load(s_l)
        vs1 = vs_smem.index(2 * stage + 1).load(s_l)
        s_hi0, s_lo0, s_hi1, s_lo1 = warpgroup_mma_wait(0, deps=[s_hi0, s_lo0, s_hi1, s_lo1])
        pos0 = j * TILE + t_col
        pos1 = pos0 + 16
        if j >= full_hi:
            ks0 = gl.where(pos0 < seq_len, ks0, 0.0)
            ks1 = gl.where(pos1 < seq_len, ks1, 0.0)
            vs0 = gl.where(pos0 < seq_len, vs0, 0.0)
            vs1 = gl.where(pos1 < seq_len, vs1, 0.0)
        S0 = _scores(s_hi0, s_lo0, row_qk, ks0)
        S1 = _scores(s_hi1, s_lo1, row_qk, ks1)
        if j >= full_hi:
            S0 = gl.where(pos0 < gl.expand_dims(kv_limit, 1), S0, float("-inf"))
            S1 = gl.where(pos1 < gl.expand_dims(kv_limit, 1), S1, float("-inf"))
        tile_max = gl.maximum(gl.max(S0, axis=1), gl.max(S1, axis=1))
        vmax = gl.maximum(gl.max(gl.max(vs0, axis=1), axis=0), gl.max(gl.max(vs1, axis=1), axis=0))
        new_v_ref = gl.maximum(vmax, v_ref)
        m_new = gl.where(tile_max > m_i + RESCALE_THRESHOLD, tile_max, m_i)
        alpha = gl.exp2(m_i - m_new)
        l_i = l_i * alpha
        acc = acc * gl.expand_dims(gl.convert_layout(alpha * (v_ref / new_v_ref), row_o), 1)
        m_i = m_new
        v_ref = new_v_ref
        shift = gl.expand_dims(m_i - P_LOG2_SCALE, 1)
        P0 = gl.exp2(S0 - shift)
        P1 = gl.exp2(S1 - shift)
        l_i += gl.sum(P0, axis=1) + gl.sum(P1, axis=1)
        inv_ref = 1.0 / v_ref
        P0 = (P0 * (vs0 * inv_ref)).to(gl.float16)
        P1 = (P1 * (vs1 * inv_ref)).to(gl.float16)
        fence_async_shared()
        gl.thread_barrier()
        acc = warpgroup_mma(gl.convert_layout(P0, p_op), vh_smem.index(0).permute([1, 0]), acc, is_async=True)
        acc = warpgroup_mma(gl.convert_layout(P1, p_op), vh_smem.index(1).permute([1, 0]), acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=[acc])
    for s in gl.static_range(STAGES):
        mbarrier.invalidate(bars.index(s))

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
