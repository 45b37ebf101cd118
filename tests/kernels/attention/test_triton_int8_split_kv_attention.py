# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Split-KV decode/verify attention over the INT8 per-token-head KV cache.

The cache is built in the Triton backend's planar layout (see
test_triton_int8_kv_attention.py).  On CPU the Triton interpreter runs a
representative subset at small sizes (``TRITON_INTERPRET=1
CUDA_VISIBLE_DEVICES=''``); on CUDA the full grid.
"""

import dataclasses
import json
import os
import subprocess
import sys
import tempfile

import pytest
import regex as re
import torch

from tests.kernels.attention.test_triton_int8_kv_attention import (
    BLOCK_SIZE,
    DEVICE_TYPE,
    DTYPE,
    FULL,
    HEAD_SIZES,
    HYBRID,
    LAYOUTS,
    NUM_HEADS,
    _make_inputs,
    _quantize_int8_per_token_head,
    _unified_int8,
    hybrid_page_bytes,
    make_kv_cache_tensor,
    ref_paged_attn,
)
from vllm.v1.attention.backends.triton_attn import int8_per_token_head_planar_views
from vllm.v1.attention.ops.triton_int8_split_kv_attention import (
    GEOMETRY_TABLES,
    MAX_PARTIALS,
    MAX_QUERY_LEN,
    Int8SplitKVGeometry,
    geometry_table,
    int8_split_kv_attention,
    int8_split_kv_rounds_query,
    kernel_int8_split_kv_reduce,
    select_int8_split_kv_geometry,
)
from vllm.v1.attention.ops.triton_reshape_and_cache_flash import (
    triton_reshape_and_cache_flash_per_token_head_quant,
)
from vllm.v1.kv_cache_interface import KVQuantMode

QUERY_LENS = list(range(1, MAX_QUERY_LEN + 1)) if FULL else [1, 6, 16]
# Requests of different lengths in one batch; contexts straddle 16-token
# blocks, KV tiles and segments.
KV_LENS = [[1328, 18, 463, 2011], [8191, 37]] if FULL else [[77, 18, 300]]
NUM_BLOCKS = [2048] if FULL else [512]


@pytest.fixture(autouse=True)
def _restore_default_device():
    """Tests here set the default device; do not leak it to other modules."""
    yield
    torch.set_default_device(None)


def _scratch(num_query_heads, head_size, partials=MAX_PARTIALS):
    return (
        torch.empty(partials, num_query_heads, head_size, dtype=torch.float32),
        torch.empty(partials, num_query_heads, dtype=torch.float32),
        torch.empty(partials, num_query_heads, dtype=torch.float32),
    )


def _kernel_query(
    query, num_kv_heads, block_size, query_lens, kv_lens, geometry, window
):
    """The query as the split-KV launch uses it, for references: rounded to
    int8 per row where the launch does that (int8_split_kv_rounds_query),
    else as given (the high and low int8 parts are exact to 1.6e-5)."""
    num_queries_per_kv = query.shape[1] // num_kv_heads
    if geometry is None:
        geometry = select_int8_split_kv_geometry(
            max(query_lens),
            max(kv_lens),
            len(kv_lens),
            query.shape[0],
            MAX_PARTIALS,
            num_queries_per_kv=num_queries_per_kv,
            num_kv_heads=num_kv_heads,
            sliding_window=window,
        )
    rows = num_queries_per_kv * max(query_lens)
    if not int8_split_kv_rounds_query(
        geometry, rows, query.shape[0], MAX_PARTIALS, block_size, window
    ):
        return query
    q = query.float()
    amax = q.abs().amax(dim=-1, keepdim=True)
    step = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    return torch.floor(q / step + 0.5) * step


def _split_kv(query, caches, cu_query_lens, block_tables, query_lens, kv_lens, **kw):
    """The split-KV launch's output, and the query as it uses it (for the
    references)."""
    key_cache, value_cache, k_scale, v_scale = caches[:4]
    head_size = query.shape[-1]
    output = torch.full_like(query, float("nan"))
    segm_output, segm_max, segm_expsum = _scratch(query.shape[1], head_size)
    int8_split_kv_attention(
        q=query,
        k_cache=key_cache,
        v_cache=value_cache,
        k_scale_cache=k_scale,
        v_scale_cache=v_scale,
        out=output,
        cu_seqlens_q=cu_query_lens,
        seqused_k=torch.tensor(kv_lens, dtype=torch.int32),
        block_table=block_tables,
        max_query_len=max(query_lens),
        max_seq_len=max(kv_lens),
        softmax_scale=head_size**-0.5,
        segm_output=segm_output,
        segm_max=segm_max,
        segm_expsum=segm_expsum,
        **kw,
    )
    kernel_query = _kernel_query(
        query,
        key_cache.shape[2],
        key_cache.shape[1],
        query_lens,
        kv_lens,
        kw.get("geometry"),
        kw.get("sliding_window", 0),
    )
    return output, kernel_query


def _run_split_kv(
    num_heads,
    head_size,
    query_lens,
    kv_lens,
    num_blocks,
    dtype=DTYPE,
    geometry=None,
    block_size=BLOCK_SIZE,
    page_bytes=None,
):
    query, caches, cu_query_lens, block_tables = _make_inputs(
        num_heads,
        head_size,
        query_lens,
        kv_lens,
        num_blocks,
        dtype,
        block_size,
        page_bytes,
    )
    output, kernel_query = _split_kv(
        query,
        caches,
        cu_query_lens,
        block_tables,
        query_lens,
        kv_lens,
        geometry=geometry,
    )
    k_deq, v_deq = caches[4:]
    ref = ref_paged_attn(
        kernel_query, k_deq, v_deq, query_lens, kv_lens, block_tables, head_size**-0.5
    ).to(dtype)
    return output, ref


@pytest.mark.parametrize("kv_lens", KV_LENS)
@pytest.mark.parametrize("query_len", QUERY_LENS)
@pytest.mark.parametrize("num_heads", NUM_HEADS)
@pytest.mark.parametrize("head_size", HEAD_SIZES)
@pytest.mark.parametrize("num_blocks", NUM_BLOCKS)
@torch.inference_mode()
def test_int8_split_kv_attention(kv_lens, query_len, num_heads, head_size, num_blocks):
    torch.set_default_device(DEVICE_TYPE)
    torch.manual_seed(0)
    # Mixed query lengths in one batch: the first request gets query_len.
    query_lens = [query_len] + [max(1, query_len // 2)] * (len(kv_lens) - 1)
    output, ref = _run_split_kv(num_heads, head_size, query_lens, kv_lens, num_blocks)
    torch.testing.assert_close(output, ref, atol=1.5e-2, rtol=1e-2)


@pytest.mark.parametrize("head_size", HEAD_SIZES)
@torch.inference_mode()
def test_int8_split_kv_many_blocks(head_size):
    """More than 32K blocks: block offsets must be computed in int64."""
    torch.set_default_device(DEVICE_TYPE)
    torch.manual_seed(5)
    num_heads = (24, 4) if FULL else (4, 1)
    output, ref = _run_split_kv(num_heads, head_size, [6, 1], [700, 1500], 40000)
    torch.testing.assert_close(output, ref, atol=1.5e-2, rtol=1e-2)


@pytest.mark.parametrize(
    "geometry",
    [
        Int8SplitKVGeometry(16, 1, 4, 2, 16),
        Int8SplitKVGeometry(16, 32, 2, 2, 16),
        Int8SplitKVGeometry(64, 4, 4, 2, 32),
        Int8SplitKVGeometry(32, 8, 8, 2, 64),
        # Every table's entries with at most 32 segments (22 tokens must fit
        # the 1024 partial slots).
        *dict.fromkeys(
            dataclasses.replace(entry.geometry, num_segments=32)
            for table in GEOMETRY_TABLES.values()
            for entry in table
        ),
    ],
)
@torch.inference_mode()
def test_int8_split_kv_geometries(geometry):
    """Every geometry is correct, including empty trailing segments (short
    contexts with many segments), segments that are fully masked for the
    early query tokens (33 keys, 16 queries, one tile per segment) and
    query rows spread over several programs (16 tokens x 6 heads)."""
    torch.set_default_device(DEVICE_TYPE)
    torch.manual_seed(1)
    output, ref = _run_split_kv(
        (12, 2),
        128,
        [16, 1, 5],
        [33, 20, 150],
        256,
        geometry=geometry,
    )
    torch.testing.assert_close(output, ref, atol=1.5e-2, rtol=1e-2)


# ((query heads, KV heads), head size): GQA groups of 1, 4, 6 and 8.
VERIFY_SHAPES = (
    [
        (heads, head_size)
        for heads in [(2, 2), (8, 2), (12, 2), (16, 2)]
        for head_size in [64, 128, 256]
    ]
    if FULL
    else [((2, 2), 64), ((12, 2), 64), ((12, 2), 256)]
)
VERIFY_GEOMETRIES = [
    # One program per (request, KV head): tokens on the MMA M axis.
    Int8SplitKVGeometry(32, 8, 4, 2, 128, swap_ab=True),
    # Query tokens spread over programs of at most 32 rows; tiles that
    # straddle 16-token blocks.
    Int8SplitKVGeometry(64, 4, 8, 2, 32, swap_ab=True),
    # No segments: the output itself, not the partial slots, stages Q.
    Int8SplitKVGeometry(32, 1, 4, 2, 64, swap_ab=True),
    # Hopper's warpgroup-MMA kernel (the swapped one elsewhere), with and
    # without segments; 16 tokens x 8 heads take two programs.
    Int8SplitKVGeometry(32, 8, 4, 3, 64, wgmma=True),
    Int8SplitKVGeometry(32, 1, 4, 2, 64, wgmma=True),
]


def _random_ragged_batch(
    num_query_heads, num_kv_heads, head_size, query_lens, kv_lens, num_blocks
):
    """A planar cache holding per-token INT8 quantised random K/V, random
    queries, and distinct blocks per request in random order.  Returns
    ``(query, cu_query_lens, block_tables, views, halves)`` with ``views``
    the cache's planar views and ``halves`` each of K and V as (the values
    it was quantised from, its dequantised values)."""
    kv_cache = make_kv_cache_tensor(num_blocks, num_kv_heads, head_size)
    views = int8_per_token_head_planar_views(kv_cache, head_size)
    halves = []
    for data_view, scale_view in ((views[0], views[2]), (views[1], views[3])):
        x = torch.randn(num_blocks, BLOCK_SIZE, num_kv_heads, head_size)
        data, scale = _quantize_int8_per_token_head(x)
        data_view.copy_(data)
        scale_view.copy_(scale)
        halves.append((x, data.float() * scale[..., None]))
    query = torch.randn(sum(query_lens), num_query_heads, head_size, dtype=DTYPE)
    cu_query_lens = torch.tensor([0] + query_lens).cumsum(0, dtype=torch.int32)
    block_tables = torch.randperm(num_blocks, dtype=torch.int32)[
        : len(kv_lens) * 64
    ].view(len(kv_lens), 64)
    return query, cu_query_lens, block_tables, views, halves


@pytest.mark.parametrize("geometry", VERIFY_GEOMETRIES)
@pytest.mark.parametrize(("num_heads", "head_size"), VERIFY_SHAPES)
@torch.inference_mode()
def test_int8_split_kv_verify(num_heads, head_size, geometry):
    """Speculative verify steps: ragged query lengths in one batch (16, 1,
    5 and 9 tokens), odd context lengths that straddle blocks, tiles and
    segments, against fp32 attention on the K/V the cache was quantised
    from (within the INT8 quantisation error) and on the dequantised cache
    (within the kernel's own rounding)."""
    torch.set_default_device(DEVICE_TYPE)
    torch.manual_seed(11)
    num_query_heads, num_kv_heads = num_heads
    query_lens = [16, 1, 5, 9]
    kv_lens = [77, 18, 300, 1001] if FULL else [77, 18, 150, 45]
    num_blocks = 256
    query, cu_query_lens, block_tables, views, exact = _random_ragged_batch(
        num_query_heads, num_kv_heads, head_size, query_lens, kv_lens, num_blocks
    )
    output, kernel_query = _split_kv(
        query,
        views[:4],
        cu_query_lens,
        block_tables,
        query_lens,
        kv_lens,
        geometry=geometry,
    )
    ref_args = (query_lens, kv_lens, block_tables, head_size**-0.5)
    ref_exact = ref_paged_attn(query, exact[0][0], exact[1][0], *ref_args)
    ref_deq = ref_paged_attn(kernel_query, exact[0][1], exact[1][1], *ref_args)
    torch.testing.assert_close(output, ref_deq.to(DTYPE), atol=1.5e-2, rtol=1e-2)

    def rel_err(out, ref):
        return ((out.float() - ref).norm() / ref.norm()).item()

    # Per-token INT8 K/V on random data is ~1% off exact attention; the
    # kernel adds bf16/fp16 rounding to that (and, in Hopper's verify kernel
    # with 65-128 rows, the query's int8 rounding: ~0.7% against attention
    # on the dequantised cache).
    assert rel_err(output, ref_exact) < 0.03
    assert rel_err(output, ref_deq) < 0.01


def _ref_window(query, k, v, query_lens, kv_lens, block_tables, causal, window):
    """fp32 attention where the query token at position ``p`` (the last
    ``query_len`` positions of its request) sees the keys at ``j`` with
    ``j <= p`` if ``causal`` (else every key) and ``|p - j| < window`` if
    ``window`` (else any distance)."""
    block_size, num_kv_heads, head_size = k.shape[1:]
    outputs, start = [], 0
    for query_len, kv_len, blocks in zip(query_lens, kv_lens, block_tables.cpu()):
        q = query[start : start + query_len].float() * head_size**-0.5
        start += query_len
        rows = blocks[: -(-kv_len // block_size)]
        keys = k[rows].reshape(-1, num_kv_heads, head_size)[:kv_len].float()
        values = v[rows].reshape(-1, num_kv_heads, head_size)[:kv_len].float()
        group = q.shape[1] // num_kv_heads
        keys = keys.repeat_interleave(group, dim=1)
        values = values.repeat_interleave(group, dim=1)
        p = torch.arange(kv_len - query_len, kv_len)[:, None]
        j = torch.arange(kv_len)[None, :]
        visible = torch.ones(query_len, kv_len, dtype=torch.bool)
        if causal:
            visible &= j <= p
        if window:
            visible &= (p - j).abs() < window
        scores = torch.einsum("qhd,khd->hqk", q, keys)
        scores = scores.masked_fill(~visible.to(scores.device), float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        outputs.append(torch.einsum("hqk,khd->qhd", attn, values))
    return torch.cat(outputs)


WINDOW_GEOMETRIES = [
    # Row-packing (decode), its split P.V form, the swapped verify kernel and
    # Hopper's warpgroup-MMA kernel (the swapped one elsewhere).
    Int8SplitKVGeometry(32, 4, 2, 2, 16),
    Int8SplitKVGeometry(16, 4, 2, 3, 32, pv_chunk=32),
    Int8SplitKVGeometry(16, 4, 4, 3, 64, swap_ab=True),
    Int8SplitKVGeometry(32, 4, 4, 3, 64, wgmma=True),
]


@pytest.mark.parametrize("geometry", WINDOW_GEOMETRIES)
@pytest.mark.parametrize(
    ("causal", "window"), [(True, 40), (True, 1), (False, 0), (False, 40), (False, 3)]
)
@torch.inference_mode()
def test_int8_split_kv_window_and_non_causal(geometry, causal, window):
    """Sliding-window layers and non-causal draft blocks (DFlash drafters):
    ragged query lengths, windows that start inside a tile, inside another
    segment, before the context (the 18-token request) and at the token
    itself (window 1), against fp32 attention with the same mask on the
    dequantised cache."""
    torch.set_default_device(DEVICE_TYPE)
    torch.manual_seed(5)
    num_query_heads, num_kv_heads, head_size = 12, 2, 64
    query_lens = [16, 1, 5, 9] if geometry.block_m > 16 else [1, 1, 2, 1]
    kv_lens = [77, 18, 300, 1001] if FULL else [77, 18, 150, 45]
    num_blocks = 256
    query, cu_query_lens, block_tables, views, halves = _random_ragged_batch(
        num_query_heads, num_kv_heads, head_size, query_lens, kv_lens, num_blocks
    )
    dequantised = [deq for _, deq in halves]
    output, kernel_query = _split_kv(
        query,
        views[:4],
        cu_query_lens,
        block_tables,
        query_lens,
        kv_lens,
        geometry=geometry,
        causal=causal,
        sliding_window=window,
    )
    ref = _ref_window(
        kernel_query, *dequantised, query_lens, kv_lens, block_tables, causal, window
    )
    torch.testing.assert_close(output, ref.to(DTYPE), atol=1.5e-2, rtol=1e-2)
    # The masks matter (for the non-causal decode geometries' one- and
    # two-token queries only where there is a window): causal attention over
    # the whole context differs.
    plain = ref_paged_attn(
        query, *dequantised, query_lens, kv_lens, block_tables, head_size**-0.5
    )
    if window or max(query_lens) > 2:
        assert (output.float() - plain).abs().max() > 0.05


# One of each kernel and P.V form: row-packing with one P.V dot, with P.V
# split into channel chunks (warps own rows), and the swapped verify kernel.
RESCALE_GEOMETRIES = [
    Int8SplitKVGeometry(32, 4, 2, 2, 16),
    Int8SplitKVGeometry(16, 4, 2, 3, 32, pv_chunk=32),
    Int8SplitKVGeometry(32, 4, 2, 2, 32, pv_chunk=32),
    Int8SplitKVGeometry(16, 4, 4, 3, 64, swap_ab=True),
    Int8SplitKVGeometry(32, 4, 4, 3, 64, wgmma=True),
]


@pytest.mark.parametrize("geometry", RESCALE_GEOMETRIES)
@pytest.mark.parametrize("query_len", [1, 4, 9])
@torch.inference_mode()
def test_int8_split_kv_growing_scales(geometry, query_len):
    """K and V whose magnitudes grow along the context (V 100x, K 4x), so
    the softmax reference and the V-scale reference move on many tiles:
    the accumulator takes both corrections, the running sum of P only the
    softmax one.  Checked against fp32 attention on the dequantised cache."""
    torch.set_default_device(DEVICE_TYPE)
    torch.manual_seed(3)
    num_query_heads, num_kv_heads, head_size = 12, 2, 128
    kv_len, num_blocks = 700, 64
    kv_cache = make_kv_cache_tensor(num_blocks, num_kv_heads, head_size)
    views = int8_per_token_head_planar_views(kv_cache, head_size)
    block_table = torch.randperm(num_blocks, dtype=torch.int32)[None, :]
    # Position of each (block, slot) in the request.
    position = torch.empty(num_blocks, BLOCK_SIZE)
    position[block_table[0].long()] = torch.arange(
        num_blocks * BLOCK_SIZE, dtype=torch.float32
    ).view(num_blocks, BLOCK_SIZE)
    ramp = (position / kv_len).clamp(max=1.0)[..., None, None]
    deq = []
    for (data_view, scale_view), growth in (
        ((views[0], views[2]), 3.0),
        ((views[1], views[3]), 99.0),
    ):
        x = torch.randn(num_blocks, BLOCK_SIZE, num_kv_heads, head_size)
        data, scale = _quantize_int8_per_token_head(x * (1.0 + growth * ramp))
        data_view.copy_(data)
        scale_view.copy_(scale)
        deq.append(data.float() * scale[..., None])
    query = torch.randn(query_len, num_query_heads, head_size, dtype=DTYPE)
    cu_query_lens = torch.tensor([0, query_len], dtype=torch.int32)
    output, kernel_query = _split_kv(
        query,
        views[:4],
        cu_query_lens,
        block_table,
        [query_len],
        [kv_len],
        geometry=geometry,
    )
    ref = ref_paged_attn(
        kernel_query,
        deq[0],
        deq[1],
        [query_len],
        [kv_len],
        block_table,
        head_size**-0.5,
    )
    err = ((output.float() - ref).norm() / ref.norm()).item()
    assert err < 0.01, f"{geometry}: relative error {err:.4f}"


@pytest.mark.parametrize(
    ("block_size", "tile_size"),
    # Tiles inside one block at an offset (64/32, 1600/32 as on Qwen3.5 with
    # an INT8 cache), and tiles read as runs across blocks (48/32: runs of
    # 16; 208/64 as on the hybrid test model: runs of 16).
    [(64, 32), (64, 16), (48, 32), (208, 64), (1600, 32)],
)
@torch.inference_mode()
def test_int8_split_kv_block_sizes(block_size, tile_size):
    torch.set_default_device(DEVICE_TYPE)
    torch.manual_seed(2)
    num_blocks = 8 if block_size > 256 else 64
    output, ref = _run_split_kv(
        (12, 2),
        128,
        [6, 1],
        [block_size + 37, 2 * block_size + 5],
        num_blocks,
        geometry=Int8SplitKVGeometry(tile_size, 4, 4, 2),
        block_size=block_size,
    )
    torch.testing.assert_close(output, ref, atol=1.5e-2, rtol=1e-2)


# Elsewhere (CPU, Triton's interpreter) the swapped kernel runs this
# geometry, as in test_int8_split_kv_verify.
@pytest.mark.skipif(not FULL, reason="the warpgroup-MMA kernel needs a GPU")
@pytest.mark.parametrize("query_lens", [[16, 12], [6, 4], [10, 1]])
@pytest.mark.parametrize("block_size", [16, 64, 1600])
@torch.inference_mode()
def test_int8_split_kv_verify_rows_in_64_token_tiles(block_size, query_lens):
    """Verify steps of 12-16 tokens (96 and 72 rows per KV head, both
    consumers on every tile) and of 4-10 tokens (up to 64 rows, alternate
    tiles): on Hopper the warpgroup-MMA kernel reads them in 64-token tiles
    where the block size is a multiple of 64 and in 32-token tiles at 16
    (with its overlapped loop for 65-128 rows)."""
    torch.set_default_device(DEVICE_TYPE)
    torch.manual_seed(3)
    num_blocks = 8 if block_size > 256 else 64
    output, ref = _run_split_kv(
        (24, 4),
        256,
        query_lens,
        [block_size + 37, 2 * block_size + 5 if block_size > 256 else 77],
        num_blocks,
        geometry=Int8SplitKVGeometry(32, 4, 4, 4, 64, wgmma=True),
        block_size=block_size,
    )
    torch.testing.assert_close(output, ref, atol=1.5e-2, rtol=1e-2)


def test_wgmma_pipeline_takes_64_token_tiles_within_blocks():
    """Launches without a window take 64-token tiles and the rounded query
    exactly where each tile lies in one cache block, whatever their rows;
    windows and other block sizes keep the geometry's tiles, with the
    query's exact pair for alternate tiles and, for 65-128 rows, a third
    widened V tile for the overlapped loop (the only launches that run
    it)."""
    from vllm.v1.attention.ops import triton_int8_split_kv_attention as mod

    geometry = Int8SplitKVGeometry(32, 32, 4, 4, 64, wgmma=True)
    tiles_64 = dict(
        TILE_SIZE=64, STAGES=2, VH_STAGES=2, AHEAD=1, OVERLAP=False, QUERY_PAIR=False
    )
    for tile_split in (False, True):
        for block_size in (64, 1600):
            assert mod.wgmma_pipeline(geometry, tile_split, 0, block_size) == tiles_64
    tiles_32 = dict(TILE_SIZE=32, STAGES=4, VH_STAGES=2, AHEAD=2, OVERLAP=False)
    overlapped = dict(tiles_32, VH_STAGES=3, OVERLAP=True, QUERY_PAIR=False)
    for block_size in (16, 32, 48, 208):
        assert mod.wgmma_pipeline(geometry, False, 0, block_size) == overlapped
        assert mod.wgmma_pipeline(geometry, True, 0, block_size) == dict(
            tiles_32, QUERY_PAIR=True
        )
    for tile_split in (False, True):
        assert mod.wgmma_pipeline(geometry, tile_split, 2048, 1600) == dict(
            tiles_32, QUERY_PAIR=tile_split
        )


@torch.inference_mode()
def test_int8_split_kv_fp16_and_padding_request():
    """fp16 queries; a zero-length (padding) request leaves others intact."""
    torch.set_default_device(DEVICE_TYPE)
    torch.manual_seed(2)
    output, ref = _run_split_kv(
        (8, 1), 256, [2, 0, 3], [40, 9, 97], 64, dtype=torch.float16
    )
    torch.testing.assert_close(output[:2], ref[:2], atol=1.5e-2, rtol=1e-2)
    torch.testing.assert_close(output[2:], ref[2:], atol=1.5e-2, rtol=1e-2)


@pytest.mark.parametrize("num_partials", [2, 5, 32, 33, 128])
@torch.inference_mode()
def test_int8_split_kv_reduce_merges_partials(num_partials):
    """The reduce kernel against a float64 log-sum-exp merge of the partials:
    segments that saw no key (-inf, 0, 0) weigh nothing, a row that saw no
    key at all comes out 0, and rows of padding tokens past the last request
    are not written (their slots hold garbage)."""
    torch.set_default_device(DEVICE_TYPE)
    gen = torch.Generator(device=DEVICE_TYPE).manual_seed(num_partials)
    num_tokens, padded, heads, head_size = 3, 4, 6, 128
    n = padded * num_partials
    segm_out = torch.randn(n, heads, head_size, generator=gen, device=DEVICE_TYPE)
    segm_max = torch.randn(n, heads, generator=gen, device=DEVICE_TYPE) * 20
    segm_expsum = torch.rand(n, heads, generator=gen, device=DEVICE_TYPE) + 0.1
    empty = torch.rand(n, heads, generator=gen, device=DEVICE_TYPE) < 0.3
    segm_max[empty] = float("-inf")
    segm_expsum[empty] = 0.0
    segm_out[empty] = 0.0
    # Token 1, head 2: no segment saw a key.
    none = slice(num_partials, 2 * num_partials)
    segm_max[none, 2] = float("-inf")
    segm_expsum[none, 2] = 0.0
    segm_out[none, 2] = 0.0
    # The padding token's slots were never written.
    segm_max[num_tokens * num_partials :] = float("nan")
    out = torch.full((padded, heads, head_size), 7.0, dtype=DTYPE)
    kernel_int8_split_kv_reduce[(padded, heads, head_size // 64)](
        out,
        segm_out,
        segm_max,
        segm_expsum,
        torch.tensor([0, num_tokens], dtype=torch.int32),
        1,
        num_partials,
        num_query_heads=heads,
        out_stride_0=out.stride(0),
        out_stride_1=out.stride(1),
        HEAD_SIZE=head_size,
        HEAD_BLOCK=64,
        SEGMENT_CHUNK=32,
    )
    rows = num_tokens * num_partials
    m = segm_max[:rows].double().view(num_tokens, num_partials, heads)
    w = torch.exp2(m - m.amax(1, keepdim=True).nan_to_num(0.0, 0.0, 0.0))
    w = w.nan_to_num(0.0)
    den = (w * segm_expsum[:rows].double().view(num_tokens, num_partials, heads)).sum(1)
    num = (
        segm_out[:rows].double().view(num_tokens, num_partials, heads, head_size)
        * w[..., None]
    ).sum(1)
    ref = torch.where(den[..., None] > 0, num / den.clamp(min=1e-300)[..., None], 0.0)
    assert (ref[1, 2] == 0).all()
    torch.testing.assert_close(out[:num_tokens].double(), ref, atol=2e-2, rtol=1e-2)
    assert (out[num_tokens] == 7.0).all()


@pytest.mark.parametrize("v_scale", [1e-4, 1e3])
@pytest.mark.parametrize("q_scale", [1e-3, 1e3])
@torch.inference_mode()
def test_int8_split_kv_value_range(v_scale, q_scale):
    """P * v_scale, rounded to fp16 for the P.V dot, keeps its precision for
    tiny V and does not overflow for large V; tiny and large queries keep
    their Q.K precision."""
    torch.set_default_device(DEVICE_TYPE)
    torch.manual_seed(6)
    num_heads, head_size, query_lens, kv_lens = (8, 2), 128, [4, 1], [300, 77]
    query, caches, cu_query_lens, block_tables = _make_inputs(
        num_heads, head_size, query_lens, kv_lens, 64, DTYPE
    )
    # Scaling the scale views scales the dequantised V exactly; scaling Q
    # changes the attention weights, so the reference sees the same Q.
    caches[3].mul_(v_scale)
    query = (query.float() * q_scale).to(DTYPE)
    output, kernel_query = _split_kv(
        query, caches, cu_query_lens, block_tables, query_lens, kv_lens
    )
    ref = ref_paged_attn(
        kernel_query,
        caches[4],
        caches[5] * v_scale,
        query_lens,
        kv_lens,
        block_tables,
        head_size**-0.5,
    )
    assert not output.isnan().any() and not output.isinf().any()
    rel = (output.float() - ref).norm() / ref.norm()
    assert rel < 1e-2, rel


@pytest.mark.parametrize("layout", list(LAYOUTS))
@torch.inference_mode()
def test_int8_split_kv_reads_what_the_writer_wrote(layout):
    """End to end through the backend's views: upstream's writer fills the
    cache, the split-KV kernel and the unified kernel read it and agree
    with attention on the dequantised cache."""
    torch.set_default_device(DEVICE_TYPE)
    torch.manual_seed(8)
    num_blocks, (nq, nkv), hs, bs = 16, (12, 2), 128, 32
    kv_lens, query_lens = [150, 70], [6, 1]
    kv_cache = make_kv_cache_tensor(num_blocks, nkv, hs, bs, None, layout)
    views = int8_per_token_head_planar_views(kv_cache, hs)
    block_tables = torch.randperm(num_blocks, dtype=torch.int32)[:10].view(2, 5)
    slots = torch.cat(
        [
            (block_tables[i, t // bs].long() * bs + t % bs)
            for i, n in enumerate(kv_lens)
            for t in [torch.arange(n)]
        ]
    )
    key = torch.randn(slots.numel(), nkv, hs, dtype=DTYPE)
    value = torch.randn_like(key)
    triton_reshape_and_cache_flash_per_token_head_quant(
        key, value, *views, slots, kv_quant_mode=KVQuantMode.INT8_PER_TOKEN_HEAD
    )
    query = torch.randn(sum(query_lens), nq, hs, dtype=DTYPE)
    cu_query_lens = torch.tensor([0, 6, 7], dtype=torch.int32)
    k_deq = views[0].float() * views[2][..., None]
    v_deq = views[1].float() * views[3][..., None]
    ref = ref_paged_attn(
        query, k_deq, v_deq, query_lens, kv_lens, block_tables, hs**-0.5
    ).to(DTYPE)
    split, _ = _split_kv(query, views, cu_query_lens, block_tables, query_lens, kv_lens)
    unified = _unified_int8(
        query, *views, cu_query_lens, query_lens, kv_lens, block_tables, 0
    )
    torch.testing.assert_close(split, ref, atol=1.5e-2, rtol=1e-2)
    torch.testing.assert_close(unified, ref, atol=1.5e-2, rtol=1e-2)
    # And the cache holds the written K to int8 precision.
    blocks, offs = slots // bs, slots % bs
    half_step = 0.5001 * views[2][blocks, offs][..., None]
    assert ((k_deq[blocks, offs] - key.float()).abs() <= half_step).all()


@torch.inference_mode()
def test_int8_split_kv_rejects_bad_input():
    torch.set_default_device(DEVICE_TYPE)
    query, caches, cu_query_lens, block_tables = _make_inputs(
        (4, 2), 128, [1], [20], 8, DTYPE
    )
    key_cache, value_cache, k_scale, v_scale = caches[:4]
    kwargs = dict(
        q=query,
        k_cache=key_cache,
        v_cache=value_cache,
        k_scale_cache=k_scale,
        v_scale_cache=v_scale,
        out=torch.empty_like(query),
        cu_seqlens_q=cu_query_lens,
        seqused_k=torch.tensor([20], dtype=torch.int32),
        block_table=block_tables,
        max_query_len=1,
        max_seq_len=20,
        softmax_scale=1.0,
        segm_output=_scratch(4, 128)[0],
        segm_max=_scratch(4, 128)[1],
        segm_expsum=_scratch(4, 128)[2],
    )
    with pytest.raises(ValueError, match="max_query_len"):
        int8_split_kv_attention(**{**kwargs, "max_query_len": MAX_QUERY_LEN + 1})
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        int8_split_kv_attention(**{**kwargs, "q": query.float(), "out": query.float()})
    with pytest.raises(ValueError, match="head_size"):
        int8_split_kv_attention(
            **{**kwargs, "q": query[..., :96], "out": query[..., :96]}
        )
    # V in K's layout (not transposed), and K in V's.
    with pytest.raises(ValueError, match="v_cache must have the planar layout"):
        int8_split_kv_attention(**{**kwargs, "v_cache": key_cache})
    with pytest.raises(ValueError, match="k_cache must have the planar layout"):
        int8_split_kv_attention(**{**kwargs, "k_cache": value_cache})
    with pytest.raises(ValueError, match="scales must be float32"):
        int8_split_kv_attention(**{**kwargs, "k_scale_cache": k_scale.double()})
    with pytest.raises(ValueError, match="power of two"):
        int8_split_kv_attention(
            **{**kwargs, "geometry": Int8SplitKVGeometry(32, 3, 4, 2)}
        )
    # A P.V split that would leave output channels out.
    with pytest.raises(ValueError, match="pv_chunk 48"):
        int8_split_kv_attention(
            **{**kwargs, "geometry": Int8SplitKVGeometry(32, 4, 2, 2, 32, pv_chunk=48)}
        )
    # Warpgroup-MMA programs hold 16 rows per warp; checked before the
    # interpreter's fallback to the swapped kernel, so CPU runs catch it.
    with pytest.raises(ValueError, match="block_m = 16 \\* num_warps"):
        int8_split_kv_attention(
            **{**kwargs, "geometry": Int8SplitKVGeometry(32, 4, 4, 3, 32, wgmma=True)}
        )


@torch.inference_mode()
def test_int8_split_kv_validate_false_skips_the_checks(monkeypatch):
    """validate=False (a caller that checked the layer once and plans the
    geometry per step) runs no argument check and gives the same output."""
    from vllm.v1.attention.ops import triton_int8_split_kv_attention as split_kv

    torch.set_default_device(DEVICE_TYPE)
    query_lens, kv_lens = [1, 6, 3], [40, 77, 18]
    query, caches, cu_query_lens, block_tables = _make_inputs(
        (6, 1), 128, query_lens, kv_lens, 32, DTYPE
    )
    geometry = select_int8_split_kv_geometry(
        max(query_lens),
        max(kv_lens),
        len(kv_lens),
        sum(query_lens),
        MAX_PARTIALS,
        num_queries_per_kv=6,
        num_kv_heads=1,
    )
    args = (query, caches, cu_query_lens, block_tables, query_lens, kv_lens)
    checked, _ = _split_kv(*args, geometry=geometry)
    checks: list[str] = []
    for name in ("_validate_inputs", "_validate_geometry"):
        monkeypatch.setattr(
            split_kv, name, lambda *a, _name=name, **kw: checks.append(_name)
        )
    unchecked, _ = _split_kv(*args, geometry=geometry, validate=False)
    assert checks == []
    torch.testing.assert_close(unchecked, checked, atol=0, rtol=0)
    _split_kv(*args, geometry=geometry)
    assert checks == ["_validate_inputs", "_validate_geometry"]


@pytest.mark.parametrize("capability_major", sorted(GEOMETRY_TABLES))
def test_int8_split_kv_geometry_table(capability_major):
    """The selector returns its family's entry for the step's query rows,
    with a power-of-two number of segments that fits the scratch buffers;
    on Hopper, verify steps of more than 32 rows take the warpgroup-MMA
    kernel, and so do 17-32 rows when the batch holds at most
    WGMMA_SHORT_BATCH_KEYS keys per KV head.
    Entries that split P.V keep their dots and KV tiles no wider than their
    rows (wider ones make Triton spread warps over tokens and channels)."""
    table = GEOMETRY_TABLES[capability_major]
    assert table[-1].max_rows == 16 * MAX_QUERY_LEN and table[-1].max_batch_keys is None
    for g in (entry.geometry for entry in table):
        if g.wgmma:
            assert g.block_m == 16 * g.num_warps and g.tile_size % 16 == 0, g
        if g.pv_chunk:
            assert not g.swap_ab and max(g.pv_chunk, g.tile_size) <= g.block_m, g
    wgmma = next((e.geometry for e in table if e.geometry.wgmma), None)
    for max_query_len in range(1, MAX_QUERY_LEN + 1):
        rows = 6 * max_query_len
        for max_seq_len in (1, 100, 8192, 32768, 131072):
            for num_seqs in (1, 2, 4, 8, 256):
                short = num_seqs * max_seq_len <= 256 * 1024
                # By rows alone, then Hopper's rule for short batches.
                entry = next(
                    e.geometry
                    for e in table
                    if rows <= e.max_rows and e.max_batch_keys is None
                )
                if capability_major == 9 and 16 < rows <= 32 and short:
                    entry = wgmma
                num_tokens = num_seqs * max_query_len
                geo = select_int8_split_kv_geometry(
                    max_query_len,
                    max_seq_len,
                    num_seqs,
                    num_tokens,
                    MAX_PARTIALS,
                    num_queries_per_kv=6,
                    num_kv_heads=4,
                    capability_major=capability_major,
                    num_sms=132,
                )
                segs = geo.num_segments
                assert dataclasses.replace(geo, num_segments=entry.num_segments) == (
                    entry
                )
                assert segs & (segs - 1) == 0 and segs <= entry.num_segments
                # The warpgroup-MMA kernel's consumers write a partial each
                # when they split a segment's tiles (up to block_m rows).
                partials = 2 if entry.wgmma and rows <= entry.block_m else 1
                assert segs == 1 or segs * num_tokens * partials <= MAX_PARTIALS
                if capability_major == 9:
                    assert entry.wgmma == (rows > 32 or (rows > 16 and short))
                else:
                    assert not entry.wgmma


def test_int8_split_kv_geometry_splits_the_window():
    """A sliding-window layer's rows see at most window + q - 1 keys of a
    long context: the selector keeps a few tiles per segment of those (the
    rule for short contexts), not of the whole context; the rest of the
    geometry is the same."""
    kw = dict(num_queries_per_kv=6, num_kv_heads=4, capability_major=9, num_sms=132)
    for q in (1, 6):
        full = select_int8_split_kv_geometry(q, 131072, 1, q, MAX_PARTIALS, **kw)
        windowed = select_int8_split_kv_geometry(
            q, 131072, 1, q, MAX_PARTIALS, sliding_window=2048, **kw
        )
        assert windowed.num_segments * windowed.tile_size * 4 <= 2048 + q - 1
        assert windowed.num_segments < full.num_segments
        assert dataclasses.replace(windowed, num_segments=full.num_segments) == full


def test_int8_split_kv_geometry_scales_with_the_sm_count():
    """Segments fill the multiprocessors the device has: half as many on a
    GPU with half the SMs, and the family's table when it is unknown."""

    def select(num_sms, capability_major=9, max_query_len=1):
        return select_int8_split_kv_geometry(
            max_query_len,
            131072,
            1,
            max_query_len,
            MAX_PARTIALS,
            num_queries_per_kv=6,
            num_kv_heads=4,
            capability_major=capability_major,
            num_sms=num_sms,
        )

    for max_query_len in (1, 6):
        full = select(132, max_query_len=max_query_len).num_segments
        assert select(66, max_query_len=max_query_len).num_segments == full // 2
        assert select(84, max_query_len=max_query_len).num_segments == full // 2
    # Ampere/Ada keep the row-split kernel for every query length.
    assert select(132, 8, max_query_len=6) == next(
        e.geometry for e in GEOMETRY_TABLES[8] if e.max_rows >= 36
    )
    assert not select(132, 8, max_query_len=16).swap_ab
    # Families without a table of their own take the nearest older one.
    assert geometry_table(12) is GEOMETRY_TABLES[9]
    assert geometry_table(7) is GEOMETRY_TABLES[8]


def test_int8_split_kv_geometry_fills_the_gpu_with_fewer_kv_heads():
    """Decode on a tensor-parallel rank with 2 (or 1) of 4 KV heads launches
    as many programs as the whole layer would; the row kernels' verify steps,
    and layers with 4 or more KV heads, keep the table's segments; Hopper's
    warpgroup-MMA verify kernel takes as many segments as fill one wave of
    one program per multiprocessor."""

    def segments(max_query_len, num_kv_heads, num_seqs=1, partials=MAX_PARTIALS):
        return select_int8_split_kv_geometry(
            max_query_len,
            131072,
            num_seqs,
            num_seqs * max_query_len,
            partials,
            # Tensor parallelism keeps the query heads per KV head.
            num_queries_per_kv=6,
            num_kv_heads=num_kv_heads,
            capability_major=9,
            num_sms=132,
        ).num_segments

    for num_kv_heads in (1, 2, 4, 8):
        assert segments(1, num_kv_heads) * min(num_kv_heads, 4) == segments(1, 4) * 4
        assert segments(2, num_kv_heads) == segments(2, 4)
        # 4 tokens at 128K: the row kernel with 4 requests (up to 4 KV heads;
        # more fill the GPU's programs), the warpgroup-MMA kernel with one.
        if num_kv_heads <= 4:
            assert segments(4, num_kv_heads, 4) == segments(4, 4, 4)
        for max_query_len in (4, 6, 16):
            # Up to 128 query rows per program (24, 36 and 96 here).
            programs = num_kv_heads
            wave = 1 << ((132 // programs).bit_length() - 1)
            assert segments(max_query_len, num_kv_heads) == min(32, wave)
    # Larger batches: the decode grid stays about the same size.
    for num_kv_heads in (1, 2, 4):
        grid = 64 * num_kv_heads * segments(1, num_kv_heads, 64, 1 << 20)
        assert grid == 64 * 4 * segments(1, 4, 64, 1 << 20)
    # The scratch buffers still bound the segments.
    assert segments(1, 1, partials=256) == 256


@pytest.mark.parametrize("query_lens", [[6, 1], [1, 1]])
@torch.inference_mode()
def test_int8_split_kv_hybrid_padded_pages(query_lens):
    """Decode and verify on a hybrid model's cache layout: large blocks that
    are not a power of two, at a padded page stride."""
    torch.set_default_device(DEVICE_TYPE)
    torch.manual_seed(7)
    block_size, kv_lens, num_blocks = HYBRID
    num_heads, head_size = (12, 2), 128
    output, ref = _run_split_kv(
        num_heads,
        head_size,
        query_lens,
        kv_lens,
        num_blocks,
        block_size=block_size,
        page_bytes=hybrid_page_bytes(block_size, num_heads[1], head_size),
    )
    torch.testing.assert_close(output, ref, atol=1.5e-2, rtol=1e-2)


def _offline_stats(geometry, block_size, arch, sliding_window=0):
    """Compile the split-KV kernel of ``geometry`` (Triton, or Gluon for the
    warpgroup-MMA one, in both of its row modes) for ``sm_<arch>`` without a
    GPU (Triton's compiler and ptxas) at the Qwen3.5-27B attention shape;
    return the per-thread stack bytes (register spills) cuobjdump reports
    and, for the warpgroup-MMA kernel, whether ptxas serialised its wgmma
    instructions."""
    if geometry.wgmma:
        stats = [
            _offline_compile(geometry, block_size, arch, sliding_window, split)
            for split in (False, True)
        ]
        return {
            "stack": max(st["stack"] for st in stats),
            "wgmma_serialized": any(st["wgmma_serialized"] for st in stats),
            "tile_split_warp_votes": stats[1]["warp_votes"],
        }
    return _offline_compile(geometry, block_size, arch, sliding_window)


def _offline_compile(geometry, block_size, arch, sliding_window, tile_split=False):
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, compile

    from vllm.v1.attention.ops import triton_int8_split_kv_attention as mod

    constants = dict(
        num_query_heads=24,
        NUM_QUERIES_PER_KV=6,
        ROW_SPLITS=1,
        HEAD_SIZE=256,
        BLOCK_SIZE=block_size,
        TILE_SIZE=geometry.tile_size,
        P_LOG2_SCALE=mod.P_LOG2_SCALE,
        RESCALE_THRESHOLD=mod.RESCALE_THRESHOLD,
        SLIDING_WINDOW=sliding_window,
    )
    if geometry.wgmma:
        from triton.experimental.gluon._runtime import GluonASTSource as ASTSource

        from vllm.v1.attention.ops import triton_int8_split_kv_wgmma as wgmma

        kernel = wgmma.kernel_int8_split_kv_verify_wgmma
        constants.update(
            **mod.wgmma_pipeline(geometry, tile_split, sliding_window, block_size),
            TILE_SPLIT=tile_split,
        )
        options = dict(num_warps=geometry.num_warps, maxnreg=wgmma.MAX_REGISTERS)
    else:
        options = dict(num_warps=geometry.num_warps, num_stages=geometry.num_stages)
        constants.update(RUN=mod._run_tokens(block_size, geometry.tile_size), WIDEN=2)
        if geometry.swap_ab:
            kernel = mod.kernel_int8_split_kv_verify
            constants.update(
                TOKENS_PER_PROGRAM=geometry.block_m // 6, BLOCK_R=geometry.block_m
            )
        else:
            kernel = mod.kernel_int8_split_kv_attention
            constants.update(
                BLOCK_M=geometry.block_m, PV_CHUNK=mod._pv_chunk(geometry, 256)
            )
    pointers = {
        "out_ptr": "*bf16",
        "q_ptr": "*bf16",
        "k_cache_ptr": "*i8",
        "v_cache_ptr": "*i8",
        "block_table_ptr": "*i32",
        "seq_lens_ptr": "*i32",
        "query_start_loc_ptr": "*i32",
    }
    signature, aligned = {}, []
    for i, name in enumerate(kernel.arg_names):
        if name in constants:
            signature[name] = "constexpr"
        elif name == "qk_scale":
            signature[name] = "fp32"
        elif name in ("num_segments", "causal"):
            signature[name] = "i32"
        elif name.endswith("_ptr"):
            signature[name] = pointers.get(name, "*fp32")
            aligned.append(i)
        else:
            signature[name] = "i64"
            # The JIT specialises integers divisible by 16; at this shape every
            # stride but the block table's is.
            if name != "block_table_stride":
                aligned.append(i)
    src = ASTSource(
        fn=kernel,
        signature=signature,
        constexprs={(kernel.arg_names.index(k),): v for k, v in constants.items()},
        attrs={(i,): [["tt.divisibility", 16]] for i in aligned},
    )
    compiled = compile(src, target=GPUTarget("cuda", arch, 32), options=options)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(compiled.asm["cubin"])
        usage = subprocess.run(
            [knobs.nvidia.cuobjdump.path, "--dump-resource-usage", path],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        serialized = False
        warp_votes = 0
        if geometry.wgmma:
            sass = subprocess.run(
                [knobs.nvidia.cuobjdump.path, "-sass", path],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            warp_votes = len(re.findall(r"\bVOTE\.ANY\b", sass))
            # ptxas serialises every wgmma of a kernel (each waits for the
            # previous one) when it cannot prove the asynchronous
            # accumulators untouched, and says so only in its verbose log.
            ptx = os.path.join(tmp, "kernel.ptx")
            with open(ptx, "w") as f:
                f.write(compiled.asm["ptx"])
            log = subprocess.run(
                [knobs.nvidia.ptxas.path, f"-arch=sm_{arch}a", "-v", ptx, "-o", path],
                check=True,
                capture_output=True,
                text=True,
            )
            serialized = "instructions are serialized" in log.stdout + log.stderr
    return {
        "stack": int(re.search(r"STACK:(\d+)", usage).group(1)),
        "wgmma_serialized": serialized,
        "warp_votes": warp_votes,
    }


def _offline_toolchain() -> bool:
    try:
        from triton import knobs

        return os.path.exists(knobs.nvidia.cuobjdump.path) and os.path.exists(
            knobs.nvidia.ptxas.path
        )
    except Exception:
        return False


SPILL_ARCHS = (80, 86, 90)
SPILL_BLOCK_SIZES = (16, 64, 1600)


def _distinct_entries(capability_major: int) -> list[int]:
    """The rows of a family's table, the first of each geometry (rows that
    differ only in the batches they cover compile alike)."""
    first: dict[Int8SplitKVGeometry, int] = {}
    for entry, row in enumerate(geometry_table(capability_major)):
        first.setdefault(row.geometry, entry)
    return list(first.values())


# Every (arch, table entry) the selector can return.
SPILL_ENTRIES = [
    (arch, entry) for arch in SPILL_ARCHS for entry in _distinct_entries(arch // 10)
]
# Sliding-window layers compile a variant with a third KV loop (the masked
# tiles at the window's start); checked with 16-token blocks.
SPILL_WINDOW = 2048
# Known spills, in bytes per thread, by (arch, entry, block size): none.
ALLOWED_SPILL_BYTES: dict[tuple[int, int, int], int] = {}
# ...and of the sliding-window variants: sm_80's decode entry (two registers,
# stored before the KV loops and read between them, not inside one).
ALLOWED_WINDOW_SPILL_BYTES = {(80, 0): 8}


def _table_offline_stats() -> dict[str, dict]:
    """Stack bytes (and wgmma serialisation) of every table geometry x block
    size x arch.  Triton's interpreter (CPU CI) replaces the kernels, so
    compile in a subprocess without it."""
    script = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('t', {__file__!r})\n"
        "m = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(m)\n"
        "stats = {f'{e}-{b}-{a}': m._offline_stats("
        "m.geometry_table(a // 10)[e].geometry, b, a) for a, e in m.SPILL_ENTRIES "
        "for b in m.SPILL_BLOCK_SIZES}\n"
        "stats.update({f'{e}-16-{a}-window': m._offline_stats("
        "m.geometry_table(a // 10)[e].geometry, 16, a, m.SPILL_WINDOW) "
        "for a, e in m.SPILL_ENTRIES})\n"
        "print(json.dumps(stats))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    out = subprocess.run(
        [sys.executable, "-c", script],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def table_offline_stats():
    return _table_offline_stats()


@pytest.mark.skipif(
    not _offline_toolchain(), reason="needs Triton's bundled ptxas and cuobjdump"
)
@pytest.mark.parametrize("block_size", SPILL_BLOCK_SIZES)
@pytest.mark.parametrize(("arch", "entry"), SPILL_ENTRIES)
def test_geometry_table_does_not_spill(arch, entry, block_size, table_offline_stats):
    """Every geometry the selector can return compiles for its GPU family
    (SM86: the RTX 30xx / A-series cards this kernel serves; Hopper) without
    register spills beyond the known ones (ALLOWED_SPILL_BYTES); no GPU
    needed."""
    spilled = table_offline_stats[f"{entry}-{block_size}-{arch}"]["stack"]
    allowed = ALLOWED_SPILL_BYTES.get((arch, entry, block_size), 0)
    assert spilled <= allowed, (
        f"{geometry_table(arch // 10)[entry].geometry} spills {spilled} bytes per "
        f"thread on sm_{arch} with {block_size}-token blocks"
    )


@pytest.mark.skipif(
    not _offline_toolchain(), reason="needs Triton's bundled ptxas and cuobjdump"
)
@pytest.mark.parametrize(("arch", "entry"), SPILL_ENTRIES)
def test_sliding_window_variant_does_not_spill(arch, entry, table_offline_stats):
    """The sliding-window variant of every table geometry (a DFlash drafter's
    layers) compiles without spills beyond the known ones, its wgmma kept
    asynchronous."""
    stats = table_offline_stats[f"{entry}-16-{arch}-window"]
    allowed = ALLOWED_WINDOW_SPILL_BYTES.get(
        (arch, entry), ALLOWED_SPILL_BYTES.get((arch, entry, 16), 0)
    )
    assert stats["stack"] <= allowed, (
        f"{geometry_table(arch // 10)[entry].geometry} with a sliding window spills "
        f"{stats['stack']} bytes per thread on sm_{arch}"
    )
    assert not stats["wgmma_serialized"]


def _sm90_wgmma_entries() -> list[int]:
    """The sm_90 table's distinct warpgroup-MMA entries."""
    entries = [
        e for a, e in SPILL_ENTRIES if a == 90 and geometry_table(9)[e].geometry.wgmma
    ]
    assert entries, "the sm_90 table has no warpgroup-MMA entry"
    return entries


@pytest.mark.skipif(
    not _offline_toolchain(), reason="needs Triton's bundled ptxas and cuobjdump"
)
@pytest.mark.parametrize("block_size", SPILL_BLOCK_SIZES)
def test_wgmma_kernel_keeps_its_mma_asynchronous(block_size, table_offline_stats):
    """The Hopper table's warpgroup-MMA entries compile with asynchronous
    wgmma: ptxas does not serialise them (it does, silently except in its
    verbose log, when a wgmma's accumulator is read or written before its
    wait, e.g. a result kept in flight across the loop's back edge)."""
    for entry in _sm90_wgmma_entries():
        stats = table_offline_stats[f"{entry}-{block_size}-90"]
        assert not stats["wgmma_serialized"], (
            f"ptxas serialises the wgmma of {geometry_table(9)[entry].geometry} "
            f"({block_size}-token blocks)"
        )


@pytest.mark.skipif(
    not _offline_toolchain(), reason="needs Triton's bundled ptxas and cuobjdump"
)
@pytest.mark.parametrize("block_size", SPILL_BLOCK_SIZES)
def test_wgmma_alternate_tiles_skip_unmoved_rescales(block_size, table_offline_stats):
    """With up to 64 rows (alternate tiles) the warpgroup-MMA kernel scales
    its accumulator only in warps where some row's softmax reference or the
    V-scale reference moved: a warp vote (VOTE.ANY) and a branch around the
    multiplies, which most tiles take (test_int8_split_kv_growing_scales
    checks the tiles that move on a GPU)."""
    for entry in _sm90_wgmma_entries():
        stats = table_offline_stats[f"{entry}-{block_size}-90"]
        assert stats["tile_split_warp_votes"] >= 1, (
            f"{geometry_table(9)[entry].geometry} ({block_size}-token blocks) "
            "rescales its accumulator on every tile"
        )


def _load_benchmark():
    import importlib.util
    from pathlib import Path

    path = (
        Path(__file__).resolve().parents[3]
        / "benchmarks"
        / "kernels"
        / "benchmark_int8_kv_attention.py"
    )
    spec = importlib.util.spec_from_file_location("benchmark_int8_kv", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_select_leaves_out_spilling_candidates(monkeypatch):
    """benchmark_int8_kv_attention.py --select ranks only candidates whose
    kernels compiled without register spills: here the fastest candidate of
    every row class spills (as reported by the compiled kernel) and the
    second fastest is chosen.  Kernels and timings are stand-ins."""
    bench = _load_benchmark()

    class Compiled:
        def __init__(self, n_spills):
            self.n_spills = n_spills

        def _init_handles(self):
            pass

    variants: dict = {}
    kernel = type("Kernel", (), {})()
    kernel.device_caches = {0: (variants, None, None, None, None)}
    monkeypatch.setattr(bench.split_kv, "kernel_int8_split_kv_attention", kernel)
    monkeypatch.setattr(bench.split_kv, "kernel_int8_split_kv_verify", None)
    monkeypatch.setattr(bench.split_kv, "kernel_int8_split_kv_verify_wgmma", None)
    monkeypatch.setattr(bench, "Case", lambda *args: object())

    def run_case(args, case, rows, geo, only, errors):
        candidates = next(c for c in bench.SELECT_CANDIDATES.values() if geo in c)
        rank = candidates.index(geo)
        # Each candidate compiles its own variant; the first one spills and
        # is the fastest, the second is the fastest that does not spill.
        variants[geo] = Compiled(n_spills=16 if rank == 0 else 0)
        return [{"impl": "int8_split_kv", "us": {0: 1.0, 1: 2.0}.get(rank, 3.0)}]

    monkeypatch.setattr(bench, "run_case", run_case)
    args = type("Args", (), {"select_block_sizes": [16, 1600]})()
    best = bench.select(args, [])
    for max_rows, candidates in bench.SELECT_CANDIDATES.items():
        assert best[max_rows] == candidates[1]
