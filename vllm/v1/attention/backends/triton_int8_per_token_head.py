# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""INT8 per-token-head KV cache on the Triton attention backend.

Which kernels a layer and a step use, in the order they are decided:

* once per layer, :func:`select_int8_per_token_head_kernels` picks the
  kernel for decode/verify rows (split-KV, or the unified kernel) and for
  prefill rows (sectioned FlashAttention, or the unified kernel);
* once per step, :func:`split_int8_step` (called by the metadata builder)
  splits the batch, ordered decodes first, into its ``decode`` and
  ``prefill`` parts, and :func:`plan_int8_decode` plans the decode part's
  split-KV launch for every layer of the group;
* on every layer call, :func:`forward_int8_per_token_head` runs the prefill
  part, then the decode part, each on its layer's kernel; the unified
  kernel runs what neither takes.

``triton_attn.py`` holds the hooks: the metadata fields, the builder's
reordering threshold and calls, and the impl's dispatch.
"""

from enum import Enum
from typing import TYPE_CHECKING, NamedTuple

import torch

from vllm.config import VllmConfig
from vllm.logger import init_logger
from vllm.v1.attention.backend import AttentionType, CommonAttentionMetadata
from vllm.v1.attention.ops.triton_int8_sectioned_prefill import (
    SectionAttnFn,
    build_sectioned_prefill_metadata,
    sectioned_prefill_attention,
    sectioned_prefill_workspace_shapes,
)
from vllm.v1.attention.ops.triton_int8_split_kv_attention import (
    MAX_QUERY_LEN as INT8_SPLIT_KV_MAX_QUERY_LEN,
)
from vllm.v1.attention.ops.triton_int8_split_kv_attention import (
    SUPPORTED_QUERY_DTYPES as INT8_SPLIT_KV_QUERY_DTYPES,
)
from vllm.v1.attention.ops.triton_int8_split_kv_attention import (
    int8_split_kv_attention,
    int8_split_kv_layer_supported,
    select_int8_split_kv_geometry,
)
from vllm.v1.kv_cache_interface import AttentionSpec, KVQuantMode, SlidingWindowSpec
from vllm.v1.worker.workspace import (
    current_workspace_manager,
    is_workspace_manager_initialized,
)

if TYPE_CHECKING:
    from vllm.v1.attention.backends.triton_attn import (
        TritonAttentionImpl,
        TritonAttentionMetadata,
        TritonAttentionMetadataBuilder,
    )

logger = init_logger(__name__)


class Int8DecodeKernel(Enum):
    SPLIT_KV = "split_kv"
    UNIFIED = "unified"


class Int8PrefillKernel(Enum):
    SECTIONED_FLASH_ATTN = "sectioned_flash_attn"
    UNIFIED = "unified"


class Int8PerTokenHeadKernels(NamedTuple):
    """Kernels of one INT8 per-token-head attention layer, chosen at init."""

    decode: Int8DecodeKernel
    prefill: Int8PrefillKernel
    # FlashAttention for the sections of SECTIONED_FLASH_ATTN prefills.
    section_attn_fn: SectionAttnFn | None = None


def _flash_attn_section_fn(fa_version: int | None) -> SectionAttnFn:
    """The sectioned prefill's per-section attention on FlashAttention varlen
    (returning the log-sum-exp the sections are merged with)."""
    from vllm.v1.attention.backends.fa_utils import flash_attn_varlen_func

    fa_kwargs = {} if fa_version is None else {"fa_version": fa_version}

    def attn(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        out: torch.Tensor,
        cu_seqlens_q: torch.Tensor,
        cu_seqlens_k: torch.Tensor,
        max_seqlen_q: int,
        max_seqlen_k: int,
        causal: bool,
        softmax_scale: float,
    ) -> torch.Tensor:
        _, lse = flash_attn_varlen_func(
            q=q,
            k=k,
            v=v,
            out=out,
            cu_seqlens_q=cu_seqlens_q,
            max_seqlen_q=max_seqlen_q,
            cu_seqlens_k=cu_seqlens_k,
            max_seqlen_k=max_seqlen_k,
            softmax_scale=softmax_scale,
            causal=causal,
            return_softmax_lse=True,
            **fa_kwargs,
        )
        return lse

    return attn


def select_int8_per_token_head_kernels(
    head_size: int,
    *,
    attn_type: str,
    sliding_window: int | None,
    use_alibi: bool,
    softcap: float,
    use_sinks: bool,
    chunk_lookback: int,
    kv_sharing: bool,
    vllm_config: VllmConfig | None,
) -> Int8PerTokenHeadKernels:
    """Choose, once per layer, the kernels for the decode rows and for the
    prefill rows of INT8 per-token-head steps.

    Decode/verify rows go to the split-KV kernel and prefills to sectioned
    FlashAttention where the layer's configuration allows; everything else
    stays on the unified kernel, which handles every configuration.  Verify
    rows longer than the split-KV kernel takes (the builder's threshold
    follows the number of drafts) go to the unified kernel step by step.
    """
    model_dtype = None
    if vllm_config is not None and vllm_config.model_config is not None:
        model_dtype = vllm_config.model_config.dtype
    plain = (
        attn_type == AttentionType.DECODER
        and sliding_window is None
        and not use_alibi
        and softcap == 0
        and not use_sinks
        and chunk_lookback == -1
    )
    half_precision = model_dtype is None or model_dtype in INT8_SPLIT_KV_QUERY_DTYPES
    decode = Int8DecodeKernel.UNIFIED
    if (
        attn_type == AttentionType.DECODER
        and half_precision
        and int8_split_kv_layer_supported(
            head_size,
            use_alibi=use_alibi,
            softcap=softcap,
            use_sinks=use_sinks,
            chunk_lookback=chunk_lookback,
        )
    ):
        decode = Int8DecodeKernel.SPLIT_KV
    section_attn_fn = None
    if plain and half_precision and not kv_sharing and head_size % 8 == 0:
        from vllm.v1.attention.backends.fa_utils import (
            get_flash_attn_version,
            is_flash_attn_varlen_func_available,
        )

        if head_size <= 256 and is_flash_attn_varlen_func_available():
            section_attn_fn = _flash_attn_section_fn(
                get_flash_attn_version(head_size=head_size)
            )
    prefill = (
        Int8PrefillKernel.UNIFIED
        if section_attn_fn is None
        else Int8PrefillKernel.SECTIONED_FLASH_ATTN
    )
    kernels = Int8PerTokenHeadKernels(decode, prefill, section_attn_fn)
    logger.info_once(
        "INT8 per-token-head KV cache attention: decode %s, prefill %s.",
        decode.value,
        prefill.value,
    )
    return kernels


# Metadata builder: the step's split and plan.


def splits_int8_steps(kv_cache_spec: AttentionSpec) -> bool:
    """Whether the backend splits this cache's steps (INT8 per-token-head)."""
    return kv_cache_spec.kv_quant_mode == KVQuantMode.INT8_PER_TOKEN_HEAD


