# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Kernel warm-up of the Triton backend's INT8 per-token-head paths.

Runs on the CPU under the Triton interpreter with the helpers (and the
launch-counting fixtures) of the split-step tests.
"""

from types import SimpleNamespace

import torch

from tests.kernels.attention.test_int8_sectioned_prefill import (
    BLOCK_SIZE,
    DEVICE,
    make_int8_cache,
)
from tests.v1.attention.test_triton_int8_split_steps import (  # noqa: F401
    HEAD_SIZE,
    NUM_KV_HEADS,
    kernel_calls,
    make_builder,
    make_int8_impl,
    workspace_manager,
)
from vllm.v1.attention.backends import triton_attn
from vllm.v1.kv_cache_interface import KVQuantMode


def test_warmup_runs_every_decode_length_and_a_mixed_step(
    workspace_manager,  # noqa: F811 (the fixtures imported above)
    monkeypatch,
    kernel_calls,  # noqa: F811
):
    """The kernel warm-up drives each INT8 layer through the decode path for
    every query length the runner sends there and through a mixed step with
    a prefill over cached context, reading the layer's own KV cache (so the
    kernels specialise on its strides as they will while serving)."""
    from vllm.model_executor.warmup import triton_attn_warmup
    from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend

    read_caches = set()
    launch = triton_attn.int8_split_kv_attention

    def recording(*args, **kwargs):
        read_caches.add(kwargs["k_cache"].untyped_storage().data_ptr())
        return launch(*args, **kwargs)

    monkeypatch.setattr(triton_attn, "int8_split_kv_attention", recording)

    # Small enough for the CPU interpreter; still several blocks.
    monkeypatch.setattr(triton_attn_warmup, "_WARMUP_CONTEXT_TOKENS", 3 * BLOCK_SIZE)
    builder, spec, _ = make_builder(KVQuantMode.INT8_PER_TOKEN_HEAD)
    builder.reorder_batch_threshold = 4
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
    # Query lengths 1..4 (the reorder threshold) and the mixed step's decode
    # row, per layer; one sectioned prefill per layer.
    assert kernel_calls == {"split_kv": 2 * 5, "sectioned_prefill": 2}
    assert read_caches == {kv_cache.untyped_storage().data_ptr()}
