"""What upstream's config-building tests need in the CPU suite: a local
Hugging Face hub cache (model configs, no weights) and a device platform.

Upstream's ``tests/v1/core/test_kv_cache_utils.py`` builds ``ModelConfig``
objects from hub model names (``ModelConfig()`` defaults to
``Qwen/Qwen3-0.6B``; two tests name ``Qwen/Qwen1.5-7B``).  ``ModelConfig``
reads the model's ``config.json`` (``try_get_generation_config`` its
``generation_config.json``) through ``huggingface_hub``, which CI cannot
reach.  ``forktool test`` writes this cache and runs pytest with ``HF_HOME``
pointing at it and ``HF_HUB_OFFLINE=1``, so those names resolve from disk.

The files are what the models publish on the hub (architecture values
unchanged).  The cache has the layout ``huggingface_hub`` itself writes
(``hub/models--ORG--NAME/{refs/main,snapshots/REV/*,blobs/*}``); REV is
derived from the files' contents, not the hub's commit id, since nothing
here talks to the hub.

Those tests then build a ``VllmConfig``, whose ``DeviceConfig("auto")`` and
hybrid-KV-cache-manager switch ask the current platform.  Upstream runs them
on a GPU.  The CPU suite has none, and the fork wheel is a CUDA build, so
vLLM finds no platform at all (``UnspecifiedPlatform``: no device type, no
hybrid KV cache manager) and these tests fail before reaching the planner,
on pristine 0.26.0 as on the fork.  Loaded as a pytest plugin
(``-pforktool.hf_cache`` in ``forktool/cpu_suite.txt``), this module gives
the tests of ``DEVICE_PLATFORM_TESTS`` vLLM's own CPU platform, the one a
CPU build of vLLM picks, for the duration of each test; every other test of
the suite keeps the platform it had.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

# Qwen/Qwen3-0.6B: vLLM 0.26.0's ModelConfig default model.
_QWEN3_0_6B_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "head_dim": 128,
    "hidden_act": "silu",
    "hidden_size": 1024,
    "initializer_range": 0.02,
    "intermediate_size": 3072,
    "max_position_embeddings": 40960,
    "max_window_layers": 28,
    "model_type": "qwen3",
    "num_attention_heads": 16,
    "num_hidden_layers": 28,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "sliding_window": None,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
_QWEN3_0_6B_GENERATION_CONFIG = {
    "bos_token_id": 151643,
    "do_sample": True,
    "eos_token_id": [151645, 151643],
    "pad_token_id": 151643,
    "temperature": 0.6,
    "top_k": 20,
    "top_p": 0.95,
    "transformers_version": "4.51.0",
}

# Qwen/Qwen1.5-7B: test_estimate_max_model_len and
# test_get_max_concurrency_for_kv_cache_config.
_QWEN1_5_7B_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151643,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 11008,
    "max_position_embeddings": 32768,
    "max_window_layers": 28,
    "model_type": "qwen2",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.37.0",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}
_QWEN1_5_7B_GENERATION_CONFIG = {
    "bos_token_id": 151643,
    "do_sample": False,
    "eos_token_id": 151643,
    "max_new_tokens": 2048,
    "transformers_version": "4.37.0",
}

# repo id -> {file name: JSON content}
MODELS: dict[str, dict[str, dict]] = {
    "Qwen/Qwen3-0.6B": {
        "config.json": _QWEN3_0_6B_CONFIG,
        "generation_config.json": _QWEN3_0_6B_GENERATION_CONFIG,
    },
    "Qwen/Qwen1.5-7B": {
        "config.json": _QWEN1_5_7B_CONFIG,
        "generation_config.json": _QWEN1_5_7B_GENERATION_CONFIG,
    },
    # vLLM 0.33.0's tests/v1/attention/test_gdn_metadata_builder.py names
    # Qwen/Qwen3.5-0.8B only to build a VllmConfig; the GDN metadata builder
    # reads no layer shapes from it, so Qwen3-0.6B's files stand in (its
    # config needs no transformers newer than the bases pin).
    "Qwen/Qwen3.5-0.8B": {
        "config.json": _QWEN3_0_6B_CONFIG,
        "generation_config.json": _QWEN3_0_6B_GENERATION_CONFIG,
    },
}


def _git_blob_sha1(data: bytes) -> str:
    # The hub's etag of a file not stored in LFS, which names its blob.
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def write_hf_cache(hf_home: Path, models: dict[str, dict[str, dict]] = MODELS) -> Path:
    """Write ``models`` into the hub cache under ``hf_home`` (replacing what
    an earlier call wrote for the same repos); return ``hf_home``."""
    hub = hf_home / "hub"
    for repo_id, files in models.items():
        repo = hub / ("models--" + repo_id.replace("/", "--"))
        shutil.rmtree(repo, ignore_errors=True)
        blobs = {
            name: (json.dumps(content, indent=2) + "\n").encode()
            for name, content in sorted(files.items())
        }
        rev = hashlib.sha1(
            b"".join(n.encode() + b"\0" + d for n, d in blobs.items())
        ).hexdigest()
        (repo / "blobs").mkdir(parents=True)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(rev)
        snapshot = repo / "snapshots" / rev
        snapshot.mkdir(parents=True)
        for name, data in blobs.items():
            etag = _git_blob_sha1(data)
            (repo / "blobs" / etag).write_bytes(data)
            link = snapshot / name
            try:
                link.symlink_to(Path("..", "..", "blobs", etag))
            except OSError:  # no symlinks here: huggingface_hub copies too
                link.write_bytes(data)
    return hf_home


def offline_env(hf_home: Path) -> dict[str, str]:
    """Environment that makes ``huggingface_hub`` and ``transformers`` read
    only the cache under ``hf_home`` (set before either is imported).
    HF_HUB_CACHE too: a caller's own HF_HUB_CACHE would win over HF_HOME."""
    return {
        "HF_HOME": os.fspath(hf_home),
        "HF_HUB_CACHE": os.fspath(hf_home / "hub"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


# Tests (pytest node id prefixes, relative to the suite's root) that run on
# vLLM's CPU platform when no device platform was found.
DEVICE_PLATFORM_TESTS = (
    "tests/v1/core/test_kv_cache_utils.py::",
    "tests/v1/attention/test_gdn_spec_metadata.py::",
    # vLLM 0.33.0 (an extra base): its planner moved to kv_cache_planning.py.
    "tests/v1/core/test_kv_cache_planning.py::",
    "tests/v1/core/test_kv_cache_config_builder.py::",
    "tests/v1/attention/test_gdn_metadata_builder.py::",
)


@pytest.fixture(autouse=True)
def _device_platform(request):
    """vLLM's CpuPlatform for DEVICE_PLATFORM_TESTS while no platform was
    found; the previous platform and os.environ (CpuPlatform's
    check_and_update_config sets process variables) come back afterwards."""
    if not request.node.nodeid.startswith(DEVICE_PLATFORM_TESTS):
        yield
        return
    import vllm.platforms as platforms

    old = platforms.current_platform
    if old.device_type:  # a real platform: leave it
        yield
        return
    from vllm.platforms.cpu import CpuPlatform

    new = CpuPlatform()
    # Modules that did `from vllm.platforms import current_platform` hold
    # the old object; vllm.platforms itself resolves it from _current_platform.
    holders = [
        m
        for m in list(sys.modules.values())
        if m is not platforms and vars(m).get("current_platform", None) is old
    ]
    saved_env = os.environ.copy()
    platforms._current_platform = new
    for m in holders:
        m.current_platform = new
    # vllm.utils.torch_utils caches the platform's pin-memory answer at
    # import (PIN_MEMORY), and modules import that name; pinning needs a
    # device driver, so they get the CPU platform's answer too.
    torch_utils = sys.modules.get("vllm.utils.torch_utils")
    saved_pin = getattr(torch_utils, "PIN_MEMORY", None)
    pin_holders = (
        [
            m
            for name, m in list(sys.modules.items())
            if name.startswith("vllm") and vars(m).get("PIN_MEMORY") is saved_pin
        ]
        if saved_pin is not None
        else []
    )
    for m in pin_holders:
        m.PIN_MEMORY = new.is_pin_memory_available()
    try:
        yield
    finally:
        platforms._current_platform = old
        for m in holders:
            m.current_platform = old
        for m in pin_holders:
            m.PIN_MEMORY = saved_pin
        os.environ.clear()
        os.environ.update(saved_env)
