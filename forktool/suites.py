"""The test suites `forktool test` runs: which tests, and how pytest reports.

A suite file (``forktool/cpu_suite.txt``, ``forktool/gpu_suite.txt``) holds
one pytest argument per line; ``#`` starts a comment.  A line ``[name]``
starts a named stage: ``forktool test --gpu --stage name`` runs the lines of
that stage only, plus the lines before the first stage (arguments every
stage shares); without ``--stage`` every line runs.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

from .errors import ForkError

_STAGE_RE = re.compile(r"^\[([A-Za-z0-9_-]+)\]$")

# Warnings the CPU suite raised by the tens of thousands (36,210 in one run)
# that say nothing about the code under test: under TRITON_INTERPRET=1,
# Triton 3.6's interpreter converts a one-element NumPy array to an index on
# every interpreted load/store, and NumPy 1.25+ warns each time
# ("Conversion of an array with ndim > 0 to a scalar is deprecated",
# triton/runtime/interpreter.py).  They are dropped; the rest are counted in
# pytest's last line (--disable-warnings) instead of listed.
CPU_WARNING_FILTERS = ("ignore::DeprecationWarning:triton.runtime.interpreter",)


def read_suite(path: Path, stage: str | None = None) -> list[str]:
    """The pytest arguments of ``path`` (of one stage, if given)."""
    common: list[str] = []
    stages: dict[str, list[str]] = {}
    current = common
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _STAGE_RE.match(line)
        if m:
            current = stages.setdefault(m.group(1), [])
        else:
            current.append(line)
    if stage is None:
        return common + [arg for args in stages.values() for arg in args]
    if stage not in stages:
        known = ", ".join(stages) or "none"
        raise ForkError(f"{path.name}: no stage {stage!r} (stages: {known})")
    return common + stages[stage]


def stages_of(path: Path) -> list[str]:
    """Names of the stages of a suite file, in order."""
    lines = (ln.strip() for ln in path.read_text().splitlines())
    return [m.group(1) for ln in lines if (m := _STAGE_RE.match(ln))]


def report_args(gpu: bool) -> list[str]:
    """How pytest reports.

    CPU suite: one dot per test and a short summary of what did not pass,
    interpreter warnings filtered and the rest counted, not listed.  GPU
    suite: each test's name and result as it finishes (a run cut by a time
    limit still shows how far it got) and a summary line for every test.
    """
    if gpu:
        return ["-v", "-rA"]
    filters = [f"-W{f}" for f in CPU_WARNING_FILTERS]
    return ["-q", "-ra", "--disable-warnings", *filters]


def run_pytest(
    cmd: list[str], cwd: Path, env: dict, time_limit: float | None = None
) -> int:
    """Run pytest; past ``time_limit`` seconds interrupt it as Ctrl-C would,
    so that it still prints the results so far, and return 124.

    pytest gets Ctrl-C's default handling even where this process was
    started with SIGINT ignored (``nohup``, a background job of a script),
    which Python would otherwise pass on and never raise KeyboardInterrupt.
    """
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        return proc.wait(timeout=time_limit)
    except subprocess.TimeoutExpired:
        print(
            f"forktool test: time limit of {time_limit:.0f} s reached: "
            "interrupting pytest",
            file=sys.stderr,
            flush=True,
        )
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return 124
