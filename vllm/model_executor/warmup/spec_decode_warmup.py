# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Warm up the Triton kernels of speculative decoding.

No dummy run reaches the kernels that verify drafts and prepare the next
drafting step, so each compiled on first use, while the first requests were
being served (about 1.5-1.9 s of stall for the decoding requests on an H200),
and torch.compile compiled the asynchronous scheduler's computed-token
correction likewise.
"""

from typing import TYPE_CHECKING

from vllm.logger import init_logger
from vllm.v1.sample.rejection_sampler import warmup_rejection_greedy_sample_kernel
from vllm.v1.spec_decode.utils import (
    warmup_update_num_computed_tokens_for_batch_change,
)

if TYPE_CHECKING:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

logger = init_logger(__name__)

# Requests per draftless warm-up batch: Triton compiles an integer argument
# equal to 1, one divisible by 16 and any other as three variants.
_DRAFTLESS_BATCH_SIZES = (1, 2, 16)


def spec_decode_warmup(model_runner: "GPUModelRunner") -> None:
    """Compile the greedy rejection kernel in both of its variants, the
    drafter's input-preparation kernels (drafters that have them:
    ``warmup_kernels``), the asynchronous scheduler's correction of the
    computed-token counts and the model's kernels for steps without
    drafts."""
    if not model_runner.speculative_config:
        return
    logger.info("Warming up speculative decoding kernels.")
    warmup_rejection_greedy_sample_kernel(
        model_runner.device, model_runner.num_spec_tokens
    )
    warmup_kernels = getattr(model_runner.drafter, "warmup_kernels", None)
    if warmup_kernels is not None:
        warmup_kernels()
    if model_runner.use_async_spec_decode:
        # Compiled by torch.compile on the first step after one with drafts.
        warmup_update_num_computed_tokens_for_batch_change(
            model_runner.num_computed_tokens,
            model_runner.num_accepted_tokens.gpu,
            model_runner.prev_positions.gpu,
            model_runner.prev_num_draft_tokens.gpu,
        )
    _warm_up_draftless_steps(model_runner)


def _warm_up_draftless_steps(model_runner: "GPUModelRunner") -> None:
    """Run decode and mixed batches whose requests carry no drafts.

    With speculative decoding on, every captured decode batch has
    ``1 + num_spec_tokens`` tokens per request, but a request can still be
    scheduled without drafts: a prompt-lookup proposer (ngram) that finds no
    match, or a request near its length limit.  Such steps take the model's
    non-speculative paths, which hybrid models implement with their own
    kernels (the Gated DeltaNet decode and conv-state update kernels, with
    state-index strides that differ from the non-speculative engine's), and
    no other warm-up or capture run reaches them.
    """
    max_num_reqs = model_runner.scheduler_config.max_num_seqs
    for num_reqs in (n for n in _DRAFTLESS_BATCH_SIZES if n <= max_num_reqs):
        # num_reqs requests of one token each...
        model_runner._dummy_run(
            num_reqs, skip_eplb=True, is_profile=True, force_attention=True
        )
        # ...and as many next to a prefill of a few tokens.
        if num_reqs < max_num_reqs:
            model_runner._dummy_run(
                2 * num_reqs + 1,
                skip_eplb=True,
                is_profile=True,
                force_attention=True,
                create_mixed_batch=True,
            )
