# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Triton backend, INT8 per-token-head cache: mixed decode/prefill steps.

The builder orders nothing itself; it finds the decode/prefill boundary of a
batch reordered by the model runner and plans the prefills.  ``forward``
sends the decode rows to the split-KV kernel and the prefills to sectioned
FlashAttention; here the per-section attention is a PyTorch callable so the
test also runs where FlashAttention does not.
"""

import math
import random
from collections import Counter
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from tests.kernels.attention.test_int8_sectioned_prefill import (
    BLOCK_SIZE,
    DEVICE,
    make_int8_cache,
    sdpa_section_attn,
    torch_dequant,
    write_requests,
)
from vllm.config import CUDAGraphMode
from vllm.v1.attention.backend import AttentionCGSupport, CommonAttentionMetadata
from vllm.v1.attention.backends import triton_attn, triton_int8_per_token_head
from vllm.v1.attention.backends.triton_attn import (
    TritonAttentionImpl,
    TritonAttentionMetadataBuilder,
)
from vllm.v1.attention.backends.triton_int8_per_token_head import (
    Int8DecodeKernel,
    Int8PerTokenHeadKernels,
    Int8PrefillKernel,
)
from vllm.v1.attention.ops.triton_int8_sectioned_prefill import (
    sectioned_prefill_workspace_shapes,
)
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVQuantMode,
    SlidingWindowSpec,
)
from vllm.v1.worker import workspace

NUM_HEADS, NUM_KV_HEADS, HEAD_SIZE = 6, 2, 64


def make_builder(kv_quant_mode, num_speculative_tokens=None, model_head_size=None):
    """A builder for layers of HEAD_SIZE; ``model_head_size`` is the head
    size of the model config (a target model whose drafter's layers differ)."""
    vllm_config = SimpleNamespace(
        model_config=SimpleNamespace(
            get_num_attention_heads=lambda parallel_config: NUM_HEADS,
            get_num_kv_heads=lambda parallel_config: NUM_KV_HEADS,
            get_head_size=lambda: model_head_size or HEAD_SIZE,
            rswa_window=None,
            dtype=torch.bfloat16,
        ),
        parallel_config=SimpleNamespace(decode_context_parallel_size=1),
        compilation_config=SimpleNamespace(
            cudagraph_mode=CUDAGraphMode.NONE,
            cudagraph_capture_sizes=[],
            static_forward_context={},
        ),
        speculative_config=None
        if num_speculative_tokens is None
        else SimpleNamespace(
            num_speculative_tokens=num_speculative_tokens, parallel_drafting=False
        ),
        scheduler_config=SimpleNamespace(max_num_seqs=16),
    )
    spec = FullAttentionSpec(
        block_size=BLOCK_SIZE,
        num_kv_heads=NUM_KV_HEADS,
        head_size=HEAD_SIZE,
        dtype=torch.bfloat16,
        kv_quant_mode=kv_quant_mode,
    )
    builder = TritonAttentionMetadataBuilder(
        spec, [], vllm_config, torch.device(DEVICE)
    )
    return builder, spec, vllm_config


def test_builder_threshold_and_cudagraph_support():
    builder, spec, cfg = make_builder(KVQuantMode.INT8_PER_TOKEN_HEAD)
    assert builder.reorder_batch_threshold == 16
    assert (
        TritonAttentionMetadataBuilder.get_cudagraph_support(cfg, spec)
        == AttentionCGSupport.UNIFORM_BATCH
    )
    # Longer verify rows than 16 still count as decodes.
    builder, _, _ = make_builder(KVQuantMode.INT8_PER_TOKEN_HEAD, 20)
    assert builder.reorder_batch_threshold == 21
    # Other cache dtypes keep upstream's behaviour.
    for mode in (KVQuantMode.NONE, KVQuantMode.FP8_PER_TENSOR):
        builder, spec, cfg = make_builder(mode)
        assert builder.reorder_batch_threshold is None
        assert builder.split_int8_steps is False
        assert (
            TritonAttentionMetadataBuilder.get_cudagraph_support(cfg, spec)
            == AttentionCGSupport.ALWAYS
        )


@pytest.fixture
def kernel_calls(monkeypatch):
    """Counts the backend's launches of each attention path (calls through)."""
    calls: Counter[str] = Counter()
    for module, name, path in (
        (triton_int8_per_token_head, "int8_split_kv_attention", "split_kv"),
        (triton_attn, "unified_attention", "unified"),
        (
            triton_int8_per_token_head,
            "sectioned_prefill_attention",
            "sectioned_prefill",
        ),
    ):
        fn = getattr(module, name)

        def counted(*args, _fn=fn, _path=path, **kwargs):
            calls[_path] += 1
            return _fn(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)
    return calls


def int8_kernels(decode_kernel: str) -> Int8PerTokenHeadKernels:
    """The layer's kernels, with the per-section attention in PyTorch."""
    return Int8PerTokenHeadKernels(
        Int8DecodeKernel(decode_kernel),
        Int8PrefillKernel.SECTIONED_FLASH_ATTN,
        sdpa_section_attn,
    )


def make_int8_impl(decode_kernel: str = "split_kv") -> TritonAttentionImpl:
    """An INT8 per-token-head layer on the given decode kernel."""
    impl = TritonAttentionImpl(
        NUM_HEADS,
        HEAD_SIZE,
        HEAD_SIZE**-0.5,
        NUM_KV_HEADS,
        None,
        None,
        "int8_per_token_head",
    )
    impl._int8_kernels = int8_kernels(decode_kernel)
    return impl


def test_kernel_selection():
    """The selector sends plain decoder layers to the split paths and keeps
    everything else on the unified kernel."""
    plain = dict(
        attn_type="decoder",
        sliding_window=None,
        use_alibi=False,
        softcap=0,
        use_sinks=False,
        chunk_lookback=-1,
        kv_sharing=False,
        vllm_config=None,
    )
    select = triton_int8_per_token_head.select_int8_per_token_head_kernels
    assert select(128, **plain).decode == Int8DecodeKernel.SPLIT_KV
    # Head sizes the split-KV kernel does not take.
    assert select(96, **plain).decode == Int8DecodeKernel.UNIFIED
    # Sliding-window layers (e.g. DFlash drafters'): split-KV decode, the
    # sectioned prefill is for full attention only.
    windowed = select(128, **{**plain, "sliding_window": 128})
    assert windowed.decode == Int8DecodeKernel.SPLIT_KV
    assert windowed.prefill == Int8PrefillKernel.UNIFIED
    for change in (
        {"use_alibi": True},
        {"softcap": 30.0},
        {"use_sinks": True},
        {"chunk_lookback": 2},
        {"attn_type": "encoder_decoder"},
    ):
        kernels = select(128, **{**plain, **change})
        assert kernels.decode == Int8DecodeKernel.UNIFIED, change
        assert kernels.prefill == Int8PrefillKernel.UNIFIED, change
    # KV-sharing layers get no new K/V of their own to attend to.
    assert (
        select(128, **{**plain, "kv_sharing": True}).prefill
        == Int8PrefillKernel.UNIFIED
    )
    # fp32 models.
    cfg = SimpleNamespace(
        model_config=SimpleNamespace(dtype=torch.float32), speculative_config=None
    )
    assert (
        select(128, **{**plain, "vllm_config": cfg}).decode == Int8DecodeKernel.UNIFIED
    )


@pytest.fixture(autouse=True)
def workspace_manager():
    """The engine's WorkspaceManager (the prefill scratch comes from it)."""
    workspace.init_workspace_manager(torch.device(DEVICE))
    yield workspace.current_workspace_manager()
    workspace.reset_workspace_manager()


def test_builder_reserves_prefill_workspace(workspace_manager):
    """vLLM locks its workspace after CUDA graph capture, and neither the
    profile run nor the capture takes the prefill path: the builder reserves
    the prefill scratch up front, so the first prefill finds it in a locked
    workspace (without the reservation, engines with CUDA graphs failed
    there)."""
    builder, _, _ = make_builder(KVQuantMode.INT8_PER_TOKEN_HEAD)
    workspace_manager.lock()
    # The request forward makes for every prefill step; raises if the locked
    # workspace would have to grow.
    key_scratch, _, out_scratch = workspace_manager.get_simultaneous(
        *sectioned_prefill_workspace_shapes(
            NUM_HEADS,
            NUM_KV_HEADS,
            HEAD_SIZE,
            torch.bfloat16,
            builder.int8_prefill_section_tokens,
            builder.int8_prefill_query_tile_tokens,
        )
    )
    assert key_scratch.shape[0] == builder.int8_prefill_section_tokens
    assert out_scratch.shape[0] == builder.int8_prefill_query_tile_tokens


# (context_len, query_len) per request, decodes first as the runner orders
# them (query length <= 16), then prefills.
STEPS = {
    "decode_only": [(40, 1), (17, 6), (33, 16)],
    "prefill_only": [(70, 40), (0, 17)],
    "mixed": [(40, 1), (17, 6), (15, 16), (70, 40), (0, 17), (31, 33)],
    # A short row after a prefill (runner threshold below 16) is planned as
    # a prefill.
    "short_after_prefill": [(5, 1), (50, 20), (16, 3)],
}


def sdpa_reference(query, keys, values, causal):
    """fp32 SDPA of one request's query rows over its keys (the queries are
    the last of them), as the sectioned prefill's tests compute it."""
    ref = torch.empty(query.shape[0], NUM_HEADS, HEAD_SIZE, device=DEVICE)
    sdpa_section_attn(
        query,
        keys,
        values,
        ref,
        torch.tensor([0, query.shape[0]]),
        torch.tensor([0, keys.shape[0]]),
        query.shape[0],
        keys.shape[0],
        causal,
        HEAD_SIZE**-0.5,
    )
    return ref


def host_step_metadata(query_lens, seq_lens, max_blocks, query_start_pad=0):
    """Common metadata of a step whose caches are never read (zero block
    table and slots): enough for the builder.  ``query_start_pad`` repeats
    the last query offset as the runner pads its CPU copy."""
    qsl = torch.tensor([0, *query_lens]).cumsum(0).to(torch.int32)
    seq_lens_cpu = torch.tensor(seq_lens, dtype=torch.int32)
    num_tokens = int(qsl[-1])
    return CommonAttentionMetadata(
        query_start_loc=qsl.to(DEVICE),
        query_start_loc_cpu=torch.cat([qsl, qsl[-1:].repeat(query_start_pad)]),
        seq_lens=seq_lens_cpu.to(DEVICE),
        seq_lens_cpu_upper_bound=seq_lens_cpu,
        num_reqs=len(query_lens),
        num_actual_tokens=num_tokens,
        max_query_len=max(query_lens),
        max_seq_len=max(seq_lens),
        block_table_tensor=torch.zeros(
            len(query_lens), max_blocks, dtype=torch.int32, device=DEVICE
        ),
        slot_mapping=torch.zeros(num_tokens, dtype=torch.int64, device=DEVICE),
        causal=True,
    )


def make_step(impl, reqs, causal=True):
    """An INT8 cache holding each request's context (written by ``impl``),
    and the step's query, new K/V and common metadata.

    ``reqs`` is a list of (context_len, query_len), decodes first.
    """
    seq_lens = [c + q for c, q in reqs]
    query_lens = [q for _, q in reqs]
    num_blocks = len(reqs) * math.ceil(max(seq_lens) / BLOCK_SIZE) + 4
    kv_cache = make_int8_cache(num_blocks, NUM_KV_HEADS, HEAD_SIZE)
    block_table, keys, values = write_requests(
        impl, kv_cache, seq_lens, NUM_KV_HEADS, HEAD_SIZE, torch.bfloat16
    )
    num_tokens = sum(query_lens)
    query = torch.randn(num_tokens, NUM_HEADS, HEAD_SIZE, dtype=torch.bfloat16)
    query = query.to(DEVICE)
    key = torch.cat([k[c:] for k, (c, _) in zip(keys, reqs)])
    value = torch.cat([v[c:] for v, (c, _) in zip(values, reqs)])
    qsl_cpu = torch.tensor([0] + query_lens).cumsum(0).to(torch.int32)
    seq_lens_cpu = torch.tensor(seq_lens, dtype=torch.int32)
    cam = CommonAttentionMetadata(
        query_start_loc=qsl_cpu.to(DEVICE),
        query_start_loc_cpu=qsl_cpu,
        seq_lens=seq_lens_cpu.to(DEVICE),
        seq_lens_cpu_upper_bound=seq_lens_cpu,
        num_reqs=len(reqs),
        num_actual_tokens=num_tokens,
        max_query_len=max(query_lens),
        max_seq_len=max(seq_lens),
        block_table_tensor=block_table,
        slot_mapping=torch.zeros(num_tokens, dtype=torch.int64, device=DEVICE),
        causal=causal,
    )
    return kv_cache, block_table, keys, values, query, key, value, cam


@pytest.mark.parametrize("step", list(STEPS))
# Decode rows go to the split-KV kernel, or to the unified kernel for layers
# that kernel does not take (e.g. head sizes other than 64/128/256).
@pytest.mark.parametrize("decode_kernel", ["split_kv", "unified"])
def test_mixed_step(step, decode_kernel, workspace_manager, kernel_calls):
    torch.manual_seed(0)
    reqs = STEPS[step]
    builder, _, _ = make_builder(KVQuantMode.INT8_PER_TOKEN_HEAD)
    # As in the engine: nothing may grow the workspace after this.
    workspace_manager.lock()
    builder.int8_prefill_section_tokens = 32
    builder.int8_prefill_query_tile_tokens = 16
    impl = make_int8_impl(decode_kernel)

    seq_lens = [c + q for c, q in reqs]
    query_lens = [q for _, q in reqs]
    kv_cache, block_table, keys, values, query, key, value, cam = make_step(impl, reqs)
    qsl_cpu = cam.query_start_loc_cpu
    seq_lens_cpu = cam.seq_lens_cpu_upper_bound
    meta = builder.build(0, cam)

    num_decodes = next((i for i, q in enumerate(query_lens) if q > 16), len(query_lens))
    if num_decodes == len(reqs):
        assert meta.prefill is None
    else:
        if num_decodes == 0:
            assert meta.decode is None
        else:
            assert meta.decode.prefill is None
            assert meta.decode.num_actual_tokens == sum(query_lens[:num_decodes])
            assert meta.decode.max_query_len == max(query_lens[:num_decodes])
            assert (
                meta.decode.query_start_loc.tolist()
                == qsl_cpu[: num_decodes + 1].tolist()
            )
            assert meta.decode.seq_lens.tolist() == seq_lens[:num_decodes]
            assert meta.decode.block_table.shape[0] == num_decodes
        planned = [r.block_table_row for r in meta.prefill.requests]
        assert planned == list(range(num_decodes, len(reqs)))

    output = torch.full_like(query, float("nan"))
    impl.forward(None, query, key, value, kv_cache, meta, output)
    # Each part of the step ran once, on the layer's kernel for it.
    expected = Counter({decode_kernel: 1 if num_decodes else 0})
    if meta.prefill is not None:
        expected["sectioned_prefill"] = 1
    assert kernel_calls == +expected

    if 0 < num_decodes < len(reqs):
        # The decode rows of a split step are exactly those of a decode-only
        # step over the same requests (the split-KV kernel on their metadata).
        n_tok = int(qsl_cpu[num_decodes])
        decode_meta = builder.build(
            0,
            CommonAttentionMetadata(
                query_start_loc=cam.query_start_loc[: num_decodes + 1],
                query_start_loc_cpu=qsl_cpu[: num_decodes + 1],
                seq_lens=cam.seq_lens[:num_decodes],
                seq_lens_cpu_upper_bound=seq_lens_cpu[:num_decodes],
                num_reqs=num_decodes,
                num_actual_tokens=n_tok,
                max_query_len=max(query_lens[:num_decodes]),
                max_seq_len=max(seq_lens[:num_decodes]),
                block_table_tensor=block_table[:num_decodes],
                slot_mapping=cam.slot_mapping[:n_tok],
                causal=True,
            ),
        )
        assert decode_meta.prefill is None
        decode_out = torch.empty_like(query[:n_tok])
        impl.forward(
            None,
            query[:n_tok],
            key[:n_tok],
            value[:n_tok],
            kv_cache,
            decode_meta,
            decode_out,
        )
        torch.testing.assert_close(output[:n_tok], decode_out, atol=0, rtol=0)

    for i, (context_len, query_len) in enumerate(reqs):
        if i < num_decodes and DEVICE == "cpu":
            # The Triton CPU interpreter mishandles bf16 dot products, so the
            # decode rows (split-KV kernel) are checked against the reference
            # on GPUs only; its own tests cover it on CPU with fp16.
            continue
        q0 = int(qsl_cpu[i])
        seq_len = context_len + query_len
        # Decode rows read every key from the cache; prefill rows read the
        # context from the cache and their own tokens from the step.
        cached = seq_len if i < num_decodes else context_len
        pos = torch.arange(cached, device=DEVICE)
        ctx_k, ctx_v = torch_dequant(kv_cache, block_table[i], pos, HEAD_SIZE)
        ref_k = torch.cat([ctx_k.bfloat16(), keys[i][cached:seq_len]])
        ref_v = torch.cat([ctx_v.bfloat16(), values[i][cached:seq_len]])
        ref = sdpa_reference(query[q0 : q0 + query_len], ref_k, ref_v, causal=True)
        torch.testing.assert_close(
            output[q0 : q0 + query_len].float(), ref, atol=2e-2, rtol=2e-2
        )


def test_decode_geometry_planned_once_per_step(
    workspace_manager, kernel_calls, monkeypatch
):
    """The builder plans the split-KV launch geometry of a step's decode
    part once (from host integers, as the selector would per call) and every
    layer launches with it: the launcher's own selection is never reached."""
    from vllm.v1.attention.ops import triton_int8_split_kv_attention as split_kv

    torch.manual_seed(0)
    reqs = STEPS["mixed"]
    builder, _, _ = make_builder(KVQuantMode.INT8_PER_TOKEN_HEAD)
    impl = make_int8_impl()
    kv_cache, _, _, _, query, key, value, cam = make_step(impl, reqs)
    meta = builder.build(0, cam)
    decode = meta.decode
    assert decode.int8_geometry == split_kv.select_int8_split_kv_geometry(
        max(q for _, q in reqs[:3]),
        max(c + q for c, q in reqs),
        3,
        sum(q for _, q in reqs[:3]),
        split_kv.MAX_PARTIALS,
        num_queries_per_kv=NUM_HEADS // NUM_KV_HEADS,
        num_kv_heads=NUM_KV_HEADS,
    )

    def replanned(*args, **kwargs):
        raise AssertionError("the launcher re-planned the geometry")

    monkeypatch.setattr(split_kv, "select_int8_split_kv_geometry", replanned)
    output = torch.full_like(query, float("nan"))
    impl.forward(None, query, key, value, kv_cache, meta, output)
    assert kernel_calls == {"split_kv": 1, "sectioned_prefill": 1}
    assert torch.isfinite(output).all()


def test_layers_use_the_builders_prefill_scratch(workspace_manager, monkeypatch):
    """The builder keeps the prefill scratch it reserves and hands it to every
    layer of a step with a prefill, so no layer fetches it from the workspace
    again (11 us of host time a layer); a layer whose scratch shapes differ
    from the builder's fetches its own, and both give the same output."""
    torch.manual_seed(0)
    reqs = STEPS["mixed"]
    builder, _, _ = make_builder(KVQuantMode.INT8_PER_TOKEN_HEAD)
    workspace_manager.lock()
    impl = make_int8_impl()
    kv_cache, _, _, _, query, key, value, cam = make_step(impl, reqs)
    meta = builder.build(0, cam)
    scratch = meta.int8_prefill_scratch
    assert scratch is builder.int8_prefill_scratch
    shapes = sectioned_prefill_workspace_shapes(
        NUM_HEADS,
        NUM_KV_HEADS,
        HEAD_SIZE,
        torch.bfloat16,
        builder.int8_prefill_section_tokens,
        builder.int8_prefill_query_tile_tokens,
    )
    assert [(x.shape, x.dtype) for x in scratch] == [
        (torch.Size(shape), dtype) for shape, dtype in shapes
    ]

    used = []
    real = triton_int8_per_token_head.sectioned_prefill_attention

    def recording(*args, **kwargs):
        used.append(args[8:11])
        return real(*args, **kwargs)

    monkeypatch.setattr(
        triton_int8_per_token_head, "sectioned_prefill_attention", recording
    )

    def fetch(*args):
        raise AssertionError("a layer fetched the prefill scratch again")

    with monkeypatch.context() as m:
        m.setattr(workspace_manager, "get_simultaneous", fetch)
        outputs = []
        for _ in range(3):
            output = torch.full_like(query, float("nan"))
            impl.forward(None, query, key, value, kv_cache, meta, output)
            outputs.append(output)
    assert len(used) == 3
    assert all(all(a is b for a, b in zip(u, scratch)) for u in used)
    assert torch.isfinite(outputs[0]).all()
    assert all(torch.equal(outputs[0], o) for o in outputs[1:])

    # Steps planned with smaller sections than the builder reserved for:
    # a layer (one that has not run with the builder's scratch: a layer's
    # shapes do not change between steps) fetches scratch of its own shapes
    # (from the locked workspace) instead.
    builder.int8_prefill_section_tokens = 32
    builder.int8_prefill_query_tile_tokens = 16
    meta = builder.build(0, cam)
    output = torch.full_like(query, float("nan"))
    make_int8_impl().forward(None, query, key, value, kv_cache, meta, output)
    assert used[-1][0].shape[0] == 32
    torch.testing.assert_close(output, outputs[0], atol=2e-2, rtol=2e-2)


def repeat_step(reqs, num_steps=3):
    """Build and run the same step ``num_steps`` times on one new layer (the
    outputs must be identical) and return the step's
    ``(query, key, value, kv_cache, metadata)`` and its first output."""
    torch.manual_seed(0)
    builder, _, _ = make_builder(KVQuantMode.INT8_PER_TOKEN_HEAD)
    impl = make_int8_impl()
    kv_cache, _, _, _, query, key, value, cam = make_step(impl, reqs)
    outputs = []
    for _ in range(num_steps):
        meta = builder.build(0, cam)
        outputs.append(torch.full_like(query, float("nan")))
        impl.forward(None, query, key, value, kv_cache, meta, outputs[-1])
    assert torch.isfinite(outputs[0]).all()
    for output in outputs[1:]:
        torch.testing.assert_close(output, outputs[0], atol=0, rtol=0)
    return (query, key, value, kv_cache, meta), outputs[0]


def test_layer_checks_split_kv_arguments_on_its_first_call_only(
    workspace_manager, kernel_calls, monkeypatch
):
    """A layer's first split-KV launch checks its caches, query layout and
    scratch; later steps launch without the checks (nothing they check
    changes between steps, and the builder plans the geometry), with the
    same output."""
    from vllm.v1.attention.ops import triton_int8_split_kv_attention as split_kv

    checks: Counter[str] = Counter()
    for name in ("_validate_inputs", "_validate_geometry"):
        fn = getattr(split_kv, name)

        def counted(*args, _fn=fn, _name=name, **kwargs):
            checks[_name] += 1
            return _fn(*args, **kwargs)

        monkeypatch.setattr(split_kv, name, counted)
    step, output = repeat_step(STEPS["decode_only"])
    assert kernel_calls == {"split_kv": 3}
    assert checks == {"_validate_inputs": 1, "_validate_geometry": 1}
    # Another layer checks its own arguments on its first call.
    make_int8_impl().forward(None, *step, output)
    assert checks == {"_validate_inputs": 2, "_validate_geometry": 2}


def test_layer_checks_prefill_arguments_on_its_first_call_only(
    workspace_manager, monkeypatch
):
    """A layer's first sectioned prefill checks the builder's scratch shapes
    and the dequantiser's arguments; later steps run without the checks
    (the layer's caches, scratch and token arrays keep their layouts), with
    the same output."""
    from vllm.v1.attention.ops import triton_int8_sectioned_prefill as prefill_op

    validated = []
    real = prefill_op.dequant_int8_pth_section

    def recording(*args, **kwargs):
        validated.append(kwargs.get("validate", True))
        return real(*args, **kwargs)

    monkeypatch.setattr(prefill_op, "dequant_int8_pth_section", recording)
    shape_checks = Counter()
    real_shapes = triton_int8_per_token_head.sectioned_prefill_workspace_shapes

    def counted_shapes(*args, **kwargs):
        shape_checks["shapes"] += 1
        return real_shapes(*args, **kwargs)

    monkeypatch.setattr(
        triton_int8_per_token_head,
        "sectioned_prefill_workspace_shapes",
        counted_shapes,
    )
    # Two requests with cached context: one dequantiser call each a step.
    step, output = repeat_step([(40, 1), (70, 40), (31, 33)])
    assert validated == [True, True] + [False, False] * 2
    # The builder's reservation and the layer's first call.
    assert shape_checks == {"shapes": 2}
    # Another layer checks its own arguments on its first call.
    make_int8_impl().forward(None, *step, output)
    assert validated[-2:] == [True, True]
    assert shape_checks == {"shapes": 3}


@pytest.mark.parametrize("seed", range(20))
def test_step_split_matches_split_decodes_and_prefills(seed):
    """The step split's boundary between decode and prefill rows (found with
    NumPy) is upstream's split_decodes_and_prefills' on reordered batches:
    decode rows (1..threshold query tokens), then prefill rows."""
    from vllm.v1.attention.backends.utils import split_decodes_and_prefills

    gen = random.Random(seed)
    builder, _, _ = make_builder(KVQuantMode.INT8_PER_TOKEN_HEAD)
    threshold = builder.reorder_batch_threshold
    num_decodes = gen.randint(0, 6)
    decode_lens = [gen.randint(1, threshold) for _ in range(num_decodes)]
    prefill_lens = [gen.randint(threshold + 1, 80)]
    prefill_lens += [gen.randint(1, 80) for _ in range(gen.randint(0, 3))]
    query_lens = decode_lens + prefill_lens
    seq_lens = [gen.randint(0, 60) + q for q in query_lens]
    # The CPU query offsets padded beyond the batch, as the runner's are.
    cam = host_step_metadata(query_lens, seq_lens, 16, query_start_pad=1)
    want_decodes, _, want_tokens, _ = split_decodes_and_prefills(
        cam, decode_threshold=threshold
    )
    meta = builder.build(0, cam)
    assert meta.prefill is not None
    assert meta.prefill.requests[0].block_table_row == want_decodes
    if want_decodes == 0:
        assert meta.decode is None
    else:
        assert meta.decode.num_actual_tokens == want_tokens
        assert meta.decode.seq_lens.shape[0] == want_decodes
        assert meta.decode.max_query_len == max(decode_lens)


def test_sliding_window_group_plans_for_its_window():
    """A sliding-window group's decode rows see at most window + q - 1 keys
    of a 128K context: the planned geometry splits those into segments (a
    few tiles each), where a full-attention group splits the context."""
    from vllm.v1.attention.ops import triton_int8_split_kv_attention as split_kv

    _, _, cfg = make_builder(KVQuantMode.INT8_PER_TOKEN_HEAD)
    cam = host_step_metadata([6, 6], [131072, 100000], 8192)
    spec = dict(
        block_size=BLOCK_SIZE,
        num_kv_heads=NUM_KV_HEADS,
        head_size=HEAD_SIZE,
        dtype=torch.bfloat16,
        kv_quant_mode=KVQuantMode.INT8_PER_TOKEN_HEAD,
    )
    geometries = {}
    for name, kv_spec in (
        ("full", FullAttentionSpec(**spec)),
        ("window", SlidingWindowSpec(**spec, sliding_window=2048)),
    ):
        builder = TritonAttentionMetadataBuilder(kv_spec, [], cfg, torch.device(DEVICE))
        geometries[name] = builder.build(0, cam).decode.int8_geometry
    window = geometries["window"]
    assert window.num_segments * window.tile_size * 4 <= 2048 + 6 - 1
    assert window.num_segments < geometries["full"].num_segments
    assert window == split_kv.select_int8_split_kv_geometry(
        6,
        131072,
        2,
        12,
        split_kv.MAX_PARTIALS,
        num_queries_per_kv=NUM_HEADS // NUM_KV_HEADS,
        num_kv_heads=NUM_KV_HEADS,
        sliding_window=2048,
    )


def test_verify_rows_beyond_the_split_kv_limit(workspace_manager, kernel_calls):
    """With 16 drafts the builder's threshold is 17, so 17-token verify rows
    are decode rows; the split-KV kernel takes at most 16 query tokens, so
    that step runs on the unified kernel, and a step of shorter rows still
    on the split-KV kernel."""
    builder, _, _ = make_builder(
        KVQuantMode.INT8_PER_TOKEN_HEAD, num_speculative_tokens=16
    )
    assert builder.reorder_batch_threshold == 17
    impl = make_int8_impl()
    for reqs, path in (([(40, 17), (17, 6)], "unified"), ([(40, 16)], "split_kv")):
        kernel_calls.clear()
        kv_cache, _, _, _, query, key, value, cam = make_step(impl, reqs)
        meta = builder.build(0, cam)
        assert meta.decode is not None and meta.prefill is None
        output = torch.full_like(query, float("nan"))
        impl.forward(None, query, key, value, kv_cache, meta, output)
        assert kernel_calls == {path: 1}, reqs


def test_drafter_layers_with_their_own_head_size(workspace_manager, kernel_calls):
    """A drafter's layers (e.g. DFlash's, head size 128 under a target of 256)
    get split-KV scratch of their own head size, not the target model's."""
    torch.manual_seed(0)
    builder, _, _ = make_builder(
        KVQuantMode.INT8_PER_TOKEN_HEAD, model_head_size=4 * HEAD_SIZE
    )
    assert builder.int8_segm_output.shape[1:] == (NUM_HEADS, HEAD_SIZE)
    impl = make_int8_impl()
    kv_cache, _, _, _, query, key, value, cam = make_step(impl, STEPS["decode_only"])
    output = torch.full_like(query, float("nan"))
    impl.forward(None, query, key, value, kv_cache, builder.build(0, cam), output)
    assert kernel_calls == {"split_kv": 1}
    assert torch.isfinite(output).all()


def test_non_causal_decode_step(workspace_manager, kernel_calls):
    """A non-causal step of decode rows only (a DFlash drafter's draft
    blocks, where every query token sees the whole context) runs the
    split-KV kernel without the causal mask, against non-causal attention
    on the dequantised cache."""
    torch.manual_seed(0)
    reqs = STEPS["decode_only"]
    builder, _, _ = make_builder(KVQuantMode.INT8_PER_TOKEN_HEAD)
    impl = make_int8_impl()
    kv_cache, block_table, _, _, query, key, value, cam = make_step(
        impl, reqs, causal=False
    )
    meta = builder.build(0, cam)
    assert meta.decode is not None and meta.decode.causal is False
    output = torch.full_like(query, float("nan"))
    impl.forward(None, query, key, value, kv_cache, meta, output)
    assert kernel_calls == {"split_kv": 1}
    causal = torch.full_like(query, float("nan"))
    causal_meta = builder.build(0, replace(cam, causal=True))
    impl.forward(None, query, key, value, kv_cache, causal_meta, causal)
    q0 = 0
    for i, (context_len, query_len) in enumerate(reqs):
        seq_len = context_len + query_len
        pos = torch.arange(seq_len, device=DEVICE)
        ctx_k, ctx_v = torch_dequant(kv_cache, block_table[i], pos, HEAD_SIZE)
        ref = sdpa_reference(
            query[q0 : q0 + query_len], ctx_k.bfloat16(), ctx_v.bfloat16(), causal=False
        )
        rows = slice(q0, q0 + query_len)
        torch.testing.assert_close(output[rows].float(), ref, atol=2e-2, rtol=2e-2)
        if query_len > 1:
            # The causal mask would have mattered for this request.
            assert (causal[rows].float() - ref).abs().max() > 0.05
        q0 += query_len


@pytest.mark.parametrize("case", ["non_causal", "prefill_on_unified"])
def test_whole_step_on_unified(case, workspace_manager, kernel_calls):
    """Steps the split does not handle (here non-causal), and layers without
    a sectioned prefill, run the whole mixed step in one unified launch."""
    reqs = STEPS["mixed"]
    builder, _, _ = make_builder(KVQuantMode.INT8_PER_TOKEN_HEAD)
    impl = make_int8_impl()
    if case == "prefill_on_unified":
        impl._int8_kernels = impl._int8_kernels._replace(
            prefill=Int8PrefillKernel.UNIFIED, section_attn_fn=None
        )
    kv_cache, _, _, _, query, key, value, cam = make_step(
        impl, reqs, causal=case != "non_causal"
    )
    meta = builder.build(0, cam)
    if case == "non_causal":
        assert meta.decode is None and meta.prefill is None
    output = torch.full_like(query, float("nan"))
    impl.forward(None, query, key, value, kv_cache, meta, output)
    assert kernel_calls == {"unified": 1}
    assert torch.isfinite(output).all()
