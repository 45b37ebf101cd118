# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""INT8 per-token-head KV cache: the planar page layout of the Triton backend,
its writer and its readers.

On CPU the Triton interpreter runs a representative subset at small sizes
(``TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES=''``); on CUDA the full grid.
"""

import pytest
import torch

from vllm.platforms import current_platform
from vllm.v1.attention.backends.triton_attn import (
    TritonAttentionBackend,
    int8_per_token_head_planar_views,
)
from vllm.v1.attention.ops.triton_reshape_and_cache_flash import (
    triton_reshape_and_cache_flash_per_token_head_quant,
)
from vllm.v1.attention.ops.triton_unified_attention import unified_attention
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVQuantMode,
    compute_layer_kv_cache_shape_bytes,
)

DEVICE_TYPE = "cuda" if current_platform.is_cuda() else "cpu"
FULL = current_platform.is_cuda()

# (num_query_heads, num_kv_heads): GQA ratios 1, 4, 6 and 8.
NUM_HEADS = [(4, 4), (8, 2), (24, 4), (16, 2)] if FULL else [(4, 4), (24, 4)]
HEAD_SIZES = [128, 256]
BLOCK_SIZE = 16
# The Triton interpreter mis-computes bfloat16 dots and int8 -> bfloat16
# casts, so CPU runs use float16.
DTYPE = torch.bfloat16 if FULL else torch.float16
# Physical orders of the logical (blocks, heads, slots, bytes) cache.
LAYOUTS = {"NHD": (0, 2, 1, 3), "HND": (0, 1, 2, 3)}


@pytest.fixture(autouse=True)
def _restore_default_device():
    """Tests here set the default device; do not leak it to other modules."""
    yield
    torch.set_default_device(None)


def _quantize_int8_per_token_head(x: torch.Tensor):
    """x: [..., head_size] -> (int8 data, fp32 scale [...])."""
    scale = x.float().abs().amax(dim=-1).clamp(min=1e-6) / 127.0
    data = torch.round(x.float() / scale[..., None]).clamp(-127, 127).to(torch.int8)
    return data, scale


def make_kv_cache_tensor(
    num_blocks: int,
    num_kv_heads: int,
    head_size: int,
    block_size: int = BLOCK_SIZE,
    page_bytes: int | None = None,
    layout: str = "NHD",
) -> torch.Tensor:
    """The backend's logical int8 cache over random bytes.

    ``page_bytes`` (default: the block's own size) is the distance between
    blocks; a larger value gives a hybrid model's padded pages (see
    ``_reshape_attention_kv_cache``), whose padding holds random bytes.
    """
    spec = FullAttentionSpec(
        block_size=block_size,
        num_kv_heads=num_kv_heads,
        head_size=head_size,
        dtype=torch.int8,
        kv_quant_mode=KVQuantMode.INT8_PER_TOKEN_HEAD,
    )
    spec = TritonAttentionBackend.customize_spec(spec)
    shape = compute_layer_kv_cache_shape_bytes(spec, num_blocks)
    block_bytes = shape[1] * shape[2] * shape[3]
    if page_bytes is None:
        page_bytes = block_bytes
    assert page_bytes >= block_bytes and page_bytes % 16 == 0
    storage = torch.randint(-128, 128, (num_blocks * page_bytes,), dtype=torch.int8)
    order = LAYOUTS[layout]
    physical = [shape[i] for i in order]
    strides = [0] * 4
    step = 1
    for dim in reversed(range(1, 4)):
        strides[order[dim]] = step
        step *= physical[dim]
    strides[0] = page_bytes
    return torch.as_strided(storage, shape, strides)


def make_int8_kv_cache(
    num_blocks: int,
    num_kv_heads: int,
    head_size: int,
    dtype: torch.dtype,
    block_size: int = BLOCK_SIZE,
    page_bytes: int | None = None,
    layout: str = "NHD",
):
    """A filled cache in the backend's planar layout.

    Returns (key_cache, value_cache, k_scale, v_scale, k_deq, v_deq): the
    views of ``int8_per_token_head_planar_views`` and the dequantised fp32
    caches ``[num_blocks, block_size, num_kv_heads, head_size]``.
    """
    kv_cache = make_kv_cache_tensor(
        num_blocks, num_kv_heads, head_size, block_size, page_bytes, layout
    )
    views = int8_per_token_head_planar_views(kv_cache, head_size)
    key = torch.randn(num_blocks, block_size, num_kv_heads, head_size, dtype=dtype)
    value = torch.randn_like(key)
    deq = []
    for x, data_view, scale_view in (
        (key, views[0], views[2]),
        (value, views[1], views[3]),
    ):
        data, scale = _quantize_int8_per_token_head(x)
        data_view.copy_(data)
        scale_view.copy_(scale)
        deq.append(data.float() * scale[..., None])
    return (*views, deq[0], deq[1])


# (block size, kv_lens, blocks) of a hybrid model's cache: Qwen3.5-27B's
# INT8 block on CUDA, a small non-power-of-two block on the interpreter.
HYBRID = (1600, [4000, 1700], 8) if FULL else (208, [450, 90], 6)


def hybrid_page_bytes(block_size: int, num_kv_heads: int, head_size: int) -> int:
    """A padded page: the block's bytes plus 1,040 bytes."""
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


