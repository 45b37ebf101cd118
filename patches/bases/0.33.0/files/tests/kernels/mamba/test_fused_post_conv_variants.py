# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The Gated DeltaNet warm-up builds every variant of the fused post-conv
kernel that prefills use, including the prefill rows of a mixed batch.

Launches are recorded instead of run, and their Triton cache keys (the keys
the JIT looks up on an sm_90 GPU, computed without one) are compared: a
serving launch whose key the warm-up did not produce would compile while
requests are being served."""

import pytest
import torch

from tests.triton_launch_keys import record_cache_keys
from vllm.model_executor.warmup import qwen_triton_warmup
from vllm.third_party.flash_linear_attention.ops import (
    fused_gdn_prefill_post_conv as post_conv,
)

K = V = 128


@pytest.fixture
def keys(monkeypatch):
    """The cache keys of the kernel's launches; the kernel does not run."""
    return record_cache_keys(monkeypatch, post_conv._fused_post_conv_kernel)


def _prefill_rows(h: int, hv: int, num_tokens: int, num_decodes: int):
    """The model's tensors for a batch of num_decodes one-token decodes,
    then prefill tokens: a and b come from the fused b/a projection made
    contiguous, and the prefill's rows are views past the decode rows."""
    conv = torch.empty(num_tokens, 2 * h * K + hv * V, dtype=torch.bfloat16)
    ba = torch.empty(num_tokens, 2 * hv, dtype=torch.bfloat16)
    b, a = (t.contiguous() for t in ba.chunk(2, dim=-1))
    return conv[num_decodes:], a[num_decodes:], b[num_decodes:]


@pytest.mark.parametrize("h,hv", [(4, 12), (2, 4), (16, 48)])
def test_mixed_batch_prefill_rows_use_a_warmed_variant(keys, h, hv):
    config = qwen_triton_warmup._QwenGDNWarmupConfig(
        h=h,
        hv=hv,
        k=K,
        v=V,
        conv_kernel_size=4,
        conv_state=torch.empty(0),
        conv_dtype=torch.bfloat16,
        norm_weight_dtype=torch.bfloat16,
        norm_before_gate=False,
        norm_activation="silu",
        a_log=torch.empty(hv),
        dt_bias=torch.empty(hv),
        state_stride_token=0,
        state_dtype=torch.float32,
    )
    qwen_triton_warmup._warm_fused_post_conv_kernel(torch.device("cpu"), config)
    warm = set(keys)
    keys.clear()
    for num_tokens, num_decodes in [(2048, 0), (2048, 1), (2048, 2), (101, 3), (9, 7)]:
        conv, a, b = _prefill_rows(h, hv, num_tokens, num_decodes)
        post_conv.fused_post_conv_prep(
            conv, a, b, config.a_log, config.dt_bias, h, K, V
        )
        assert keys[-1] in warm, (num_tokens, num_decodes)
