# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""The warm-up compiles the Triton kernels of speculative decoding and of the
runner's slot mappings before the engine serves.

Each test records the launches of a kernel (instead of running it), once from
the warm-up and once from the serving code path over batches of different
sizes, and compares their Triton cache keys: the keys the JIT would look up
on an sm_90 GPU, computed without one.  A serving launch whose key the
warm-up did not produce would compile while requests are being decoded."""

import dataclasses
import functools
import types
from unittest import mock

import numpy as np
import pytest
import torch

from tests.triton_launch_keys import record_cache_keys
from tests.v1.sample.test_rejection_sampler import create_sampling_metadata
from vllm.model_executor.warmup.v1_block_table_warmup import (
    warm_v1_block_table_groups,
    warm_v1_block_table_kernels,
)
from vllm.triton_utils import triton
from vllm.v1.sample.rejection_sampler import (
    rejection_greedy_sample_kernel,
    rejection_sample,
    warmup_rejection_greedy_sample_kernel,
)
from vllm.v1.spec_decode import dflash as dflash_module
from vllm.v1.spec_decode import utils as spec_utils
from vllm.v1.spec_decode.dflash import DFlashProposer
from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer
from vllm.v1.utils import CpuGpuBuffer
from vllm.v1.worker import block_table as block_table_module
from vllm.v1.worker.block_table import MultiGroupBlockTable

DEVICE = torch.device("cpu")
NUM_SPEC_TOKENS = 5


@pytest.fixture
def record(monkeypatch):
    """record(kernel) -> the cache keys of its launches from then on; the
    kernel itself does not run."""
    return functools.partial(record_cache_keys, monkeypatch)


def _dflash_proposer(max_tokens: int = 8192) -> DFlashProposer:
    """A DFlash proposer with only what its input kernels read (its
    constructor needs a drafter model)."""
    proposer = object.__new__(DFlashProposer)
    proposer.device = DEVICE
    proposer.num_speculative_tokens = NUM_SPEC_TOKENS
    proposer.parallel_drafting_token_id = 7
    proposer.block_size = 16
    proposer.vllm_config = types.SimpleNamespace(
        model_config=types.SimpleNamespace(get_vocab_size=lambda: 1000)
    )
    max_query = 16 * (1 + NUM_SPEC_TOKENS)
    proposer.input_ids = torch.zeros(max_query, dtype=torch.int32)
    proposer.positions = torch.zeros(max_query, dtype=torch.int64)
    proposer._slot_mapping_buffer = torch.zeros(max_query, dtype=torch.int64)
    proposer._context_positions_buffer = torch.zeros(max_tokens, dtype=torch.int64)
    proposer._context_slot_mapping_buffer = torch.zeros(max_tokens, dtype=torch.int64)
    proposer.backup_next_token_ids = CpuGpuBuffer(
        16, dtype=torch.int32, pin_memory=False, device=DEVICE, with_numpy=True
    )
    return proposer


def test_eagle_input_kernels_one_variant_for_every_batch(record):
    """The kernels that turn sampled tokens into the next drafting step's
    inputs run the warm-up's variant for any number of requests, on the
    first step (one sampled token per request) and after verify steps."""
    proposer = _dflash_proposer()
    next_keys = record(spec_utils.eagle_prepare_next_token_padded_kernel)
    inputs_keys = record(spec_utils.eagle_prepare_inputs_padded_kernel)
    SpecDecodeBaseProposer.warmup_kernels(proposer)
    assert len(next_keys) == 1 and len(inputs_keys) == 1
    warm_next, warm_inputs = next_keys.pop(), inputs_keys.pop()

    for num_reqs, num_sampled in [(1, 1), (3, 1), (1, 6), (8, 6), (16, 6)]:
        req_ids = [f"r{i}" for i in range(num_reqs)]
        batch = mock.MagicMock()
        batch.num_reqs = num_reqs
        batch.req_ids = req_ids
        batch.vocab_size = 151936
        batch.num_tokens_no_spec = np.full(num_reqs, 9)
        requests = {
            r: mock.MagicMock(**{"get_token_id.return_value": 3}) for r in req_ids
        }
        proposer.prepare_next_token_ids_padded(
            torch.zeros((num_reqs, num_sampled), dtype=torch.int32),
            requests,
            batch,
            torch.zeros(num_reqs, dtype=torch.bool),
        )
        # The launch of prepare_inputs_padded.
        proposer._padded_sampling_indices(
            torch.zeros(num_reqs, dtype=torch.int32),
            torch.zeros(num_reqs, dtype=torch.int32),
            torch.zeros(num_reqs + 1, dtype=torch.int32),
            num_reqs,
        )
    assert next_keys == [warm_next] * 5
    assert inputs_keys == [warm_inputs] * 5


def _first_pass_batch(context_lens: list[int], block_table_stride: int):
    """Inputs of DFlash's first-pass kernel for requests with these numbers of
    new target tokens (contexts of 100 + that many tokens)."""
    num_reqs = len(context_lens)
    query_start_loc = torch.tensor([0, *np.cumsum(context_lens)], dtype=torch.int32)
    positions = torch.cat([torch.arange(100, 100 + n) for n in context_lens])
    block_table = torch.randperm(num_reqs * block_table_stride, dtype=torch.int32)
    return dict(
        next_token_ids=torch.arange(1, num_reqs + 1, dtype=torch.int32) * 100,
        target_positions=positions,
        token_indices_to_sample=torch.full(
            (num_reqs * NUM_SPEC_TOKENS,), -1, dtype=torch.int32
        ),
        block_table=block_table.view(num_reqs, block_table_stride),
        query_start_loc=query_start_loc,
        batch_size=num_reqs,
        max_ctx_per_req=max(context_lens),
        num_context=int(sum(context_lens)),
    )


def test_dflash_first_pass_kernel_one_variant_per_form(record):
    """DFlash's first-pass input kernel runs one of the warm-up's two
    variants (with and without rejected tokens) for any batch, context and
    block table."""
    proposer = _dflash_proposer()
    keys = record(dflash_module.copy_and_expand_dflash_inputs_kernel)
    with mock.patch.object(SpecDecodeBaseProposer, "warmup_kernels"):
        proposer.warmup_kernels()
    warm = set(keys)
    assert len(warm) == 2
    keys.clear()
    for context_lens, stride in [([1], 1), ([3, 2, 4], 37), ([4097], 300)]:
        for rejected in (None, torch.zeros(len(context_lens), dtype=torch.int32)):
            proposer._copy_and_expand_inputs(
                **_first_pass_batch(context_lens, stride),
                num_rejected_tokens_gpu=rejected,
            )
    assert len(keys) == 6 and set(keys) == warm


@pytest.mark.parametrize("rejected", [False, True])
@torch.inference_mode()
def test_dflash_first_pass_kernel_fixed_block_keeps_its_output(rejected):
    """The fixed 256-token program writes what the kernel wrote with a
    program as wide as the longest request (Triton's interpreter)."""
    context_lens = [3, 300, 2]
    batch = _first_pass_batch(context_lens, block_table_stride=40)
    num_rejected = torch.tensor([1, 0, 1], dtype=torch.int32) if rejected else None
    outputs = []
    for block in (None, triton.next_power_of_2(300 + 1 + NUM_SPEC_TOKENS)):
        proposer = _dflash_proposer()
        token_indices = batch["token_indices_to_sample"].clone()
        if block is None:
            proposer._copy_and_expand_inputs(
                **{**batch, "token_indices_to_sample": token_indices},
                num_rejected_tokens_gpu=num_rejected,
            )
        else:
            # The launch before this change: BLOCK_SIZE from the step.
            with mock.patch.object(dflash_module, "_COPY_AND_EXPAND_BLOCK_SIZE", block):
                proposer._copy_and_expand_inputs(
                    **{**batch, "token_indices_to_sample": token_indices},
                    num_rejected_tokens_gpu=num_rejected,
                )
        outputs.append(
            [
                proposer.input_ids.clone(),
                proposer.positions.clone(),
                proposer._slot_mapping_buffer.clone(),
                proposer._context_positions_buffer.clone(),
                proposer._context_slot_mapping_buffer.clone(),
                token_indices,
            ]
        )
    for fixed, wide in zip(*outputs):
        torch.testing.assert_close(fixed, wide, rtol=0, atol=0)
    # The query positions follow each request's last accepted position.
    last = torch.tensor([102, 399, 101]) - (num_rejected if rejected else 0)
    expected = (last[:, None] + 1 + torch.arange(1 + NUM_SPEC_TOKENS)).flatten()
    torch.testing.assert_close(outputs[0][1][: expected.numel()], expected)


@pytest.mark.parametrize("num_reqs", [1, 3])
@torch.inference_mode()
def test_rejection_greedy_kernel_variants_warmed(record, num_reqs):
    """Greedy verification of all-greedy batches (is_greedy None) and of
    mixed ones runs variants the warm-up compiled."""
    keys = record(rejection_greedy_sample_kernel)
    warmup_rejection_greedy_sample_kernel(DEVICE, NUM_SPEC_TOKENS)
    warm = set(keys)
    assert len(warm) == 2
    keys.clear()
    spec_tokens = [[1, 2, 3][: 1 + i % 3] for i in range(num_reqs)]
    # The target agrees with each draft but its last token.
    targets = [[*s[:-1], 9] for s in spec_tokens]
    logits = torch.nn.functional.one_hot(torch.tensor(sum(targets, [])), 100).float()
    num_draft_tokens = [len(s) for s in spec_tokens]
    cu_num_draft_tokens = torch.tensor(np.cumsum(num_draft_tokens), dtype=torch.int32)
    draft_token_ids = torch.tensor(sum(spec_tokens, []), dtype=torch.int32)
    bonus = torch.zeros((num_reqs, 1), dtype=torch.int32)
    mixed = create_sampling_metadata(
        all_greedy=False, temperature=torch.tensor([0.0] + [1.0] * (num_reqs - 1))
    )
    mixed = dataclasses.replace(mixed, all_random=False)
    for metadata in (create_sampling_metadata(all_greedy=True), mixed):
        rejection_sample(
            draft_token_ids,
            num_draft_tokens,
            max(num_draft_tokens),
            cu_num_draft_tokens,
            None,
            logits,
            bonus,
            metadata,
        )
    assert len(keys) == 2 and set(keys) == warm


@torch.inference_mode()
def test_slot_mapping_warmup_covers_every_group(record):
    """The runner's own KV-cache groups (a hybrid model's 848-token
    attention blocks, a drafter's 16-token ones) get their slot-mapping
    variant from the warm-up; the fixed sizes of warm_v1_block_table_kernels
    do not give it."""
    tables = MultiGroupBlockTable(
        max_num_reqs=4,
        max_num_batched_tokens=64,
        pin_memory=False,
        device=DEVICE,
        block_sizes=[848, 16],
        kernel_block_sizes=[848, 16],
        max_num_blocks=[4, 200],
    )
    runner = types.SimpleNamespace(
        input_batch=types.SimpleNamespace(block_table=tables),
        query_start_loc=CpuGpuBuffer(
            5, dtype=torch.int32, pin_memory=False, device=DEVICE
        ),
        positions=torch.zeros(64, dtype=torch.int64),
    )
    keys = record(block_table_module._compute_slot_mapping_kernel)
    warm_v1_block_table_kernels(DEVICE, 64)
    fixed = set(keys)
    keys.clear()
    warm_v1_block_table_groups(runner)
    warm = set(keys)
    assert len(warm) == 2
    keys.clear()
    for num_reqs, num_tokens in [(1, 7), (3, 33), (4, 64)]:
        tables.compute_slot_mapping(
            num_reqs,
            runner.query_start_loc.gpu[: num_reqs + 1],
            runner.positions[:num_tokens],
        )
    assert set(keys) == warm
    assert not warm <= fixed


@pytest.mark.parametrize("max_num_seqs", [1, 8, 256])
def test_draftless_steps_warmed(monkeypatch, max_num_seqs):
    """With speculation on, the warm-up runs eager decode batches of one,
    two and 16 one-token requests (Triton's three integer variants), alone
    and next to a prefill of at least two tokens (which the metadata
    builders do not count as a decode), all with attention metadata and no
    drafts: the steps a prompt-lookup proposer without a match schedules."""
    from vllm.model_executor.warmup import spec_decode_warmup as warmup

    monkeypatch.setattr(
        warmup, "warmup_rejection_greedy_sample_kernel", lambda *args: None
    )
    calls = []
    runner = types.SimpleNamespace(
        speculative_config=object(),
        device=DEVICE,
        num_spec_tokens=NUM_SPEC_TOKENS,
        drafter=None,
        use_async_spec_decode=False,
        scheduler_config=types.SimpleNamespace(max_num_seqs=max_num_seqs),
        _dummy_run=lambda num_tokens, **kw: calls.append((num_tokens, kw)),
    )
    warmup.spec_decode_warmup(runner)
    batches = set()
    for num_tokens, kw in calls:
        assert kw["force_attention"] and kw["is_profile"], kw
        assert not kw.get("uniform_decode"), kw
        if kw.get("create_mixed_batch"):
            # The runner's mixed batch: this many one-token decodes, then
            # one prefill of the remaining tokens.
            decodes = min(max_num_seqs - 1, num_tokens // 2)
            assert num_tokens - decodes >= 2
            batches.add(("mixed", decodes))
        else:
            assert num_tokens <= max_num_seqs
            batches.add(("decode", num_tokens))
    expected = {("decode", n) for n in (1, 2, 16) if n <= max_num_seqs}
    expected |= {("mixed", n) for n in (1, 2, 16) if n < max_num_seqs}
    assert batches == expected

    calls.clear()
    runner.speculative_config = None
    warmup.spec_decode_warmup(runner)
    assert not calls


def _corrected_counts(
    num_computed, num_accepted, prev_positions, valid_counts, prev_drafts, host
):
    """The correction's rule, request by request, on lists: a request that
    had drafts in the previous step (at position p) has computed what it had
    there plus its valid sampled tokens, and accepted those; any other takes
    the host's count and keeps its accepted count."""
    computed, accepted = list(num_computed), list(num_accepted)
    for i, p in enumerate(prev_positions):
        if p >= 0 and prev_drafts[p] > 0:
            computed[i] = num_computed[p] + valid_counts[p]
            accepted[i] = valid_counts[p]
        else:
            computed[i] = host[i]
    return computed, accepted


def test_batch_change_correction_compiled_once():
    """After the warm-up, the asynchronous scheduler's computed-token
    correction (torch.compile, dynamic) runs batches of 1-16 requests after
    batches of 1-16 without recompiling (dynamic shapes alone specialise
    sizes 0 and 1: four graphs), and corrects each request as the rule
    says."""
    torch._dynamo.reset()
    max_num_reqs = 16
    # The runner's device buffers, created outside inference mode.
    num_computed = torch.zeros(max_num_reqs, dtype=torch.int32, device=DEVICE)
    num_accepted = torch.ones(max_num_reqs, dtype=torch.int32, device=DEVICE)
    prev_positions = torch.zeros(max_num_reqs, dtype=torch.int64, device=DEVICE)
    prev_drafts = torch.zeros(max_num_reqs, dtype=torch.int32, device=DEVICE)
    spec_utils.warmup_update_num_computed_tokens_for_batch_change(
        num_computed, num_accepted, prev_positions, prev_drafts
    )

    rng = np.random.default_rng(0)
    prev_num_reqs = 1
    with (
        torch.inference_mode(),
        torch._dynamo.config.patch(error_on_recompile=True),
    ):
        for num_reqs in (1, 2, 1, 3, 16, 1, 5, 2):
            num_computed.copy_(torch.from_numpy(rng.integers(0, 4096, max_num_reqs)))
            num_accepted.copy_(torch.from_numpy(rng.integers(1, 7, max_num_reqs)))
            prev_drafts.copy_(torch.from_numpy(rng.integers(0, 2, max_num_reqs)))
            # -1: a request that was not in the previous batch.
            prev = rng.integers(-1, prev_num_reqs, num_reqs)
            prev_positions[:num_reqs].copy_(torch.from_numpy(prev))
            valid = rng.integers(1, NUM_SPEC_TOKENS + 2, prev_num_reqs)
            host = rng.integers(0, 4096, num_reqs)
            expected = _corrected_counts(
                num_computed.tolist(),
                num_accepted.tolist()[:num_reqs],
                prev.tolist(),
                valid.tolist(),
                prev_drafts.tolist(),
                host.tolist(),
            )

            spec_utils.update_num_computed_tokens_for_batch_change(
                num_computed,
                num_accepted[:num_reqs],
                prev_positions[:num_reqs],
                torch.tensor(valid, dtype=torch.int32, device=DEVICE),
                prev_drafts,
                torch.tensor(host, dtype=torch.int32, device=DEVICE),
            )
            assert num_computed.tolist()[:num_reqs] == expected[0][:num_reqs]
            assert num_accepted.tolist()[:num_reqs] == expected[1][:num_reqs]
            prev_num_reqs = num_reqs
