# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Sectioned INT8 per-token-head prefill against a PyTorch reference.

The dequant kernel and ``merge_attn_states`` run for real (Triton, or the
Triton interpreter on CPU); the per-section attention is a plain-PyTorch
callable with the FlashAttention (out, lse) contract, so the test also runs
where FlashAttention does not.
"""

import math

import pytest
import torch

from vllm.platforms import current_platform
from vllm.v1.attention.backends.triton_attn import (
    TritonAttentionBackend,
    TritonAttentionImpl,
    int8_per_token_head_planar_views,
)
from vllm.v1.attention.ops.triton_int8_sectioned_prefill import (
    build_sectioned_prefill_metadata,
    dequant_int8_pth_section,
    sectioned_prefill_attention,
    sectioned_prefill_workspace_shapes,
)

DEVICE = "cuda" if current_platform.is_cuda() else "cpu"
BLOCK_SIZE = 16
# Small sections and query tiles so that CPU runs cross every boundary.
SECTION_TOKENS = 64
QUERY_TILE_TOKENS = 32


def sdpa_section_attn(q, k, v, out, cu_q, cu_k, max_q, max_k, causal, scale):
    """Reference for the FlashAttention varlen (out, lse) contract."""
    assert cu_q.tolist() == [0, q.shape[0]] and max_q == q.shape[0]
    assert cu_k.tolist() == [0, k.shape[0]] and max_k == k.shape[0]
    group = q.shape[1] // k.shape[1]
    qf = q.float().transpose(0, 1)
    kf = k.float().repeat_interleave(group, dim=1).transpose(0, 1)
    vf = v.float().repeat_interleave(group, dim=1).transpose(0, 1)
    scores = qf @ kf.transpose(-1, -2) * scale
    if causal:
        nq, nk = q.shape[0], k.shape[0]
        rows = torch.arange(nq, device=q.device)[:, None] + (nk - nq)
        visible = torch.arange(nk, device=q.device)[None, :] <= rows
        scores = scores.masked_fill(~visible, float("-inf"))
    out.copy_((scores.softmax(-1) @ vf).transpose(0, 1))
    return torch.logsumexp(scores, dim=-1).contiguous()


def make_int8_cache(num_blocks, num_kv_heads, head_size, layout="NHD"):
    """Packed per-token-head cache as the Triton backend allocates it."""
    shape = TritonAttentionBackend.get_kv_cache_shape(
        num_blocks, BLOCK_SIZE, num_kv_heads, head_size, "int8_per_token_head"
    )
    order = (0, 2, 1, 3) if layout == "NHD" else (0, 1, 2, 3)
    inv = [order.index(i) for i in range(4)]
    # Random bytes, so that reading a wrong slot cannot go unnoticed.
    raw = torch.randint(
        -128, 128, [shape[i] for i in order], dtype=torch.int8, device=DEVICE
    )
    return raw.permute(*inv)


def torch_dequant(kv_cache, block_table_row, positions, head_size):
    """[len(positions), num_kv_heads, head_size] fp32 K and V, read through
    the backend's views with plain indexing."""
    key, value, k_scale, v_scale = int8_per_token_head_planar_views(kv_cache, head_size)
    blocks = block_table_row[positions // BLOCK_SIZE].long()
    slots = positions % BLOCK_SIZE
    return [
        data[blocks, slots].float() * scale[blocks, slots][..., None]
        for data, scale in ((key, k_scale), (value, v_scale))
    ]


def write_requests(impl, kv_cache, seq_lens, num_kv_heads, head_size, dtype):
    """Random per-request K/V written through the backend's cache update."""
    max_blocks = max(math.ceil(s / BLOCK_SIZE) for s in seq_lens)
    perm = torch.randperm(kv_cache.shape[0], device=DEVICE).to(torch.int32)
    block_table = perm[: len(seq_lens) * max_blocks].view(len(seq_lens), max_blocks)
    keys, values = [], []
    for i, seq_len in enumerate(seq_lens):
        k = torch.randn(seq_len, num_kv_heads, head_size, device=DEVICE, dtype=dtype)
        v = torch.randn_like(k)
        pos = torch.arange(seq_len, device=DEVICE)
        slots = block_table[i, pos // BLOCK_SIZE].long() * BLOCK_SIZE
        impl.do_kv_cache_update(None, k, v, kv_cache, slots + pos % BLOCK_SIZE)
        keys.append(k)
        values.append(v)
    return block_table, keys, values


def one_request_and_nan_buffers(head_size, layout, out_rows, num_kv_heads=2):
    """A cache holding one random 64-token request, and NaN-filled K/V
    buffers of ``out_rows`` rows for the dequantiser."""
    torch.manual_seed(0)
    impl = TritonAttentionImpl(
        4, head_size, 1.0, num_kv_heads, None, None, "int8_per_token_head"
    )
    kv_cache = make_int8_cache(16, num_kv_heads, head_size, layout)
    block_table, _, _ = write_requests(
        impl, kv_cache, [64], num_kv_heads, head_size, torch.bfloat16
    )
    key_out = torch.full(
        (out_rows, num_kv_heads, head_size),
        float("nan"),
        dtype=torch.bfloat16,
        device=DEVICE,
    )
    return kv_cache, block_table, key_out, torch.full_like(key_out, float("nan"))


@pytest.mark.parametrize("head_size", [64, 256])
@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("start,length", [(0, 16), (5, 40), (13, 3), (0, 0)])
def test_dequant_section(head_size, layout, start, length):
    kv_cache, block_table, key_out, value_out = one_request_and_nan_buffers(
        head_size, layout, 48
    )
    dequant_int8_pth_section(
        int8_per_token_head_planar_views(kv_cache, head_size),
        block_table,
        0,
        start,
        length,
        key_out,
        value_out,
    )
    pos = torch.arange(start, start + length, device=DEVICE)
    ref_k, ref_v = torch_dequant(kv_cache, block_table[0], pos, head_size)
    torch.testing.assert_close(key_out[:length], ref_k.to(torch.bfloat16))
    torch.testing.assert_close(value_out[:length], ref_v.to(torch.bfloat16))
    # Rows past the section are left alone.
    assert key_out[length:].isnan().all() and value_out[length:].isnan().all()


@pytest.mark.parametrize("start,length,num_new", [(5, 40, 7), (0, 16, 16), (0, 0, 9)])
def test_dequant_section_then_new_tokens(start, length, num_new):
    """The step's own tokens are copied, unquantised, right after the
    section by the same launch (the single-call path's key/value rows)."""
    num_kv_heads, head_size = 2, 64
    kv_cache, block_table, key_out, value_out = one_request_and_nan_buffers(
        head_size, "NHD", 64, num_kv_heads
    )
    # As a model with a key norm hands them to the layer: a fresh key and a
    # value that is a view of the fused QKV (different strides).
    qkv = torch.randn(
        num_new, 3, num_kv_heads, head_size, dtype=torch.bfloat16, device=DEVICE
    )
    new_key, new_value = qkv[:, 1].contiguous(), qkv[:, 2]
    assert new_key.stride() != new_value.stride()
    dequant_int8_pth_section(
        int8_per_token_head_planar_views(kv_cache, head_size),
        block_table,
        0,
        start,
        length,
        key_out,
        value_out,
        new_key=new_key,
        new_value=new_value,
    )
    pos = torch.arange(start, start + length, device=DEVICE)
    ref_k, ref_v = torch_dequant(kv_cache, block_table[0], pos, head_size)
    end = length + num_new
    torch.testing.assert_close(key_out[:length], ref_k.to(torch.bfloat16))
    torch.testing.assert_close(value_out[:length], ref_v.to(torch.bfloat16))
    assert torch.equal(key_out[length:end], new_key)
    assert torch.equal(value_out[length:end], new_value)
    assert key_out[end:].isnan().all() and value_out[end:].isnan().all()


# (context_len, query_len) per request.  Context lengths cover: no context,
# shorter than a section, exactly one section, several sections with a
# remainder, block-boundary offsets; query lengths cover one and several
# query tiles.  Context and own tokens fit one section (one call) in
# "no_context", "short_context", "fills_a_section" and "block_edges".
CASES = {
    "no_context": [(0, 40)],
    "short_context": [(37, 20)],
    "fills_a_section": [(SECTION_TOKENS - 20, 20)],
    "just_over_a_section": [(SECTION_TOKENS - 19, 20)],
    "one_section": [(SECTION_TOKENS, 33)],
    "sections": [(3 * SECTION_TOKENS + 5, 70)],
    "block_edges": [(BLOCK_SIZE - 1, 1), (2 * BLOCK_SIZE, BLOCK_SIZE + 1)],
    "several": [(0, 17), (SECTION_TOKENS + 1, 5), (150, 64), (9, 31)],
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("num_heads,num_kv_heads", [(6, 2)])
@pytest.mark.parametrize("head_size", [64])
@pytest.mark.parametrize("dtype", [torch.bfloat16])
def test_sectioned_prefill(case, num_heads, num_kv_heads, head_size, dtype):
    torch.manual_seed(0)
    reqs = CASES[case]
    seq_lens = [c + q for c, q in reqs]
    query_lens = [q for _, q in reqs]
    num_blocks = len(reqs) * math.ceil(max(seq_lens) / BLOCK_SIZE) + 8
    scale = head_size**-0.5
    impl = TritonAttentionImpl(
        num_heads, head_size, scale, num_kv_heads, None, None, "int8_per_token_head"
    )
    kv_cache = make_int8_cache(num_blocks, num_kv_heads, head_size)
    block_table, keys, values = write_requests(
        impl, kv_cache, seq_lens, num_kv_heads, head_size, dtype
    )

    # Step token arrays: each request's new tokens, in request order.
    query = torch.randn(
        sum(query_lens), num_heads, head_size, dtype=dtype, device=DEVICE
    )
    key = torch.cat([k[c:] for k, (c, _) in zip(keys, reqs)])
    # The value a view of a wider tensor, as a model with a key norm hands
    # the layer a fresh key next to a view of the fused QKV.
    value = torch.cat(
        [torch.cat([v[c:], v[c:]], dim=1) for v, (c, _) in zip(values, reqs)]
    )[:, num_kv_heads:]
    query_start_loc = torch.tensor([0] + query_lens).cumsum(0).to(torch.int32)

    metadata = build_sectioned_prefill_metadata(
        query_start_loc,
        torch.tensor(seq_lens, dtype=torch.int32),
        first_request=0,
        device=torch.device(DEVICE),
        section_tokens=SECTION_TOKENS,
        query_tile_tokens=QUERY_TILE_TOKENS,
    )
    shapes = sectioned_prefill_workspace_shapes(
        num_heads, num_kv_heads, head_size, dtype, SECTION_TOKENS, QUERY_TILE_TOKENS
    )
    # Poisoned: the kernels must write every scratch element they read.
    scratch = [torch.full(s, float("nan"), dtype=d, device=DEVICE) for s, d in shapes]

    output = torch.full_like(query, float("nan"))
    sectioned_prefill_attention(
        query,
        key,
        value,
        int8_per_token_head_planar_views(kv_cache, head_size),
        block_table,
        output,
        metadata,
        scale,
        *scratch,
        attn_fn=sdpa_section_attn,
    )

    for i, (context_len, query_len) in enumerate(reqs):
        q0 = int(query_start_loc[i])
        pos = torch.arange(context_len, device=DEVICE)
        ctx_k, ctx_v = torch_dequant(kv_cache, block_table[i], pos, head_size)
        # The request's own tokens come unquantised from the step.
        ref_k = torch.cat([ctx_k.to(dtype), key[q0 : q0 + query_len]])
        ref_v = torch.cat([ctx_v.to(dtype), value[q0 : q0 + query_len]])
        ref = torch.empty(query_len, num_heads, head_size, device=DEVICE)
        cu = torch.tensor([0, query_len])
        sdpa_section_attn(
            query[q0 : q0 + query_len],
            ref_k,
            ref_v,
            ref,
            cu,
            torch.tensor([0, context_len + query_len]),
            query_len,
            context_len + query_len,
            True,
            scale,
        )
        torch.testing.assert_close(
            output[q0 : q0 + query_len].float(), ref, atol=2e-2, rtol=2e-2
        )


def test_plan_sections():
    # Decode rows first (not planned), then prefills: 100 tokens over 192
    # cached, 3 without context, 40 without context (more than a query
    # tile), 24 over 40 cached (exactly one section), 24 over 41.
    query_lens = [1, 4, 100, 3, 40, 24, 24]
    qsl = torch.tensor([0, *torch.tensor(query_lens).cumsum(0).tolist()])
    context_lens = [9, 16, 3 * 64, 0, 0, 40, 41]
    seq_lens = torch.tensor(query_lens) + torch.tensor(context_lens)
    meta = build_sectioned_prefill_metadata(
        qsl.to(torch.int32),
        seq_lens.to(torch.int32),
        2,
        torch.device("cpu"),
        section_tokens=64,
        query_tile_tokens=32,
    )
    assert [r.block_table_row for r in meta.requests] == [2, 3, 4, 5, 6]
    big, small, no_context, fits, over = meta.requests
    assert (big.query_start, big.query_len, big.context_len) == (5, 100, 192)
    assert big.single_call_cu_row is None
    assert big.query_tiles == [(0, 32), (32, 64), (64, 96), (96, 100)]
    assert big.sections == [(0, 64), (64, 128), (128, 192)]
    assert len(big.own_cu_rows) == 4 and len(big.context_cu_rows) == 3
    assert meta.cu_seqlens[big.own_cu_rows[-1]].tolist() == [[0, 4], [0, 100]]
    assert meta.cu_seqlens[big.context_cu_rows[2][0]].tolist() == [[0, 32], [0, 64]]
    # One call each, over [context | own tokens], query tiles or not.
    for req, num_keys in ((small, 3), (no_context, 40), (fits, 64)):
        assert req.single_call_cu_row is not None
        assert req.query_tiles == req.sections == req.context_cu_rows == []
        row = meta.cu_seqlens[req.single_call_cu_row].tolist()
        assert row == [[0, req.query_len], [0, num_keys]]
    assert over.single_call_cu_row is None
    assert over.sections == [(0, 41)] and over.query_tiles == [(0, 24)]


def test_single_call_launches(monkeypatch):
    """A request whose context and own tokens fit one section attends in one
    call and merges nothing; one just past it takes two calls and a merge."""
    from vllm.v1.attention.ops import triton_int8_sectioned_prefill as sp

    merges = []
    monkeypatch.setattr(sp, "merge_attn_states", lambda *a: merges.append(a))
    num_heads, num_kv_heads, head_size = 6, 2, 64
    impl = TritonAttentionImpl(
        num_heads, head_size, 1.0, num_kv_heads, None, None, "int8_per_token_head"
    )
    kv_cache = make_int8_cache(16, num_kv_heads, head_size)
    for context_len, calls, merged in ((44, 1, 0), (45, 2, 1)):
        seq_lens = [context_len + 20]
        block_table, _, _ = write_requests(
            impl, kv_cache, seq_lens, num_kv_heads, head_size, torch.bfloat16
        )
        metadata = build_sectioned_prefill_metadata(
            torch.tensor([0, 20], dtype=torch.int32),
            torch.tensor(seq_lens, dtype=torch.int32),
            0,
            torch.device(DEVICE),
            SECTION_TOKENS,
            QUERY_TILE_TOKENS,
        )
        shapes = sectioned_prefill_workspace_shapes(
            num_heads, num_kv_heads, head_size, torch.bfloat16, SECTION_TOKENS
        )
        scratch = [torch.zeros(s, dtype=d, device=DEVICE) for s, d in shapes]
        kv = torch.zeros(20, num_kv_heads, head_size, device=DEVICE)
        query = torch.zeros(20, num_heads, head_size, device=DEVICE)
        attn_calls = []

        def attn(*a, attn_calls=attn_calls):
            attn_calls.append(a[-2])
            return sdpa_section_attn(*a)

        merges.clear()
        sectioned_prefill_attention(
            query.bfloat16(),
            kv.bfloat16(),
            kv.bfloat16(),
            int8_per_token_head_planar_views(kv_cache, head_size),
            block_table,
            torch.empty_like(query).bfloat16(),
            metadata,
            1.0,
            *scratch,
            attn_fn=attn,
        )
        assert len(attn_calls) == calls and len(merges) == merged


def test_workspace_bound_qwen35_geometry():
    # 24 query / 4 KV heads x 256, default 32K sections and 2K query tiles:
    # the whole path needs < 160 MiB at any context length.
    shapes = sectioned_prefill_workspace_shapes(24, 4, 256, torch.bfloat16)
    total = sum(math.prod(s) * d.itemsize for s, d in shapes)
    assert total == (128 + 24) * 2**20
