"""Tests of the fork tool on a miniature upstream (see conftest.py)."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from forktool.__main__ import main
from forktool.gitops import git

from .conftest import AUTHOR


@pytest.fixture(autouse=True)
def _no_cache_override(monkeypatch):
    monkeypatch.delenv("FORK_CACHE", raising=False)


def run(root: Path, *args: str) -> int:
    return main(["--root", str(root), *args])


def tree_of(root: Path) -> Path:
    return root / "build" / "vllm-fork"


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").stdout.strip()


def test_materialize_tags_pristine_tree_and_commits_series(fork: Path):
    assert run(fork, "materialize") == 0
    tree = tree_of(fork)
    log = git(tree, "log", "--format=%s|%an <%ae>", "v1.2.0..HEAD").stdout
    assert log.strip() == f"[Bugfix] Change line 20 of attn|{AUTHOR}"
    pristine = git(tree, "show", "v1.2.0:vllm/attn.txt").stdout
    assert "line 20\n" in pristine and "(fixed)" not in pristine
    assert "line 20 (fixed)\n" in (tree / "vllm/attn.txt").read_text()
    assert (tree / "tests/test_new.py").is_file()
    body = git(tree, "log", "-1", "--format=%B").stdout
    assert f"Signed-off-by: {AUTHOR}" in body
    assert "Upstream-Status" not in body  # fork metadata stays out of commits
    note = git(tree, "notes", "--ref", "refs/notes/fork", "show", "HEAD").stdout
    assert "Upstream-Status: Pending" in note
    # Same series, same commit ids.
    first = head(tree)
    assert run(fork, "materialize") == 0
    assert head(tree) == first


def _am_onto_tag(tree: Path, patches: list[Path], tmp_path: Path) -> str:
    """`git am` the patches onto the pristine tag in a clone of ``tree``;
    return the resulting tree id."""
    clone = tmp_path / "am"
    subprocess.run(["git", "clone", "-q", str(tree), str(clone)], check=True)
    git(clone, "checkout", "-q", "v1.2.0")
    git(clone, "am", "-q", *map(str, patches))
    return git(clone, "rev-parse", "HEAD^{tree}").stdout


def test_export_applies_with_git_am_and_equals_tree(fork: Path, tmp_path: Path):
    assert run(fork, "export") == 0
    patches = sorted((fork / "dist/patches/v1.2.0").glob("*.patch"))
    assert [p.name[:5] for p in patches] == ["0001-"]
    tree = tree_of(fork)
    assert _am_onto_tag(tree, patches, tmp_path) == git(
        tree, "rev-parse", "HEAD^{tree}"
    ).stdout


def test_save_round_trip(fork: Path):
    assert run(fork, "materialize") == 0
    tree = tree_of(fork)
    (tree / "vllm/attn.txt").write_text(
        (tree / "vllm/attn.txt").read_text().replace("line 30\n", "line 30 (too)\n")
    )
    (tree / "vllm/extra.py").write_text("X = 1\n")
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "--amend", "--no-edit")
    amended_tree = git(tree, "rev-parse", "HEAD^{tree}").stdout
    assert run(fork, "save") == 0
    patch = (fork / "patches/0001-Bugfix-Change-line-20-of-attn.patch").read_text()
    assert "+line 30 (too)" in patch and "Added-Files:" in patch
    assert "vllm/extra.py" in patch.split("\n\n", 1)[0]
    assert (fork / "vllm/extra.py").read_text() == "X = 1\n"
    assert not (fork / "patches/0001-fix.patch").exists()
    assert run(fork, "materialize") == 0
    assert git(tree, "rev-parse", "HEAD^{tree}").stdout == amended_tree


def test_wrong_sdist_hash_is_refused_and_changes_nothing(fork: Path, capsys):
    cached = fork / ".cache/upstream/vllm-1.2.0.tar.gz"
    cached.write_bytes(cached.read_bytes() + b"tampered")
    before = cached.read_bytes()
    assert run(fork, "materialize") == 2
    err = capsys.readouterr().err
    assert "sha256 mismatch" in err and "vllm-1.2.0.tar.gz" in err
    assert cached.read_bytes() == before
    assert not tree_of(fork).exists()


def test_missing_patch_is_named(fork: Path, capsys):
    (fork / "patches/series").write_text("0001-fix.patch\n0002-gone.patch\n")
    assert run(fork, "materialize") == 2
    assert "0002-gone.patch" in capsys.readouterr().err
    assert not tree_of(fork).exists()


def test_patch_that_no_longer_applies_names_patch_file_and_hunk(fork, capsys):
    assert run(fork, "materialize") == 0
    good_head = head(tree_of(fork))
    patch = fork / "patches/0001-fix.patch"
    patch.write_text(patch.read_text().replace(" line 21\n", " line 21 moved\n"))
    assert run(fork, "materialize") == 2
    err = capsys.readouterr().err
    assert "0001-fix.patch" in err and "vllm/attn.txt" in err and "hunk #1" in err
    # The previous tree is left as it was, and no partial tree remains.
    assert head(tree_of(fork)) == good_head
    leftovers = [p.name for p in tree_of(fork).parent.iterdir()]
    assert leftovers == ["vllm-fork"]


def test_added_file_listed_by_two_commits(fork: Path, capsys):
    second = (fork / "patches/0001-fix.patch").read_text()
    second = second.replace("Change line 20", "Also change").split("---\n")[0]
    (fork / "patches/0002-dup.patch").write_text(second + "---\n")
    (fork / "patches/series").write_text("0001-fix.patch\n0002-dup.patch\n")
    assert run(fork, "materialize") == 2
    err = capsys.readouterr().err
    assert "tests/test_new.py" in err and "two commits" in err


def test_added_file_listed_twice_by_one_commit(fork: Path, capsys):
    patch = fork / "patches/0001-fix.patch"
    text = patch.read_text()
    assert " tests/test_new.py\n" in text
    patch.write_text(text.replace(" tests/test_new.py\n", " tests/test_new.py\n" * 2, 1))
    assert run(fork, "materialize") == 2
    err = capsys.readouterr().err
    assert "0001-fix.patch: added file tests/test_new.py is listed twice" in err


def test_added_file_that_upstream_has_is_refused(fork: Path, capsys):
    patch = fork / "patches/0001-fix.patch"
    patch.write_text(patch.read_text().replace(" tests/test_new.py", " setup.py"))
    (fork / "setup.py").write_text("# ours\n")
    assert run(fork, "materialize") == 2
    assert "setup.py must live under" in capsys.readouterr().err


def test_built_wheel_installs_reports_version_and_uninstalls(fork, tmp_path):
    assert run(fork, "build") == 0
    (wheel,) = (fork / "dist").glob("vllm-1.2.0+fork.1.g*.whl")
    version = wheel.name.split("-")[1]
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        assert z.read("vllm/_C.abi3.so") == b"\x7fELF binary payload"
        assert b"line 20 (fixed)" in z.read("vllm/attn.txt")
        info = f"vllm-{version}.dist-info/"
        assert f"Version: {version}" in z.read(info + "METADATA").decode()
        rows = list(csv.reader(io.StringIO(z.read(info + "RECORD").decode())))
        assert {r[0] for r in rows} == set(names)
        for name, digest, size in rows:
            if digest:
                data = z.read(name)
                assert len(data) == int(size)
                want = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
                assert digest == "sha256=" + want.rstrip(b"=").decode()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    pip = [str(py), "-m", "pip", "--quiet"]
    subprocess.run([*pip, "install", "--no-deps", str(wheel)], check=True, env=env)
    out = subprocess.run(
        [str(py), "-c", "import vllm; print(vllm.__version__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert out.stdout.strip() == version
    subprocess.run([*pip, "uninstall", "-y", "vllm"], check=True, env=env)
    site = next((venv / "lib").glob("python*/site-packages"))
    assert not [p.name for p in site.iterdir() if p.name.startswith("vllm")]


def test_upstream_wheel_with_wrong_hash_is_refused(fork: Path, capsys):
    whl = fork / ".cache/upstream/vllm-1.2.0-py3-none-any.whl"
    whl.write_bytes(b"not the wheel")
    assert run(fork, "build") == 2
    assert "sha256 mismatch" in capsys.readouterr().err
    assert not list(fork.glob("dist/*.whl"))


def test_pin_matches_issue(fork: Path):
    """The real pin names upstream's published hashes."""
    from forktool.upstream import read_pin

    pin = read_pin(Path(__file__).resolve().parents[2])
    assert (pin.version, pin.tag) == ("0.26.0", "v0.26.0")
    assert pin.sdist_sha256.startswith("23e9fa19d7e2")
    assert pin.wheel_sha256.startswith("adb1e4c9b46d")


