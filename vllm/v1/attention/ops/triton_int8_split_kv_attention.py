# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Split-KV attention over the INT8 per-token-head KV cache.

Decode and speculative verify (1..16 query tokens per request) are
memory-bound: each step streams the whole context once.  The kernel here

* reads the cache in place (a row is ``head_size`` int8 values followed by
  their fp32 scale), a KV tile at a time from one base address, so every
  offset inside a tile is a compile-time constant and the loads are as wide
  as the rows' alignment allows; takes each row's scale from the row itself
  and dequantises V in registers; no converted copy of the cache is ever
  written,
* packs all query heads that share a KV head and all query tokens of a
  request into the rows of one tile, so K/V are read once per KV head,
* splits the context into segments processed by separate programs and
  merges them with a log-sum-exp reduction.

The launch geometry (KV tile, number of segments, warps) is chosen in one
place, :func:`select_int8_split_kv_geometry`.
"""

from dataclasses import dataclass

import torch

import vllm.envs as envs
from vllm.logger import init_logger
from vllm.triton_utils import tl, triton

logger = init_logger(__name__)

# Largest number of query tokens per request the kernel handles; longer
# queries (prefill) stay on the unified attention kernel.
MAX_QUERY_LEN = 16
SUPPORTED_HEAD_SIZES = (64, 128, 256)
SUPPORTED_QUERY_DTYPES = (torch.float16, torch.bfloat16)
# (token, segment) partial-result slots the metadata builder allocates.  At
# 24 query heads x 256 dims this is 24 MiB; batches with more tokens get
# fewer segments (they fill the GPU with requests instead).
MAX_PARTIALS = 1024

# P is scaled by 2**P_LOG2_SCALE before P * v_scale is rounded to the fp16
# (or bf16) dot operand; L carries the same factor, so it cancels.  fp16
# keeps full precision only down to 6.1e-5: without the factor, V rows with
# max |v| below ~0.01 (v_scale < 8e-5) lose precision (3.7% output error at
# max |v| ~ 4e-4 in the tests).  With it, any fp16 V (|v| <= 65504, so
# v_scale <= 516) still gives P * v_scale <= 64 * 516 < 65504; bf16 has
# fp32's range.
P_LOG2_SCALE = 6.0


@dataclass(frozen=True)
class Int8SplitKVGeometry:
    tile_size: int
    num_segments: int
    num_warps: int
    num_stages: int


# (largest query length, geometry) rows, checked in order; measured at 128K
# context, batch 1, with benchmarks/kernels/benchmark_int8_kv_attention.py.
GEOMETRY_TABLE: tuple[tuple[int, Int8SplitKVGeometry], ...] = (
    (1, Int8SplitKVGeometry(32, 64, 4, 3)),
    (8, Int8SplitKVGeometry(32, 64, 4, 2)),
    (MAX_QUERY_LEN, Int8SplitKVGeometry(32, 32, 8, 2)),
)


def select_int8_split_kv_geometry(
    max_query_len: int,
    max_seq_len: int,
    num_seqs: int,
    num_tokens: int,
    max_partials: int,
) -> Int8SplitKVGeometry:
    """Choose the launch geometry for one split-KV launch.

    Decode wants many segments (the grid must fill the GPU with only
    ``num_seqs * num_kv_heads`` (request, KV head) pairs); verify packs up to
    16x more query rows per tile, so it amortises each K/V load over more
    rows.  The base geometry comes from ``GEOMETRY_TABLE`` by query length;
    short contexts, large batches and the scratch size then cut the number
    of segments.

    Only host integers are consulted, so the choice is fixed for a captured
    CUDA graph (captured with ``max_seq_len == max_model_len``).

    Args:
        max_query_len: Longest query of the batch (1..16).
        max_seq_len: Longest context (including the query) of the batch.
        num_seqs: Number of requests.
        num_tokens: Number of query tokens (rows of ``q``).
        max_partials: (token, segment) slots in the scratch buffers.
    """
    base = next(g for q, g in GEOMETRY_TABLE if max_query_len <= q)
    tile_size, num_segments = base.tile_size, base.num_segments
    # Short contexts: keep at least a few tiles per segment.
    while num_segments > 1 and num_segments * tile_size * 4 > max_seq_len:
        num_segments //= 2
    # Larger batches fill the GPU with requests; keep the grid ~constant.
    while num_segments > 1 and num_seqs * num_segments > 4 * 64:
        num_segments //= 2
    # Stay within the scratch buffers (num_segments is a power of two).
    while num_segments > 1 and num_tokens * num_segments > max_partials:
        num_segments //= 2
    return Int8SplitKVGeometry(tile_size, num_segments, base.num_warps, base.num_stages)


def int8_split_kv_layer_supported(
    head_size: int,
    *,
    sliding_window: int,
    use_alibi: bool,
    softcap: float,
    use_sinks: bool,
    chunk_lookback: int,
) -> bool:
    """Whether an attention layer's configuration fits the split-KV kernel.

    Plain causal attention qualifies; sliding window, ALiBi, soft-capping,
    sinks and chunked attention keep the unified kernel.  Fixed per layer,
    so callers decide it once; :func:`int8_split_kv_step_supported` covers
    what changes from step to step.
    """
    return (
        head_size in SUPPORTED_HEAD_SIZES
        and sliding_window <= 0
        and not use_alibi
        and softcap == 0
        and not use_sinks
        and chunk_lookback < 0
    )


def int8_split_kv_step_supported(
    query_dtype: torch.dtype,
    max_query_len: int,
    *,
    causal: bool | torch.Tensor,
    use_mm_prefix: bool,
    use_rswa: bool,
    use_output_quant: bool,
) -> bool:
    """Whether a step of a qualifying layer can run on the split-KV kernel.

    Decode/verify steps (at most ``MAX_QUERY_LEN`` query tokens per request)
    of causal attention qualify; multimodal prefixes, R-SWA and fused output
    quantization keep the unified kernel.
    """
    return (
        max_query_len <= MAX_QUERY_LEN
        and query_dtype in SUPPORTED_QUERY_DTYPES
        and causal is True
        and not use_mm_prefix
        and not use_rswa
        and not use_output_quant
    )


@triton.jit
def _attend_tile(
    M,
    L,
    acc,
    Q,
    row_qk_scale,
    kv_limit,
    K,  # (HEAD_SIZE, TILE_SIZE) int8
    V,  # (TILE_SIZE, HEAD_SIZE) int8
    k_scale,  # (TILE_SIZE,) fp32 bits as int32
    v_scale,  # (TILE_SIZE,) fp32 bits as int32
    kv_pos,
    dot_dtype: tl.constexpr,
    MASKED: tl.constexpr,
    INTEGER_QK: tl.constexpr,
    P_LOG2_SCALE: tl.constexpr,
):
    """One online-softmax step over a KV tile."""
    k_scale = k_scale.to(tl.float32, bitcast=True)
    v_scale = v_scale.to(tl.float32, bitcast=True)
    if INTEGER_QK:
        S = tl.dot(Q, K, out_dtype=tl.int32).to(tl.float32)
    else:
        S = tl.dot(Q, K.to(tl.float32).to(dot_dtype))
    S = S * row_qk_scale[:, None] * k_scale[None, :]
    if MASKED:
        S = tl.where(kv_pos[None, :] < kv_limit[:, None], S, float("-inf"))

    # Online softmax in base 2.  A row that has seen no valid key yet keeps
    # M == -inf; use 0 as its reference so exp2(-inf - -inf) never produces
    # NaN and it contributes nothing.
    m_new = tl.maximum(M, tl.max(S, axis=1))
    m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(M - m_ref)
    # P <= 2**P_LOG2_SCALE; the shift is per row, not per element.
    P = tl.exp2(S - (m_ref - P_LOG2_SCALE)[:, None])
    L = L * alpha + tl.sum(P, axis=1)
    # V's per-token scale is folded into P (see P_LOG2_SCALE for the fp16
    # range).
    P_v = (P * v_scale[None, :]).to(dot_dtype)
    acc = tl.dot(P_v, V.to(tl.float32).to(dot_dtype), acc * alpha[:, None])
    return m_new, L, acc


@triton.jit
def _load_tile(
    head_ptr,
    head_words_ptr,
    block_table_row,
    stride_kv_0,
    tile_idx,
    seq_len,
    STRIDE_SLOT: tl.constexpr,
    V_OFFSET: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE_SIZE: tl.constexpr,
    ROW_ALIGN: tl.constexpr,
    MASKED: tl.constexpr,
):
    """K, V and their scales for the tokens of one KV tile.

    Every offset inside a tile is a compile-time constant from one base
    address: with ``TILE_SIZE`` dividing ``BLOCK_SIZE`` a tile lies in one
    cache block (one block-table load); otherwise it is read as runs of 16
    tokens (``BLOCK_SIZE`` is a multiple of 16), one base per run.
    """
    tile_start = tile_idx * TILE_SIZE
    offs_d = tl.arange(0, HEAD_SIZE)
    if BLOCK_SIZE % TILE_SIZE == 0:
        offs_t = tl.arange(0, TILE_SIZE)
        block = tl.load(block_table_row + tile_start // BLOCK_SIZE).to(tl.int64)
        base = block * stride_kv_0 + (tile_start % BLOCK_SIZE) * STRIDE_SLOT
        base = tl.multiple_of(base, ROW_ALIGN)
        tile_ptr = head_ptr + base
        words_ptr = head_words_ptr + base // 4
        k_offs = offs_t[None, :] * STRIDE_SLOT + offs_d[:, None]
        v_offs = V_OFFSET + offs_t[:, None] * STRIDE_SLOT + offs_d[None, :]
        s_offs = offs_t * (STRIDE_SLOT // 4)
        if MASKED:
            valid = tile_start + offs_t < seq_len
            K = tl.load(tile_ptr + k_offs, mask=valid[None, :], other=0)
            V = tl.load(tile_ptr + v_offs, mask=valid[:, None], other=0)
        else:
            K = tl.load(tile_ptr + k_offs)
            V = tl.load(tile_ptr + v_offs)
    else:
        RUN: tl.constexpr = 16
        NUM_RUNS: tl.constexpr = TILE_SIZE // RUN
        offs_r = tl.arange(0, NUM_RUNS)
        offs_u = tl.arange(0, RUN)
        run_start = tile_start + offs_r * RUN
        if MASKED:
            block = tl.load(
                block_table_row + run_start // BLOCK_SIZE,
                mask=run_start < seq_len,
                other=0,
            )
        else:
            block = tl.load(block_table_row + run_start // BLOCK_SIZE)
        base = block.to(tl.int64) * stride_kv_0 + (run_start % BLOCK_SIZE) * STRIDE_SLOT
        base = tl.multiple_of(base, ROW_ALIGN)
        words_ptr = head_words_ptr + base[:, None] // 4
        k_offs = offs_u[None, None, :] * STRIDE_SLOT + offs_d[:, None, None]
        v_offs = V_OFFSET + offs_u[None, :, None] * STRIDE_SLOT + offs_d[None, None, :]
        s_offs = offs_u[None, :] * (STRIDE_SLOT // 4)
        if MASKED:
            valid = run_start[:, None] + offs_u[None, :] < seq_len
            K = tl.load(
                head_ptr + base[None, :, None] + k_offs,
                mask=valid[None, :, :],
                other=0,
            )
            V = tl.load(
                head_ptr + base[:, None, None] + v_offs,
                mask=valid[:, :, None],
                other=0,
            )
        else:
            K = tl.load(head_ptr + base[None, :, None] + k_offs)
            V = tl.load(head_ptr + base[:, None, None] + v_offs)
        K = tl.reshape(K, [HEAD_SIZE, TILE_SIZE])
        V = tl.reshape(V, [TILE_SIZE, HEAD_SIZE])
    # Each row's fp32 scale is the word right after its values.
    k_scale_offs = s_offs + HEAD_SIZE // 4
    v_scale_offs = s_offs + (V_OFFSET + HEAD_SIZE) // 4
    if MASKED:
        k_scale = tl.load(words_ptr + k_scale_offs, mask=valid, other=0)
        v_scale = tl.load(words_ptr + v_scale_offs, mask=valid, other=0)
    else:
        k_scale = tl.load(words_ptr + k_scale_offs)
        v_scale = tl.load(words_ptr + v_scale_offs)
    if BLOCK_SIZE % TILE_SIZE != 0:
        k_scale = tl.reshape(k_scale, [TILE_SIZE])
        v_scale = tl.reshape(v_scale, [TILE_SIZE])
    return K, V, k_scale, v_scale


@triton.jit
def kernel_int8_split_kv_attention(
    out_ptr,  # [num_tokens, num_query_heads, HEAD_SIZE]
    segm_out_ptr,  # [max_partials, num_query_heads, HEAD_SIZE] float32
    segm_max_ptr,  # [max_partials, num_query_heads] float32
    segm_expsum_ptr,  # [max_partials, num_query_heads] float32
    q_ptr,  # [num_tokens, num_query_heads, HEAD_SIZE]
    kv_cache_ptr,  # int8, start of the K rows (V rows follow at V_OFFSET)
    kv_words_ptr,  # the same memory as int32 words, for the scales
    block_table_ptr,  # [num_seqs, max_num_blocks_per_seq] int32
    seq_lens_ptr,  # [num_seqs] int32
    query_start_loc_ptr,  # [num_seqs + 1] int32
    qk_scale,  # softmax scale * log2(e)
    num_query_heads: tl.constexpr,
    q_stride_0: tl.int64,
    q_stride_1: tl.int64,
    out_stride_0: tl.int64,
    out_stride_1: tl.int64,
    block_table_stride: tl.int64,
    stride_kv_0: tl.int64,  # bytes, multiple of ROW_ALIGN
    STRIDE_SLOT: tl.constexpr,  # bytes, multiple of ROW_ALIGN
    STRIDE_HEAD: tl.constexpr,  # bytes, multiple of ROW_ALIGN
    V_OFFSET: tl.constexpr,  # bytes from a K row to its V row, multiple of 4
    ROW_ALIGN: tl.constexpr,  # 8 or 4: alignment of every K row, in bytes
    NUM_QUERIES_PER_KV: tl.constexpr,
    BLOCK_M: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    TILE_SIZE: tl.constexpr,
    NUM_SEGMENTS: tl.constexpr,
    INTEGER_QK: tl.constexpr,
    P_LOG2_SCALE: tl.constexpr,  # P and L carry a factor 2**P_LOG2_SCALE
):
    seq_idx = tl.program_id(0)
    kv_head_idx = tl.program_id(1)
    segm_idx = tl.program_id(2)

    q_start = tl.load(query_start_loc_ptr + seq_idx)
    q_len = tl.load(query_start_loc_ptr + seq_idx + 1) - q_start
    seq_len = tl.load(seq_lens_ptr + seq_idx)

    # Row r of the tile is query token r // G of the request, query head
    # kv_head_idx * G + r % G (G = NUM_QUERIES_PER_KV).
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_SIZE)
    q_tok = offs_m // NUM_QUERIES_PER_KV
    q_head = kv_head_idx * NUM_QUERIES_PER_KV + offs_m % NUM_QUERIES_PER_KV
    row_mask = q_tok < q_len
    token_idx = (q_start + q_tok).to(tl.int64)
    # Causal within the query block: token i sees keys < seq_len - q_len + 1 + i.
    kv_limit = seq_len - q_len + 1 + q_tok

    # Q : (BLOCK_M, HEAD_SIZE)
    Q = tl.load(
        q_ptr
        + token_idx[:, None] * q_stride_0
        + q_head[:, None] * q_stride_1
        + offs_d[None, :],
        mask=row_mask[:, None],
        other=0.0,
    )
    if INTEGER_QK:
        # One int8 scale per query row, as llama.cpp's vector kernel does.
        q_amax = tl.max(tl.abs(Q.to(tl.float32)), axis=1)
        q_scale = tl.where(q_amax > 0.0, q_amax / 127.0, 1.0)
        Q = tl.floor(Q.to(tl.float32) / q_scale[:, None] + 0.5)
        Q = tl.minimum(tl.maximum(Q, -127.0), 127.0).to(tl.int8)
        row_qk_scale = q_scale * qk_scale
    else:
        row_qk_scale = tl.full([BLOCK_M], 1.0, tl.float32) * qk_scale
    dot_dtype = q_ptr.dtype.element_ty

    # This segment's range of KV tiles; trailing segments may be empty.
    num_tiles = tl.cdiv(seq_len, TILE_SIZE)
    tiles_per_segment = tl.cdiv(num_tiles, NUM_SEGMENTS)
    tile_lo = segm_idx * tiles_per_segment
    tile_hi = tl.minimum(tile_lo + tiles_per_segment, num_tiles)
    # Tiles below full_hi are seen whole by every query row.
    full_hi = tl.minimum(tile_hi, (seq_len - q_len + 1) // TILE_SIZE)
    full_hi = tl.maximum(full_hi, tile_lo)

    M = tl.full([BLOCK_M], float("-inf"), tl.float32)
    L = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_SIZE], tl.float32)
    block_table_row = block_table_ptr + seq_idx.to(tl.int64) * block_table_stride
    head_ptr = kv_cache_ptr + kv_head_idx * STRIDE_HEAD
    head_words_ptr = kv_words_ptr + kv_head_idx * (STRIDE_HEAD // 4)

    # Two loops: tiles that every query row sees whole, without masks, then
    # the last ones (past the context or partly hidden by the causal mask).
    for masked in tl.static_range(2):
        lo = full_hi if masked else tile_lo
        hi = tile_hi if masked else full_hi
        for j in range(lo, hi):
            K, V, k_scale, v_scale = _load_tile(
                head_ptr,
                head_words_ptr,
                block_table_row,
                stride_kv_0,
                j,
                seq_len,
                STRIDE_SLOT,
                V_OFFSET,
                HEAD_SIZE,
                BLOCK_SIZE,
                TILE_SIZE,
                ROW_ALIGN,
                masked,
            )
            M, L, acc = _attend_tile(
                M,
                L,
                acc,
                Q,
                row_qk_scale,
                kv_limit,
                K,
                V,
                k_scale,
                v_scale,
                j * TILE_SIZE + tl.arange(0, TILE_SIZE),
                dot_dtype,
                masked,
                INTEGER_QK,
                P_LOG2_SCALE,
            )

    if NUM_SEGMENTS == 1:
        inv_l = tl.where(L > 0.0, 1.0 / L, 0.0)
        tl.store(
            out_ptr
            + token_idx[:, None] * out_stride_0
            + q_head[:, None] * out_stride_1
            + offs_d[None, :],
            (acc * inv_l[:, None]).to(out_ptr.dtype.element_ty),
            mask=row_mask[:, None],
        )
    else:
        # Unnormalised partials; empty segments store (-inf, 0, 0).
        partial = (token_idx * NUM_SEGMENTS + segm_idx) * num_query_heads + q_head
        tl.store(
            segm_out_ptr + partial[:, None] * HEAD_SIZE + offs_d[None, :],
            acc,
            mask=row_mask[:, None],
        )
        tl.store(segm_max_ptr + partial, M, mask=row_mask)
        tl.store(segm_expsum_ptr + partial, L, mask=row_mask)


@triton.jit
def kernel_int8_split_kv_reduce(
    out_ptr,  # [num_tokens, num_query_heads, HEAD_SIZE]
    segm_out_ptr,  # [max_partials, num_query_heads, HEAD_SIZE] float32
    segm_max_ptr,  # [max_partials, num_query_heads] float32
    segm_expsum_ptr,  # [max_partials, num_query_heads] float32
    query_start_loc_ptr,  # [num_seqs + 1] int32
    num_seqs,
    num_query_heads: tl.constexpr,
    out_stride_0: tl.int64,
    out_stride_1: tl.int64,
    HEAD_SIZE: tl.constexpr,
    NUM_SEGMENTS: tl.constexpr,
):
    token_idx = tl.program_id(0)
    head_idx = tl.program_id(1)
    # Padding tokens past the last request have no partials.
    if token_idx >= tl.load(query_start_loc_ptr + num_seqs):
        return

    offs_s = tl.arange(0, NUM_SEGMENTS)
    offs_d = tl.arange(0, HEAD_SIZE)
    partial = (token_idx.to(tl.int64) * NUM_SEGMENTS + offs_s) * num_query_heads
    partial += head_idx
    segm_max = tl.load(segm_max_ptr + partial)
    segm_expsum = tl.load(segm_expsum_ptr + partial)
    overall_max = tl.max(segm_max, axis=0)
    # All segments empty (-inf everywhere): weights become exp2(-inf) = 0.
    max_ref = tl.where(overall_max == float("-inf"), 0.0, overall_max)
    weight = tl.exp2(segm_max - max_ref)
    expsum = tl.sum(segm_expsum * weight, axis=0)
    segm_out = tl.load(segm_out_ptr + partial[:, None] * HEAD_SIZE + offs_d[None, :])
    acc = tl.sum(segm_out * weight[:, None], axis=0)
    acc = tl.where(expsum > 0.0, acc / expsum, 0.0)
    tl.store(
        out_ptr + token_idx * out_stride_0 + head_idx * out_stride_1 + offs_d,
        acc.to(out_ptr.dtype.element_ty),
    )


def _int8_cache_words(cache: torch.Tensor, head_size: int, name: str) -> torch.Tensor:
    """Check an INT8 per-token-head cache view and return its int32 words."""
    if cache.dtype != torch.int8 or cache.dim() != 4:
        raise ValueError(
            f"{name} must be a 4-D int8 per-token-head cache, got "
            f"{cache.dtype} with shape {tuple(cache.shape)}"
        )
    if cache.shape[3] != head_size + 4 or cache.stride(3) != 1:
        raise ValueError(
            f"{name} rows must be {head_size} int8 values followed by an inline "
            f"fp32 scale ({head_size + 4} contiguous bytes), got shape "
            f"{tuple(cache.shape)} and strides {cache.stride()}"
        )
    if cache.storage_offset() % 4 or any(st % 4 for st in cache.stride()[:3]):
        raise ValueError(
            f"{name} rows must start on 4-byte boundaries, got strides "
            f"{cache.stride()} and storage offset {cache.storage_offset()}"
        )
    return cache.view(torch.int32)


def int8_split_kv_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    out: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    seqused_k: torch.Tensor,
    block_table: torch.Tensor,
    max_query_len: int,
    max_seq_len: int,
    softmax_scale: float,
    segm_output: torch.Tensor,
    segm_max: torch.Tensor,
    segm_expsum: torch.Tensor,
    integer_qk: bool | None = None,
    geometry: Int8SplitKVGeometry | None = None,
) -> None:
    """Causal attention of 1..16 query tokens per request on the INT8 cache.

    Query token ``i`` of a request with ``q_len`` tokens and ``seq_len``
    context tokens (the query included) attends to positions
    ``< seq_len - (q_len - 1 - i)``.  Launches a fixed grid of
    ``(num_seqs, num_kv_heads, num_segments)`` programs plus a reduce kernel;
    nothing depends on device values, so it is CUDA-graph safe.

    Args:
        q: ``[num_tokens, num_query_heads, head_size]`` fp16/bf16.
        k_cache: ``[num_blocks, block_size, num_kv_heads, head_size + 4]``
            int8; each row is ``head_size`` values then their fp32 scale.
        v_cache: Same layout as ``k_cache``.
        out: ``[num_tokens, num_query_heads, head_size]``, written.
        cu_seqlens_q: ``[num_seqs + 1]`` int32 query start offsets.
        seqused_k: ``[num_seqs]`` int32 context lengths.
        block_table: ``[num_seqs, max_num_blocks_per_seq]`` int32.
        max_query_len: Longest query (host int, at most ``MAX_QUERY_LEN``).
        max_seq_len: Longest context (host int); only picks the geometry.
        softmax_scale: Scale applied to Q.K.
        segm_output: ``[max_partials, num_query_heads, head_size]`` float32.
        segm_max: ``[max_partials, num_query_heads]`` float32.
        segm_expsum: ``[max_partials, num_query_heads]`` float32.
        integer_qk: Quantize Q to int8 and use int8 Q.K dot products;
            ``None`` reads ``VLLM_TRITON_INT8_KV_INTEGER_QK``.  Adds
            ~1.5-2% relative error (vs ~0.3% with fp Q.K).
        geometry: Overrides :func:`select_int8_split_kv_geometry` (tests and
            tuning); ``num_segments`` must be a power of two.
    """
    num_tokens, num_query_heads, head_size = q.shape
    if head_size not in SUPPORTED_HEAD_SIZES:
        raise ValueError(
            f"head_size {head_size} is not supported; expected one of "
            f"{SUPPORTED_HEAD_SIZES}"
        )
    if q.dtype not in SUPPORTED_QUERY_DTYPES or out.dtype != q.dtype:
        raise ValueError(
            f"q and out must both be float16 or bfloat16, got {q.dtype} and {out.dtype}"
        )
    if q.stride(2) != 1 or out.stride(2) != 1:
        raise ValueError("q and out must be contiguous in the head dimension")
    if not 1 <= max_query_len <= MAX_QUERY_LEN:
        raise ValueError(
            f"max_query_len {max_query_len} is outside 1..{MAX_QUERY_LEN}; "
            "use unified_attention for longer queries"
        )
    k_words = _int8_cache_words(k_cache, head_size, "k_cache")
    _int8_cache_words(v_cache, head_size, "v_cache")
    # K and V rows are addressed from one base pointer (aligned, so the
    # compiler can prove 4-byte alignment of every row).
    v_offset = v_cache.data_ptr() - k_cache.data_ptr()
    if (
        k_cache.shape != v_cache.shape
        or k_cache.stride() != v_cache.stride()
        or v_offset < 0
        or v_offset % 4
    ):
        raise ValueError(
            "k_cache and v_cache must be views of one cache with equal shapes "
            f"and strides and V rows 4-byte aligned after K rows, got shapes "
            f"{tuple(k_cache.shape)} / {tuple(v_cache.shape)}, strides "
            f"{k_cache.stride()} / {v_cache.stride()}, V offset {v_offset}"
        )
    _, block_size, num_kv_heads, _ = k_cache.shape
    if num_query_heads % num_kv_heads:
        raise ValueError(
            f"{num_query_heads} query heads are not a multiple of "
            f"{num_kv_heads} KV heads"
        )
    if segm_output.shape[1:] != (num_query_heads, head_size):
        raise ValueError(
            f"segm_output must be [max_partials, {num_query_heads}, {head_size}], "
            f"got {tuple(segm_output.shape)}"
        )
    if integer_qk is None:
        integer_qk = envs.VLLM_TRITON_INT8_KV_INTEGER_QK
    if integer_qk and head_size < 128:
        raise ValueError("integer Q.K needs head_size >= 128")

    num_seqs = seqused_k.shape[0]
    num_queries_per_kv = num_query_heads // num_kv_heads
    block_q = triton.next_power_of_2(max_query_len)
    # tl.dot needs at least 16 rows.
    block_m = max(16, triton.next_power_of_2(num_queries_per_kv * block_q))
    if geometry is None:
        geometry = select_int8_split_kv_geometry(
            max_query_len, max_seq_len, num_seqs, num_tokens, segm_output.shape[0]
        )
    num_segments = geometry.num_segments
    if num_segments & (num_segments - 1) or (
        num_segments > 1 and num_tokens * num_segments > segm_output.shape[0]
    ):
        raise ValueError(
            f"{num_segments} segments x {num_tokens} tokens do not fit the "
            f"{segm_output.shape[0]} partial slots (or are not a power of two)"
        )

    tile_size = geometry.tile_size
    if block_size % tile_size and block_size % 16:
        raise ValueError(
            f"block_size {block_size} must be a multiple of 16 or of the KV tile "
            f"({tile_size} tokens)"
        )
    # 8-byte alignment of every K row lets the compiler use 64-bit loads
    # (upstream's layout: 520-byte rows for head_size 256).
    row_align = (
        8
        if k_cache.data_ptr() % 8 == 0
        and not any(st % 8 for st in k_cache.stride()[:3])
        else 4
    )

    kernel_int8_split_kv_attention[(num_seqs, num_kv_heads, num_segments)](
        out,
        segm_output,
        segm_max,
        segm_expsum,
        q,
        k_cache,
        k_words,
        block_table,
        seqused_k,
        cu_seqlens_q,
        softmax_scale * 1.4426950408889634,  # log2(e): the kernel uses exp2
        num_query_heads=num_query_heads,
        q_stride_0=q.stride(0),
        q_stride_1=q.stride(1),
        out_stride_0=out.stride(0),
        out_stride_1=out.stride(1),
        block_table_stride=block_table.stride(0),
        stride_kv_0=k_cache.stride(0),
        STRIDE_SLOT=k_cache.stride(1),
        STRIDE_HEAD=k_cache.stride(2),
        V_OFFSET=v_offset,
        ROW_ALIGN=row_align,
        NUM_QUERIES_PER_KV=num_queries_per_kv,
        BLOCK_M=block_m,
        HEAD_SIZE=head_size,
        BLOCK_SIZE=block_size,
        TILE_SIZE=tile_size,
        NUM_SEGMENTS=num_segments,
        INTEGER_QK=integer_qk,
        P_LOG2_SCALE=P_LOG2_SCALE,
        num_warps=geometry.num_warps,
        num_stages=geometry.num_stages,
    )
    if num_segments > 1:
        kernel_int8_split_kv_reduce[(num_tokens, num_query_heads)](
            out,
            segm_output,
            segm_max,
            segm_expsum,
            cu_seqlens_q,
            num_seqs,
            num_query_heads=num_query_heads,
            out_stride_0=out.stride(0),
            out_stride_1=out.stride(1),
            HEAD_SIZE=head_size,
            NUM_SEGMENTS=num_segments,
        )
