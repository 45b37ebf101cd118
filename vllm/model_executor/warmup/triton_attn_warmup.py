# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Warm up the Triton backend's INT8 per-token-head attention paths.

CUDA graph capture only runs uniform decode batches, and the profile run
only runs a prefill without cached context.  The first mixed step (decode
rows next to a prefill chunk) and the first prefill chunk with cached context
would otherwise compile the split-KV kernel's eager variants and the section
dequantiser while requests are being served.  This runs every layer's
attention once on small batches that take those paths, reading the layer's
own KV cache (nothing is written to it) so the kernels specialise exactly as
they will while serving.
"""

from typing import TYPE_CHECKING

import torch

from vllm.logger import init_logger
from vllm.v1.attention.backend import CommonAttentionMetadata

if TYPE_CHECKING:
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

logger = init_logger(__name__)

# Cached tokens per warm-up request: several blocks and KV tiles, so the
# decode kernel splits the context into segments and runs its reduction.
_WARMUP_CONTEXT_TOKENS = 4096
# Query tokens of the warm-up prefill chunk beyond the longest decode row.
_WARMUP_PREFILL_EXTRA_TOKENS = 32
# Longest context the decode rows are planned for a second time: the
# split-KV kernel's choice may depend on the keys a batch holds (host
# integers only), so each query length also runs as a batch this long
# would, while reading the short context above.
_WARMUP_PLANNED_SEQ_LEN = 1 << 24


def _warmup_batch(
    query_lens: list[int],
    context_lens: list[int],
    block_size: int,
    device: torch.device,
    planned_seq_len: int | None = None,
) -> CommonAttentionMetadata:
    """A batch whose block tables all point at block 0 (read, never written);
    ``planned_seq_len`` overrides its longest context as seen by the builder
    (as CUDA graph capture plans for max_model_len), not the context read."""
    seq_lens = [q + c for q, c in zip(query_lens, context_lens)]
    query_start_loc_cpu = torch.tensor(
        [0, *torch.tensor(query_lens).cumsum(0).tolist()], dtype=torch.int32
    )
    seq_lens_cpu = torch.tensor(seq_lens, dtype=torch.int32)
    num_tokens = sum(query_lens)
    max_blocks = -(-max(seq_lens) // block_size)
    return CommonAttentionMetadata(
        query_start_loc=query_start_loc_cpu.to(device),
        query_start_loc_cpu=query_start_loc_cpu,
        seq_lens=seq_lens_cpu.to(device),
        num_reqs=len(query_lens),
        num_actual_tokens=num_tokens,
        max_query_len=max(query_lens),
        max_seq_len=planned_seq_len or max(seq_lens),
        block_table_tensor=torch.zeros(
            (len(query_lens), max_blocks), dtype=torch.int32, device=device
        ),
        slot_mapping=torch.full((num_tokens,), -1, dtype=torch.int64, device=device),
        causal=True,
        seq_lens_cpu_upper_bound=seq_lens_cpu,
    )


def _warm_up_group(runner: "GPUModelRunner", group, forward_context: dict) -> int:
    """Run every layer of one attention group on the warm-up batches; return
    the number of layers."""
    builder = group.get_metadata_builder()
    threshold = builder.reorder_batch_threshold or 1
    ctx = _WARMUP_CONTEXT_TOKENS
    batches = [
        _warmup_batch([q], [ctx], builder.block_size, runner.device, planned)
        for planned in (None, _WARMUP_PLANNED_SEQ_LEN)
        for q in range(1, threshold + 1)
    ]
    batches.append(
        _warmup_batch(
            [1, threshold + _WARMUP_PREFILL_EXTRA_TOKENS],
            [ctx, ctx],
            builder.block_size,
            runner.device,
        )
    )
    metadata = [builder.build(0, batch) for batch in batches]
    max_tokens = max(batch.num_actual_tokens for batch in batches)
    for name in group.layer_names:
        layer = forward_context[name]
        impl = layer.impl
        query = torch.zeros(
            (max_tokens, impl.num_heads, impl.head_size),
            dtype=runner.dtype,
            device=runner.device,
        )
        kv = torch.zeros(
            (max_tokens, impl.num_kv_heads, impl.head_size),
            dtype=runner.dtype,
            device=runner.device,
        )
        output = torch.empty_like(query)
        for batch, attn_metadata in zip(batches, metadata):
            n = batch.num_actual_tokens
            impl.forward(
                layer,
                query[:n],
                kv[:n],
                kv[:n],
                layer.kv_cache,
                attn_metadata,
                output[:n],
            )
    return len(group.layer_names)


def triton_int8_per_token_head_warmup(runner: "GPUModelRunner") -> None:
    """Run each INT8 per-token-head Triton attention layer on warm-up batches:
    every decode/verify query length the batch reordering sends to the decode
    path, planned for a short and for a very long context, then a mixed step
    with a prefill chunk over cached context."""
    from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend

    forward_context = runner.compilation_config.static_forward_context
    num_layers = 0
    with torch.inference_mode():
        for groups in runner.attn_groups:
            for group in groups:
                # The builder decides which groups split their steps.
                if issubclass(group.backend, TritonAttentionBackend) and (
                    group.get_metadata_builder().split_int8_steps
                ):
                    num_layers += _warm_up_group(runner, group, forward_context)
    if num_layers:
        if runner.device.type == "cuda":
            torch.accelerator.synchronize(runner.device)
        logger.info(
            "Warmed up INT8 per-token-head attention of %d Triton layers.",
            num_layers,
        )
