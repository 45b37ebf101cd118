# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Hopper (sm_90) verify kernel over the INT8 per-token-head KV cache.

Written in Gluon (``triton.experimental.gluon``), which exposes warpgroup
MMA (wgmma), shared memory, mbarriers and warp specialisation explicitly.
One program (one per multiprocessor) holds the query rows of a (request, KV
head, context segment) in FlashAttention-3's orientation, the rows on the M
axis, and runs three warpgroups:

* a producer (the default partition, few registers) copies the K and V
  tiles and their scales by ``cp.async`` into a ring of ``STAGES`` int8
  stages, reading the block table one tile ahead, and widens each tile's
  transposed V to fp16 (once, for every row) into a ring of ``VH_STAGES``
  tiles, the B operand of P.V;
* two consumers hold 64 query rows each, the rows' query rounded to int8
  in shared memory: ``S = Q K^T`` is an int8 wgmma product that reads Q
  and the K tile from there, so K is never widened and a row's scores stay
  in one warp (two lane shuffles per row), then the softmax and
  ``O += P V`` with P from registers.

With up to 64 rows (``TILE_SPLIT``: up to 10 tokens at 6 query heads per KV
head) both consumers hold the same rows and take alternate tiles, each
writing its own partial result.  With 65-128 rows (12-16 tokens) consumer
``c`` holds rows ``64 c .. 64 c + 63`` and both consume every tile, so a
tile is copied and widened once for all rows.  Where the cache's blocks
hold whole 64-token tiles the launcher gives every tile 64 tokens (half the
tiles' fixed cost, and each channel's V run is 64 contiguous bytes rather
than 32; on an H100 at blocks of 1600: 6-14% faster with 65-128 rows, and
with alternate tiles 15-22% faster from L2, 2-6% from its HBM), and each
consumer runs the plain loop (the next tile's Q.K overlapping this tile's
softmax would not fit its registers); 65-128 rows in 32-token tiles overlap
them (``OVERLAP``, FlashAttention-3's intra-warpgroup overlap).

Q.K takes one int8 product of the query rounded per row, within 1/254 of
the row's largest element, except for alternate 32-token tiles
(``QUERY_PAIR``): there the query is split into int8 high and low parts (as
in ``triton_int8_split_kv_attention``), two products into one int32
accumulator (254 times the high part's, then the low part's added), exact
to 1.6e-5.  With 65-128 rows the single product, and a warp rescaling its
rows of the accumulator only where they moved, were together 14-20% faster
on an H200 than the pair, whose second product doubles Q.K's tensor work
and its shared-memory reads; in 64-token tiles the pair's second query
stage would spill the consumers' registers.  The rounding adds less to the
error against exact attention than the cache's own INT8 quantisation.

Stages pass between the partitions through mbarriers: ``ready`` (copied
and widened), ``kfree`` (Q.K done) and ``vhfree`` (P.V done).

Partial results have the layout of ``kernel_int8_split_kv_attention``'s,
``2 * num_segments`` of them per token with ``TILE_SPLIT``, and its reduce
kernel merges them.  Gluon kernels do not run under Triton's interpreter;
there, and on other GPUs, the launcher uses the swapped Triton kernel
instead.
"""

try:
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared,
        mbarrier,
        warpgroup_mma,
        warpgroup_mma_wait,
    )
except ImportError as e:
    # vllm.triton_utils has no placeholder for Gluon: without Triton (or
    # with one older than Gluon) the split-KV launcher catches this and
    # keeps the swapped Triton kernel.
    raise ImportError("this kernel needs Triton's Gluon") from e


@gluon.jit
def _widen(x):
    # 0x6400 | (v ^ 0x80) is the fp16 number 1152 + v.
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
def _opaque(x):
    # x, through a move the compiler cannot see into: what is derived from
    # it is computed where it is used, not carried from an equal value
    # computed earlier.
    return gl.inline_asm_elementwise(
        asm="mov.b32 $0, $1;",
        constraints="=r,r",
        args=[x],
        dtype=gl.int32,
        is_pure=True,
        pack=1,
    )


def _rescale_asm(pack: int) -> tuple[str, str]:
    # PTX and constraints of one _rescale_if_moved block of `pack`
    # accumulator elements: outputs, then the elements, their rows' factors
    # and the warp's flags (the block reads the first).
    lines = [
        "{",
        ".reg .pred moved;",
        f"setp.ne.u32 moved, ${3 * pack}, 0;",
        "@!moved bra.uni KEEP;",
        *(f"mul.f32 ${i}, ${pack + i}, ${2 * pack + i};" for i in range(pack)),
        "bra.uni DONE;",
        "KEEP:",
        *(f"mov.f32 ${i}, ${pack + i};" for i in range(pack)),
        "DONE:",
        "}",
    ]
    constraints = ["=f"] * pack + ["f"] * (2 * pack) + ["r"] * pack
    return "\n".join(lines), ",".join(constraints)


# Each thread holds 32, 64 or 128 accumulator elements (head sizes 64, 128,
# 256); a block takes 32 of them.
_RESCALE_PACK = gl.constexpr(32)
_RESCALE_ASM, _RESCALE_CONSTRAINTS = map(
    gl.constexpr, _rescale_asm(_RESCALE_PACK.value)
)


@gluon.jit
def _warp_moved(factor):
    # 1 in every lane of a warp where some row's factor differs from 1,
    # else 0: a thread's two elements are its accumulator rows r and r + 8.
    return gl.inline_asm_elementwise(
        asm="""{
        .reg .pred p, q;
        setp.ne.f32 p, $2, 0f3F800000;
        setp.ne.or.f32 p, $3, 0f3F800000, p;
        vote.sync.any.pred q, p, 0xffffffff;
        selp.u32 $0, 1, 0, q;
        mov.u32 $1, $0;
        }""",
        constraints="=r,=r,f,f",
        args=[factor],
        dtype=gl.int32,
        is_pure=True,
        pack=2,
    )


@gluon.jit
def _rescale_if_moved(acc, factor):
    # acc * factor (per row), skipped by every warp none of whose rows'
    # factors moved from 1: most tiles move neither a row's softmax
    # reference nor the V-scale reference, and a warp owns its accumulator
    # rows, so the vote needs no other warp (a branch taken by whole warps,
    # which Gluon's scalar control flow cannot express).
    moved = gl.expand_dims(_warp_moved(factor), 1)
    factor = gl.expand_dims(factor, 1)
    acc, factor = gl.broadcast(acc, factor)
    acc, moved = gl.broadcast(acc, moved)
    return gl.inline_asm_elementwise(
        asm=_RESCALE_ASM,
        constraints=_RESCALE_CONSTRAINTS,
        args=[acc, factor, moved],
        dtype=gl.float32,
        is_pure=True,
        pack=_RESCALE_PACK,
    )


@gluon.jit
def _tile_blocks(
    block_table_row,
    tile,
    seq_len,
    TILE_SIZE: gl.constexpr,
    BLOCK_SIZE: gl.constexpr,
    RUNS: gl.constexpr,  # layout of the tile's 16-token runs
):
    # The cache block of each of the tile's 16-token runs (runs never
    # straddle a block: block sizes are multiples of 16); runs past the
    # context read entry 0, a block that exists, and are masked later.
    run_pos = tile * TILE_SIZE + gl.arange(0, TILE_SIZE // 16, layout=RUNS) * 16
    return gl.load(
        block_table_row + run_pos // BLOCK_SIZE, mask=run_pos < seq_len, other=0
    )


@gluon.jit
def _run_bases(
    blocks,
    tile,
    t,
    stride,
    row_bytes: gl.constexpr,
    TILE_SIZE: gl.constexpr,
    BLOCK_SIZE: gl.constexpr,
):
    # Offset of the 16-token run that holds each token t of the tile: its
    # block times `stride` plus its place in the block times `row_bytes`.
    runs = gl.arange(0, TILE_SIZE // 16, layout=blocks.type.layout)
    base = gl.zeros_like(t).to(gl.int64)
    for r in gl.static_range(TILE_SIZE // 16):
        block = gl.sum(gl.where(runs == r, blocks, 0), axis=0).to(gl.int64)
        in_block = (tile * TILE_SIZE + 16 * r) % BLOCK_SIZE
        base = gl.where(t // 16 == r, block * stride + in_block * row_bytes, base)
    return base


@gluon.jit
def _issue_tile(
    k_smem,
    v_smem,
    ks_smem,
    vs_smem,
    stage,
    tile,
    blocks,  # _tile_blocks(tile)
    k_head_ptr,
    v_head_ptr,
    ks_head_ptr,
    vs_head_ptr,
    k_offs,  # (TILE_SIZE, HEAD_SIZE) offsets of K bytes within their run
    v_offs,  # (HEAD_SIZE, TILE_SIZE) offsets of V^T bytes within their run
    t_k,  # the tile's tokens in the layouts of k_offs, v_offs, the scales
    t_v,
    t_s,
    stride_page,
    stride_scale_page,
    HEAD_SIZE: gl.constexpr,
    TILE_SIZE: gl.constexpr,
    BLOCK_SIZE: gl.constexpr,
):
    # A run's source is its block's offset plus offsets that are the same
    # for every tile, so the threads compute one 64-bit base per run rather
    # than an address per 16-byte chunk.  Nothing is masked: slots past the
    # context hold cache bytes (finite int8) and scales that the consumers
    # replace by zero.
    k_base = _run_bases(
        blocks, tile, t_k, stride_page, HEAD_SIZE, TILE_SIZE, BLOCK_SIZE
    )
    k_ptrs = k_head_ptr + gl.expand_dims(k_base, 1) + k_offs
    k_ptrs = gl.max_contiguous(gl.multiple_of(k_ptrs, [1, 16]), [1, 16])
    async_copy.async_copy_global_to_shared(k_smem.index(stage), k_ptrs)
    v_base = _run_bases(blocks, tile, t_v, stride_page, 1, TILE_SIZE, BLOCK_SIZE)
    v_ptrs = v_head_ptr + gl.expand_dims(v_base, 0) + v_offs
    v_ptrs = gl.max_contiguous(gl.multiple_of(v_ptrs, [1, 16]), [1, 16])
    async_copy.async_copy_global_to_shared(v_smem.index(stage), v_ptrs)
    s_off = _run_bases(
        blocks, tile, t_s, stride_scale_page, 1, TILE_SIZE, BLOCK_SIZE
    ) + (t_s % 16)
    async_copy.async_copy_global_to_shared(ks_smem.index(stage), ks_head_ptr + s_off)
    async_copy.async_copy_global_to_shared(vs_smem.index(stage), vs_head_ptr + s_off)


# Registers per consumer thread; the producer gets what is left of the
# 168 x 384 the launcher's maxnreg allows (56).
CONSUMER_REGISTERS = gl.constexpr(224)
# maxnreg for the program's 12 warps: the register file (64K) / 384 threads,
# rounded down to the allocation granule.
MAX_REGISTERS = 168


@gluon.jit
def _producer(
    k_smem,
    v_smem,
    ks_smem,
    vs_smem,
    vh_smem,
    ready,
    kfree,
    vhfree,
    block_table_row,
    k_head_ptr,
    v_head_ptr,
    ks_head_ptr,
    vs_head_ptr,
    seq_len,
    tile_lo,
    n_tiles,
    stride_page,
    stride_scale_page,
    HEAD_SIZE: gl.constexpr,
    TILE_SIZE: gl.constexpr,
    BLOCK_SIZE: gl.constexpr,
    STAGES: gl.constexpr,
    VH_STAGES: gl.constexpr,
    AHEAD: gl.constexpr,
):
    NUM_WARPS: gl.constexpr = gl.num_warps()
    # 16 bytes per thread along the contiguous dimension.
    ROW_LOAD: gl.constexpr = gl.BlockedLayout(
        [1, 16], [32 * 16 // HEAD_SIZE, HEAD_SIZE // 16], [NUM_WARPS, 1], [1, 0]
    )
    V_LOAD: gl.constexpr = gl.BlockedLayout(
        [1, 16], [32 * 16 // TILE_SIZE, TILE_SIZE // 16], [NUM_WARPS, 1], [1, 0]
    )
    S_LOAD: gl.constexpr = gl.BlockedLayout([1], [32], [NUM_WARPS], [0])
    # Every thread holds the tile's run blocks.
    RUNS: gl.constexpr = gl.BlockedLayout([TILE_SIZE // 16], [32], [NUM_WARPS], [0])
    # Offsets of K and V^T bytes within their 16-token run, the same for
    # every tile.
    t_k = gl.arange(0, TILE_SIZE, layout=gl.SliceLayout(1, ROW_LOAD))
    d_k = gl.arange(0, HEAD_SIZE, layout=gl.SliceLayout(0, ROW_LOAD))
    k_offs = gl.expand_dims((t_k % 16) * HEAD_SIZE, 1) + gl.expand_dims(d_k, 0)
    t_v = gl.arange(0, TILE_SIZE, layout=gl.SliceLayout(0, V_LOAD))
    d_v = gl.arange(0, HEAD_SIZE, layout=gl.SliceLayout(1, V_LOAD))
    v_offs = gl.expand_dims(d_v * BLOCK_SIZE, 1) + gl.expand_dims(t_v % 16, 0)
    t_s = gl.arange(0, TILE_SIZE, layout=S_LOAD)

    # The copies run AHEAD tiles ahead of the widening: iteration ``nxt``
    # issues tile ``nxt``'s copies (int8 stage s holds tile i once the
    # consumers are done with Q.K of tile i - STAGES: kfree; this partition
    # widened its V before, in program order) and widens tile
    # ``nxt - AHEAD``.  Block-table entries are read one iteration early.
    blocks = _tile_blocks(
        block_table_row, tile_lo, seq_len, TILE_SIZE, BLOCK_SIZE, RUNS
    )
    for nxt in range(n_tiles + AHEAD):
        if nxt < n_tiles:
            mbarrier.wait(kfree.index(nxt % STAGES), ((nxt // STAGES) & 1) ^ 1)
            _issue_tile(
                k_smem,
                v_smem,
                ks_smem,
                vs_smem,
                nxt % STAGES,
                tile_lo + nxt,
                blocks,
                k_head_ptr,
                v_head_ptr,
                ks_head_ptr,
                vs_head_ptr,
                k_offs,
                v_offs,
                t_k,
                t_v,
                t_s,
                stride_page,
                stride_scale_page,
                HEAD_SIZE,
                TILE_SIZE,
                BLOCK_SIZE,
            )
        async_copy.commit_group()
        blocks = _tile_blocks(
            block_table_row, tile_lo + nxt + 1, seq_len, TILE_SIZE, BLOCK_SIZE, RUNS
        )
        i = nxt - AHEAD
        if i >= 0:
            # Tile i has arrived (every thread's copies: the barrier).
            async_copy.wait_group(AHEAD)
            gl.thread_barrier()
            v8 = v_smem.index(i % STAGES).load(V_LOAD)
            h = i % VH_STAGES
            mbarrier.wait(vhfree.index(h), ((i // VH_STAGES) & 1) ^ 1)
            vh_smem.index(h).store(_widen(v8))
            # The copied K and the widened V are visible to the tensor cores.
            fence_async_shared()
            mbarrier.arrive(ready.index(i % STAGES))
    async_copy.wait_group(0)


@gluon.jit
def _tile_qk(q_hi_smem, q_lo_smem, k_t, ks, vs, s_zero, QUERY_PAIR: gl.constexpr):
    # With QUERY_PAIR, one int32 accumulator: 254 * (q_hi . K), then
    # + q_lo . K.  Half the score registers of two products, and 7-10%
    # faster tiles on an H200 with up to 64 rows, although the products then
    # run one after the other; |254 * S_hi + S_lo| < 2**31, so it is exact.
    # Else q_hi . K alone.  The tile's K and V scales (ks, vs) are read
    # while the first product runs.
    col_s: gl.constexpr = gl.SliceLayout(0, s_zero.type.layout)
    s_int = warpgroup_mma(q_hi_smem, k_t, s_zero, use_acc=False, is_async=True)
    k_scale = ks.load(col_s)
    v_scale = vs.load(col_s)
    s_int = warpgroup_mma_wait(0, deps=[s_int])
    if QUERY_PAIR:
        s_int = warpgroup_mma(q_lo_smem, k_t, s_int * 254, use_acc=True, is_async=True)
        s_int = warpgroup_mma_wait(0, deps=[s_int])
    return s_int, k_scale, v_scale


@gluon.jit
def _softmax_tile(
    s_int,
    k_scale,
    v_scale,
    j,
    m_i,
    l_i,
    acc,
    v_ref,
    row_qk_scale,
    t_col,
    seq_len,
    q_pos,
    kv_limit,
    full_lo,
    full_hi,
    TILE_SIZE: gl.constexpr,
    P_LOG2_SCALE: gl.constexpr,
    RESCALE_THRESHOLD: gl.constexpr,
    SLIDING_WINDOW: gl.constexpr,
    SKIP_UNMOVED: gl.constexpr,
):
    # Tile j's int32 scores to P (fp16, the A operand of P.V), moving the
    # running state along.  m_i: each row's softmax reference (log2 units;
    # a finite sentinel until the row sees a key); l_i: the sum of P; acc:
    # the sum of P * v_scale * V in units of v_ref, the largest V scale seen
    # so far, so that the fp16 P operand never limits the range.  A row's
    # reference moves only when its maximum exceeds it by more than
    # RESCALE_THRESHOLD.
    row_o: gl.constexpr = gl.SliceLayout(1, acc.type.layout)
    p_layout: gl.constexpr = gl.DotOperandLayout(
        operand_index=0, parent=acc.type.layout, k_width=2
    )
    pos = j * TILE_SIZE + t_col
    masked = (j >= full_hi) | (j < full_lo)
    if masked:
        # Slots past the context hold whatever the cache holds there (the
        # copies are not masked).
        k_scale = gl.where(pos < seq_len, k_scale, 0.0)
        v_scale = gl.where(pos < seq_len, v_scale, 0.0)
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
    if SKIP_UNMOVED:
        # Factors exactly 1 where nothing moved (v_ref * rcp(v_ref) need not
        # be), so that warps can skip the 128 multiplies per thread.
        v_ratio = gl.where(new_v_ref > v_ref, v_ref / new_v_ref, 1.0)
        alpha = gl.where(m_new > m_i, alpha, 1.0)
        acc = _rescale_if_moved(acc, gl.convert_layout(alpha * v_ratio, row_o))
    else:
        acc = acc * gl.expand_dims(
            gl.convert_layout(alpha * (v_ref / new_v_ref), row_o), 1
        )
    # P <= 2**(P_LOG2_SCALE + RESCALE_THRESHOLD).
    P = gl.exp2(S - gl.expand_dims(m_new - P_LOG2_SCALE, 1))
    l_i += gl.sum(P, axis=1)
    P_v = gl.convert_layout(
        (P * gl.expand_dims(v_scale / new_v_ref, 0)).to(gl.float16), p_layout
    )
    return P_v, acc, m_new, l_i, new_v_ref


@gluon.jit
def _consumer(
    q_hi_smem,
    q_lo_smem,
    k_smem,
    ks_smem,
    vs_smem,
    vh_smem,
    ready,
    kfree,
    vhfree,
    out_ptr,
    segm_out_ptr,
    segm_max_ptr,
    segm_expsum_ptr,
    q_ptr,
    qk_scale,
    q_start,
    q_len,
    seq_len,
    kv_head_idx,
    row0,
    segm_idx,
    num_segments,
    tile_lo,
    n_tiles,
    full_lo,
    full_hi,
    causal,
    num_query_heads: gl.constexpr,
    q_stride_0,
    q_stride_1,
    out_stride_0,
    out_stride_1,
    NUM_QUERIES_PER_KV: gl.constexpr,
    HEAD_SIZE: gl.constexpr,
    TILE_SIZE: gl.constexpr,
    STAGES: gl.constexpr,
    VH_STAGES: gl.constexpr,
    OVERLAP: gl.constexpr,
    P_LOG2_SCALE: gl.constexpr,
    RESCALE_THRESHOLD: gl.constexpr,
    SLIDING_WINDOW: gl.constexpr,
    TILE_SPLIT: gl.constexpr,
    QUERY_PAIR: gl.constexpr,
    C: gl.constexpr,  # which consumer (0 or 1)
):
    NUM_WARPS: gl.constexpr = gl.num_warps()
    ROWS: gl.constexpr = 16 * NUM_WARPS
    # Scores (int32) and output (fp32) in wgmma's accumulator layouts; P is
    # the register A operand of the P.V product.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, TILE_SIZE, 32]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[NUM_WARPS, 1], instr_shape=[16, HEAD_SIZE, 16]
    )
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    col_s: gl.constexpr = gl.SliceLayout(0, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    col_o: gl.constexpr = gl.SliceLayout(0, o_layout)
    ROW_LOAD: gl.constexpr = gl.BlockedLayout(
        [1, 16], [32 * 16 // HEAD_SIZE, HEAD_SIZE // 16], [NUM_WARPS, 1], [1, 0]
    )
    if TILE_SPLIT:
        my_row0 = row0
        my_tiles = (n_tiles - C + 1) // 2
    else:
        my_row0 = row0 + C * ROWS
        my_tiles = n_tiles

    # Row r is query token r // G, query head kv_head_idx * G + r % G
    # (G = NUM_QUERIES_PER_KV).  With s = max|Q| / 127 per row, Q / s is
    # q_hi + q_lo / 254 with QUERY_PAIR (254 * (q_hi . K) + q_lo . K is
    # exact in int32), else q_hi rounded alone (see the module's docstring).
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
    q_hi_smem.store(q_hi.to(gl.int8))
    row_qk = qk_scale
    if QUERY_PAIR:
        q_lo_smem.store(gl.floor((Q - q_hi) * 254.0 + 0.5).to(gl.int8))
        row_qk = qk_scale / 254.0
    fence_async_shared()
    gl.thread_barrier()
    row_qk_scale = gl.convert_layout(q_scale * row_qk, row_s)
    # The query tokens are the request's last q_len positions.
    q_pos = (
        seq_len
        - q_len
        + (my_row0 + gl.arange(0, ROWS, layout=row_s)) // NUM_QUERIES_PER_KV
    )
    kv_limit = gl.where(causal != 0, q_pos + 1, seq_len)

    # The running softmax state (see _softmax_tile).
    m_i = gl.full([ROWS], -3.0e38, gl.float32, row_s)
    l_i = gl.zeros([ROWS], gl.float32, row_s)
    acc = gl.zeros([ROWS, HEAD_SIZE], gl.float32, o_layout)
    s_zero = gl.zeros([ROWS, TILE_SIZE], gl.int32, s_layout)
    v_ref = 1e-30
    t_col = gl.arange(0, TILE_SIZE, layout=col_s)
    i = C if TILE_SPLIT else 0
    if not OVERLAP:
        for _ in range(my_tiles):
            s = i % STAGES
            mbarrier.wait(ready.index(s), (i // STAGES) & 1)
            s_int, k_scale, v_scale = _tile_qk(
                q_hi_smem,
                q_lo_smem,
                k_smem.index(s).permute([1, 0]),
                ks_smem.index(s),
                vs_smem.index(s),
                s_zero,
                QUERY_PAIR,
            )
            mbarrier.arrive(kfree.index(s))
            P_v, acc, m_i, l_i, v_ref = _softmax_tile(
                s_int,
                k_scale,
                v_scale,
                tile_lo + i,
                m_i,
                l_i,
                acc,
                v_ref,
                row_qk_scale,
                t_col,
                seq_len,
                q_pos,
                kv_limit,
                full_lo,
                full_hi,
                TILE_SIZE,
                P_LOG2_SCALE,
                RESCALE_THRESHOLD,
                SLIDING_WINDOW,
                True,
            )
            h = i % VH_STAGES
            acc = warpgroup_mma(
                P_v, vh_smem.index(h).permute([1, 0]), acc, is_async=True
            )
            acc = warpgroup_mma_wait(0, deps=[acc])
            mbarrier.arrive(vhfree.index(h))
            i += 2 if TILE_SPLIT else 1
    else:
        # OVERLAP (the launcher's choice, for 32-token tiles without a
        # window): both consumers take every tile, so the tensor cores idle
        # while each computes its softmax unless it overlaps its own
        # products (FlashAttention-3's intra-warpgroup overlap): the next
        # tile's Q.K runs during this tile's softmax and is waited for beside
        # this tile's P.V (5-7% faster on an H200 at 12-16 tokens; slower
        # with alternate tiles; sliding-window layers and 64-token tiles keep
        # the loop above, where their masks and scores need no spill), and
        # warps skip the rescale of rows that did not move (2-5% faster here
        # with one Q.K product).  The consumer then waits for its next tile
        # while its P.V still reads this tile's widened V, so the producer
        # needs a third widened tile.  After the last tile the "next" product
        # reads a stage that may be refilling; its result is not used.
        gl.static_assert(not TILE_SPLIT and SLIDING_WINDOW == 0)
        gl.static_assert(TILE_SIZE == 32 and VH_STAGES > 2)
        h = 0
        s_int = s_zero
        k_scale = gl.zeros([TILE_SIZE], gl.float32, col_s)
        v_scale = gl.zeros([TILE_SIZE], gl.float32, col_s)
        if my_tiles > 0:
            mbarrier.wait(ready.index(0), 0)
            s_int, k_scale, v_scale = _tile_qk(
                q_hi_smem,
                q_lo_smem,
                k_smem.index(0).permute([1, 0]),
                ks_smem.index(0),
                vs_smem.index(0),
                s_zero,
                QUERY_PAIR,
            )
            mbarrier.arrive(kfree.index(0))
        for _ in range(my_tiles):
            has_next = i + 1 < my_tiles
            s_n = (i + 1) % STAGES
            mbarrier.wait(ready.index(s_n), ((i + 1) // STAGES) & 1, pred=has_next)
            k_n = k_smem.index(s_n).permute([1, 0])
            s_nxt = warpgroup_mma(q_hi_smem, k_n, s_zero, use_acc=False, is_async=True)
            P_v, acc, m_i, l_i, v_ref = _softmax_tile(
                s_int,
                k_scale,
                v_scale,
                tile_lo + i,
                m_i,
                l_i,
                acc,
                v_ref,
                row_qk_scale,
                t_col,
                seq_len,
                q_pos,
                kv_limit,
                full_lo,
                full_hi,
                TILE_SIZE,
                P_LOG2_SCALE,
                RESCALE_THRESHOLD,
                SLIDING_WINDOW,
                True,
            )
            k_scale = ks_smem.index(s_n).load(col_s)
            v_scale = vs_smem.index(s_n).load(col_s)
            acc = warpgroup_mma(
                P_v, vh_smem.index(h).permute([1, 0]), acc, is_async=True
            )
            acc, s_int = warpgroup_mma_wait(0, deps=[acc, s_nxt])
            mbarrier.arrive(vhfree.index(h))
            mbarrier.arrive(kfree.index(s_n), pred=has_next)
            # The widened tile's index, counted without a division by 3.
            h = gl.where(h == VH_STAGES - 1, 0, h + 1)
            i += 1

    # The rows' query tokens equal q_pos's, but carrying them across the KV
    # loop at the consumers' register cap spilled them: recompute.
    rows = my_row0 + _opaque(gl.arange(0, ROWS, layout=row_o))
    q_tok = rows // NUM_QUERIES_PER_KV
    q_head = kv_head_idx * NUM_QUERIES_PER_KV + rows % NUM_QUERIES_PER_KV
    row_mask = q_tok < q_len
    token_idx = (q_start + q_tok).to(gl.int64)
    l_o = gl.convert_layout(l_i, row_o)
    offs_d = gl.arange(0, HEAD_SIZE, layout=col_o)
    acc = acc * v_ref
    if TILE_SPLIT:
        num_partials = 2 * num_segments
        part = 2 * segm_idx + C
    else:
        num_partials = num_segments
        part = segm_idx
    if num_partials == 1:
        inv_l = gl.where(l_o > 0.0, 1.0 / l_o, 0.0)
        gl.store(
            out_ptr
            + gl.expand_dims(token_idx * out_stride_0 + q_head * out_stride_1, 1)
            + gl.expand_dims(offs_d, 0),
            (acc * gl.expand_dims(inv_l, 1)).to(out_ptr.dtype.element_ty),
            mask=gl.expand_dims(row_mask, 1),
        )
    else:
        # Unnormalised partials; rows that saw no key store (-inf, 0, 0).
        partial = (token_idx * num_partials + part) * num_query_heads + q_head
        gl.store(
            segm_out_ptr
            + gl.expand_dims(partial * HEAD_SIZE, 1)
            + gl.expand_dims(offs_d, 0),
            acc,
            mask=gl.expand_dims(row_mask, 1),
        )
        m_o = gl.convert_layout(m_i, row_o)
        gl.store(
            segm_max_ptr + partial,
            gl.where(l_o > 0.0, m_o, float("-inf")),
            mask=row_mask,
        )
        gl.store(segm_expsum_ptr + partial, l_o, mask=row_mask)


@gluon.jit(do_not_specialize=["num_segments", "block_table_stride", "causal"])
def kernel_int8_split_kv_verify_wgmma(
    out_ptr,  # [num_tokens, num_query_heads, HEAD_SIZE]
    segm_out_ptr,  # [max_partials, num_query_heads, HEAD_SIZE] float32
    segm_max_ptr,  # [max_partials, num_query_heads] float32
    segm_expsum_ptr,  # [max_partials, num_query_heads] float32
    q_ptr,  # [num_tokens, num_query_heads, HEAD_SIZE]
    k_cache_ptr,  # int8 K rows (planar layout)
    v_cache_ptr,  # int8 V, transposed per block (planar layout)
    k_scale_ptr,  # fp32 K scales
    v_scale_ptr,  # fp32 V scales
    block_table_ptr,  # [num_seqs, max_num_blocks_per_seq] int32
    seq_lens_ptr,  # [num_seqs] int32
    query_start_loc_ptr,  # [num_seqs + 1] int32
    qk_scale,  # softmax scale * log2(e)
    num_segments,  # context segments per (request, KV head)
    causal,  # 1: query token i sees keys up to its own position; 0: all
    num_query_heads: gl.constexpr,
    q_stride_0: gl.int64,
    q_stride_1: gl.int64,
    out_stride_0: gl.int64,
    out_stride_1: gl.int64,
    block_table_stride: gl.int64,
    stride_page: gl.int64,  # bytes between cache blocks (K and V views)
    stride_head: gl.int64,  # bytes between KV heads
    stride_scale_page: gl.int64,  # fp32 words between cache blocks
    stride_scale_head: gl.int64,  # fp32 words between KV heads
    NUM_QUERIES_PER_KV: gl.constexpr,
    ROW_SPLITS: gl.constexpr,  # programs that share one (request, KV head)
    HEAD_SIZE: gl.constexpr,
    BLOCK_SIZE: gl.constexpr,
    TILE_SIZE: gl.constexpr,
    STAGES: gl.constexpr,  # int8 stages (K, V, scales)
    VH_STAGES: gl.constexpr,  # widened V tiles
    AHEAD: gl.constexpr,  # tiles copied ahead of the widening
    OVERLAP: gl.constexpr,  # consumers overlap Q.K with the softmax
    TILE_SPLIT: gl.constexpr,  # 64 rows, alternate tiles (else 128 rows)
    QUERY_PAIR: gl.constexpr,  # the query's int8 high and low parts
    P_LOG2_SCALE: gl.constexpr,  # P and l carry a factor 2**P_LOG2_SCALE
    RESCALE_THRESHOLD: gl.constexpr,
    SLIDING_WINDOW: gl.constexpr,  # keys per query position (0: all)
):
    # Each consumer warpgroup holds 64 rows.
    ROWS: gl.constexpr = 64
    if TILE_SPLIT:
        PROGRAM_ROWS: gl.constexpr = ROWS
        CONSUMERS_PER_TILE: gl.constexpr = 1
    else:
        PROGRAM_ROWS: gl.constexpr = 2 * ROWS
        CONSUMERS_PER_TILE: gl.constexpr = 2
    kv_head_idx = gl.program_id(0) // ROW_SPLITS
    row0 = gl.program_id(0) % ROW_SPLITS * PROGRAM_ROWS
    seq_idx = gl.program_id(1)
    segm_idx = gl.program_id(2)
    q_start = gl.load(query_start_loc_ptr + seq_idx)
    q_len = gl.load(query_start_loc_ptr + seq_idx + 1) - q_start
    seq_len = gl.load(seq_lens_ptr + seq_idx)

    # This segment's tiles (as _segment_tiles of the Triton kernels): the
    # segments share the tiles some row sees; tiles outside
    # [full_lo, full_hi) are masked.
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
    # Keys every query row sees end at the first query token (causal), at
    # the context's end, or where the window of the first token ends.
    seen = gl.where(causal != 0, seq_len - q_len + 1, seq_len)
    if SLIDING_WINDOW > 0:
        seen = gl.minimum(seen, seq_len - q_len + SLIDING_WINDOW)
    full_hi = gl.minimum(tile_hi, seen // TILE_SIZE)
    # Programs past the request's rows (or its context) read no tiles; they
    # still store their rows' partials (all masked).
    n_tiles = gl.maximum(tile_hi - tile_lo, 0)
    n_tiles = gl.where(row0 < q_len * NUM_QUERIES_PER_KV, n_tiles, 0)

    q_shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
        [ROWS, HEAD_SIZE], gl.int8
    )
    k_shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
        [TILE_SIZE, HEAD_SIZE], gl.int8
    )
    v_shared: gl.constexpr = gl.SwizzledSharedLayout(16, 1, 1, [1, 0])
    vh_shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for(
        [HEAD_SIZE, TILE_SIZE], gl.float16
    )
    s_shared: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    bar_layout: gl.constexpr = mbarrier.MBarrierLayout()
    q_hi0 = gl.allocate_shared_memory(gl.int8, [ROWS, HEAD_SIZE], q_shared)
    q_lo0 = gl.allocate_shared_memory(gl.int8, [ROWS, HEAD_SIZE], q_shared)
    q_hi1 = gl.allocate_shared_memory(gl.int8, [ROWS, HEAD_SIZE], q_shared)
    q_lo1 = gl.allocate_shared_memory(gl.int8, [ROWS, HEAD_SIZE], q_shared)
    k_smem = gl.allocate_shared_memory(
        gl.int8, [STAGES, TILE_SIZE, HEAD_SIZE], k_shared
    )
    v_smem = gl.allocate_shared_memory(
        gl.int8, [STAGES, HEAD_SIZE, TILE_SIZE], v_shared
    )
    ks_smem = gl.allocate_shared_memory(gl.float32, [STAGES, TILE_SIZE], s_shared)
    vs_smem = gl.allocate_shared_memory(gl.float32, [STAGES, TILE_SIZE], s_shared)
    vh_smem = gl.allocate_shared_memory(
        gl.float16, [VH_STAGES, HEAD_SIZE, TILE_SIZE], vh_shared
    )
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    kfree = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    vhfree = gl.allocate_shared_memory(gl.int64, [VH_STAGES, 1], bar_layout)
    for s in gl.static_range(STAGES):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(kfree.index(s), count=CONSUMERS_PER_TILE)
    for h in gl.static_range(VH_STAGES):
        mbarrier.init(vhfree.index(h), count=CONSUMERS_PER_TILE)

    block_table_row = block_table_ptr + seq_idx.to(gl.int64) * block_table_stride
    k_head_ptr = k_cache_ptr + kv_head_idx * stride_head
    v_head_ptr = v_cache_ptr + kv_head_idx * stride_head
    ks_head_ptr = k_scale_ptr + kv_head_idx * stride_scale_head
    vs_head_ptr = v_scale_ptr + kv_head_idx * stride_scale_head
    # (The argument tuples are written out: a tuple held in a variable
    # would lose its constexprs.)
    gl.warp_specialize(
        [
            (
                _producer,
                (
                    k_smem,
                    v_smem,
                    ks_smem,
                    vs_smem,
                    vh_smem,
                    ready,
                    kfree,
                    vhfree,
                    block_table_row,
                    k_head_ptr,
                    v_head_ptr,
                    ks_head_ptr,
                    vs_head_ptr,
                    seq_len,
                    tile_lo,
                    n_tiles,
                    stride_page,
                    stride_scale_page,
                    HEAD_SIZE,
                    TILE_SIZE,
                    BLOCK_SIZE,
                    STAGES,
                    VH_STAGES,
                    AHEAD,
                ),
            ),
            (
                _consumer,
                (
                    q_hi0,
                    q_lo0,
                    k_smem,
                    ks_smem,
                    vs_smem,
                    vh_smem,
                    ready,
                    kfree,
                    vhfree,
                    out_ptr,
                    segm_out_ptr,
                    segm_max_ptr,
                    segm_expsum_ptr,
                    q_ptr,
                    qk_scale,
                    q_start,
                    q_len,
                    seq_len,
                    kv_head_idx,
                    row0,
                    segm_idx,
                    num_segments,
                    tile_lo,
                    n_tiles,
                    full_lo,
                    full_hi,
                    causal,
                    num_query_heads,
                    q_stride_0,
                    q_stride_1,
                    out_stride_0,
                    out_stride_1,
                    NUM_QUERIES_PER_KV,
                    HEAD_SIZE,
                    TILE_SIZE,
                    STAGES,
                    VH_STAGES,
                    OVERLAP,
                    P_LOG2_SCALE,
                    RESCALE_THRESHOLD,
                    SLIDING_WINDOW,
                    TILE_SPLIT,
                    QUERY_PAIR,
                    0,
                ),
            ),
            (
                _consumer,
                (
                    q_hi1,
                    q_lo1,
                    k_smem,
                    ks_smem,
                    vs_smem,
                    vh_smem,
                    ready,
                    kfree,
                    vhfree,
                    out_ptr,
                    segm_out_ptr,
                    segm_max_ptr,
                    segm_expsum_ptr,
                    q_ptr,
                    qk_scale,
                    q_start,
                    q_len,
                    seq_len,
                    kv_head_idx,
                    row0,
                    segm_idx,
                    num_segments,
                    tile_lo,
                    n_tiles,
                    full_lo,
                    full_hi,
                    causal,
                    num_query_heads,
                    q_stride_0,
                    q_stride_1,
                    out_stride_0,
                    out_stride_1,
                    NUM_QUERIES_PER_KV,
                    HEAD_SIZE,
                    TILE_SIZE,
                    STAGES,
                    VH_STAGES,
                    OVERLAP,
                    P_LOG2_SCALE,
                    RESCALE_THRESHOLD,
                    SLIDING_WINDOW,
                    TILE_SPLIT,
                    QUERY_PAIR,
                    1,
                ),
            ),
        ],
        [4, 4],
        [CONSUMER_REGISTERS, CONSUMER_REGISTERS],
    )
