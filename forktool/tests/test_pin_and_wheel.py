"""The pin is verified by every command; the fork wheel is rebuilt only when
its inputs change, is byte-reproducible, and is installed whenever the
installed files differ from it (miniature upstream, see conftest.py)."""

from __future__ import annotations

import csv
import importlib.metadata
import io
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

import forktool.__main__ as cli
from forktool.__main__ import main
from forktool.gitops import git, in_order

from .conftest import AUTHOR, sha256

PIN_COMMANDS = ["check", "build", "install", "test", "export"]


@pytest.fixture(autouse=True)
def _no_cache_override(monkeypatch):
    monkeypatch.delenv("FORK_CACHE", raising=False)


def run(root: Path, *args: str) -> int:
    return main(["--root", str(root), *args])


def _set_pin(root: Path, which: str, digest: str) -> None:
    """Write ``digest`` as the pinned sha256 of the sdist or the wheel."""
    path = root / "requirements" / "upstream.toml"
    lines = path.read_text().splitlines(keepends=True)
    section = f"[upstream.{which}]\n"
    i = lines.index(section) + 2
    assert lines[i].startswith("sha256 = ")
    lines[i] = f'sha256 = "{digest}"\n'
    path.write_text("".join(lines))


def _fail_pip(*args, **kwargs):
    raise AssertionError("pip must not run")


@pytest.mark.parametrize("which", ["sdist", "wheel"])
@pytest.mark.parametrize("command", PIN_COMMANDS)
def test_wrong_pin_stops_every_command(fork: Path, capsys, monkeypatch, command, which):
    """With a tree and a wheel already built, a pin that no longer names the
    cached files stops each command with the file and both hashes, before
    it uses the tree (or pip, or pytest)."""
    assert run(fork, "build") == 0
    capsys.readouterr()
    monkeypatch.setattr(cli, "_pip_install", _fail_pip)
    monkeypatch.setattr(cli, "run_pytest", _fail_pip)
    wrong = "0" * 64
    _set_pin(fork, which, wrong)
    assert run(fork, command) == 2
    err = capsys.readouterr().err
    name = "vllm-1.2.0.tar.gz" if which == "sdist" else "vllm-1.2.0-py3-none-any.whl"
    assert err.startswith(f"forktool {command}: error: "), err
    assert f"{name}: sha256 mismatch" in err and f"expected {wrong}" in err
    assert err.count("error") == 1, err


def test_changed_pin_rematerializes_the_tree(fork: Path, capsys):
    """The tree records the pin it was made from: another sdist (with its
    hash) makes a new tree even when the series is the same."""
    assert run(fork, "materialize") == 0
    cached = fork / ".cache/upstream/vllm-1.2.0.tar.gz"
    with tarfile.open(cached) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]
    with tarfile.open(cached, "w:gz") as tar:
        for m, data in members:
            if m.name.endswith("setup.py"):
                data = b"# upstream setup, re-released\n"
                m.size = len(data)
            tar.addfile(m, io.BytesIO(data))
    _set_pin(fork, "sdist", sha256(cached))
    capsys.readouterr()
    assert run(fork, "build") == 0
    assert "materialized" in capsys.readouterr().out
    tree = fork / "build" / "vllm-fork"
    assert (tree / "setup.py").read_text() == "# upstream setup, re-released\n"


def _wheel_path(root: Path) -> Path:
    (wheel,) = (root / "dist").glob("vllm-1.2.0+fork.1.g*.whl")
    return wheel


def test_second_build_reuses_the_wheel(fork: Path, capsys):
    assert run(fork, "build") == 0
    assert "built " in capsys.readouterr().out
    wheel = _wheel_path(fork)
    before = (wheel.stat().st_mtime_ns, wheel.stat().st_ino)
    assert run(fork, "build") == 0
    out = capsys.readouterr().out
    assert "up to date" in out and "built " not in out
    assert (wheel.stat().st_mtime_ns, wheel.stat().st_ino) == before


