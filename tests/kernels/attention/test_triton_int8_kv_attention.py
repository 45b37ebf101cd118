# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""INT8 per-token-head KV cache: aligned-row path of the unified Triton
kernel.

On CPU the Triton interpreter runs a representative subset at small sizes
(``TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES=''``); on CUDA the full grid.
"""

import pytest
import torch

from vllm.platforms import current_platform
from vllm.v1.attention.ops.triton_unified_attention import (
    _int8_kv_inline_v_offset,
    unified_attention,
)
from vllm.v1.kv_cache_interface import KVQuantMode

DEVICE_TYPE = "cuda" if current_platform.is_cuda() else "cpu"
FULL = current_platform.is_cuda()

# (num_query_heads, num_kv_heads): GQA ratios 1, 4, 6 and 8.
NUM_HEADS = [(4, 4), (8, 2), (24, 4), (16, 2)] if FULL else [(4, 4), (24, 4)]
HEAD_SIZES = [128, 256]
BLOCK_SIZE = 16
# The Triton interpreter mis-computes bfloat16 dots and int8 -> bfloat16
# casts, so CPU runs use float16.
DTYPE = torch.bfloat16 if FULL else torch.float16


def _quantize_int8_per_token_head(x: torch.Tensor):
    """x: [..., head_size] -> (int8 data, fp32 scale [...])."""
    scale = x.float().abs().amax(dim=-1).clamp(min=1e-6) / 127.0
    data = torch.round(x.float() / scale[..., None]).clamp(-127, 127).to(torch.int8)
    return data, scale


def make_int8_kv_cache(
    num_blocks: int,
    num_kv_heads: int,
    head_size: int,
    dtype: torch.dtype,
    block_size: int = BLOCK_SIZE,
    page_bytes: int | None = None,
):
    """Build the cache exactly as the Triton backend lays it out (NHD).

    ``page_bytes`` (default: the block's own size) is the distance between
    blocks.  A larger value gives a hybrid model's layout: blocks aligned to
    the Mamba state (so not a power of two) in padded pages (see
    ``_reshape_attention_kv_cache``).  The padding holds random bytes, so a
    kernel that reads outside the rows gets garbage.

    Returns (key_cache, value_cache, k_scale, v_scale, k_deq, v_deq): the
    int8 row views ``[num_blocks, block_size, num_kv_heads, head_size + 4]``,
    their inline fp32 scale views ``[num_blocks, block_size, num_kv_heads]``
    and the dequantised fp32 caches ``[..., head_size]``.
    """
    padded = head_size + 4
    row_bytes = num_kv_heads * 2 * padded
    if page_bytes is None:
        page_bytes = block_size * row_bytes
    assert page_bytes >= block_size * row_bytes and page_bytes % 4 == 0
    storage = torch.randint(-128, 128, (num_blocks * page_bytes,), dtype=torch.int8)
    raw = torch.as_strided(
        storage,
        (num_blocks, block_size, num_kv_heads, 2 * padded),
        (page_bytes, row_bytes, 2 * padded, 1),
    )
    words = raw.view(torch.float32)
    key = torch.randn(num_blocks, block_size, num_kv_heads, head_size, dtype=dtype)
    value = torch.randn_like(key)
    deq = []
    for half, x in enumerate((key, value)):
        data, scale = _quantize_int8_per_token_head(x)
        raw[..., half * padded : half * padded + head_size] = data
        words[..., (half * padded + head_size) // 4] = scale
        deq.append(data.float() * scale[..., None])
    key_cache, value_cache = raw.split(padded, dim=-1)
    k_scale = words[..., head_size // 4]
    v_scale = words[..., (padded + head_size) // 4]
    return key_cache, value_cache, k_scale, v_scale, deq[0], deq[1]


# (block size, kv_lens, blocks) of a hybrid model's cache: Qwen3.5-27B's
# INT8 block on CUDA, a small non-power-of-two block on the interpreter.
HYBRID = (1600, [4000, 1700], 8) if FULL else (208, [450, 90], 6)


def hybrid_page_bytes(block_size: int, num_kv_heads: int, head_size: int) -> int:
    """A padded page: the block's rows plus 1,040 bytes."""
    return block_size * num_kv_heads * 2 * (head_size + 4) + 4 * 260


def ref_paged_attn(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    query_lens: list[int],
    kv_lens: list[int],
    block_tables: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """fp32 causal attention; key_cache: [num_blocks, block_size, nkv, hs]."""
    block_tables = block_tables.cpu()
    _, block_size, num_kv_heads, head_size = key_cache.shape
    outputs = []
    start = 0
    for query_len, kv_len, blocks in zip(query_lens, kv_lens, block_tables):
        q = query[start : start + query_len].float() * scale
        start += query_len
        num_kv_blocks = (kv_len + block_size - 1) // block_size
        k = key_cache[blocks[:num_kv_blocks]].reshape(-1, num_kv_heads, head_size)
        v = value_cache[blocks[:num_kv_blocks]].reshape(-1, num_kv_heads, head_size)
        k, v = k[:kv_len].float(), v[:kv_len].float()
        group = q.shape[1] // num_kv_heads
        k = torch.repeat_interleave(k, group, dim=1)
        v = torch.repeat_interleave(v, group, dim=1)
        attn = torch.einsum("qhd,khd->hqk", q, k)
        mask = torch.triu(
            torch.ones(query_len, kv_len), diagonal=kv_len - query_len + 1
        ).bool()
        attn.masked_fill_(mask, float("-inf"))
        attn = torch.softmax(attn, dim=-1)
        outputs.append(torch.einsum("hqk,khd->qhd", attn, v))
    return torch.cat(outputs, dim=0)


def _make_inputs(
    num_heads,
    head_size,
    query_lens,
    kv_lens,
    num_blocks,
    dtype,
    block_size=BLOCK_SIZE,
    page_bytes=None,
):
    num_query_heads, num_kv_heads = num_heads
    caches = make_int8_kv_cache(
        num_blocks, num_kv_heads, head_size, dtype, block_size, page_bytes
    )
    query = torch.randn(sum(query_lens), num_query_heads, head_size, dtype=dtype)
    cu_query_lens = torch.tensor([0] + query_lens, dtype=torch.int32).cumsum(
        dim=0, dtype=torch.int32
    )
    max_blocks = (max(kv_lens) + block_size - 1) // block_size
    block_tables = torch.randint(
        0, num_blocks, (len(kv_lens), max_blocks), dtype=torch.int32
    )
    return query, caches, cu_query_lens, block_tables


def _unified_int8(
    query,
    key_cache,
    value_cache,
    k_scale,
    v_scale,
    cu_query_lens,
    query_lens,
    kv_lens,
    block_tables,
    seq_threshold_3D,
):
    """Upstream's unified kernel on an INT8 per-token-head cache."""
    num_query_heads, head_size = query.shape[1:]
    segments = 16
    output = torch.empty_like(query)
    unified_attention(
        q=query,
        k=key_cache,
        v=value_cache,
        out=output,
        cu_seqlens_q=cu_query_lens,
        seqused_k=torch.tensor(kv_lens, dtype=torch.int32),
        max_seqlen_q=max(query_lens),
        max_seqlen_k=max(kv_lens),
        softmax_scale=head_size**-0.5,
        causal=True,
        window_size=(-1, -1),
        block_table=block_tables,
        softcap=0,
        q_descale=None,
        k_descale=None,
        v_descale=None,
        seq_threshold_3D=seq_threshold_3D,
        num_par_softmax_segments=segments,
        softmax_segm_output=torch.empty(
            seq_threshold_3D, num_query_heads, segments, head_size
        ),
        softmax_segm_max=torch.empty(seq_threshold_3D, num_query_heads, segments),
        softmax_segm_expsum=torch.empty(seq_threshold_3D, num_query_heads, segments),
        kv_quant_mode=KVQuantMode.INT8_PER_TOKEN_HEAD,
        k_scale_cache=k_scale,
        v_scale_cache=v_scale,
    )
    return output


@pytest.mark.parametrize("num_heads", NUM_HEADS)
@pytest.mark.parametrize("head_size", HEAD_SIZES)
@pytest.mark.parametrize("seq_threshold_3D", [0, 8])
@pytest.mark.parametrize("inline_scales", [True, False])
@torch.inference_mode()
def test_unified_attention_int8_per_token_head(
    num_heads, head_size, seq_threshold_3D, inline_scales
):
    """Upstream's unified kernel on the INT8 cache: aligned row loads with
    inline scales, and the byte path when scales live elsewhere."""
    torch.set_default_device(DEVICE_TYPE)
    torch.manual_seed(4)
    query_lens, kv_lens = [1, 6, 1], [130, 53, 301]
    query, caches, cu_query_lens, block_tables = _make_inputs(
        num_heads, head_size, query_lens, kv_lens, 2048 if FULL else 256, DTYPE
    )
    key_cache, value_cache, k_scale, v_scale, k_deq, v_deq = caches
    if not inline_scales:
        key_cache = key_cache[..., :head_size].contiguous()
        value_cache = value_cache[..., :head_size].contiguous()
        k_scale, v_scale = k_scale.contiguous(), v_scale.contiguous()
    # The launcher takes the aligned path exactly for the backend's layout.
    v_offset = _int8_kv_inline_v_offset(
        key_cache, value_cache, k_scale, v_scale, head_size
    )
    assert (v_offset == head_size + 4) if inline_scales else (v_offset == -1)
    output = _unified_int8(
        query,
        key_cache,
        value_cache,
        k_scale,
        v_scale,
        cu_query_lens,
        query_lens,
        kv_lens,
        block_tables,
        seq_threshold_3D,
    )
    scale = head_size**-0.5
    ref = ref_paged_attn(
        query, k_deq, v_deq, query_lens, kv_lens, block_tables, scale
    ).to(query.dtype)
    torch.testing.assert_close(output, ref, atol=1.5e-2, rtol=1e-2)


@torch.inference_mode()
def test_unified_attention_int8_hybrid_padded_pages():
    """Upstream's kernel (aligned path) on a hybrid model's cache layout."""
    torch.set_default_device(DEVICE_TYPE)
    torch.manual_seed(6)
    block_size, kv_lens, num_blocks = HYBRID
    num_heads, head_size, query_lens = (8, 2), 128, [6, 1]
    page_bytes = hybrid_page_bytes(block_size, num_heads[1], head_size)
    query, caches, cu_query_lens, block_tables = _make_inputs(
        num_heads,
        head_size,
        query_lens,
        kv_lens,
        num_blocks,
        DTYPE,
        block_size,
        page_bytes,
    )
    key_cache, value_cache, k_scale, v_scale, k_deq, v_deq = caches
    assert key_cache.stride(0) == page_bytes
    assert (
        _int8_kv_inline_v_offset(key_cache, value_cache, k_scale, v_scale, head_size)
        == head_size + 4
    )
    output = _unified_int8(
        query,
        key_cache,
        value_cache,
        k_scale,
        v_scale,
        cu_query_lens,
        query_lens,
        kv_lens,
        block_tables,
        seq_threshold_3D=0,
    )
    ref = ref_paged_attn(
        query, k_deq, v_deq, query_lens, kv_lens, block_tables, head_size**-0.5
    ).to(query.dtype)
    torch.testing.assert_close(output, ref, atol=1.5e-2, rtol=1e-2)