def reserve_int8_prefill_workspace(
    builder: "TritonAttentionMetadataBuilder",
) -> tuple[torch.Tensor, ...] | None:
    """Reserve the sectioned prefill's scratch at its full size and return
    its views (key, value, output), or None without a workspace manager.

    vLLM locks the workspace after CUDA graph capture, and neither the
    profile run nor the capture takes the prefill path, so the first
    prefill would try to grow a locked workspace.  The scratch size is
    fixed by the section and query-tile sizes, so reserve it here, as
    the TurboQuant builder does for its buffers.  The layers run one after
    another and use the views the builder keeps (as MLA's prefill backends
    keep theirs): fetching them per layer cost 11 us of host time a layer.
    """
    if not is_workspace_manager_initialized():
        return None
    return tuple(
        current_workspace_manager().get_simultaneous(
            *sectioned_prefill_workspace_shapes(
                builder.num_heads_q,
                builder.kv_cache_spec.num_kv_heads,
                builder.kv_cache_spec.head_size,
                builder.vllm_config.model_config.dtype,
                builder.int8_prefill_section_tokens,
                builder.int8_prefill_query_tile_tokens,
            )
        )
    )


def _shallow_copy(metadata: "TritonAttentionMetadata") -> "TritonAttentionMetadata":
    """``copy.copy`` of the metadata without the reduce protocol, which
    costs the host several times the copy of its fields."""
    new = object.__new__(type(metadata))
    new.__dict__.update(metadata.__dict__)
    return new


