"""Each commit's own tests at that commit: ``forktool test --each-commit``.

A reviewer or a maintainer who cherry-picks commit N gets vLLM 0.26.0 plus
the first N commits of the series, not the whole series.  ``forktool test``
runs the tests against the installed fork, which holds all of them, so a
commit whose tests pass only with a later commit's code would go unnoticed.

For commit N this builds the Python package of the tree at N (``git
archive`` of ``vllm/``) with the installed wheel's binaries linked in (the
series changes Python only; files the wheel has and the whole tree lacks are
the build's: extension modules, ``_version.py``), puts it first on
``PYTHONPATH``, and runs the test files that commit N adds or changes, from
a copy of the tree's ``tests/`` and ``benchmarks/`` at N, the way the CPU
suite runs (interpreter, no GPU, the local Hugging Face cache).
"""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import tarfile
from pathlib import Path

from .errors import ForkError
from .gitops import git, series_commits


def own_tests(tree: Path, commit: str) -> list[str]:
    """Test files (``tests/**/test_*.py``) that ``commit`` adds or changes,
    GPU-only ones (``tests/gpu``) excepted."""
    names = git(
        tree,
        "diff",
        "--name-only",
        "--diff-filter=AM",
        f"{commit}~1",
        commit,
        "--",
        "tests",
    ).stdout.split()
    return sorted(
        n
        for n in names
        if Path(n).name.startswith("test_")
        and n.endswith(".py")
        and not n.startswith("tests/gpu/")
    )


def installed_package_dir() -> Path:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise ForkError("vllm is not installed: run `make install` first")
    return Path(next(iter(spec.submodule_search_locations)))


def _archive(tree: Path, commit: str, paths: list[str], dest: Path) -> None:
    data = git(tree, "archive", "--format=tar", commit, *paths, text=False).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")


def _tree_files(tree: Path, commit: str, folder: str) -> set[str]:
    out = git(tree, "ls-tree", "-r", "--name-only", commit, "--", folder).stdout
    return set(out.split())


def build_prefix_site(tree: Path, commit: str, installed: Path, dest: Path) -> Path:
    """``dest/vllm``: the tree's Python at ``commit`` plus the installed
    wheel's build outputs (files the tree lacks at HEAD too); returns
    ``dest``."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    _archive(tree, commit, ["vllm"], dest)
    in_series = {
        name.removeprefix("vllm/") for name in _tree_files(tree, "HEAD", "vllm")
    }
    for path in installed.rglob("*"):
        if path.is_dir() or "__pycache__" in path.parts:
            continue
        rel = path.relative_to(installed).as_posix()
        if rel in in_series:
            continue  # Python of the series: the tree at `commit` decides
        target = dest / "vllm" / rel
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(path)
    return dest


def prefix_commits(
    tree: Path, tag: str, which: list[int] | None
) -> list[tuple[int, str]]:
    commits = series_commits(tree, tag)
    numbers = which or list(range(1, len(commits) + 1))
    bad = [n for n in numbers if not 1 <= n <= len(commits)]
    if bad:
        raise ForkError(f"no commit {bad[0]} in a series of {len(commits)}")
    return [(n, commits[n - 1]) for n in numbers]


def prepare(
    tree: Path, commit: str, installed: Path, work: Path
) -> tuple[Path, Path, list[str]]:
    """(site dir, test root, test files) for ``commit`` under ``work``."""
    site = build_prefix_site(tree, commit, installed, work / "site")
    testroot = work / "testroot"
    shutil.rmtree(testroot, ignore_errors=True)
    testroot.mkdir(parents=True)
    wanted = ["tests", "benchmarks", "pyproject.toml"]
    present = git(tree, "ls-tree", "--name-only", commit, "--", *wanted).stdout.split()
    _archive(tree, commit, present, testroot)
    return site, testroot, own_tests(tree, commit)


def prefix_env(env: dict, site: Path) -> dict:
    path = env.get("PYTHONPATH")
    return dict(env, PYTHONPATH=f"{site}{os.pathsep}{path}" if path else str(site))
