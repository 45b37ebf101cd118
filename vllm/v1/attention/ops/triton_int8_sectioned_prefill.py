# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Prefill attention over an INT8 per-token-head KV cache via FlashAttention.

The Triton unified kernel dequantises the INT8 cache inline, which makes long
prefills several times slower than FlashAttention on a BF16 cache.  Converting
the whole cached context to BF16 first would need a scratch proportional to
the context length (512 MiB per layer at 128K for 4 KV heads x 256), so the
cached context of each prefill request is instead converted in sections of at
most ``section_tokens`` tokens into one reusable scratch:

* the request's own (new) tokens attend to each other causally, read straight
  from the unquantised ``key``/``value`` of the step;
* each section of the cached context is dequantised by a Triton kernel and
  attended to non-causally with FlashAttention (varlen, returning the LSE);
* the partial results are combined with ``merge_attn_states`` (log-sum-exp),
  as MLA does for its chunked context.

Query rows are processed in tiles of at most ``query_tile_tokens`` so that the
partial-output buffer is bounded too: the memory of this path does not depend
on the context length or the chunk size.

Most chunks need none of that: when a request's cached context and its own
tokens fit one section together, the dequantiser writes the context and
copies the own tokens after it, and one causal FlashAttention call (aligned
to the bottom right) attends over both, straight into the output.  A request
without cached context attends to its own tokens in one call.  That is two
launches per request instead of four (own tokens, dequantiser, context,
merge), which is what a mixed decode + prefill step costs the host.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from vllm.logger import init_logger
from vllm.triton_utils import tl, triton
from vllm.utils.math_utils import cdiv, next_power_of_2
from vllm.utils.platform_utils import is_pin_memory_available
from vllm.v1.attention.ops.merge_attn_states import merge_attn_states

logger = init_logger(__name__)

# 32K tokens x 4 KV heads x 256 x (K + V) x bf16 = 128 MiB of scratch.
DEFAULT_SECTION_TOKENS = 32 * 1024
# 2K query rows x 24 heads x 256 x bf16 = 24 MiB of partial output.
DEFAULT_QUERY_TILE_TOKENS = 2 * 1024
# (q, k, v, out, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
#  causal, softmax_scale) -> lse [num_heads, num_q_tokens] (float32).
# Writes the attention output into ``out``; one sequence per call.  Causal
# masking is aligned to the bottom right (query i sees keys up to
# i + max_seqlen_k - max_seqlen_q), as in FlashAttention.
SectionAttnFn = Callable[
    [
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        torch.Tensor,
        int,
        int,
        bool,
        float,
    ],
    torch.Tensor,
]


@dataclass
class SectionedPrefillRequest:
    """Host-side plan for one prefill request (positions are request-local)."""

    # Row of the request in the (full) block table.
    block_table_row: int
    # Offsets of the request's query tokens in the step's token array.
    query_start: int
    query_len: int
    # Number of cached tokens before the request's own tokens.
    context_len: int
    # Row of ``SectionedPrefillMetadata.cu_seqlens`` of the request's single
    # attention call (over its own tokens, after its whole context if it has
    # one), or None when its context and own tokens do not fit one section;
    # the fields below then plan its sections.
    single_call_cu_row: int | None
    # [start, end) of each query tile (request-local query rows) and of each
    # section of the cached context.
    query_tiles: list[tuple[int, int]]
    sections: list[tuple[int, int]]
    # Rows of ``SectionedPrefillMetadata.cu_seqlens`` used by the calls:
    # own-token call of tile j: ``own_cu_rows[j]``; context call of section s
    # and tile j: ``context_cu_rows[s][j]``.
    own_cu_rows: list[int]
    context_cu_rows: list[list[int]]


@dataclass
class SectionedPrefillMetadata:
    requests: list[SectionedPrefillRequest]
    # [num_rows, 2, 2] int32: (cu_seqlens_q, cu_seqlens_k) per attention call.
    cu_seqlens: torch.Tensor
    section_tokens: int
    query_tile_tokens: int
    # (cu_seqlens_q, cu_seqlens_k) views of each row of ``cu_seqlens``, made
    # once per step for all layers (indexing a tensor costs the host ~1 us).
    cu_views: list[tuple[torch.Tensor, torch.Tensor]]