def test_build_again_when_the_wheel_was_changed(fork: Path, capsys):
    assert run(fork, "build") == 0
    wheel = _wheel_path(fork)
    good = wheel.read_bytes()
    wheel.write_bytes(good + b"tampered")
    capsys.readouterr()
    assert run(fork, "build") == 0
    assert "built " in capsys.readouterr().out
    assert wheel.read_bytes() == good


def test_build_again_when_the_series_changed(fork: Path, capsys):
    assert run(fork, "build") == 0
    first = _wheel_path(fork)
    patch = fork / "patches/0001-fix.patch"
    patch.write_text(patch.read_text().replace("It was wrong.", "It was wrong!"))
    capsys.readouterr()
    assert run(fork, "build") == 0
    assert "built " in capsys.readouterr().out
    second = _wheel_path(fork)  # the old wheel is gone
    assert second != first


def test_build_again_when_the_pinned_wheel_changed(fork: Path, capsys):
    assert run(fork, "build") == 0
    cached = fork / ".cache/upstream/vllm-1.2.0-py3-none-any.whl"
    with zipfile.ZipFile(cached, "a") as z:
        z.writestr("vllm/_extra.abi3.so", b"\x7fELF another binary")
    _set_pin(fork, "wheel", sha256(cached))
    capsys.readouterr()
    assert run(fork, "build") == 0
    assert "built " in capsys.readouterr().out
    with zipfile.ZipFile(_wheel_path(fork)) as z:
        assert z.read("vllm/_extra.abi3.so") == b"\x7fELF another binary"


def test_wheel_is_byte_reproducible(fork: Path, monkeypatch):
    """Two builds an hour apart give the same bytes."""
    assert run(fork, "build") == 0
    wheel = _wheel_path(fork)
    first = wheel.read_bytes()
    for p in (fork / "dist").iterdir():
        p.unlink()
    later = time.time() + 3600
    monkeypatch.setattr(time, "time", lambda: later)
    assert run(fork, "build") == 0
    assert wheel.read_bytes() == first
    with zipfile.ZipFile(wheel) as z:
        dates = {i.filename: i.date_time for i in z.infolist()}
    record = next(n for n in dates if n.endswith(".dist-info/RECORD"))
    assert dates[record] == (2026, 1, 1, 0, 0, 0)


class FakeSite:
    """A site-packages that behaves like pip for one wheel: ``install``
    keeps an installed distribution of the same version unless told to
    force a reinstall."""

    def __init__(self, path: Path):
        self.path = path
        self.calls: list[tuple[str, ...]] = []

    def distribution(self) -> importlib.metadata.Distribution | None:
        infos = list(self.path.glob("vllm-*.dist-info"))
        return importlib.metadata.PathDistribution(infos[0]) if infos else None

    def pip_install(self, *args: str) -> None:
        self.calls.append(args)
        wheel = Path(args[-1])
        version = wheel.name.split("-")[1]
        installed = self.distribution()
        if installed and installed.version == version:
            if "--force-reinstall" not in args:
                return  # "Requirement already satisfied"
        for info in self.path.glob("vllm-*.dist-info"):
            for f in info.iterdir():
                f.unlink()
            info.rmdir()
        with zipfile.ZipFile(wheel) as z:
            z.extractall(self.path)

    def make_stale(self) -> None:
        """The same version installed, with other bytes in one file."""
        info = next(self.path.glob("vllm-*.dist-info"))
        record = info / "RECORD"
        rows = list(csv.reader(io.StringIO(record.read_text())))
        for r in rows:
            if r[0] == "vllm/attn.txt":
                r[1] = "sha256=stale"
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(rows)
        record.write_text(buf.getvalue())