def split_int8_step(
    builder: "TritonAttentionMetadataBuilder",
    attn_metadata: "TritonAttentionMetadata",
    common_attn_metadata: CommonAttentionMetadata,
) -> None:
    """Split an INT8 per-token-head step into its decode and prefill
    parts (``attn_metadata.decode`` / ``.prefill``)."""
    assert builder.reorder_batch_threshold is not None
    if (
        not isinstance(attn_metadata.causal, bool)
        or attn_metadata.mm_prefix_range_tensor is not None
        or attn_metadata.rswa_prefix_lens is not None
    ):
        return
    if attn_metadata.max_query_len <= builder.reorder_batch_threshold:
        # Decode-only (e.g. every CUDA-graph step): no host work.  Also
        # the non-causal draft blocks of a drafter such as DFlash's.
        attn_metadata.decode = plan_int8_decode(builder, _shallow_copy(attn_metadata))
        return
    if not attn_metadata.causal:
        # The sectioned prefill is causal.
        return
    # The reordered batch's decode rows come first (as for
    # split_decodes_and_prefills, whose tensor ops cost this step's host
    # several times more than NumPy's): the first row with more query
    # tokens than the threshold starts the prefill part, and there is one.
    num_reqs = common_attn_metadata.num_reqs
    query_start_loc_cpu = common_attn_metadata.query_start_loc_cpu
    # (Slicing the NumPy view, and not the tensor, and subtracting instead
    # of np.diff halve this part's host time.)
    query_start = query_start_loc_cpu.numpy()[: num_reqs + 1]
    query_lens = query_start[1:] - query_start[:-1]
    num_decodes = int((query_lens > builder.reorder_batch_threshold).argmax())
    num_decode_tokens = int(query_start[num_decodes])
    # Exact for prefill rows (the only ones planned from it); avoids a sync.
    seq_lens_cpu = common_attn_metadata.seq_lens_cpu_upper_bound
    if seq_lens_cpu is None:
        seq_lens_cpu = common_attn_metadata.seq_lens.cpu()
    attn_metadata.prefill = build_sectioned_prefill_metadata(
        query_start_loc_cpu,
        seq_lens_cpu[:num_reqs],
        first_request=num_decodes,
        device=builder.device,
        section_tokens=builder.int8_prefill_section_tokens,
        query_tile_tokens=builder.int8_prefill_query_tile_tokens,
    )
    attn_metadata.int8_prefill_scratch = builder.int8_prefill_scratch
    if num_decodes > 0:
        # A shallow copy with the decode rows' fields (as the FlashAttention
        # backend derives its metadata; dataclasses.replace would run the
        # constructor).
        decode = _shallow_copy(attn_metadata)
        decode.num_actual_tokens = num_decode_tokens
        decode.max_query_len = int(query_lens[:num_decodes].max())
        decode.query_start_loc = attn_metadata.query_start_loc[: num_decodes + 1]
        decode.seq_lens = attn_metadata.seq_lens[:num_decodes]
        decode.block_table = attn_metadata.block_table[:num_decodes]
        decode.slot_mapping = attn_metadata.slot_mapping[:num_decode_tokens]
        decode.prefill = None
        attn_metadata.decode = plan_int8_decode(builder, decode)


def plan_int8_decode(
    builder: "TritonAttentionMetadataBuilder", decode: "TritonAttentionMetadata"
) -> "TritonAttentionMetadata":
    """Plan the split-KV launch geometry of a step's decode part once, for
    all layers of the group (as the FlashAttention builder plans its
    scheduler metadata); it depends on host integers only.  The layers
    of a sliding-window group share its window (a full-attention group
    can hold windowed layers too, which then plan for the context)."""
    spec = builder.kv_cache_spec
    num_kv_heads = spec.num_kv_heads
    if (
        decode.max_query_len <= INT8_SPLIT_KV_MAX_QUERY_LEN
        and builder.num_heads_q % num_kv_heads == 0
    ):
        assert builder.int8_segm_output is not None
        decode.int8_geometry = select_int8_split_kv_geometry(
            decode.max_query_len,
            decode.max_seq_len,
            decode.seq_lens.shape[0],
            decode.num_actual_tokens,
            builder.int8_segm_output.shape[0],
            num_queries_per_kv=builder.num_heads_q // num_kv_heads,
            num_kv_heads=num_kv_heads,
            sliding_window=(
                spec.sliding_window if isinstance(spec, SlidingWindowSpec) else 0
            ),
        )
    return decode


