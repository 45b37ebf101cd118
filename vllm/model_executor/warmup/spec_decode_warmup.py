# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Warm up the Triton kernels of speculative decoding.

No dummy run reaches the kernels that verify drafts and prepare the next
drafting step, so each compiled on first use, while the first requests were
being served (about 1.5-1.9 s of stall for the decoding requests on an H200).
"""

from typing import TYPE_CHECKING

from vllm.logger import init_logger
from vllm.v1.sample.rejection_sampler import warmup_rejection_greedy_sample_kernel

if TYPE_CHECKING:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

logger = init_logger(__name__)


def spec_decode_warmup(model_runner: "GPUModelRunner") -> None:
    """Compile the greedy rejection kernel in both of its variants and the
    drafter's input-preparation kernels (drafters that have them:
    ``warmup_kernels``), on one request each."""
    if not model_runner.speculative_config:
        return
    logger.info("Warming up speculative decoding kernels.")
    warmup_rejection_greedy_sample_kernel(
        model_runner.device, model_runner.num_spec_tokens
    )
    warmup_kernels = getattr(model_runner.drafter, "warmup_kernels", None)
    if warmup_kernels is not None:
        warmup_kernels()
