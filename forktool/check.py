"""`forktool check`: the series is canonical, applies exactly, and its code
passes upstream's own lint (ruff with the sdist's pyproject.toml and the
pre-commit scripts upstream runs on every PR)."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .errors import ForkError
from .gitops import git, series_commits
from .series import AS_IS, SUBJECT_RE, Series, read_series, unclaimed_files
from .table import readme_table_is_current, table_is_current

# Upstream's pre-commit hooks that take Python file names (0.26.0's
# .pre-commit-config.yaml); they run from the materialized tree.
UPSTREAM_HOOKS = (
    "tools/pre_commit/check_spdx_header.py",
    "tools/pre_commit/check_torch_cuda.py",
    "tools/pre_commit/check_forbidden_imports.py",
)


# Fork-only material (measurement results, plots): only a commit whose
# Upstream-Status is "Fork-only <reason>" may add a file matching these; an
# upstream PR carries its figures in its text.  One glob per line.
FORK_ONLY_PATTERNS_FILE = Path(__file__).with_name("fork_only.txt")
_DIFF_FILE_RE = re.compile(r"^diff --git a/(\S+) b/", re.MULTILINE)
# Files no commit may touch: generated when vLLM is built (their text differs
# between the sdist and the wheel, so a patch to them applies to one and not
# to the other) or vendored from other projects.  A formatter run over the
# whole tree is the usual way they end up in a commit.
UNTOUCHABLE_PATTERNS = ("vllm/_version.py", "vllm/third_party/*")


def fork_only_patterns(path: Path = FORK_ONLY_PATTERNS_FILE) -> list[str]:
    lines = (ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines())
    return [ln for ln in lines if ln]


def check_file_ownership(
    series: Series, patterns: list[str] | None = None
) -> list[str]:
    """A file the series adds belongs to the commit that adds it: no later
    commit may change it, fork-only material stays out of the commits meant
    for upstream, and no commit touches generated or vendored files."""
    patterns = fork_only_patterns() if patterns is None else patterns
    problems = []
    try:
        _ = series.num_upstream
    except ForkError as e:
        problems.append(str(e))
    owners: dict[str, str] = {}
    for patch in series.patches:
        changed = _DIFF_FILE_RE.findall(patch.diff)
        for path in [*changed, *patch.added_files]:
            if any(fnmatch.fnmatch(path, p) for p in UNTOUCHABLE_PATTERNS):
                problems.append(
                    f"{path}: generated or vendored, but {patch.name} changes it; "
                    "restore it from the base (a formatter run over the whole "
                    "tree does this)"
                )
        for path in changed:
            if path in owners:
                problems.append(
                    f"{path}: added by {owners[path]} and changed again by "
                    f"{patch.name}; fold the change into {owners[path]}"
                )
        fork_only = patch.fork_only
        for path in patch.added_files:
            owners[path] = patch.name
            if not fork_only and any(fnmatch.fnmatch(path, p) for p in patterns):
                problems.append(
                    f"{path}: fork-only material (forktool/fork_only.txt) added "
                    f"by {patch.name}, a commit meant for upstream; keep it in "
                    "results/ or in a Fork-only commit"
                )
    return problems


def _ruff() -> list[str]:
    exe = shutil.which("ruff", path=str(Path(sys.executable).parent))
    return [exe] if exe else [sys.executable, "-m", "ruff"]


def check_commits(series: Series, tree: Path, tag: str) -> list[str]:
    """Problems with commit metadata or a non-canonical patch file."""
    problems = []
    commits = series_commits(tree, tag)
    if len(commits) != len(series.patches):
        return [f"{tree} has {len(commits)} commits, the series {len(series.patches)}"]
    # On an extra base, a primary patch that applies unchanged may apply at
    # an offset (its export there has that base's line numbers); variants
    # must be canonical like the primary series.
    as_is = {e.name for e in series.entries or [] if e.kind == AS_IS}
    for patch, commit in zip(series.patches, commits, strict=True):
        where = f"patches/{patch.name}"
        if not SUBJECT_RE.match(patch.subject):
            problems.append(f"{where}: subject needs an upstream tag like [Bugfix]")
        if len(patch.subject) > 80:
            problems.append(f"{where}: subject longer than 80 characters")
        sob = f"Signed-off-by: {patch.author}"
        if sob not in patch.body.splitlines():
            problems.append(f"{where}: body lacks '{sob}'")
        if len(patch.body.split("\n\n")) < 2:
            problems.append(f"{where}: body must say what, why and the effect")
        for key in ("Why", "Effect", "Removal"):
            if not patch.headers.get(key):
                problems.append(f"{where}: missing {key}: header (commit table)")
        status = git(
            tree, "diff", "--no-renames", "--name-status", f"{commit}^", commit
        ).stdout
        changed = [
            ln.split("\t", 1)[1]
            for ln in status.splitlines()
            if not ln.startswith("A\t")
        ]
        diff = ""
        if changed:
            diff = git(
                tree,
                "diff",
                "--no-renames",
                "--binary",
                f"{commit}^",
                commit,
                "--",
                *changed,
            ).stdout
        if diff != patch.diff and patch.name not in as_is:
            problems.append(
                f"{where}: not canonical (the diff git makes from the applied "
                "commit differs: line numbers or context moved); run "
                "`forktool save` after materialize"
            )
    return problems


def check_lint(tree: Path, tag: str, hooks=UPSTREAM_HOOKS) -> list[str]:
    """Run ruff and upstream's pre-commit scripts on the files we touch."""
    out = git(
        tree, "diff", "--name-only", "--diff-filter=AM", tag, "HEAD", "--", "*.py"
    ).stdout.split()
    added = git(
        tree, "diff", "--name-only", "--diff-filter=A", tag, "HEAD", "--"
    ).stdout.split()
    problems = []
    if not out:
        return problems
    for args in (["check", "--no-cache"], ["format", "--check", "--no-cache"]):
        res = subprocess.run(
            _ruff() + args + out, cwd=tree, capture_output=True, text=True
        )
        if res.returncode != 0:
            problems.append(f"ruff {' '.join(args)}:\n{res.stdout}{res.stderr}")
    for hook in hooks:
        files = added if "spdx" in hook else out
        files = [f for f in files if f.endswith(".py")]
        if not files:
            continue
        if not (tree / hook).is_file():
            problems.append(f"{hook}: not in the materialized tree")
            continue
        res = subprocess.run(
            [sys.executable, hook, *files], cwd=tree, capture_output=True, text=True
        )
        if res.returncode != 0:
            problems.append(f"{hook}:\n{res.stdout}{res.stderr}")
    return problems


def run_check(
    root: Path, series: Series, tree: Path, tag: str, hooks=UPSTREAM_HOOKS
) -> list[str]:
    problems = []
    # Files of the working tree (tracked or not ignored) that exist now.
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        text=True,
    ).stdout.split()
    tracked = [f for f in listed if (root / f).is_file()]
    # The primary series claims the repository's files and owns the tables;
    # an extra base's series is checked against its own tree.
    primary = read_series(root) if series.base else series
    for f in unclaimed_files(root, tracked, primary):
        problems.append(f"{f}: under an upstream folder but no commit adds it")
    problems += check_file_ownership(series)
    problems += check_commits(series, tree, tag)
    problems += check_lint(tree, tag, hooks)
    if not table_is_current(root, primary):
        problems.append("PATCHES.md: commit table is stale; run `forktool table`")
    try:
        if not readme_table_is_current(root, primary):
            problems.append("README.md: series table is stale; run `forktool table`")
    except ForkError as e:
        problems.append(str(e))
    return problems