def _check(fork: Path, mutate=None) -> list[str]:
    """Canonicalize the fixture series (materialize + save), apply ``mutate``,
    then run the series check (without upstream's hook scripts, which the
    miniature upstream does not have)."""
    from forktool.check import run_check
    from forktool.series import read_series
    from forktool.table import write_table
    from forktool.upstream import read_pin

    assert run(fork, "materialize") == 0 and run(fork, "save") == 0
    if mutate is not None:
        mutate(next((fork / "patches").glob("0001-*.patch")))
    assert run(fork, "materialize") == 0
    write_table(fork, read_series(fork))
    subprocess.run(["git", "add", "-A"], cwd=fork, check=True)
    pin = read_pin(fork)
    return run_check(fork, read_series(fork), tree_of(fork), pin.tag, hooks=())


def test_check_passes_on_canonical_series(fork: Path):
    assert _check(fork) == []


def test_check_flags_patch_applied_at_an_offset(fork: Path):
    def shift(patch: Path) -> None:
        text = patch.read_text()
        assert "@@ -17,7 +17,7 @@" in text
        patch.write_text(text.replace("@@ -17,7 +17,7 @@", "@@ -16,7 +16,7 @@"))

    problems = _check(fork, shift)
    assert len(problems) == 1 and "not canonical" in problems[0]