def _byte_offsets(view: torch.Tensor) -> torch.Tensor:
    """Storage byte offset of every element of a strided view."""
    offsets = torch.zeros(view.shape, dtype=torch.int64)
    for dim, (size, stride) in enumerate(zip(view.shape, view.stride())):
        shape = [1] * view.dim()
        shape[dim] = size
        offsets += torch.arange(size).view(shape) * stride
    offsets += view.storage_offset()
    return offsets * view.element_size()


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("page_padding", [0, 1040])
def test_planar_views_partition_each_block(layout, page_padding):
    """K, V and the scales tile each (block, head) region exactly, in the
    documented order: [K rows | V^T rows | K scales | V scales]."""
    num_blocks, nkv, hs, bs = 3, 2, 64, 16
    record = 2 * (hs + 4)
    page = bs * nkv * record + page_padding
    kv_cache = make_kv_cache_tensor(num_blocks, nkv, hs, bs, page, layout)
    key, value, k_scale, v_scale = int8_per_token_head_planar_views(kv_cache, hs)
    offsets = [_byte_offsets(v) for v in (key, value, k_scale, v_scale)]
    every = torch.cat([o.flatten() for o in offsets[:2]])
    for o in offsets[2:]:  # 4 bytes per scale
        every = torch.cat([every, (o[..., None] + torch.arange(4)).flatten()])
    # Every byte of every block's (slot, head) records, once, none outside.
    expected = _byte_offsets(kv_cache).flatten()
    assert torch.equal(every.sort().values, expected.sort().values)

    chunk = bs * record
    head_stride = kv_cache.stride(1) if layout == "HND" else chunk
    for block, slot, head, dim in [(0, 0, 0, 0), (2, 15, 1, 63), (1, 7, 1, 9)]:
        base = block * page + head * head_stride
        assert offsets[0][block, slot, head, dim] == base + slot * hs + dim
        assert offsets[1][block, slot, head, dim] == base + bs * hs + dim * bs + slot
        assert offsets[2][block, slot, head] == base + 2 * bs * hs + 4 * slot
        assert offsets[3][block, slot, head] == base + 2 * bs * hs + 4 * (bs + slot)


def test_planar_views_reject_unsupported_caches():
    kv_cache = make_kv_cache_tensor(2, 2, 64)
    with pytest.raises(ValueError, match="bytes per"):
        int8_per_token_head_planar_views(kv_cache, 128)
    # Slots with gaps between them: a (block, head) region is not contiguous.
    gapped = torch.as_strided(
        torch.zeros(2 * 4 * 16 * 136 * 2, dtype=torch.int8),
        kv_cache.shape,
        (4 * 16 * 136 * 2, 136, 2 * 2 * 136, 1),
    )
    with pytest.raises(ValueError, match="contiguous"):
        int8_per_token_head_planar_views(gapped, 64)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@torch.inference_mode()
def test_writer_fills_planar_views(layout):
    """Upstream's per-token-head writer, given the planar views, stores what
    a PyTorch quantizer computes, and touches no other block."""
    torch.set_default_device(DEVICE_TYPE)
    torch.manual_seed(3)
    num_blocks, nkv, hs, bs = 6, 2, 128, 32
    kv_cache = make_kv_cache_tensor(num_blocks, nkv, hs, bs, None, layout)
    key_cache, value_cache, k_scale, v_scale = int8_per_token_head_planar_views(
        kv_cache, hs
    )
    before = kv_cache.clone()
    slots = torch.cat([2 * bs + torch.arange(bs), 4 * bs + torch.arange(5)])
    key = torch.randn(slots.numel(), nkv, hs, dtype=DTYPE)
    value = torch.randn_like(key)
    triton_reshape_and_cache_flash_per_token_head_quant(
        key,
        value,
        key_cache,
        value_cache,
        k_scale,
        v_scale,
        slots,
        kv_quant_mode=KVQuantMode.INT8_PER_TOKEN_HEAD,
    )
    blocks, offs = slots // bs, slots % bs
    for src, data, scale in ((key, key_cache, k_scale), (value, value_cache, v_scale)):
        ref_scale = src.float().abs().amax(-1) / 127.0
        torch.testing.assert_close(scale[blocks, offs], ref_scale, rtol=1e-6, atol=0)
        scaled = src.float() / scale[blocks, offs][..., None]
        # Rounded to the nearest integer (ties may go either way: the
        # writer multiplies by a reciprocal).
        assert ((data[blocks, offs].float() - scaled).abs() <= 0.5 + 1e-4).all()
    untouched = [b for b in range(num_blocks) if b not in (2, 4)]
    assert torch.equal(kv_cache[untouched], before[untouched])


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
@torch.inference_mode()
def test_unified_attention_int8_planar(num_heads, head_size, seq_threshold_3D):
    """Upstream's unified kernel (sliding-window and other layers the
    split-KV kernel does not take) reads the planar views."""
    torch.set_default_device(DEVICE_TYPE)
    torch.manual_seed(4)
    query_lens, kv_lens = [1, 6, 1], [130, 53, 301]
    query, caches, cu_query_lens, block_tables = _make_inputs(
        num_heads, head_size, query_lens, kv_lens, 2048 if FULL else 256, DTYPE
    )
    key_cache, value_cache, k_scale, v_scale, k_deq, v_deq = caches
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
    """Upstream's kernel on a hybrid model's cache layout: large blocks that
    are not a power of two, at a padded page stride."""
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
