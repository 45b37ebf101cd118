# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Per-token-head KV scale views must never write to the KV storage.

In hybrid models (Gated DeltaNet + attention) the raw KV tensor of an
attention layer shares its storage with other layers' recurrent state, and
``TritonAttentionImpl._ensure_scale_caches`` can first run while a request
is live.  Setting up the scale views must therefore leave every byte of that
storage as it was.
"""

import math
import os

import pytest
import torch

from vllm.platforms import current_platform
from vllm.v1.attention.backends.triton_attn import (
    TritonAttentionBackend,
    TritonAttentionImpl,
)
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    compute_layer_kv_cache_shape_bytes,
    get_kv_quant_mode,
)

NUM_BLOCKS = 6
BLOCK_SIZE = 16
NUM_KV_HEADS = 2
NUM_HEADS = 4
HEAD_SIZE = 64
CACHE_DTYPE = "int8_per_token_head"
# Physical orders of the logical (blocks, kv_heads, slots, 2 * padded_hs)
# cache: NHD is the default layout, HND the alternative.
LAYOUTS = {"NHD": (0, 2, 1, 3), "HND": (0, 1, 2, 3)}

can_run_triton = current_platform.is_cuda_alike() or (
    os.environ.get("TRITON_INTERPRET") == "1"
)
DEVICE = "cuda" if current_platform.is_cuda_alike() else "cpu"


def _make_impl() -> TritonAttentionImpl:
    return TritonAttentionImpl(
        num_heads=NUM_HEADS,
        head_size=HEAD_SIZE,
        scale=HEAD_SIZE**-0.5,
        num_kv_heads=NUM_KV_HEADS,
        alibi_slopes=None,
        sliding_window=None,
        kv_cache_dtype=CACHE_DTYPE,
    )


def _cache_shape() -> tuple[int, ...]:
    """The logical (blocks, kv_heads, slots, content bytes) cache shape the
    model runner gives the backend's spec."""
    spec = FullAttentionSpec(
        block_size=BLOCK_SIZE,
        num_kv_heads=NUM_KV_HEADS,
        head_size=HEAD_SIZE,
        dtype=torch.int8,
        kv_quant_mode=get_kv_quant_mode(CACHE_DTYPE),
    )
    spec = TritonAttentionBackend.customize_spec(spec)
    return compute_layer_kv_cache_shape_bytes(spec, NUM_BLOCKS)


def _kv_cache_over(raw: torch.Tensor, layout: str) -> torch.Tensor:
    """View ``raw`` as a per-token-head KV cache, as the model runner does."""
    shape = _cache_shape()
    order = LAYOUTS[layout]
    physical = raw.view(torch.int8).view([shape[i] for i in order])
    inverse = [order.index(i) for i in range(len(order))]
    return physical.permute(*inverse)


def _raw_storage_with_state(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A raw KV buffer whose bytes are all owned by a recurrent-state tensor.

    The state is float32 data with a recognisable pattern, standing in for
    the conv/SSM state a Gated DeltaNet layer keeps in the shared storage.
    """
    raw = torch.empty(math.prod(_cache_shape()), dtype=torch.int8, device=DEVICE)
    state = raw.view(torch.float32)
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    state.copy_(torch.randn(state.shape, generator=gen, device=DEVICE))
    return raw, state


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_scale_view_setup_leaves_shared_state_intact(layout: str):
    raw, state = _raw_storage_with_state(seed=0)
    before = state.clone()
    kv_cache = _kv_cache_over(raw, layout)

    impl = _make_impl()
    impl._ensure_scale_caches(kv_cache)

    assert torch.equal(state.view(torch.int32), before.view(torch.int32)), (
        "setting up the scale views changed bytes of the shared KV storage"
    )
    # The views do alias the state: writing through them (what the fill_(1.0)
    # this test guards against did) corrupts it, so the check above is not
    # vacuous.
    for view in (impl._k_scale_cache, impl._v_scale_cache):
        assert view.shape == (NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS)
        assert view.untyped_storage().data_ptr() == raw.untyped_storage().data_ptr()
    impl._k_scale_cache.fill_(1.0)
    impl._v_scale_cache.fill_(1.0)
    changed = (state.view(torch.int32) != before.view(torch.int32)).sum().item()
    assert changed == 2 * NUM_BLOCKS * BLOCK_SIZE * NUM_KV_HEADS


@pytest.mark.skipif(not can_run_triton, reason="needs a GPU or TRITON_INTERPRET=1")
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_scales_written_by_cache_update_read_back(layout: str):
    raw, state = _raw_storage_with_state(seed=1)
    kv_cache = _kv_cache_over(raw, layout)
    # Block 0 stays owned by the state; the request writes blocks 2 and 4.
    num_tokens = 20
    slots = torch.cat(
        [
            2 * BLOCK_SIZE + torch.arange(BLOCK_SIZE),
            4 * BLOCK_SIZE + torch.arange(num_tokens - BLOCK_SIZE),
        ]
    ).to(device=DEVICE, dtype=torch.int64)
    block0_state = kv_cache[0].clone()

    gen = torch.Generator(device=DEVICE).manual_seed(2)
    key = torch.randn(
        num_tokens, NUM_KV_HEADS, HEAD_SIZE, generator=gen, device=DEVICE
    ).to(torch.bfloat16)
    value = torch.randn(
        num_tokens, NUM_KV_HEADS, HEAD_SIZE, generator=gen, device=DEVICE
    ).to(torch.bfloat16)

    impl = _make_impl()
    impl.do_kv_cache_update(None, key, value, kv_cache, slots)

    assert torch.equal(kv_cache[0], block0_state), "an unwritten block changed"
    blocks, offsets = slots // BLOCK_SIZE, slots % BLOCK_SIZE
    key_cache, value_cache = impl._pth_key_value_caches(kv_cache)
    for src, scales, data in (
        (key, impl._k_scale_cache, key_cache),
        (value, impl._v_scale_cache, value_cache),
    ):
        ref = src.float()
        expected_scale = ref.abs().amax(dim=-1) / 127.0
        got_scale = scales[blocks, offsets]
        torch.testing.assert_close(got_scale, expected_scale, rtol=1e-5, atol=1e-7)
        quantized = data[blocks, offsets, :, :HEAD_SIZE].float()
        dequantized = quantized * got_scale[..., None]
        # Rounding to int8 moves each element by at most half a step.
        assert ((dequantized - ref).abs() <= 0.5001 * got_scale[..., None]).all()
