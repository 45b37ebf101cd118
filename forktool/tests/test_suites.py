"""The suite files and how `forktool test` runs and reports them."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import forktool.__main__ as cli
from forktool.errors import ForkError
from forktool.suites import read_suite, report_args, run_pytest, stages_of

ROOT = Path(__file__).resolve().parents[2]
GPU_SUITE = ROOT / "forktool" / "gpu_suite.txt"


def test_stages_select_their_lines_and_share_the_preamble(tmp_path: Path):
    suite = tmp_path / "suite.txt"
    suite.write_text(
        "# comment\n--deselect=a.py::t\n\n[one]\na.py\n[two]\nb.py\nc.py::t\n"
    )
    assert stages_of(suite) == ["one", "two"]
    assert read_suite(suite) == ["--deselect=a.py::t", "a.py", "b.py", "c.py::t"]
    assert read_suite(suite, "two") == ["--deselect=a.py::t", "b.py", "c.py::t"]
    with pytest.raises(ForkError, match=r"no stage 'three' \(stages: one, two\)"):
        read_suite(suite, "three")


def test_a_file_without_stages_reads_as_before():
    lines = read_suite(ROOT / "forktool" / "cpu_suite.txt")
    assert lines and not any(ln.startswith(("#", "[")) for ln in lines)


def _gpu_test_ids() -> set[str]:
    """``file::function`` of every test function under tests/gpu."""
    ids = set()
    for path in sorted((ROOT / "tests" / "gpu").glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                ids.add(f"{path.relative_to(ROOT)}::{node.name}")
    return ids


def test_gpu_stages_cover_every_engine_test_once():
    """A test added to tests/gpu must be put into a stage, or `make test-gpu
    STAGE=...` would never run it."""
    assert {"kernels", "engine", "spec"} <= set(stages_of(GPU_SUITE))
    staged = [
        arg
        for stage in stages_of(GPU_SUITE)
        for arg in read_suite(GPU_SUITE, stage)
        if arg.startswith("tests/gpu/")
    ]
    # Each staged once; a parametrised test may be staged by its cases.
    assert len(staged) == len(set(staged))
    assert {arg.split("[")[0] for arg in staged} == _gpu_test_ids()


def test_report_args():
    assert report_args(gpu=True) == ["-v", "-rA"]
    cpu = report_args(gpu=False)
    assert "--disable-warnings" in cpu and "-q" in cpu
    assert any(a.startswith("-Wignore:") for a in cpu)


@pytest.fixture
def gpu_cli(monkeypatch):
    """``forktool test --gpu`` with CUDA reported usable, the installed
    version current and nothing copied; each pytest run is recorded as
    (cmd, time_limit) and returns the next of ``rcs`` (0 once they run out)."""
    calls: list[tuple[list[str], float | None]] = []
    rcs: list[int] = []

    def fake_run_pytest(cmd, cwd, env, time_limit=None):
        calls.append((cmd, time_limit))
        return rcs.pop(0) if rcs else 0

    def fake_probe(cmd, *a, **kw):
        return subprocess.CompletedProcess(cmd, 0, "True\n", "")

    monkeypatch.setattr(cli, "run_pytest", fake_run_pytest)
    monkeypatch.setattr(cli.subprocess, "run", fake_probe)
    monkeypatch.setattr(cli, "fork_version", lambda pin, tree: "1")
    monkeypatch.setattr(cli.importlib.metadata, "version", lambda name: "1")
    monkeypatch.setattr(cli, "_ensure_tree", lambda args, pin: ROOT / "build" / "x")
    monkeypatch.setattr(cli.shutil, "copytree", lambda *a, **kw: None)
    monkeypatch.setattr(cli.shutil, "copy2", lambda *a, **kw: None)
    return calls, rcs


def test_gpu_stage_runs_verbose_with_time_limit(gpu_cli, capsys):
    """`make test-gpu STAGE=engine`: only that stage's tests, each result
    printed as it finishes, and the stage's time limit handed on."""
    calls, _ = gpu_cli
    argv = ["test", "--gpu", "--stage", "engine", "--time-limit", "480"]
    assert cli.main(argv) == 0
    [(cmd, time_limit)] = calls
    assert "-v" in cmd and "-rA" in cmd and time_limit == 480
    tests = [a for a in cmd if a.startswith("tests/")]
    assert tests == read_suite(GPU_SUITE, "engine")
    assert cli.main(["test", "--gpu", "--stage", "nope"]) == 2
    assert "no stage 'nope'" in capsys.readouterr().err