def _tiles(length: int, tile: int) -> list[tuple[int, int]]:
    return [(s, min(s + tile, length)) for s in range(0, length, tile)]


def build_sectioned_prefill_metadata(
    query_start_loc_cpu: torch.Tensor,
    seq_lens_cpu: torch.Tensor,
    first_request: int,
    device: torch.device,
    section_tokens: int = DEFAULT_SECTION_TOKENS,
    query_tile_tokens: int = DEFAULT_QUERY_TILE_TOKENS,
) -> SectionedPrefillMetadata:
    """Plan the attention calls of the prefill requests of one step.

    Runs on the host from CPU tensors only (no device sync); the call bounds
    are copied to the device in one transfer from pinned memory.

    Args:
        query_start_loc_cpu: [num_reqs + 1] query offsets of the whole step.
        seq_lens_cpu: [num_reqs] sequence lengths (context + query tokens).
        first_request: index of the first prefill request; requests from
            there to the end are planned.
        device: device of the returned ``cu_seqlens``.
        section_tokens: most cached tokens dequantised at once.
        query_tile_tokens: most query rows per attention call.

    """
    qsl = query_start_loc_cpu.tolist()
    seq_lens = seq_lens_cpu.tolist()
    rows: list[list[list[int]]] = []
    requests = []
    for req in range(first_request, len(seq_lens)):
        query_len = qsl[req + 1] - qsl[req]
        if query_len == 0:
            continue
        context_len = seq_lens[req] - query_len
        single_call_cu_row = None
        tiles, sections = [], []
        own_cu_rows, context_cu_rows = [], []
        if context_len + query_len <= section_tokens or context_len == 0:
            # Keys [0, context_len + query_len) in one call, causal from the
            # bottom right.
            single_call_cu_row = len(rows)
            rows.append([[0, query_len], [0, context_len + query_len]])
        else:
            tiles = _tiles(query_len, query_tile_tokens)
            for start, end in tiles:
                # Tile [start, end) sees its own chunk's keys [0, end).
                own_cu_rows.append(len(rows))
                rows.append([[0, end - start], [0, end]])
            sections = _tiles(context_len, section_tokens)
            for sec_start, sec_end in sections:
                sec_rows = []
                for start, end in tiles:
                    sec_rows.append(len(rows))
                    rows.append([[0, end - start], [0, sec_end - sec_start]])
                context_cu_rows.append(sec_rows)
        requests.append(
            SectionedPrefillRequest(
                block_table_row=req,
                query_start=qsl[req],
                query_len=query_len,
                context_len=context_len,
                single_call_cu_row=single_call_cu_row,
                query_tiles=tiles,
                sections=sections,
                own_cu_rows=own_cu_rows,
                context_cu_rows=context_cu_rows,
            )
        )
    # Through NumPy (a third of torch.tensor's host time for nested lists),
    # pinned, so that the copy does not wait for the work queued on the
    # device (a copy from pageable memory does).
    cu_seqlens = torch.from_numpy(np.array(rows, dtype=np.int32).reshape(-1, 2, 2))
    if device.type != "cpu" and is_pin_memory_available():
        cu_seqlens = cu_seqlens.pin_memory()
    cu_seqlens = cu_seqlens.to(device, non_blocking=True)
    # One unbind into the (cu_seqlens_q, cu_seqlens_k) rows, paired: half
    # the host time of indexing each row.
    bounds = iter(cu_seqlens.view(-1, 2).unbind(0))
    return SectionedPrefillMetadata(
        requests=requests,
        cu_seqlens=cu_seqlens,
        section_tokens=section_tokens,
        query_tile_tokens=query_tile_tokens,
        cu_views=list(zip(bounds, bounds)),
    )


def sectioned_prefill_workspace_shapes(
    num_heads: int,
    num_kv_heads: int,
    head_size: int,
    dtype: torch.dtype,
    section_tokens: int = DEFAULT_SECTION_TOKENS,
    query_tile_tokens: int = DEFAULT_QUERY_TILE_TOKENS,
) -> tuple[tuple[tuple[int, ...], torch.dtype], ...]:
    """(shape, dtype) of the K section, V section and partial-output buffers.

    Their total is all the device memory this path needs besides a few small
    LSE tensors; it is independent of the context length.
    """
    kv_shape = (section_tokens, num_kv_heads, head_size)
    return (
        (kv_shape, dtype),
        (kv_shape, dtype),
        ((query_tile_tokens, num_heads, head_size), dtype),
    )


