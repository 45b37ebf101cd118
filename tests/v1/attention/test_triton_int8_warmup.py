# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Kernel warm-up of the Triton backend's INT8 per-token-head paths.

Runs on the CPU under the Triton interpreter with the helpers (and the
launch-counting fixtures) of the split-step tests.
"""

from dataclasses import replace
from types import SimpleNamespace

import torch

from tests.kernels.attention.test_int8_sectioned_prefill import (
    BLOCK_SIZE,
    DEVICE,
    make_int8_cache,
)
from tests.v1.attention.test_triton_int8_split_steps import (  # noqa: F401
    HEAD_SIZE,
    NUM_HEADS,
    NUM_KV_HEADS,
    kernel_calls,
    make_builder,
    make_int8_impl,
    workspace_manager,
)
from vllm.v1.attention.backends import triton_int8_per_token_head
from vllm.v1.attention.ops.triton_int8_split_kv_attention import (
    select_int8_split_kv_geometry,
)
from vllm.v1.kv_cache_interface import KVQuantMode


def test_warmup_runs_every_decode_length_and_a_mixed_step(
    workspace_manager,  # noqa: F811 (the fixtures imported above)
    monkeypatch,
    kernel_calls,  # noqa: F811
):
    """The kernel warm-up drives each INT8 layer through the decode path for
    every query length the runner sends there and through a mixed step with
    a prefill over cached context, reading the layer's own KV cache (so the
    kernels specialise on its strides as they will while serving).  Every
    split-KV geometry that serving can select for those query lengths, for
    short and long batches, is among the ones it launched."""
    from vllm.model_executor.warmup import triton_attn_warmup
    from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend

    read_caches = set()
    launched = set()
    launch = triton_int8_per_token_head.int8_split_kv_attention

    def recording(*args, **kwargs):
        read_caches.add(kwargs["k_cache"].untyped_storage().data_ptr())
        # The segment count is a runtime argument of the kernels.
        launched.add(replace(kwargs["geometry"], num_segments=1))
        return launch(*args, **kwargs)

    monkeypatch.setattr(
        triton_int8_per_token_head, "int8_split_kv_attention", recording
    )

    # Small enough for the CPU interpreter; still several blocks.
    monkeypatch.setattr(triton_attn_warmup, "_WARMUP_CONTEXT_TOKENS", 3 * BLOCK_SIZE)
    builder, spec, _ = make_builder(KVQuantMode.INT8_PER_TOKEN_HEAD)
    # Up to 18 query rows per KV head (6 tokens x 3 heads): the row-packing
    # entries and, for few keys, the warpgroup-MMA one.
    threshold = 6
    builder.reorder_batch_threshold = threshold
    workspace_manager.lock()
    builder.int8_prefill_section_tokens = 32
    builder.int8_prefill_query_tile_tokens = 16
    impl = make_int8_impl()
    kv_cache = make_int8_cache(2, NUM_KV_HEADS, HEAD_SIZE)
    layers = {
        name: SimpleNamespace(impl=impl, kv_cache=kv_cache) for name in ("a", "b")
    }
    group = SimpleNamespace(
        backend=TritonAttentionBackend,
        kv_cache_spec=spec,
        layer_names=list(layers),
        get_metadata_builder=lambda: builder,
    )
    # A group on another cache dtype is skipped.
    other_builder, other_spec, _ = make_builder(KVQuantMode.NONE)
    other = SimpleNamespace(
        backend=TritonAttentionBackend,
        kv_cache_spec=other_spec,
        layer_names=["c"],
        get_metadata_builder=lambda: other_builder,
    )
    runner = SimpleNamespace(
        attn_groups=[[group], [other]],
        compilation_config=SimpleNamespace(static_forward_context=layers),
        device=torch.device(DEVICE),
        dtype=torch.bfloat16,
    )
    triton_attn_warmup.triton_int8_per_token_head_warmup(runner)
    served = {
        replace(
            select_int8_split_kv_geometry(
                q,
                seq_len,
                num_seqs,
                num_seqs * q,
                builder.int8_segm_output.shape[0],
                num_queries_per_kv=NUM_HEADS // NUM_KV_HEADS,
                num_kv_heads=NUM_KV_HEADS,
            ),
            num_segments=1,
        )
        for q in range(1, threshold + 1)
        for num_seqs in (1, 8, 64)
        for seq_len in (q, 4096, 131072, 1 << 20)
    }
    assert len({g.wgmma for g in served}) == 2
    assert served <= launched, served - launched
    # Query lengths 1..6 (the reorder threshold) planned for a short and a
    # long context, and the mixed step's decode row, per layer; one
    # sectioned prefill per layer.
    assert kernel_calls == {"split_kv": 2 * (2 * threshold + 1), "sectioned_prefill": 2}
    assert read_caches == {kv_cache.untyped_storage().data_ptr()}
