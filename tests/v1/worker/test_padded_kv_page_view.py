# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The worker's strided view of a padded KV page that holds several kernel
blocks (a KV cache block split into smaller kernel blocks) puts each kernel
block inside its own sub-page of the page."""

from dataclasses import replace

import pytest
import torch

from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVQuantMode,
    SlidingWindowSpec,
)
from vllm.v1.worker.gpu.attn_utils import _reshape_attention_kv_cache

INT8_PTH = KVQuantMode.INT8_PER_TOKEN_HEAD
# A Qwen3.5-27B-like INT8 per-token-head target page (4 KV heads x 256, block
# 1600: 3,328,000 bytes) pads a DFlash drafter's sliding-window pages (8 KV
# heads x 128).  With an 800-token drafter block, one padded page holds one
# block of 800 x 8 x 2 x (128 + 4) bytes, which a backend may split into
# kernel blocks of 16 tokens or more.
TARGET = FullAttentionSpec(
    block_size=1600,
    num_kv_heads=4,
    head_size=256,
    dtype=torch.int8,
    kv_quant_mode=INT8_PTH,
    indexes_kv_by_block_stride=True,
)
DRAFTER = SlidingWindowSpec(
    block_size=16,
    num_kv_heads=8,
    head_size=128,
    dtype=torch.int8,
    kv_quant_mode=INT8_PTH,
    sliding_window=2048,
    indexes_kv_by_block_stride=True,
)
# The Triton backend's stride order for its (blocks, heads, slots, 2 * (hs + 4))
# cache shape in the default NHD layout: (blocks, slots, heads, ...) in memory.
NHD = (0, 2, 1, 3)


def _padded_int8_cache(kernel_block_size: int, num_pages: int = 2):
    spec = replace(DRAFTER, block_size=16 * 50, page_size_padded=TARGET.page_size_bytes)
    raw = torch.zeros(num_pages * spec.page_size_bytes, dtype=torch.int8)
    kernel_blocks = num_pages * spec.block_size // kernel_block_size
    shape = TritonAttentionBackend.get_kv_cache_shape(
        kernel_blocks,
        kernel_block_size,
        spec.num_kv_heads,
        spec.head_size,
        cache_dtype_str="int8_per_token_head",
    )
    cache = _reshape_attention_kv_cache(raw, spec, shape, NHD, kernel_blocks, None)
    return spec, raw, cache


@pytest.mark.parametrize("kernel_block_size", [16 * 50, 16 * 10, 16])
def test_padded_view_puts_kernel_blocks_inside_their_page(kernel_block_size):
    spec, raw, cache = _padded_int8_cache(kernel_block_size)
    per_page = spec.block_size // kernel_block_size
    sub_page = spec.page_size_bytes // per_page
    token_bytes = spec.num_kv_heads * 2 * (spec.head_size + 4)
    assert cache.shape[2] == kernel_block_size

    def mark(block: int) -> int:
        return block % 120 + 1  # fits int8, never 0

    # Mark every byte the view can address with its kernel block.
    for block in range(cache.shape[0]):
        cache[block].fill_(mark(block))
    pages = raw.view(-1, spec.page_size_bytes)
    used_bytes = kernel_block_size * token_bytes
    for page in range(pages.shape[0]):
        for j in range(per_page):
            # Manager page p holds kernel blocks p * r .. p * r + r - 1, each
            # at the start of its own sub-page; the rest stays untouched.
            sub = pages[page, j * sub_page : (j + 1) * sub_page]
            assert (sub[:used_bytes] == mark(page * per_page + j)).all()
            assert (sub[used_bytes:] == 0).all()


def test_padded_view_refuses_uneven_kernel_split():
    spec = replace(DRAFTER, block_size=16 * 50, page_size_padded=TARGET.page_size_bytes)
    raw = torch.zeros(2 * spec.page_size_bytes, dtype=torch.int8)
    # Three kernel blocks per page: 3,328,000 bytes have no uniform stride.
    kernel_blocks = 2 * 3
    shape = TritonAttentionBackend.get_kv_cache_shape(
        kernel_blocks, 16, spec.num_kv_heads, spec.head_size, "int8_per_token_head"
    )
    with pytest.raises(ValueError, match="uniform stride"):
        _reshape_attention_kv_cache(raw, spec, shape, NHD, kernel_blocks, None)