@triton.jit
def _dequant_int8_pth_half(
    cache_ptr,
    scale_ptr,
    out_ptr,
    row_off,  # [BLOCK_T] offset of each token's first value
    scale_off,  # [BLOCK_T] offset of each token's scale
    out_off,  # [BLOCK_T, HEAD_SIZE] output offsets
    tok_mask,
    stride_dim: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
):
    """Dequantise the K or the V values of a tile of tokens."""
    dims = tl.arange(0, HEAD_SIZE)
    mask = tok_mask[:, None]
    x = tl.load(
        cache_ptr + row_off[:, None] + dims[None, :] * stride_dim, mask=mask, other=0
    )
    scale = tl.load(scale_ptr + scale_off, mask=tok_mask, other=0.0)
    x = x.to(tl.float32) * scale[:, None]
    tl.store(out_ptr + out_off, x.to(out_ptr.dtype.element_ty), mask=mask)


# The request row and section bounds change with every request, and the
# block-table width with the engine's configuration; Triton's integer
# specialisation (== 1, divisible by 16) would compile new variants for them
# while serving.
@triton.jit(
    do_not_specialize=[
        "block_table_row",
        "section_start",
        "section_len",
        "new_len",
        "stride_bt_row",
    ],
)
def _dequant_int8_pth_section_kernel(
    key_cache_ptr,  # int8 [num_blocks, block_size, num_kv_heads, HEAD_SIZE]
    value_cache_ptr,  # int8, same logical shape (any strides)
    k_scale_ptr,  # fp32 [num_blocks, block_size, num_kv_heads]
    v_scale_ptr,  # fp32, same logical shape
    block_table_ptr,  # [num_reqs, max_num_blocks]
    new_key_ptr,  # [new_len, num_kv_heads, HEAD_SIZE], output dtype
    new_value_ptr,  # same shape as new_key_ptr (its own strides)
    key_out_ptr,  # [section_tokens, num_kv_heads, HEAD_SIZE]
    value_out_ptr,  # [section_tokens, num_kv_heads, HEAD_SIZE]
    block_table_row,
    section_start,
    section_len,
    new_len,
    stride_k_block,
    stride_k_slot,
    stride_k_head,
    stride_k_dim: tl.constexpr,
    stride_v_block,
    stride_v_slot: tl.constexpr,
    stride_v_head,
    stride_v_dim: tl.constexpr,
    stride_s_block,
    stride_s_slot: tl.constexpr,
    stride_s_head,
    stride_bt_row,
    stride_new_k_tok,
    stride_new_k_head,
    stride_new_v_tok,
    stride_new_v_head,
    stride_out_tok,
    stride_out_head,
    BLOCK_SIZE: tl.constexpr,
    HEAD_SIZE: tl.constexpr,
    BLOCK_T: tl.constexpr,
):
    tile = tl.program_id(0)
    head = tl.program_id(1)

    tok = tile * BLOCK_T + tl.arange(0, BLOCK_T)
    dims = tl.arange(0, HEAD_SIZE)
    out_off = (
        tok.to(tl.int64)[:, None] * stride_out_tok
        + head * stride_out_head
        + dims[None, :]
    )
    if tile * BLOCK_T < section_len:
        tok_mask = tok < section_len
        pos = section_start + tok
        block_idx = tl.load(
            block_table_ptr + block_table_row * stride_bt_row + pos // BLOCK_SIZE,
            mask=tok_mask,
            other=0,
        ).to(tl.int64)
        slot = pos % BLOCK_SIZE
        scale_off = (
            block_idx * stride_s_block + slot * stride_s_slot + head * stride_s_head
        )
        # The backend's planar views: K rows of HEAD_SIZE bytes, V stored
        # transposed (runs of tokens per channel); the strides say which.
        _dequant_int8_pth_half(
            key_cache_ptr,
            k_scale_ptr,
            key_out_ptr,
            block_idx * stride_k_block + slot * stride_k_slot + head * stride_k_head,
            scale_off,
            out_off,
            tok_mask,
            stride_k_dim,
            HEAD_SIZE,
        )
        _dequant_int8_pth_half(
            value_cache_ptr,
            v_scale_ptr,
            value_out_ptr,
            block_idx * stride_v_block + slot * stride_v_slot + head * stride_v_head,
            scale_off,
            out_off,
            tok_mask,
            stride_v_dim,
            HEAD_SIZE,
        )
    if tile * BLOCK_T + BLOCK_T > section_len:
        # Rows after the section: the request's own (unquantised) tokens.
        new_tok = (tok - section_len).to(tl.int64)[:, None]
        new_mask = (new_tok >= 0) & (new_tok < new_len)
        k_off = new_tok * stride_new_k_tok + head * stride_new_k_head + dims[None, :]
        x = tl.load(new_key_ptr + k_off, mask=new_mask, other=0.0)
        tl.store(key_out_ptr + out_off, x, mask=new_mask)
        v_off = new_tok * stride_new_v_tok + head * stride_new_v_head + dims[None, :]
        x = tl.load(new_value_ptr + v_off, mask=new_mask, other=0.0)
        tl.store(value_out_ptr + out_off, x, mask=new_mask)


