# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Attention layers whose page must be padded to a much larger page (a DFlash
drafter beside an INT8 hybrid model) fill the padded page with their blocks,
and the Triton backend's views read them back at the right addresses."""

import pytest
import torch

from tests.v1.core.test_kv_cache_group_planning import offline_vllm_config
from tests.v1.worker.test_padded_kv_page_view import (
    DRAFTER,
    TARGET,
    _padded_int8_cache,
)
from vllm.config import VllmConfig
from vllm.v1.core import kv_cache_utils
from vllm.v1.core.kv_cache_utils import (
    _padded_page_block_ratio,
    get_kv_cache_capacity,
    get_kv_cache_configs,
    resolve_kv_cache_block_sizes,
    unify_kv_cache_spec_page_size,
)
from vllm.v1.kv_cache_interface import MambaSpec

# Qwen3.5-27B with an INT8 per-token-head cache (TARGET: 4 KV heads x 256,
# block size 1600 aligned by the platform to the Mamba state page, so
# 3,328,000-byte pages) and its DFlash drafter (DRAFTER: 8 KV heads x 128,
# sliding window 2048, 16-token blocks of 16 x 8 x 2 x (128 + 4) = 33,792
# bytes), as in the worker-view test.
MAMBA = MambaSpec(
    block_size=1600,
    shapes=((10, 6, 512),),
    dtypes=(torch.float32,),
    page_size_padded=TARGET.page_size_bytes,
)


def test_int8_hybrid_drafter_fills_the_padded_page():
    assert TARGET.page_size_bytes == 3_328_000
    assert DRAFTER.page_size_bytes == 33_792
    specs = {"target": TARGET, "mamba": MAMBA, "draft": DRAFTER}

    unified = unify_kv_cache_spec_page_size(specs)

    assert unified["target"] == TARGET
    assert unified["mamba"] == MAMBA
    draft = unified["draft"]
    assert draft.page_size_bytes == TARGET.page_size_bytes
    # 98 blocks would fit; 80 would split the page evenly (41,600-byte
    # sub-pages), but 16 x 80 = 1280 does not divide the target's 1600 and
    # would raise the scheduler's block size (the LCM) to 6400. 50 does:
    # 800-token blocks in 66,560-byte sub-pages.
    assert draft.block_size == 16 * 50
    assert draft.unpadded_page_size_bytes == 50 * DRAFTER.page_size_bytes
    assert TARGET.block_size % draft.block_size == 0


@pytest.fixture(scope="module")
def vllm_config(tmp_path_factory) -> VllmConfig:
    return offline_vllm_config(tmp_path_factory.mktemp("model"), max_model_len=131072)


def test_int8_hybrid_drafter_capacity(vllm_config, monkeypatch):
    """The whole Qwen3.5-27B + DFlash mix through vLLM's planner, 12 GiB."""
    specs = {f"layers.{i}": TARGET if (i + 1) % 4 == 0 else MAMBA for i in range(64)}
    specs.update({f"draft.{i}": DRAFTER for i in range(5)})
    budget = 12 << 30

    def plan():
        (config,) = get_kv_cache_configs(vllm_config, [dict(specs)], [budget])
        (draft_group,) = [
            g for g in config.kv_cache_groups if "draft.0" in g.layer_names
        ]
        spec = draft_group.kv_cache_spec
        pages = spec.max_memory_usage_bytes(vllm_config) // spec.page_size_bytes
        # The scheduler's block size is the LCM of the groups' block sizes.
        scheduler_block_size, _ = resolve_kv_cache_block_sizes(config, vllm_config)
        assert scheduler_block_size == TARGET.block_size
        return get_kv_cache_capacity(vllm_config, config)[0], pages

    tokens, draft_pages = plan()
    # One padded page per 16 drafter tokens, as before this change.
    monkeypatch.setattr(kv_cache_utils, "_padded_page_block_ratio", lambda *a: 1)
    old_tokens, old_draft_pages = plan()

    # The drafter's window (2,048 tokens plus the in-flight chunk) now takes
    # a handful of pages per request instead of hundreds of 3.3 MB pages.
    assert draft_pages <= 10 < 100 < old_draft_pages
    assert tokens > 2 * old_tokens
    # Full attention costs 16 layers x 4 heads x 520 bytes per token, so 12 GiB
    # minus the fixed per-request state must still hold ~300K tokens.
    assert tokens > 290_000


@pytest.mark.parametrize(
    ("max_page", "page", "block", "anchor", "ratio"),
    [
        (3_328_000, 33_792, 16, 1600, 50),  # INT8 Qwen3.5-27B + DFlash
        (3_328_000, 33_792, 16, None, 80),  # no attention layer owns the max
        (12_288, 8_192, 16, 16, 1),  # MiMo + DFlash: 3:2, one block per page
        (65_536, 8_192, 16, 256, 8),  # divides: the ratio itself
        (65_536, 8_192, 16, 32, 2),  # ... capped by the anchor
        (1_000, 48, 16, None, 1),  # no 16-byte aligned split of 1,000 bytes
    ],
)
def test_padded_page_block_ratio(max_page, page, block, anchor, ratio):
    assert _padded_page_block_ratio(max_page, page, block, anchor) == ratio
    # Brute force: the largest count of equal, 16-byte aligned sub-pages
    # that each hold one page, with the grown block dividing the anchor.
    fits = [
        r
        for r in range(2, max_page // page + 1)
        if max_page % r == 0
        and (max_page // r) % 16 == 0
        and (anchor is None or anchor % (block * r) == 0)
    ]
    assert ratio == max(fits, default=1)


def test_triton_scale_views_follow_the_padded_sub_pages():
    """The Triton backend's per-token-head scale views over a padded, split
    cache address a word inside the right block of the right sub-page (where
    inside the block is the backend's layout, tested with the backend)."""
    from vllm.v1.attention.backends.triton_attn import TritonAttentionImpl

    kernel_block_size = 16
    spec, raw, cache = _padded_int8_cache(kernel_block_size)
    per_page = spec.block_size // kernel_block_size
    sub_page = spec.page_size_bytes // per_page
    nkv, hs = spec.num_kv_heads, spec.head_size
    block_bytes = kernel_block_size * nkv * 2 * (hs + 4)

    impl = TritonAttentionImpl(
        num_heads=2 * nkv,
        head_size=hs,
        scale=hs**-0.5,
        num_kv_heads=nkv,
        alibi_slopes=None,
        sliding_window=spec.sliding_window,
        kv_cache_dtype="int8_per_token_head",
    )
    impl._ensure_scale_caches(cache)
    assert raw.count_nonzero() == 0  # setting up the views wrote nothing

    gen = torch.Generator().manual_seed(0)
    for block, slot, head in [
        (0, 0, 0),
        (1, 15, 7),
        (49, 3, 2),
        (50, 0, 0),
        (99, 9, 5),
    ]:
        k_scale, v_scale = (0.5 + torch.rand(2, generator=gen, device="cpu")).tolist()
        impl._k_scale_cache[block, slot, head] = k_scale
        impl._v_scale_cache[block, slot, head] = v_scale
        page, sub = divmod(block, per_page)
        start = page * spec.page_size_bytes + sub * sub_page
        written = raw.nonzero().flatten()
        # Eight bytes (two fp32 words in [0.5, 1.5) have no zero high
        # byte), all inside this block's records.
        assert 2 <= written.numel() <= 8
        assert ((written >= start) & (written < start + block_bytes)).all()
        words = raw[start : start + block_bytes].view(torch.float32)
        assert (words == k_scale).sum() == 1 and (words == v_scale).sum() == 1
        raw.zero_()