def test_gpu_suite_runs_each_stage_in_its_own_pytest(gpu_cli, capsys):
    """Without --stage every stage runs, one pytest each (a stage's -k
    narrows only its own files), each under the time limit; a cut or failed
    stage does not stop the next, and the run fails with the first failure."""
    calls, rcs = gpu_cli
    stages = stages_of(GPU_SUITE)
    rcs.extend([0, 124, 0, 1] + [0] * (len(stages) - 4))
    assert len(stages) == 12
    assert cli.main(["test", "--gpu", "--time-limit", "480"]) == 124
    assert len(calls) == len(stages)
    for (cmd, limit), stage in zip(calls, stages, strict=True):
        assert limit == 480
        assert cmd[-len(read_suite(GPU_SUITE, stage)) :] == read_suite(GPU_SUITE, stage)
    upstream = calls[stages.index("upstream")][0]
    # Upstream's tensor-descriptor cases fail on unpatched 0.26.0 too.
    assert (
        upstream[upstream.index("-k") + 1] == "num_heads0 and seq_lens1 and not use_td"
    )
    # The split-KV file's full grid runs in a stage of its own; the offline
    # compile checks run in the CPU suite.
    kernels = calls[stages.index("kernels")][0]
    assert (
        kernels[kernels.index("-k") + 1]
        == "not test_int8_split_kv_attention[ and not spill and not test_wgmma_"
    )
    grid = calls[stages.index("kernels-grid")][0]
    assert grid[grid.index("-k") + 1] == "test_int8_split_kv_attention["
    # One DFlash engine per stage: both in one stage ran past 8 minutes.
    for stage, kv in (("spec-warmup", "int8-triton"), ("spec-warmup-bf16", "bf16-fa")):
        assert read_suite(GPU_SUITE, stage) == [
            "tests/gpu/test_engine_int8_kv.py::"
            f"test_no_spec_decode_compile_after_ready[dflash-{kv}]"
        ]
    out = capsys.readouterr().out
    assert f"stage {stages[1]}: cut at 480 s" in out
    assert f"stage {stages[3]}: failed (exit 1) in " in out
    # Each stage's wall time, for the 8-minute budget each is meant to fit.
    assert re.search(rf"stage {stages[0]}: passed in \d+ s", out)


@pytest.mark.parametrize("sigint_ignored", [False, True])
def test_time_limit_interrupts_pytest_and_keeps_its_summary(
    tmp_path, capfd, sigint_ignored
):
    """Past the limit pytest gets Ctrl-C: it still prints what ran; also
    when forktool runs with SIGINT ignored (nohup, a script's background
    job), which pytest would otherwise inherit and sleep through."""
    (tmp_path / "test_slow.py").write_text(
        "import time\n\n"
        "def test_fast():\n    pass\n\n"
        "def test_slow():\n    time.sleep(60)\n"
    )
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rA"]
    handler = signal.getsignal(signal.SIGINT)
    if sigint_ignored:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        rc = run_pytest(cmd, tmp_path, dict(os.environ), time_limit=5)
    finally:
        signal.signal(signal.SIGINT, handler)
    out = capfd.readouterr()
    assert rc == 124
    assert "test_fast PASSED" in out.out and "KeyboardInterrupt" in out.out
    assert "time limit of 5 s reached" in out.err
