# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""GDNAttentionMetadataBuilder.build() in speculative-decoding steps: the
per-request lookups (state slots, query lengths, accepted tokens, initial
states) follow the batch's speculative / non-speculative split, and on a
GPU, building the metadata never synchronizes with the device."""

import json

import pytest
import torch

from tests.v1.attention.utils import (
    BatchSpec,
    create_common_attn_metadata,
    create_vllm_config,
)
from vllm.config import SpeculativeConfig
from vllm.utils import torch_utils
from vllm.v1.attention.backends import utils as attn_utils
from vllm.v1.attention.backends.gdn_attn import GDNAttentionMetadataBuilder
from vllm.v1.attention.backends.utils import mamba_get_block_table_tensor
from vllm.v1.kv_cache_interface import MambaSpec

BLOCK_SIZE = 16
NUM_SPEC = 2

# A small Qwen3 text config: the builder reads the scheduler, speculative
# and compilation settings, not the model's layers.
MODEL_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000,
    "vocab_size": 1024,
    "torch_dtype": "bfloat16",
}

# seq_lens, query_lens, draft tokens per request (-1: not a speculative
# decode).  Speculative rows sit between non-speculative ones, so a lookup
# that ignored the split would pick other requests' values.
BATCHES = {
    "pure_spec_decode": ([50, 30, 70], [3, 3, 3], [2, 2, 2]),
    "spec_decode_and_prefills": (
        [100, 20, 300, 45],
        [50, 3, 64, 3],
        [-1, 2, -1, 2],
    ),
    "spec_decode_prefill_and_decode": ([100, 65, 20], [50, 1, 3], [-1, -1, 2]),
}


@pytest.fixture(autouse=True)
def cpu_default_device():
    """The runner's host tensors are on the CPU, also where an earlier test in
    the process left a CUDA default device (as the per-token-head cache tests
    do): the batch helpers create some of them on the default device."""
    previous = torch.get_default_device()
    torch.set_default_device("cpu")
    yield
    torch.set_default_device(previous)


def _builder(tmp_path, device: torch.device) -> GDNAttentionMetadataBuilder:
    (tmp_path / "config.json").write_text(json.dumps(MODEL_CONFIG))
    vllm_config = create_vllm_config(model_name=str(tmp_path), block_size=BLOCK_SIZE)
    vllm_config.speculative_config = SpeculativeConfig(
        method="ngram", num_speculative_tokens=NUM_SPEC
    )
    spec = MambaSpec(block_size=BLOCK_SIZE, shapes=((16, 64),), dtypes=(torch.float16,))
    return GDNAttentionMetadataBuilder(
        kv_cache_spec=spec,
        layer_names=["layer.0"],
        vllm_config=vllm_config,
        device=device,
    )


def _inputs(name: str, device: torch.device):
    seq_lens, query_lens, drafts = BATCHES[name]
    common = create_common_attn_metadata(
        BatchSpec(seq_lens=seq_lens, query_lens=query_lens), BLOCK_SIZE, device
    )
    # Distinct per request, so that a lookup of the wrong request shows.
    accepted = torch.arange(1, len(seq_lens) + 1, dtype=torch.int32, device=device)
    return common, accepted, torch.tensor(drafts, dtype=torch.int32)


@pytest.mark.parametrize("name", BATCHES)
def test_spec_step_lookups_follow_the_split(tmp_path, monkeypatch, name):
    device = torch.device("cpu")
    if not torch.cuda.is_available():
        # Pinning host memory needs a CUDA driver.
        monkeypatch.setattr(torch_utils, "PIN_MEMORY", False)
        monkeypatch.setattr(attn_utils, "PIN_MEMORY", False)
    builder = _builder(tmp_path, device)
    common, accepted, drafts = _inputs(name, device)
    meta = builder.build(
        common_prefix_len=0,
        common_attn_metadata=common,
        num_accepted_tokens=accepted,
        num_decode_draft_tokens_cpu=drafts,
    )

    spec = [i for i, d in enumerate(drafts.tolist()) if d >= 0]
    non_spec = [i for i, d in enumerate(drafts.tolist()) if d < 0]
    block_table = mamba_get_block_table_tensor(
        common.block_table_tensor,
        common.seq_lens,
        builder.kv_cache_spec,
        builder.vllm_config.cache_config.mamba_cache_mode,
    )
    query_lens = BATCHES[name][1]

    def starts(rows: list[int]) -> list[int]:
        out = [0]
        for r in rows:
            out.append(out[-1] + query_lens[r])
        return out

    assert meta.num_spec_decodes == len(spec)
    assert meta.spec_state_indices_tensor.tolist() == (
        block_table[spec, : NUM_SPEC + 1].tolist()
    )
    assert meta.num_accepted_tokens.tolist() == [r + 1 for r in spec]
    assert meta.spec_query_start_loc.tolist() == starts(spec)
    if non_spec:
        assert meta.non_spec_state_indices_tensor.tolist() == (
            block_table[non_spec, 0].tolist()
        )
        assert meta.non_spec_query_start_loc.tolist() == starts(non_spec)
        context_lens = [BATCHES[name][0][r] - query_lens[r] for r in non_spec]
        assert meta.has_initial_state.tolist() == [c > 0 for c in context_lens]
    else:
        assert meta.non_spec_state_indices_tensor is None
        assert meta.has_initial_state is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", BATCHES)
def test_spec_step_metadata_does_not_synchronize(tmp_path, name):
    """A synchronizing call (a blocking host-to-device copy, such as indexing
    a device tensor with a CPU mask) raises under the sync debug mode."""
    device = torch.device("cuda")
    builder = _builder(tmp_path, device)
    common, accepted, drafts = _inputs(name, device)
    torch.accelerator.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        meta = builder.build(
            common_prefix_len=0,
            common_attn_metadata=common,
            num_accepted_tokens=accepted,
            num_decode_draft_tokens_cpu=drafts,
        )
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert meta.num_spec_decodes == sum(d >= 0 for d in drafts.tolist())