def test_check_flags_unclaimed_and_unsigned(fork: Path):
    def unsign(patch: Path) -> None:
        patch.write_text(patch.read_text().replace(f"Signed-off-by: {AUTHOR}\n", ""))
        (fork / "vllm").mkdir()
        (fork / "vllm" / "stray.py").write_text("X = 1\n")

    problems = _check(fork, unsign)
    assert any("vllm/stray.py" in p and "no commit adds it" in p for p in problems)
    assert any("lacks 'Signed-off-by" in p for p in problems)


def test_check_runs_ruff_on_touched_python(fork: Path):
    (fork / "tests/test_new.py").write_text("import os\ndef test_new():\n    pass\n")
    problems = _check(fork)
    assert any(p.startswith("ruff check") and "F401" in p for p in problems)


def _add_commit(fork: Path, path: str, text: str, status: str = "Pending") -> None:
    """Materialize, commit ``text`` to ``path`` as a second commit with fork
    metadata, and save the series."""
    assert run(fork, "materialize") == 0
    tree = tree_of(fork)
    (tree / path).parent.mkdir(parents=True, exist_ok=True)
    (tree / path).write_text(text)
    git(tree, "add", path)
    git(
        tree,
        "commit",
        "-q",
        "-m",
        f"[Misc] Second change\n\nWhat, why, effect.\n\nSigned-off-by: {AUTHOR}",
        env={"GIT_AUTHOR_NAME": "A", "GIT_AUTHOR_EMAIL": "a@example.invalid"},
    )
    note = f"Upstream-Status: {status}\nWhy: w\nEffect: e\nRemoval: r\n"
    git(tree, "notes", "--ref", "refs/notes/fork", "add", "-f", "-m", note, "HEAD")
    assert run(fork, "save") == 0


def test_check_flags_later_commit_changing_an_added_file(fork: Path):
    from forktool.check import check_file_ownership
    from forktool.series import read_series

    _add_commit(fork, "tests/test_new.py", "def test_new():\n    assert True\n")
    problems = check_file_ownership(read_series(fork))
    assert len(problems) == 1, problems
    assert problems[0].startswith("tests/test_new.py: added by 0001-")
    assert "changed again by 0002-" in problems[0]


@pytest.mark.parametrize("status", ["Pending", "Fork-only test results"])
def test_check_flags_fork_only_file_in_an_upstream_commit(fork: Path, status):
    from forktool.check import check_file_ownership
    from forktool.series import read_series

    _add_commit(fork, "benchmarks/results/run_nvidia_h200.json", "{}\n", status)
    problems = check_file_ownership(read_series(fork))
    if status == "Pending":
        assert len(problems) == 1, problems
        assert "benchmarks/results/run_nvidia_h200.json: fork-only" in problems[0]
        assert "0002-" in problems[0]
    else:
        assert problems == []


@pytest.mark.parametrize("path", ["vllm/_version.py", "vllm/third_party/lib.py"])
def test_check_flags_generated_or_vendored_files(fork: Path, path):
    """A whole-tree formatter run once slipped vllm/_version.py into a commit:
    the series applied to the sdist but not to the wheel's files."""
    from forktool.check import check_file_ownership
    from forktool.series import read_series

    _add_commit(fork, path, "x = 1\n")
    problems = check_file_ownership(read_series(fork))
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{path}: generated or vendored")
    assert "0002-" in problems[0]


def test_real_series_file_ownership():
    """The series of this repository passes both ownership rules."""
    from forktool.check import check_file_ownership
    from forktool.series import read_series

    assert check_file_ownership(read_series(Path(__file__).resolve().parents[2])) == []


