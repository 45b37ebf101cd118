"""The local Hugging Face cache `forktool test` serves upstream's ModelConfig
tests from (forktool/hf_cache.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from forktool import hf_cache

ROOT = Path(__file__).resolve().parents[2]


def test_cache_has_the_layout_huggingface_hub_reads(tmp_path):
    """refs/main names a snapshot whose files link to content-named blobs."""
    hf_cache.write_hf_cache(tmp_path)
    repo = tmp_path / "hub" / "models--Qwen--Qwen1.5-7B"
    rev = (repo / "refs" / "main").read_text()
    config = repo / "snapshots" / rev / "config.json"
    assert config.is_symlink()
    assert config.resolve().parent == (repo / "blobs").resolve()
    assert (
        json.loads(config.read_text())
        == hf_cache.MODELS["Qwen/Qwen1.5-7B"]["config.json"]
    )
    # Rewriting replaces the repo instead of stacking snapshots.
    hf_cache.write_hf_cache(tmp_path)
    assert [p.name for p in (repo / "snapshots").iterdir()] == [rev]


def test_offline_env_resolves_model_names_from_the_cache(tmp_path):
    """Under offline_env, huggingface_hub (imported fresh, as pytest's child
    process does) finds each file by repo id without the network, and a file
    the cache lacks is reported missing rather than fetched."""
    pytest.importorskip("huggingface_hub")
    hf_home = hf_cache.write_hf_cache(tmp_path / "hf-home")
    probe = """
import json, sys
from huggingface_hub import hf_hub_download
from huggingface_hub.errors import LocalEntryNotFoundError
for repo, files in json.loads(sys.argv[1]).items():
    for name, content in files.items():
        with open(hf_hub_download(repo, name)) as f:
            assert json.load(f) == content, (repo, name)
try:
    hf_hub_download("Qwen/Qwen3-0.6B", "model.safetensors")
except LocalEntryNotFoundError:
    print("ok")
"""
    env = {"PATH": "/usr/bin:/bin", **hf_cache.offline_env(hf_home)}
    out = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(hf_cache.MODELS)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_vllm_default_model_is_cached():
    """ModelConfig() with no model builds the default model; an upstream
    bump that changes it must bring its config here too."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("vllm not installed (run `make install`)")
    source = Path(next(iter(spec.submodule_search_locations)), "config", "model.py")
    default = re.search(r'^    model: str = "([^"]+)"$', source.read_text(), re.M)
    assert default, source
    assert default.group(1) in hf_cache.MODELS


def test_cpu_suite_runs_with_the_cache(fork, monkeypatch):
    """`forktool test` (CPU suite) hands pytest an HF_HOME holding the cache,
    offline; the GPU suite keeps the caller's HF_HOME."""
    import forktool.__main__ as cli

    (fork / "forktool").mkdir()
    (fork / "benchmarks").mkdir()
    (fork / "pyproject.toml").write_text("")
    (fork / "forktool" / "cpu_suite.txt").write_text("tests/test_new.py\n")
    (fork / "forktool" / "gpu_suite.txt").write_text("tests/test_new.py\n")
    envs = []
    real_run = subprocess.run

    def fake_run(cmd, *a, **kw):
        if cmd[:2] == [sys.executable, "-c"]:  # the GPU probe
            return subprocess.CompletedProcess(cmd, 0, "True\n", "")
        return real_run(cmd, *a, **kw)

    def fake_pytest(cmd, cwd, env, time_limit=None):
        envs.append(env)
        return 0

    monkeypatch.setattr(cli.subprocess, "run", fake_run)
    monkeypatch.setattr(cli, "run_pytest", fake_pytest)
    monkeypatch.setattr(cli, "fork_version", lambda pin, tree: "1")
    monkeypatch.setattr(cli.importlib.metadata, "version", lambda name: "1")
    monkeypatch.setattr(cli, "_ensure_tree", lambda args, pin: fork)
    monkeypatch.setenv("HF_HOME", "/elsewhere")
    assert cli.main(["--root", str(fork), "test"]) == 0
    assert cli.main(["--root", str(fork), "test", "--gpu"]) == 0
    cpu, gpu = envs
    assert cpu["HF_HUB_OFFLINE"] == "1"
    hub = Path(cpu["HF_HUB_CACHE"])
    assert hub == Path(cpu["HF_HOME"]) / "hub"
    for repo_id in hf_cache.MODELS:
        repo = hub / ("models--" + repo_id.replace("/", "--"))
        rev = (repo / "refs" / "main").read_text()
        assert (repo / "snapshots" / rev / "config.json").is_file(), repo_id
    assert gpu["HF_HOME"] == "/elsewhere"


def test_plugin_gives_listed_tests_the_cpu_platform_and_restores(tmp_path):
    """With no device platform (a CUDA build, no GPU), the tests of
    DEVICE_PLATFORM_TESTS see vLLM's CpuPlatform, also through a
    `current_platform` bound at import; the next test sees the platform and
    the os.environ it had before."""
    pytest.importorskip("vllm")
    listed = tmp_path / "tests" / "v1" / "core" / "test_kv_cache_utils.py"
    listed.parent.mkdir(parents=True)
    listed.write_text(
        "import os\n"
        "from vllm.platforms import current_platform\n"
        "def test_listed():\n"
        "    import vllm.platforms\n"
        "    assert vllm.platforms.current_platform.device_type == 'cpu'\n"
        "    assert current_platform.device_type == 'cpu'\n"
        "    os.environ['FORKTOOL_PLATFORM_PROBE'] = '1'\n"
    )
    (tmp_path / "tests" / "test_other.py").write_text(
        "import os\n"
        "def test_other():\n"
        "    import vllm.platforms\n"
        "    assert not vllm.platforms.current_platform.device_type\n"
        "    assert 'FORKTOOL_PLATFORM_PROBE' not in os.environ\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-pforktool.hf_cache",
            f"--rootdir={tmp_path}",
            str(listed),
            str(tmp_path / "tests" / "test_other.py"),
        ],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "2 passed" in out.stdout


def test_cpu_suite_deselects_nothing_of_the_planner_tests():
    """Upstream's whole test_kv_cache_utils.py runs (issue 21, item 5)."""
    suite = (ROOT / "forktool" / "cpu_suite.txt").read_text().splitlines()
    assert "tests/v1/core/test_kv_cache_utils.py" in suite
    assert not [
        line
        for line in suite
        if line.startswith("--deselect") and "test_kv_cache_utils.py" in line
    ]