def dequant_int8_pth_section(
    kv_views: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    block_table: torch.Tensor,
    block_table_row: int,
    section_start: int,
    section_len: int,
    key_out: torch.Tensor,
    value_out: torch.Tensor,
    new_key: torch.Tensor | None = None,
    new_value: torch.Tensor | None = None,
    validate: bool = True,
) -> None:
    """Dequantise cached tokens of one request into contiguous K/V buffers.

    Args:
        kv_views: ``(key_cache, value_cache, k_scale_cache, v_scale_cache)``
            of the INT8 per-token-head cache as the Triton backend builds
            them (``int8_per_token_head_planar_views``): int8
            ``[num_blocks, block_size, num_kv_heads, head_size]`` and fp32
            ``[num_blocks, block_size, num_kv_heads]``, any strides.
        block_table: [num_reqs, max_num_blocks_per_req] int32.
        block_table_row: row of the request in ``block_table``.
        section_start: first request-local position to convert.
        section_len: number of positions to convert.
        key_out: [>= section_len + len(new_key), num_kv_heads, head_size]
            bf16/fp16.
        value_out: same shape and dtype as ``key_out``.
        new_key: optional [n, num_kv_heads, head_size] keys in the dtype of
            ``key_out`` (any strides, last dimension contiguous), copied to
            rows ``section_len .. section_len + n`` of ``key_out`` by the
            same launch.
        new_value: the values for ``new_key``, copied to ``value_out``; its
            strides may differ from ``new_key``'s (a model with a key norm
            hands the layer a fresh key next to a view of the fused QKV).
        validate: Check the arguments' shapes, dtypes and strides.  A caller
            that checked them for a layer's caches, scratch and token arrays
            (which keep their layouts from step to step) may pass False.

    """
    key_cache, value_cache, k_scale, v_scale = kv_views
    _, block_size, num_kv_heads, head_size = key_cache.shape
    if new_key is None:
        assert new_value is None
        new_key = new_value = key_out
        new_len = 0
    else:
        assert new_value is not None
        new_len = new_key.shape[0]
    if validate:
        assert key_cache.dtype == value_cache.dtype == torch.int8
        assert value_cache.shape == key_cache.shape
        assert k_scale.stride() == v_scale.stride()
        assert key_out.shape[-1] == head_size
        assert head_size == next_power_of_2(head_size)
        assert key_out.stride() == value_out.stride() and key_out.stride(-1) == 1
        assert new_key.shape == new_value.shape
        assert new_key.shape[1:] == key_out.shape[1:]
        assert new_key.dtype == new_value.dtype == key_out.dtype
        assert new_key.stride(-1) == new_value.stride(-1) == 1
    assert key_out.shape[0] >= section_len + new_len
    if section_len + new_len == 0:
        return
    block_t = 16
    grid = (cdiv(section_len + new_len, block_t), num_kv_heads)
    _dequant_int8_pth_section_kernel[grid](
        key_cache,
        value_cache,
        k_scale,
        v_scale,
        block_table,
        new_key,
        new_value,
        key_out,
        value_out,
        block_table_row,
        section_start,
        section_len,
        new_len,
        *key_cache.stride(),
        *value_cache.stride(),
        *k_scale.stride(),
        block_table.stride()[0],
        *new_key.stride()[:2],
        *new_value.stride()[:2],
        *key_out.stride()[:2],
        BLOCK_SIZE=block_size,
        HEAD_SIZE=head_size,
        BLOCK_T=block_t,
        num_warps=4,
    )


