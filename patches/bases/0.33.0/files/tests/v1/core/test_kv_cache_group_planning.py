# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""KV cache group planning for hybrid models: full-attention layers are never
padded when a group size exists that avoids it."""

import json
from pathlib import Path

import pytest
import torch

from vllm.config import DeviceConfig, ModelConfig, VllmConfig
from vllm.v1.core.kv_cache_planning import (
    _get_kv_cache_groups_uniform_page_size,
    get_global_kv_cache_groups,
    get_kv_cache_configs,
    get_kv_cache_groups,
)
from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity
from vllm.v1.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheSpec,
    MambaSpec,
    SlidingWindowSpec,
)

BLOCK_SIZE = 16
# 16 tokens * 2 heads * (64 + 64) * 2 bytes: every spec below uses this page.
PAGE_SIZE = 8192

FULL = FullAttentionSpec(
    block_size=BLOCK_SIZE, num_kv_heads=2, head_size=64, dtype=torch.float16
)
SLIDING = SlidingWindowSpec(
    block_size=BLOCK_SIZE,
    num_kv_heads=2,
    head_size=64,
    dtype=torch.float16,
    sliding_window=128,
)
LOCAL = ChunkedLocalAttentionSpec(
    block_size=BLOCK_SIZE,
    num_kv_heads=2,
    head_size=64,
    dtype=torch.float16,
    attention_chunk_size=128,
)
MAMBA = MambaSpec(
    block_size=BLOCK_SIZE,
    shapes=((4, 256),),
    dtypes=(torch.float32,),
    page_size_padded=PAGE_SIZE,
)


def offline_vllm_config(model_dir: Path, max_model_len: int) -> VllmConfig:
    """A VllmConfig for planning tests, from a config.json written into
    ``model_dir`` (no hub access); the planner only reads max_model_len and
    the scheduler/cache settings."""
    (model_dir / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Qwen3ForCausalLM"],
                "model_type": "qwen3",
                "hidden_size": 256,
                "intermediate_size": 512,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "head_dim": 64,
                "vocab_size": 1024,
                "max_position_embeddings": max_model_len,
                "torch_dtype": "float16",
            }
        )
    )
    model_config = ModelConfig(
        model=str(model_dir), skip_tokenizer_init=True, max_model_len=max_model_len
    )
    config = VllmConfig(
        model_config=model_config, device_config=DeviceConfig(device="cpu")
    )
    # Planning, not running: keep the hybrid manager on as on a GPU, with
    # the layer-outer layout the Triton and Gated DeltaNet backends resolve.
    config.scheduler_config.disable_hybrid_kv_cache_manager = False
    config.cache_config.kv_cache_layout = "LBNHC"
    return config


def configs_for(
    vllm_config: VllmConfig,
    specs: list[dict[str, KVCacheSpec]],
    memory: list[int],
) -> list[KVCacheConfig]:
    """The engine's planning: global groups over all workers, then each
    worker's config."""
    groups = get_global_kv_cache_groups(vllm_config, specs)
    return get_kv_cache_configs(vllm_config, specs, memory, groups)


@pytest.fixture(scope="module")
def vllm_config(tmp_path_factory) -> VllmConfig:
    return offline_vllm_config(tmp_path_factory.mktemp("model"), max_model_len=4096)


def qwen3_5_27b_specs(drafter: bool = True) -> dict[str, KVCacheSpec]:
    """Qwen3.5-27B: GDN layers with full attention every 4th of 64 layers,
    plus the 5 sliding-window layers of its DFlash drafter."""
    specs: dict[str, KVCacheSpec] = {
        f"layers.{i}": FULL if (i + 1) % 4 == 0 else MAMBA for i in range(64)
    }
    if drafter:
        specs.update({f"draft.{i}": SLIDING for i in range(5)})
    return specs


def layout(groups) -> list[tuple[str, list[str]]]:
    return [(type(g.kv_cache_spec).__name__, g.layer_names) for g in groups]


def test_qwen3_5_with_dflash_drafter_pads_only_the_drafter(vllm_config):
    groups = get_kv_cache_groups(vllm_config, qwen3_5_27b_specs())

    full = [f"layers.{i}" for i in range(3, 64, 4)]
    gdn = [f"layers.{i}" for i in range(64) if (i + 1) % 4]
    assert layout(groups) == [
        *[("MambaSpec", gdn[i::6]) for i in range(6)],
        ("FullAttentionSpec", full[0::2]),
        ("FullAttentionSpec", full[1::2]),
        ("SlidingWindowSpec", [f"draft.{i}" for i in range(5)]),
    ]
    assert all(len(g.layer_names) == 8 for g in groups[:-1])


