"""Extra bases: the series on another upstream release (``--base``)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from forktool.__main__ import main
from forktool.check import run_check
from forktool.gitops import NOTES_REF, git
from forktool.series import read_series
from forktool.upstream import read_pin

from .conftest import UPSTREAM_FILES, _tar_sdist, sha256

BASE = "1.3.0"
PATCH_NAME = "0001-fix.patch"


def run(root: Path, *args: str) -> int:
    return main(["--root", str(root), *args])


def _sdist_130(path: Path, line_20: str = "line 20") -> None:
    """Upstream 1.3.0: attn.txt gained three lines at its top (the fix
    applies at an offset; ``line_20`` other than "line 20" makes it
    conflict); everything else as in 1.2.0."""
    files = dict(UPSTREAM_FILES)
    attn = files["vllm/attn.txt"].replace("line 20\n", f"{line_20}\n")
    files["vllm/attn.txt"] = "new a\nnew b\nnew c\n" + attn
    files["vllm/_version.py"] = "__version__ = version = '1.3.0'\n"
    _tar_sdist(path, files, top="vllm-1.3.0")


def _write_base_series(root: Path, text: str) -> None:
    folder = root / "patches" / "bases" / BASE
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "series").write_text(text)


@pytest.fixture
def based(fork: Path, monkeypatch) -> Path:
    """The miniature fork with a second base, 1.3.0, carrying the fix as-is."""
    monkeypatch.delenv("FORK_CACHE", raising=False)
    sdist = fork / ".cache" / "upstream" / "vllm-1.3.0.tar.gz"
    _sdist_130(sdist)
    with open(fork / "requirements" / "upstream.toml", "a") as f:
        f.write(
            f"""