def sectioned_prefill_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    kv_views: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    block_table: torch.Tensor,
    output: torch.Tensor,
    metadata: SectionedPrefillMetadata,
    softmax_scale: float,
    key_scratch: torch.Tensor,
    value_scratch: torch.Tensor,
    out_scratch: torch.Tensor,
    attn_fn: SectionAttnFn,
    validate: bool = True,
) -> None:
    """Causal prefill attention for the planned requests of one step.

    Token offsets in ``metadata`` index the first dimension of ``query``,
    ``key``, ``value`` and ``output`` (the step's token arrays).

    Args:
        query: [num_tokens, num_heads, head_size]
        key: [num_tokens, num_kv_heads, head_size], the step's new keys.
        value: [num_tokens, num_kv_heads, head_size], the step's new values.
        kv_views: the INT8 per-token-head cache holding each request's
            context, as the backend's ``(key_cache, value_cache,
            k_scale_cache, v_scale_cache)`` views.
        block_table: [num_reqs, max_num_blocks_per_req]
        output: [num_tokens, num_heads, head_size]; rows of the planned
            requests are written.
        metadata: plan from :func:`build_sectioned_prefill_metadata`.
        softmax_scale: attention scale.
        key_scratch: [section_tokens, num_kv_heads, head_size], query dtype.
        value_scratch: same as ``key_scratch``.
        out_scratch: [query_tile_tokens, num_heads, head_size], query dtype.
        attn_fn: attention for one sequence, see :data:`SectionAttnFn`.
        validate: Check the dequantiser's arguments (see
            :func:`dequant_int8_pth_section`); False where the caller checked
            them on the layer's first call.

    """
    assert key_scratch.shape[0] >= metadata.section_tokens
    assert out_scratch.shape[0] >= metadata.query_tile_tokens
    cu = metadata.cu_views
    for req in metadata.requests:
        q0 = req.query_start
        if req.single_call_cu_row is not None:
            q1 = q0 + req.query_len
            num_keys = req.context_len + req.query_len
            if req.context_len == 0:
                k, v = key[q0:q1], value[q0:q1]
            else:
                # [whole context | own tokens] in the scratch.
                dequant_int8_pth_section(
                    kv_views,
                    block_table,
                    req.block_table_row,
                    0,
                    req.context_len,
                    key_scratch,
                    value_scratch,
                    new_key=key[q0:q1],
                    new_value=value[q0:q1],
                    validate=validate,
                )
                k, v = key_scratch[:num_keys], value_scratch[:num_keys]
            attn_fn(
                query[q0:q1],
                k,
                v,
                output[q0:q1],
                *cu[req.single_call_cu_row],
                req.query_len,
                num_keys,
                True,
                softmax_scale,
            )
            continue
        tiles = req.query_tiles
        lses = []
        # The request's own tokens, causally, from the unquantised K/V.
        for (start, end), cu_row in zip(tiles, req.own_cu_rows):
            lses.append(
                attn_fn(
                    query[q0 + start : q0 + end],
                    key[q0 : q0 + end],
                    value[q0 : q0 + end],
                    output[q0 + start : q0 + end],
                    *cu[cu_row],
                    end - start,
                    end,
                    True,
                    softmax_scale,
                )
            )
        # Cached context: every query row sees every cached key.
        for (sec_start, sec_end), cu_rows in zip(req.sections, req.context_cu_rows):
            sec_len = sec_end - sec_start
            dequant_int8_pth_section(
                kv_views,
                block_table,
                req.block_table_row,
                sec_start,
                sec_len,
                key_scratch,
                value_scratch,
                validate=validate,
            )
            for (start, end), cu_row, lse in zip(tiles, cu_rows, lses):
                part = out_scratch[: end - start]
                sec_lse = attn_fn(
                    query[q0 + start : q0 + end],
                    key_scratch[:sec_len],
                    value_scratch[:sec_len],
                    part,
                    *cu[cu_row],
                    end - start,
                    sec_len,
                    False,
                    softmax_scale,
                )
                out_tile = output[q0 + start : q0 + end]
                # In place: each element is read before it is written.
                merge_attn_states(out_tile, out_tile, lse, part, sec_lse, lse)
