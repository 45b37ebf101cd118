"""The real series against the real pinned upstream (needs the cached sdist,
which `make install` fetches)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from forktool import gitops
from forktool.series import read_series
from forktool.upstream import cache_dir, fetch_sdist, read_pin

ROOT = Path(__file__).resolve().parents[2]
PIN = read_pin(ROOT)

pytestmark = pytest.mark.skipif(
    not (cache_dir(ROOT) / PIN.sdist).is_file(),
    reason="pinned sdist not cached yet (run `make install`)",
)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("real") / "vllm-fork"
    gitops.materialize(ROOT, PIN, fetch_sdist(ROOT, PIN), out)
    return out


def test_exported_series_git_am_onto_pristine_equals_fork_tree(tree, tmp_path):
    series = read_series(ROOT)
    patches = gitops.export(tree, PIN.tag, tmp_path / "patches", series.num_upstream)
    assert len(patches) == series.num_upstream > 0
    fork_only = len(series.patches) - series.num_upstream
    pristine = tmp_path / "pristine"
    subprocess.run(
        ["git", "clone", "-q", "--branch", PIN.tag, str(tree), str(pristine)],
        check=True,
    )
    gitops.git(pristine, "am", "-q", *map(str, patches))
    assert (
        gitops.git(pristine, "rev-parse", "HEAD^{tree}").stdout
        == gitops.git(tree, "rev-parse", f"HEAD~{fork_only}^{{tree}}").stdout
    )
    # No exported patch adds fork-only material or touches what only the
    # Fork-only commits carry.
    exported = "".join(p.read_text() for p in patches)
    for p in series.patches[series.num_upstream :]:
        for f in p.added_files:
            assert f"b/{f}\n" not in exported, f


def test_series_is_canonical(tree):
    from forktool.check import check_commits

    assert check_commits(read_series(ROOT), tree, PIN.tag) == []


def test_each_commit_runs_its_own_tests_against_vllm_as_of_that_commit(tree, tmp_path):
    """`forktool test --each-commit`: commit N's own test files, against a
    package that holds the tree's Python at N (a later commit's module is
    not importable there) and the installed wheel's binaries."""
    import importlib.util
    import os
    import sys

    from forktool import prefix

    commits = gitops.series_commits(tree, PIN.tag)
    series = read_series(ROOT)
    for n, commit in enumerate(commits[: series.num_upstream], 1):
        tests = prefix.own_tests(tree, commit)
        assert tests, f"commit {n} has no test file of its own"
        assert all(t.startswith("tests/") and "/test_" in t for t in tests)
    assert prefix.own_tests(tree, commits[0]) == [
        "tests/v1/attention/test_per_token_head_scale_views.py"
    ]
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm not installed")
    # The first commit that adds the split-KV kernel module.
    op = "vllm/v1/attention/ops/triton_int8_split_kv_attention.py"
    adds = [
        i
        for i, c in enumerate(commits)
        if gitops.git(tree, "diff", "--name-only", "--diff-filter=A", f"{c}~1", c)
        .stdout.split()
        .count(op)
    ]
    assert len(adds) == 1
    before = commits[adds[0] - 1]
    installed = prefix.installed_package_dir()
    site = prefix.build_prefix_site(tree, before, installed, tmp_path / "site")
    assert not (site / op).exists()
    assert (installed / op.removeprefix("vllm/")).exists()  # the whole series has it
    built = [p for p in installed.glob("*.so")]
    assert built and all((site / "vllm" / p.name).is_symlink() for p in built)
    env = prefix.prefix_env(dict(os.environ), site)
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.util, vllm; print(vllm.__file__); "
            "print(importlib.util.find_spec("
            "'vllm.v1.attention.ops.triton_int8_split_kv_attention'))",
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    where, spec = probe.stdout.split()[:2]
    assert where.startswith(str(site)) and spec == "None"