@pytest.fixture
def site(tmp_path, monkeypatch) -> FakeSite:
    fake = FakeSite(tmp_path / "site-packages")
    fake.path.mkdir()
    monkeypatch.setattr(cli, "_pip_install", fake.pip_install)
    monkeypatch.setattr(cli, "_installed_vllm", fake.distribution)
    monkeypatch.setattr(cli, "cmd_status", lambda args: 0)
    return fake


def test_install_installs_then_skips_the_same_files(fork: Path, site: FakeSite):
    assert run(fork, "install") == 0
    assert len(site.calls) == 1 and "--force-reinstall" not in site.calls[0]
    assert site.distribution().version.startswith("1.2.0+fork.1.g")
    assert run(fork, "install") == 0
    assert len(site.calls) == 1  # same files installed: pip does not run


def test_install_replaces_other_bytes_of_the_same_version(
    fork: Path, site: FakeSite, capsys
):
    """pip keeps an installed distribution of the same version; install
    then forces a reinstall of the wheel's files."""
    assert run(fork, "install") == 0
    site.make_stale()
    site.calls.clear()
    assert run(fork, "install") == 0
    assert [("--force-reinstall" in c) for c in site.calls] == [False, True]
    assert "installed vllm 1.2.0+fork.1.g" in capsys.readouterr().out
    site.calls.clear()
    assert run(fork, "install") == 0
    assert site.calls == []


def test_install_fails_when_pip_leaves_other_files(fork, site, monkeypatch, capsys):
    monkeypatch.setattr(cli, "_pip_install", lambda *a: None)
    assert run(fork, "install") == 2
    assert "pip did not install the files of" in capsys.readouterr().err


def test_install_is_current_wheel_check_reads_record_rows(fork: Path, site):
    from forktool.wheel import wheel_is_installed

    assert run(fork, "build") == 0
    wheel = _wheel_path(fork)
    assert not wheel_is_installed(wheel, None)
    site.pip_install(str(wheel))
    assert wheel_is_installed(wheel, site.distribution())
    site.make_stale()
    assert not wheel_is_installed(wheel, site.distribution())


def test_saved_dates_never_go_backwards(fork: Path):
    """A commit dated before its predecessor (a reordering rebase) is saved
    with its predecessor's date, so exported patches read in date order."""
    assert run(fork, "materialize") == 0
    tree = fork / "build" / "vllm-fork"
    (tree / "tests/test_other.py").write_text("def test_x():\n    pass\n")
    git(tree, "add", "tests/test_other.py")
    git(
        tree,
        "commit",
        "-q",
        "-m",
        f"[Misc] Older change\n\nWritten first.\n\nSigned-off-by: {AUTHOR}",
        env={"GIT_AUTHOR_DATE": "2026-10-01T09:00:00+00:00"},
    )
    assert run(fork, "save") == 0
    dates = [
        next(ln for ln in p.read_text().splitlines() if ln.startswith("Date: "))
        for p in sorted((fork / "patches").glob("000*.patch"))
    ]
    assert dates == ["Date: 2026-11-01T10:00:00+00:00"] * 2


def test_in_order():
    assert in_order("2026-11-02T00:00:00+00:00", None) == "2026-11-02T00:00:00+00:00"
    west, utc = "2026-11-01T23:00:00-02:00", "2026-11-02T00:00:00+00:00"
    # 23:00 at -02:00 is 01:00 UTC on the 2nd: after the previous date, kept.
    assert in_order(west, utc) == west
    assert in_order(utc, "2026-11-03T00:00:00+00:00") == "2026-11-03T00:00:00+00:00"


def test_corrupt_patch_shows_one_message(fork: Path, capsys):
    patch = fork / "patches/0001-fix.patch"
    patch.write_text(patch.read_text().replace("@@ -18,5 +18,5 @@", "@@ -18,7 +18,7 @@"))
    assert run(fork, "materialize") == 2
    err = capsys.readouterr().err
    assert "is corrupt in the hunk at line" in err
    assert "corrupt patch at line" not in err  # git's own count is left out