def test_qwen3_5_with_dflash_drafter_capacity(vllm_config):
    specs = qwen3_5_27b_specs()
    num_blocks = 1000
    (config,) = configs_for(vllm_config, [dict(specs)], [8 * PAGE_SIZE * num_blocks])
    assert config.num_blocks == num_blocks
    # The layer-outer layout gives each group one tensor of its layers: 6 GDN
    # groups, 2 full-attention groups and the drafter's.
    assert len(config.kv_cache_tensors) == len(config.kv_cache_groups) == 9
    # Two full-attention groups of 8 layers: 16 pages per 16 tokens, the
    # 64 KiB per token of the 16 real layers and nothing more.
    num_full_groups = sum(
        isinstance(g.kv_cache_spec, FullAttentionSpec) for g in config.kv_cache_groups
    )
    assert num_full_groups * 8 * PAGE_SIZE // BLOCK_SIZE == 16 * 512
    num_tokens, _ = get_kv_cache_capacity(vllm_config, config)

    # The n:1 heuristic picks 5 and pads every full-attention group to 5.
    old_groups = _get_kv_cache_groups_uniform_page_size(
        specs, vllm_config, group_size=5
    )
    assert [len(g.layer_names) for g in old_groups] == [5] * 8 + [4] * 2 + [4] * 4 + [5]
    (old_config,) = configs_for(
        vllm_config, [dict(specs)], [8 * PAGE_SIZE * num_blocks]
    )
    old_config.kv_cache_groups = old_groups
    old_config.num_blocks = 8 * num_blocks // 5
    old_tokens, _ = get_kv_cache_capacity(vllm_config, old_config)
    # Pages per request of max_model_len=4096: 256 per full-attention group,
    # 1 per GDN group and 257 per sliding-window group (the window plus the
    # 4096 in-flight tokens, capped at max_model_len).
    assert num_tokens == int(num_blocks / (2 * 256 + 6 + 257) * 4096) == 5285
    assert old_tokens == int(8 * num_blocks // 5 / (4 * 256 + 10 + 257) * 4096)
    assert old_tokens == 5076


def test_qwen3_5_without_drafter_unchanged(vllm_config):
    groups = get_kv_cache_groups(vllm_config, qwen3_5_27b_specs(drafter=False))
    full = [f"layers.{i}" for i in range(3, 64, 4)]
    gdn = [f"layers.{i}" for i in range(64) if (i + 1) % 4]
    assert layout(groups) == [
        ("MambaSpec", gdn[0::3]),
        ("MambaSpec", gdn[1::3]),
        ("MambaSpec", gdn[2::3]),
        ("FullAttentionSpec", full),
    ]


def test_gemma3_5_to_1_unchanged(vllm_config):
    specs = {f"layers.{i}": FULL if i % 6 == 5 else SLIDING for i in range(62)}
    groups = get_kv_cache_groups(vllm_config, specs)
    sw = [f"layers.{i}" for i in range(62) if i % 6 != 5]
    assert layout(groups) == [
        *[("SlidingWindowSpec", sw[i::6]) for i in range(6)],
        ("FullAttentionSpec", [f"layers.{i}" for i in range(5, 62, 6)]),
    ]
    assert [len(g.layer_names) for g in groups] == [9, 9, 9, 9, 8, 8, 10]


def test_llama4_3_to_1_unchanged(vllm_config):
    specs = {f"layers.{i}": FULL if i % 4 == 3 else LOCAL for i in range(48)}
    groups = get_kv_cache_groups(vllm_config, specs)
    local = [f"layers.{i}" for i in range(48) if i % 4 != 3]
    assert layout(groups) == [
        ("ChunkedLocalAttentionSpec", local[0::3]),
        ("ChunkedLocalAttentionSpec", local[1::3]),
        ("ChunkedLocalAttentionSpec", local[2::3]),
        ("FullAttentionSpec", [f"layers.{i}" for i in range(3, 48, 4)]),
    ]


def test_gpt_oss_with_eagle_unchanged(vllm_config):
    specs = {f"layers.{i}": SLIDING if i % 2 == 0 else FULL for i in range(24)}
    specs["eagle.0"] = FULL
    groups = get_kv_cache_groups(vllm_config, specs)
    assert layout(groups) == [
        ("SlidingWindowSpec", [f"layers.{i}" for i in range(0, 24, 2)]),
        ("FullAttentionSpec", [f"layers.{i}" for i in range(1, 24, 2)] + ["eagle.0"]),
    ]


@pytest.mark.parametrize("spec", [FULL, MAMBA])
def test_single_type_unchanged(vllm_config, spec):
    specs = {f"layers.{i}": spec for i in range(28)}
    groups = get_kv_cache_groups(vllm_config, specs)
    assert layout(groups) == [(type(spec).__name__, list(specs))]


def test_keeps_heuristic_when_drafter_pages_cost_more(vllm_config):
    # One-token drafter blocks padded to the shared page: each padded drafter
    # slot holds ~1,000 pages per request, more than the full-attention
    # padding of the heuristic's size 5 costs (4 slots * 256 pages).
    drafter = SlidingWindowSpec(
        block_size=1,
        num_kv_heads=2,
        head_size=64,
        dtype=torch.float16,
        sliding_window=1024,
        page_size_padded=PAGE_SIZE,
    )
    specs = qwen3_5_27b_specs(drafter=False)
    specs.update({f"draft.{i}": drafter for i in range(5)})
    groups = get_kv_cache_groups(vllm_config, specs)
    assert max(len(g.layer_names) for g in groups) == 5
    assert len(groups) == 15


def test_pipeline_parallel_stages(vllm_config):
    # PP=2: stage 0 holds layers 0-31, stage 1 layers 32-63 and the drafter.
    specs = qwen3_5_27b_specs()
    stages = [
        {
            k: v
            for k, v in specs.items()
            if k.startswith("layers.") and int(k.split(".")[1]) < 32
        },
        {
            k: v
            for k, v in specs.items()
            if not k.startswith("layers.") or int(k.split(".")[1]) >= 32
        },
    ]
    configs = configs_for(
        vllm_config, stages, [40 * PAGE_SIZE * 100, 40 * PAGE_SIZE * 100]
    )
    # Groups stride over the layer list, so each stage gets 4 of the 8 layers
    # of every full-attention and GDN group.
    for config, stage in zip(configs, stages):
        for group in config.kv_cache_groups:
            if not isinstance(group.kv_cache_spec, SlidingWindowSpec):
                assert len(group.layer_names) == 4
        assert sum(len(g.layer_names) for g in config.kv_cache_groups) == len(stage)
    # One tensor per group; stage 1 also holds the drafter's group.
    assert [len(c.kv_cache_tensors) for c in configs] == [8, 9]
    assert configs[0].num_blocks == configs[1].num_blocks == 40 * 100 // 5