def test_gpu_suite_fails_without_cuda_unless_allowed(monkeypatch, capsys):
    """`make test-gpu` on a machine whose CUDA is unusable fails with the
    reason; skipping is an explicit opt-in (--allow-no-gpu)."""
    import forktool.__main__ as cli

    real_run = subprocess.run

    def fake_run(cmd, *a, **kw):
        if cmd[:2] == [sys.executable, "-c"] and "cuda.is_available" in cmd[2]:
            return subprocess.CompletedProcess(cmd, 0, "False\n", "")
        if cmd[:3] == [sys.executable, "-m", "pytest"]:
            raise AssertionError("the GPU suite must not start without CUDA")
        return real_run(cmd, *a, **kw)

    def no_pytest(*a, **kw):
        raise AssertionError("the GPU suite must not start without CUDA")

    monkeypatch.setattr(cli.subprocess, "run", fake_run)
    monkeypatch.setattr(cli, "run_pytest", no_pytest)
    monkeypatch.setattr(cli, "fork_version", lambda pin, tree: "1")
    monkeypatch.setattr(cli.importlib.metadata, "version", lambda name: "1")
    root = Path(__file__).resolve().parents[2]
    monkeypatch.setattr(cli, "_ensure_tree", lambda args, pin: root / "build" / "x")
    monkeypatch.setattr(cli.shutil, "copytree", lambda *a, **kw: None)
    monkeypatch.setattr(cli.shutil, "copy2", lambda *a, **kw: None)
    assert cli.main(["test", "--gpu"]) == 2
    assert "torch.cuda.is_available() is not True" in capsys.readouterr().err
    assert cli.main(["test", "--gpu", "--allow-no-gpu"]) == 0
    assert "skipped (--allow-no-gpu)" in capsys.readouterr().out


def test_corrupt_hunk_header_names_the_patch_file_line(fork: Path, capsys):
    patch = fork / "patches/0001-fix.patch"
    text = patch.read_text()
    # Claim two more lines in the hunk than it has.
    m = re.search(r"^@@ -(\d+),(\d+) \+(\d+),(\d+) @@", text, re.MULTILINE)
    assert m, text
    a, n, b, k = map(int, m.groups())
    bad_header = f"@@ -{a},{n + 2} +{b},{k + 2} @@"
    patch.write_text(text.replace(m.group(0), bad_header))
    assert run(fork, "materialize") == 2
    err = capsys.readouterr().err
    m = re.search(r"in the hunk at line (\d+) of patches/0001-fix.patch", err)
    assert m, err
    assert "(vllm/attn.txt)" in err
    # The named line is the header of the hunk that claims too many lines.
    lines = patch.read_text().splitlines()
    assert lines[int(m.group(1)) - 1].startswith(bad_header)


def test_materialize_removes_trees_of_killed_runs(fork: Path):
    out = tree_of(fork)
    out.parent.mkdir(parents=True)
    # A run killed with SIGKILL (its process is gone), and one still going on.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    killed = out.parent / f".vllm-fork.partial-{dead.pid}-abc"
    running = out.parent / f".vllm-fork.partial-{os.getpid()}-def"
    for d in (killed, running):
        (d / "vllm").mkdir(parents=True)
    assert run(fork, "materialize") == 0
    assert not killed.exists()
    assert running.exists()


def test_export_leaves_out_trailing_fork_only_commits(fork: Path, tmp_path: Path):
    _add_commit(
        fork, "benchmarks/results/run_nvidia_h200.json", "{}\n", "Fork-only results"
    )
    assert run(fork, "export") == 0
    patches = sorted((fork / "dist/patches/v1.2.0").glob("*.patch"))
    assert [p.name[:5] for p in patches] == ["0001-"]
    assert "run_nvidia_h200" not in "".join(p.read_text() for p in patches)
    tree = tree_of(fork)
    assert _am_onto_tag(tree, patches, tmp_path) == git(
        tree, "rev-parse", "HEAD~1^{tree}"
    ).stdout


def test_check_flags_upstream_commit_after_a_fork_only_one(fork: Path):
    from forktool.check import check_file_ownership
    from forktool.series import read_series

    _add_commit(fork, "benchmarks/results/a_nvidia_h200.json", "{}\n", "Fork-only r")
    _add_commit(fork, "tests/test_other.py", "def test_x():\n    pass\n")
    problems = check_file_ownership(read_series(fork))
    assert any(
        "0003-" in p and "comes after the Fork-only 0002-" in p for p in problems
    ), problems
