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