# Impl: one layer call.


def forward_int8_per_token_head(
    impl: "TritonAttentionImpl",
    layer: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    kv_cache: torch.Tensor,
    attn_metadata: "TritonAttentionMetadata",
    output: torch.Tensor,
) -> torch.Tensor:
    """INT8 per-token-head step: the prefill part, then the decode part
    (see ``TritonAttentionMetadata.decode``/``.prefill``), each on the
    kernel chosen for this layer at init.  Steps the split does not
    apply to (an unsplit step, or a prefill on a layer without a
    sectioned prefill) run on the unified kernel whole."""
    kernels = impl._int8_kernels
    assert kernels is not None
    decode, prefill = attn_metadata.decode, attn_metadata.prefill
    if (decode is None and prefill is None) or (
        prefill is not None and kernels.prefill == Int8PrefillKernel.UNIFIED
    ):
        return impl._forward_unified(layer, query, kv_cache, attn_metadata, output)
    key_cache, value_cache = impl._pth_key_value_caches(kv_cache)
    if prefill is not None:
        assert kernels.section_attn_fn is not None
        # One scratch shared by all layers (they run one after another),
        # reserved by the metadata builder so that its size is independent
        # of the context.  A layer checks it against its own shapes on its
        # first prefill and fetches scratch of its own if they differ (or
        # if the builder could not keep any).
        scratch = attn_metadata.int8_prefill_scratch
        checked = scratch is not None and scratch is impl._int8_prefill_checked
        if not checked:
            shapes = sectioned_prefill_workspace_shapes(
                impl.num_heads,
                impl.num_kv_heads,
                impl.head_size,
                query.dtype,
                prefill.section_tokens,
                prefill.query_tile_tokens,
            )
            if scratch is None or any(
                x.shape != shape or x.dtype != dtype
                for x, (shape, dtype) in zip(scratch, shapes)
            ):
                scratch = current_workspace_manager().get_simultaneous(*shapes)
        key_scratch, value_scratch, out_scratch = scratch
        sectioned_prefill_attention(
            query,
            key,
            value,
            (key_cache, value_cache, impl._k_scale_cache, impl._v_scale_cache),
            attn_metadata.block_table,
            output,
            prefill,
            impl.scale,
            key_scratch,
            value_scratch,
            out_scratch,
            kernels.section_attn_fn,
            validate=not checked,
        )
        if not checked and scratch is attn_metadata.int8_prefill_scratch:
            impl._int8_prefill_checked = scratch
    if decode is None:
        return output
    if (
        kernels.decode == Int8DecodeKernel.UNIFIED
        # Verify rows beyond the kernel's limit (more than 15 drafts).
        or decode.int8_geometry is None
    ):
        return impl._forward_unified(layer, query, kv_cache, decode, output)
    assert decode.int8_segm_output is not None
    assert decode.int8_segm_max is not None
    assert decode.int8_segm_expsum is not None
    n = decode.num_actual_tokens
    int8_split_kv_attention(
        q=query[:n],
        k_cache=key_cache,
        v_cache=value_cache,
        k_scale_cache=impl._k_scale_cache,
        v_scale_cache=impl._v_scale_cache,
        out=output[:n],
        cu_seqlens_q=decode.query_start_loc,
        seqused_k=decode.seq_lens,
        block_table=decode.block_table,
        max_query_len=decode.max_query_len,
        max_seq_len=decode.max_seq_len,
        softmax_scale=impl.scale,
        segm_output=decode.int8_segm_output,
        segm_max=decode.int8_segm_max,
        segm_expsum=decode.int8_segm_expsum,
        geometry=decode.int8_geometry,
        causal=decode.causal,
        # (W - 1, 0) for a window of W positions, (-1, -1) for none.
        sliding_window=impl.sliding_window[0] + 1,
        # The layer's caches, query layout and scratch are checked on its
        # first call; the geometry is planned per step by the builder.
        validate=not impl._int8_split_kv_checked,
    )
    impl._int8_split_kv_checked = True
    return output