[bases."{BASE}"]
version = "{BASE}"
tag = "v{BASE}"
[bases."{BASE}".sdist]
filename = "{sdist.name}"
sha256 = "{sha256(sdist)}"
[bases."{BASE}".wheel]
filename = "vllm-1.3.0-py3-none-any.whl"
sha256 = "{"0" * 64}"
"""
        )
    _write_base_series(fork, f"{PATCH_NAME}\n")
    return fork


def _tree(root: Path) -> Path:
    return root / "build" / f"vllm-fork-{BASE}"


def test_as_is_commit_applies_at_an_offset_exports_and_checks(based, tmp_path):
    assert run(based, "--base", BASE, "export") == 0
    tree = _tree(based)
    text = (tree / "vllm/attn.txt").read_text()
    assert text.startswith("new a\n") and "line 20 (fixed)\n" in text
    patches = sorted((based / "dist/patches" / f"v{BASE}").glob("*.patch"))
    assert len(patches) == 1
    # The export carries this base's line numbers: `git am` onto pristine
    # 1.3.0 gives the materialized tree exactly.
    assert "@@ -20,7 +20,7 @@" in patches[0].read_text()
    clone = tmp_path / "am"
    subprocess.run(["git", "clone", "-q", str(tree), str(clone)], check=True)
    git(clone, "checkout", "-q", f"v{BASE}")
    git(clone, "am", "-q", str(patches[0]))
    assert (
        git(clone, "rev-parse", "HEAD^{tree}").stdout
        == git(tree, "rev-parse", "HEAD^{tree}").stdout
    )
    # The export also writes the range-diff report against the primary
    # series (materialized for it; see the test below).
    assert (based / "results" / "series" / f"range_diff_v1.2.0_v{BASE}.txt").is_file()
    assert run(based, "table") == 0
    assert "| on 1.3.0 |" in (based / "PATCHES.md").read_text()
    assert "applies unchanged" in (based / "PATCHES.md").read_text()
    # The as-is commit applies at an offset there: that is no finding on an
    # extra base (its export has the base's line numbers).
    subprocess.run(["git", "add", "-A"], cwd=based, check=True)
    pin = read_pin(based, BASE)
    series = read_series(based, BASE)
    assert run_check(based, series, tree, pin.tag, hooks=()) == []


def test_base_export_writes_the_range_diff_and_check_finds_it_stale(based, capsys):
    """The generated range-diff report pairs the commits of both bases
    without commit hashes ('=' for the commit that applies as it is), and
    `check` names the report once it no longer matches the two series."""
    assert run(based, "--base", BASE, "export") == 0
    report = based / "results" / "series" / f"range_diff_v1.2.0_v{BASE}.txt"
    lines = report.read_text().splitlines()
    assert "1: = 1: [Bugfix] Change line 20 of attn" in lines
    assert not [x for x in lines if re.search(r"\b[0-9a-f]{7,40}\b", x)]
    capsys.readouterr()
    run(based, "--base", BASE, "check")
    assert "range-diff" not in capsys.readouterr().out
    report.write_text(report.read_text().replace("1: = 1:", "1: ! 1:"))
    assert run(based, "--base", BASE, "check") == 1
    assert (
        f"FAIL results/series/range_diff_v1.2.0_v{BASE}.txt: range-diff report is stale"
        in capsys.readouterr().out
    )


def test_every_primary_commit_needs_a_line(based, capsys):
    _write_base_series(based, "# nothing\n")
    assert run(based, "--base", BASE, "materialize") == 2
    err = capsys.readouterr().err
    assert f"no line for {PATCH_NAME}" in err


def test_drop_needs_a_reason_and_unknown_patches_are_named(based, capsys):
    _write_base_series(based, f"drop {PATCH_NAME}\n")
    assert run(based, "--base", BASE, "status") == 2
    assert "needs its reason" in capsys.readouterr().err
    _write_base_series(based, "0002-other.patch\n")
    assert run(based, "--base", BASE, "status") == 2
    assert "0002-other.patch is not a patch of patches/series" in (
        capsys.readouterr().err
    )


def test_todo_commit_is_left_out_and_shown_in_the_table(based):
    _write_base_series(based, f"todo {PATCH_NAME}: line 20 moved upstream\n")
    assert run(based, "--base", BASE, "materialize") == 0
    tree = _tree(based)
    assert git(tree, "rev-list", "--count", f"v{BASE}..HEAD").stdout.strip() == "0"
    assert run(based, "table") == 0
    assert (
        "not ported yet: line 20 moved upstream" in (based / "PATCHES.md").read_text()
    )


def test_unknown_base_is_refused(based, capsys):
    assert run(based, "--base", "9.9.9", "status") == 2
    assert "no base '9.9.9'" in capsys.readouterr().err


def test_wrong_base_sdist_hash_stops_check(based, capsys):
    pin = based / "requirements" / "upstream.toml"
    text = pin.read_text()
    good = sha256(based / ".cache" / "upstream" / "vllm-1.3.0.tar.gz")
    pin.write_text(text.replace(good, "f" * 64))
    assert run(based, "--base", BASE, "check") == 2
    assert "sha256 mismatch" in capsys.readouterr().err


def _amend(tree: Path, path: str, old: str, new: str) -> None:
    (tree / path).write_text((tree / path).read_text().replace(old, new))
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "--amend", "--no-edit")


def test_save_turns_a_changed_commit_into_a_variant(based, capsys):
    assert run(based, "--base", BASE, "materialize") == 0
    tree = _tree(based)
    primary_patch = (based / "patches" / PATCH_NAME).read_text()
    _amend(tree, "vllm/attn.txt", "line 30\n", "line 30 (1.3.0 too)\n")
    _amend(tree, "tests/test_new.py", "pass", "assert True")
    # A variant must say what differs and why.
    assert run(based, "--base", BASE, "save") == 2
    assert "needs a Base-Note" in capsys.readouterr().err
    git(tree, "notes", "--ref", NOTES_REF, "append", "-m", "Base-Note: also 30", "HEAD")
    amended = git(tree, "rev-parse", "HEAD^{tree}").stdout
    assert run(based, "--base", BASE, "save") == 0
    folder = based / "patches" / "bases" / BASE
    variant = (folder / PATCH_NAME).read_text()
    assert "Base-Note: also 30" in variant and "+line 30 (1.3.0 too)" in variant
    # The base's own copy of the added file, as a diff against the
    # primary's (which stays as it was).
    delta = (folder / "files/tests/test_new.py.diff").read_text()
    assert "-    pass\n+    assert True\n" in delta
    assert not (folder / "files/tests/test_new.py").exists()
    assert "pass" in (based / "tests/test_new.py").read_text()
    assert (based / "patches" / PATCH_NAME).read_text() == primary_patch
    assert read_series(based, BASE).entries[0].kind == "variant"
    # Materializing the saved base gives the amended tree again, and the
    # primary series still gives its own.
    assert run(based, "--base", BASE, "materialize") == 0
    assert git(tree, "rev-parse", "HEAD^{tree}").stdout == amended
    assert run(based, "materialize") == 0
    assert "pass" in (based / "build/vllm-fork/tests/test_new.py").read_text()
    assert run(based, "table") == 0
    assert (
        "variant ([patch](patches/bases/1.3.0/0001-fix.patch)): also 30"
        in (based / "PATCHES.md").read_text()
    )
    # Saved back unchanged from a tree equal to the primary: as-is again.
    assert run(based, "--base", BASE, "materialize") == 0
    git(tree, "reset", "-q", "--hard", f"v{BASE}")
    subprocess.run(
        ["git", "-C", str(tree), "fetch", "-q", str(based / "build/vllm-fork")],
        check=True,
    )
    git(tree, "cherry-pick", "FETCH_HEAD")
    assert run(based, "--base", BASE, "save") == 0
    assert not (folder / PATCH_NAME).exists()
    assert not (folder / "files").exists()
    assert read_series(based, BASE).entries[0].kind == "as-is"


def test_stray_variant_and_stray_file_are_refused(based, capsys):
    folder = based / "patches" / "bases" / BASE
    (folder / "0009-old.patch").write_text("x")
    assert run(based, "--base", BASE, "status") == 2
    assert "0009-old.patch is not a variant the series uses" in (
        capsys.readouterr().err
    )
    (folder / "0009-old.patch").unlink()
    (folder / "files/tests").mkdir(parents=True)
    (folder / "files/tests/test_new.py").write_text("x = 1\n")
    assert run(based, "--base", BASE, "status") == 2
    assert "no variant of base 1.3.0 adds tests/test_new.py" in (
        capsys.readouterr().err
    )


def _fake_installed(tmp: Path) -> Path:
    """An installed upstream package: Python plus a binary the tree lacks."""
    pkg = tmp / "site-packages" / "vllm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "_C.abi3.so").write_bytes(b"\x7fELF")
    return pkg


def test_base_test_runs_its_suite_over_the_base_tree(based, monkeypatch, tmp_path):
    import forktool.__main__ as cli

    calls = []

    def fake_pytest(cmd, cwd, env, limit):
        calls.append((cmd, Path(cwd), env))
        return 0

    monkeypatch.setattr(cli, "run_pytest", fake_pytest)
    monkeypatch.setattr(cli.importlib.metadata, "version", lambda name: BASE)
    installed = _fake_installed(tmp_path)
    monkeypatch.setattr(cli.prefix, "installed_package_dir", lambda: installed)
    folder = based / "patches" / "bases" / BASE
    # No suite file: a clear error, not the primary's suite.
    assert run(based, "--base", BASE, "test") == 2
    (folder / "cpu_suite.txt").write_text("# ours\ntests/test_new.py\n")
    assert run(based, "--base", BASE, "test") == 0
    cmd, cwd, env = calls[-1]
    assert cmd[-1] == "tests/test_new.py"
    assert (cwd / "tests/test_new.py").is_file()
    # The base tree's Python comes first, over the installed binaries.
    site = Path(env["PYTHONPATH"].split(os.pathsep)[0])
    attn = (site / "vllm/attn.txt").read_text()
    assert attn.startswith("new a\n") and "line 20 (fixed)\n" in attn
    assert (site / "vllm/_C.abi3.so").resolve() == installed / "_C.abi3.so"
    assert env["TRITON_INTERPRET"] == "1"
    # Each commit's own tests run at that commit as on the primary base.
    assert run(based, "--base", BASE, "test", "--each-commit") == 0
    assert calls[-1][0][-1] == "tests/test_new.py"


def test_base_test_needs_the_base_wheel_installed(based, monkeypatch, capsys):
    import forktool.__main__ as cli

    monkeypatch.setattr(cli.importlib.metadata, "version", lambda name: "1.2.0")
    assert run(based, "--base", BASE, "test") == 2
    err = capsys.readouterr().err
    assert "installed vllm is 1.2.0" in err and "make install BASE=1.3.0" in err


def test_base_copy_diff_that_no_longer_applies_is_named(based, capsys):
    assert run(based, "--base", BASE, "materialize") == 0
    tree = _tree(based)
    _amend(tree, "tests/test_new.py", "pass", "assert True")
    git(tree, "notes", "--ref", NOTES_REF, "append", "-m", "Base-Note: x", "HEAD")
    assert run(based, "--base", BASE, "save") == 0
    # The primary's copy changes under the base's diff.
    (based / "tests/test_new.py").write_text("def test_other():\n    return\n")
    assert run(based, "--base", BASE, "materialize") == 2
    err = capsys.readouterr().err
    assert "files/tests/test_new.py.diff: does not apply to tests/test_new.py" in err


def test_pick_ports_a_primary_commit_with_its_note_in_primary_order(based):
    from .test_forktool import _add_commit

    # A second primary commit; the base series lists both as todo.
    _add_commit(based, "vllm/second.py", "X = 2\n")
    second = next(
        p.name for p in read_series(based).patches if p.name.startswith("0002-")
    )
    first = read_series(based).patches[0].name
    _write_base_series(based, f"todo {first}: later\ntodo {second}: later\n")
    assert run(based, "--base", BASE, "materialize") == 0
    tree = _tree(based)
    # Pick the second commit first, then the first: the tree keeps the
    # primary order, and each commit carries its primary note.
    assert run(based, "--base", BASE, "pick", "2") == 0
    assert run(based, "--base", BASE, "pick", first) == 0
    log = git(tree, "log", "--reverse", "--format=%s", f"v{BASE}..HEAD").stdout
    assert log.splitlines() == [
        "[Bugfix] Change line 20 of attn",
        "[Misc] Second change",
    ]
    note = git(tree, "notes", "--ref", NOTES_REF, "show", "HEAD").stdout
    assert "Why: w" in note
    note = git(tree, "notes", "--ref", NOTES_REF, "show", "HEAD~1").stdout
    assert "Why: line 20 was wrong" in note
    # Unchanged commits save as "applies unchanged".
    assert run(based, "--base", BASE, "save") == 0
    assert [e.kind for e in read_series(based, BASE).entries] == ["as-is", "as-is"]


def test_pick_stops_on_a_conflict_and_continues_after_it(based, capsys):
    # Upstream 1.3.0 changed line 20 itself: the fix conflicts there.
    sdist = based / ".cache" / "upstream" / "vllm-1.3.0.tar.gz"
    old_sha = sha256(sdist)
    _sdist_130(sdist, line_20="line 20 (moved)")
    pin = based / "requirements" / "upstream.toml"
    pin.write_text(pin.read_text().replace(old_sha, sha256(sdist)))
    _write_base_series(based, f"todo {PATCH_NAME}: later\n")
    assert run(based, "--base", BASE, "materialize") == 0
    tree = _tree(based)
    pristine = (tree / "vllm/attn.txt").read_text()
    assert run(based, "--base", BASE, "pick", "1") == 1
    assert "pick --continue" in capsys.readouterr().out
    (tree / "vllm/attn.txt").write_text(
        pristine.replace("line 20 (moved)\n", "line 20 (fixed)\n")
    )
    git(tree, "add", "vllm/attn.txt")
    assert run(based, "--base", BASE, "pick", "--continue") == 0
    assert "Why: line 20 was wrong" in (
        git(tree, "notes", "--ref", NOTES_REF, "show", "HEAD").stdout
    )
    # Nothing is half-picked any more: a second --continue says so.
    assert run(based, "--base", BASE, "pick", "--continue") == 2
    assert "no pick in progress" in capsys.readouterr().err


def test_primary_save_keeps_the_bases_in_step(based):
    """A reworded primary commit is renamed in the base's series (and its
    variant file); a new one gets a todo line there."""
    from .test_forktool import _add_commit

    folder = based / "patches" / "bases" / BASE
    assert run(based, "--base", BASE, "materialize") == 0
    tree = _tree(based)
    _amend(tree, "vllm/attn.txt", "line 30\n", "line 30 (too)\n")
    git(tree, "notes", "--ref", NOTES_REF, "append", "-m", "Base-Note: n", "HEAD")
    assert run(based, "--base", BASE, "save") == 0
    assert (folder / PATCH_NAME).is_file()
    _add_commit(based, "vllm/second.py", "X = 2\n")
    names = [p.name for p in read_series(based).patches]
    assert names[0] != PATCH_NAME  # the primary save renamed it
    entries = read_series(based, BASE).entries
    assert [(e.name, e.kind) for e in entries] == [
        (names[0], "variant"),
        (names[1], "to port"),
    ]
    assert (folder / names[0]).is_file() and not (folder / PATCH_NAME).exists()
