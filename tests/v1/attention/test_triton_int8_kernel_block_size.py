# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Kernel block sizes of the Triton backend with an int8_per_token_head cache.

With that cache the backend prefers blocks of 64 tokens and declares kernel
blocks of 16, 32 and 64, so vLLM splits larger KV-manager blocks (a hybrid
model's attention blocks) into 64-token kernel blocks; with every other
cache dtype it keeps any multiple of 16.
"""

from types import SimpleNamespace

import pytest
import torch

from vllm.config import CacheConfig, DeviceConfig, VllmConfig, set_current_vllm_config
from vllm.v1.attention.backend import MultipleOf
from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
)
from vllm.v1.worker.utils import prepare_kernel_block_sizes, select_common_block_size


def _config(cache_dtype: str) -> VllmConfig:
    return VllmConfig(
        cache_config=CacheConfig(cache_dtype=cache_dtype),
        device_config=DeviceConfig(device="cpu"),
    )


def _kernel_block(manager_block_size: int) -> int:
    return select_common_block_size(manager_block_size, [TritonAttentionBackend])


def test_int8_cache_takes_64_token_kernel_blocks():
    with set_current_vllm_config(_config("int8_per_token_head")):
        assert TritonAttentionBackend.get_supported_kernel_block_sizes() == [
            16,
            32,
            64,
        ]
        assert TritonAttentionBackend.get_preferred_block_size(16) == 64
        assert TritonAttentionBackend.get_preferred_block_size(128) == 128
        # The largest of 16/32/64 that divides the KV-manager block.
        expected = {16: 16, 32: 32, 48: 16, 64: 64, 256: 64, 1552: 16, 1600: 64}
        assert {b: _kernel_block(b) for b in expected} == expected
        # Any multiple of 16 is still a valid KV-manager block (a user's
        # --block-size 16 keeps kernel blocks of 16).
        assert TritonAttentionBackend.supports_block_size(16)
        assert not TritonAttentionBackend.supports_block_size(24)


@pytest.mark.parametrize(
    "cache_dtype", ["auto", "fp8", "fp8_per_token_head", "int4_per_token_head"]
)
def test_other_caches_keep_any_multiple_of_16(cache_dtype):
    with set_current_vllm_config(_config(cache_dtype)):
        (size,) = TritonAttentionBackend.get_supported_kernel_block_sizes()
        assert isinstance(size, MultipleOf) and size.base == 16
        assert TritonAttentionBackend.get_preferred_block_size(16) == 16
        assert _kernel_block(1600) == 1600


def test_without_a_config_the_backend_keeps_upstream_sizes():
    (size,) = TritonAttentionBackend.get_supported_kernel_block_sizes()
    assert isinstance(size, MultipleOf) and size.base == 16
    assert TritonAttentionBackend.get_preferred_block_size(16) == 16


def test_hybrid_plan_splits_attention_blocks_into_64_token_kernel_blocks():
    """prepare_kernel_block_sizes (what the model runner calls): the
    attention group's 1,600-token blocks become kernel blocks of 64, the
    Mamba group keeps its block."""
    attention = FullAttentionSpec(
        block_size=1600,
        num_kv_heads=4,
        head_size=256,
        dtype=torch.int8,
    )
    mamba = MambaSpec(
        block_size=1600,
        shapes=((4, 128),),
        dtypes=(torch.bfloat16,),
    )
    kv_cache_config = KVCacheConfig(
        num_blocks=8,
        kv_cache_tensors=[],
        kv_cache_groups=[
            KVCacheGroupSpec(["linear_attn"], mamba),
            KVCacheGroupSpec(["self_attn"], attention),
        ],
    )
    groups = [[], [SimpleNamespace(backend=TritonAttentionBackend)]]
    with set_current_vllm_config(_config("int8_per_token_head")):
        assert prepare_kernel_block_sizes(kv_cache_config, groups) == [1600, 64]
    with set_current_vllm_config(_config("auto")):
        assert prepare_kernel_block_sizes(kv_cache_config, groups) == [1600, 1600]
