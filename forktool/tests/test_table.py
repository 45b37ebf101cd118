"""`forktool table` writes the series tables of PATCHES.md and README.md,
and `forktool check` fails when either is stale (fixture: conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forktool.check import run_check
from forktool.series import read_series
from forktool.table import README_END, README_START, readme_table_is_current
from forktool.upstream import read_pin

from .conftest import README
from .test_forktool import _add_commit, _check, run, tree_of

STALE = "README.md: series table is stale; run `forktool table`"


@pytest.fixture(autouse=True)
def _no_cache_override(monkeypatch):
    monkeypatch.delenv("FORK_CACHE", raising=False)


def _block(text: str) -> str:
    return text.split(README_START, 1)[1].split(README_END, 1)[0]


def _recheck(fork: Path) -> list[str]:
    return run_check(
        fork, read_series(fork), tree_of(fork), read_pin(fork).tag, hooks=()
    )


def test_table_writes_readme_block_from_patch_headers(fork: Path, capsys):
    _add_commit(fork, "tests/test_harness.py", "X = 1\n", "Fork-only test harness")
    (fork / "README.md").write_text(README)  # back to the empty block
    assert not readme_table_is_current(fork, read_series(fork))
    assert run(fork, "table") == 0
    assert "README.md" in capsys.readouterr().out
    text = (fork / "README.md").read_text()
    rows = _block(text).strip("\n").splitlines()
    assert rows == [
        "| # | commit | measured effect |",
        "|---|---|---|",
        "| 0001 | [Bugfix] Change line 20 of attn | line 20 is right |",
        "| 0002 | [Misc] Second change | Fork-only, not exported: e |",
    ]
    # The hand-written prose around the markers is kept, markers included.
    before, after = README.split(README_START)[0], README.split(README_END)[1]
    assert text.startswith(before + README_START + "\n")
    assert text.endswith(README_END + after)
    # PATCHES.md is still written, and a second run changes nothing.
    patches_md = (fork / "PATCHES.md").read_text()
    assert "| 0002 | [Misc] Second change" in patches_md
    assert run(fork, "table") == 0
    assert (fork / "README.md").read_text() == text
    assert (fork / "PATCHES.md").read_text() == patches_md
    assert readme_table_is_current(fork, read_series(fork))


def test_check_fails_on_stale_readme_block(fork: Path):
    assert _check(fork) == []
    readme = fork / "README.md"
    good = readme.read_text()
    readme.write_text(good.replace("line 20 is right", "line 20 is fine"))
    assert _recheck(fork) == [STALE]
    # A changed Effect: header makes both tables stale.
    readme.write_text(good)
    patch = next((fork / "patches").glob("0001-*.patch"))
    patch.write_text(patch.read_text().replace("Effect: line 20 is right", "Effect: x"))
    problems = _recheck(fork)
    assert STALE in problems
    assert "PATCHES.md: commit table is stale; run `forktool table`" in problems
    assert run(fork, "table") == 0
    assert _recheck(fork) == []


BROKEN_READMES = [
    "# Fork\n\nNo table here.\n",
    f"# Fork\n\n{README_START}\n| # |\n",  # no end marker
    f"# Fork\n\n{README_END}\n{README_START}\n",  # wrong order
    f"{README_START}\n{README_END}\n{README_START}\n{README_END}\n",  # twice
    None,  # no README.md at all
]


def _break_readme(fork: Path, readme: str | None) -> None:
    if readme is None:
        (fork / "README.md").unlink()
    else:
        (fork / "README.md").write_text(readme)


@pytest.mark.parametrize("readme", BROKEN_READMES)
def test_table_without_readme_markers_is_a_clear_error(fork: Path, capsys, readme):
    _break_readme(fork, readme)
    assert run(fork, "table") == 2
    err = capsys.readouterr().err
    assert err.startswith("forktool table: error: ")
    assert "README.md" in err and README_START in err and README_END in err
    # Nothing was written: neither README.md nor PATCHES.md.
    assert not (fork / "PATCHES.md").exists()
    if readme is None:
        assert not (fork / "README.md").exists()
    else:
        assert (fork / "README.md").read_text() == readme


@pytest.mark.parametrize("readme", [BROKEN_READMES[0], None])
def test_check_reports_readme_without_markers(fork: Path, readme):
    assert _check(fork) == []
    _break_readme(fork, readme)
    (problem,) = _recheck(fork)
    assert problem.startswith(str(fork / "README.md"))
    assert README_START in problem and README_END in problem
