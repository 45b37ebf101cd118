"""Command line of the fork tool: ``python -m forktool <command>``.

materialize  pinned sdist + series -> git repo (build/vllm-fork)
save         commits of that repo -> patches/ + added files (gbp pq export)
pick         (--base) a primary commit onto that base's tree, note included
export       series -> dist/patches/v0.26.0/NNNN-*.patch (git format-patch)
build        fork wheel from upstream's pinned wheel -> dist/
install      build, then pip install the fork wheel into this Python
check        series canonical + applies exactly + upstream's lint passes
table        rewrite the commit tables of PATCHES.md and README.md
status       print the series and what is installed
test         run the CPU suite (forktool/cpu_suite.txt) against the
             installed fork, from a copy of the fork tree's tests/;
             --each-commit: each commit's own tests at that commit

--base VERSION selects an extra base of requirements/upstream.toml
([bases."VERSION"]): its series is patches/bases/VERSION/series, its tree
build/vllm-fork-VERSION, its export dist/patches/vVERSION.  On such a base,
install puts the pinned upstream wheel into this Python (create one venv per
base), and test runs that base's CPU suite (patches/bases/VERSION/cpu_suite.txt)
over its tree; pick ports a primary commit onto its tree.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import gitops, prefix
from .check import run_check
from .errors import ForkError
from .series import base_dir, read_series
from .suites import read_suite, report_args, run_pytest, stages_of
from .table import write_table
from .upstream import fetch_sdist, fetch_wheel, read_pin, verify_pin
from .wheel import build_wheel, built_wheel, fork_version, wheel_is_installed

ROOT = Path(__file__).resolve().parent.parent


def _tree(args) -> Path:
    return Path(args.tree).resolve()


def _ensure_tree(args, pin) -> Path:
    """The materialized tree, rebuilt when the pin or the series changed
    since.  The pinned files are verified first, every time: a tree that
    exists says nothing about whether the pin still names its sdist."""
    verify_pin(args.root, pin, args.sdist, args.wheel)
    tree = _tree(args)
    if not gitops.is_current(args.root, tree, pin, args.base):
        sdist = fetch_sdist(args.root, pin, args.sdist)
        head = gitops.materialize(args.root, pin, sdist, tree, args.base)
        print(f"materialized {tree} at {head[:12]}")
    return tree


def _primary_tree(args):
    """(pin, materialized tree) of the primary series, for base commands."""
    primary_pin = read_pin(args.root)
    primary_args = argparse.Namespace(**vars(args))
    primary_args.base, primary_args.tree = None, str(args.root / "build" / "vllm-fork")
    return primary_pin, _ensure_tree(primary_args, primary_pin)


def cmd_materialize(args) -> int:
    pin = read_pin(args.root, args.base)
    sdist = fetch_sdist(args.root, pin, args.sdist)
    head = gitops.materialize(args.root, pin, sdist, _tree(args), args.base)
    n = len(read_series(args.root, args.base).patches)
    print(f"materialized {_tree(args)}: {pin.tag} + {n} commits, HEAD {head[:12]}")
    return 0


def cmd_pick(args) -> int:
    """Cherry-pick a commit of the primary series onto an extra base's tree
    (with its fork note, in the primary order), to port it there."""
    if not args.base:
        raise ForkError("pick needs --base: it ports a primary commit to that base")
    pin = read_pin(args.root, args.base)
    tree = _tree(args)
    if args.cont:
        gitops.pick_continue(args.root, tree, pin.tag)
        print(f"picked into {tree}; then `forktool --base {args.base} save`")
        return 0
    if not args.patch:
        raise ForkError(
            "name the primary commit: its number (e.g. 7) or patch file name"
        )
    primary_pin, primary_tree = _primary_tree(args)
    if not tree.is_dir():
        raise ForkError(f"{tree}: materialize base {args.base} first")
    names = [p.name for p in read_series(args.root).patches]
    name = args.patch
    if name.isdigit():
        n = int(name)
        if not 1 <= n <= len(names):
            raise ForkError(f"no commit {n} in a series of {len(names)}")
        name = names[n - 1]
    outcome = gitops.pick(args.root, primary_tree, primary_pin.tag, tree, pin.tag, name)
    if outcome == "conflict":
        print(
            f"{name} conflicts on {args.base}: resolve it in {tree} (git add), then "
            f"`forktool --base {args.base} pick --continue`"
        )
        return 1
    print(f"picked {name} into {tree}; then `forktool --base {args.base} save`")
    return 0


def cmd_save(args) -> int:
    pin = read_pin(args.root, args.base)
    names = gitops.save(args.root, _tree(args), pin.tag, args.base)
    write_table(args.root, read_series(args.root))
    where = args.root / "patches"
    if args.base:
        where = where / "bases" / args.base
    print(f"saved {len(names)} commits into {where}")
    for n in names:
        print(f"  {n}")
    return 0


def cmd_export(args) -> int:
    pin = read_pin(args.root, args.base)
    tree = _ensure_tree(args, pin)
    dest = Path(args.dest or args.root / "dist" / "patches" / pin.tag).resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    series = read_series(args.root, args.base)
    files = gitops.export(tree, pin.tag, dest, series.num_upstream)
    kept = len(series.patches) - series.num_upstream
    print(
        f"exported {len(files)} patches to {dest}"
        + (f" ({kept} Fork-only commits stay in patches/)" if kept else "")
    )
    for f in files:
        print(f"  {f.name}")
    if args.base:
        report, text = range_diff_report(args, pin, tree)
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(text)
        print(f"wrote {report.relative_to(args.root)}")
    return 0


def range_diff_report(args, pin, tree: Path) -> tuple[Path, str]:
    """(path, text) of the generated range-diff report of an extra base
    against the primary series (the primary tree materialized as needed)."""
    primary_pin, primary_tree = _primary_tree(args)
    body = gitops.range_diff(primary_tree, primary_pin.tag, tree, pin.tag)
    path = (
        args.root / "results" / "series" / f"range_diff_{primary_pin.tag}_{pin.tag}.txt"
    )
    return path, (
        f"# git range-diff of the series on {primary_pin.tag} (left) against the\n"
        f"# series on {pin.tag} (right), commit hashes left out.  Generated by\n"
        f"# `forktool --base {args.base} export` (`make patches BASE={args.base}`);\n"
        f"# `forktool --base {args.base} check` fails when it is stale.\n"
        "# '=' same patch, '!' changed (diff of the diffs below it), '<' only on\n"
        f"# {primary_pin.tag} (PATCHES.md says why), '>' only on {pin.tag}.\n\n" + body
    )


def cmd_build(args) -> Path:
    if args.base:
        raise ForkError(
            f"base {args.base} has no fork wheel: its tests run each commit's "
            "Python over the pinned upstream wheel (`forktool --base "
            f"{args.base} install` installs that wheel)"
        )
    pin = read_pin(args.root)
    tree = _ensure_tree(args, pin)
    wheel = fetch_wheel(args.root, pin, args.wheel)
    version = fork_version(pin, tree)
    dist = args.root / "dist"
    out = built_wheel(pin, tree, dist)
    if out is not None:
        print(f"up to date: {out} (series and pin unchanged)")
        return out
    print(f"building {version} from {wheel.name}", flush=True)
    out = build_wheel(pin, tree, wheel, dist)
    print(f"built {out}")
    return out


def _pip_install(*args: str) -> None:
    """``pip install --quiet ARGS`` into this Python."""
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", *args]
    subprocess.run(cmd, check=True)


def _installed_vllm() -> importlib.metadata.Distribution | None:
    """The vllm distribution this Python imports, or None."""
    try:
        return importlib.metadata.distribution("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def cmd_install(args) -> int:
    """Build the fork wheel and install it when the installed vllm is not
    exactly its files (another version, or the same version string with
    other bytes, which pip alone would keep).  On an extra base: the
    pinned upstream wheel, verified, with its dependencies."""
    if args.base:
        pin = read_pin(args.root, args.base)
        _ensure_tree(args, pin)
        out = fetch_wheel(args.root, pin, args.wheel)
    else:
        out = cmd_build(args)
    version = out.name.split("-")[1]
    if wheel_is_installed(out, _installed_vllm()):
        print(f"vllm {version} is installed in {sys.prefix} (same files)")
    else:
        _pip_install(str(out))  # with its dependencies
        if not wheel_is_installed(out, _installed_vllm()):
            # Same version string already installed: reinstall our bytes.
            _pip_install("--force-reinstall", "--no-deps", str(out))
        if not wheel_is_installed(out, _installed_vllm()):
            raise ForkError(f"pip did not install the files of {out}")
        print(f"installed vllm {version} into {sys.prefix}")
    cmd_status(args)
    return 0


def cmd_check(args) -> int:
    pin = read_pin(args.root, args.base)
    series = read_series(args.root, args.base)
    tree = _ensure_tree(args, pin)
    problems = run_check(args.root, series, tree, pin.tag)
    if args.base:
        report, text = range_diff_report(args, pin, tree)
        if not report.is_file() or report.read_text() != text:
            problems.append(
                f"{report.relative_to(args.root)}: range-diff report is stale or "
                f"missing; run `forktool --base {args.base} export`"
            )
    for p in problems:
        print(f"FAIL {p}")
    if problems:
        return 1
    print(
        f"check: {len(series.patches)} commits apply exactly on {pin.tag}, "
        "are canonical, and pass ruff and upstream's pre-commit scripts"
    )
    return 0


def cmd_table(args) -> int:
    write_table(args.root, read_series(args.root))
    print(
        f"wrote the commit tables into {args.root / 'PATCHES.md'} and "
        f"{args.root / 'README.md'}"
    )
    return 0


def cmd_status(args) -> int:
    pin = read_pin(args.root, args.base)
    series = read_series(args.root, args.base)
    print(
        f"vLLM fork of {pin.name} {pin.version} ({pin.tag}), "
        f"{len(series.patches)} commits:"
    )
    if series.entries is None:
        for i, p in enumerate(series.patches, 1):
            print(f"  {i:04d} [{p.headers['Upstream-Status']}] {p.subject}")
    else:
        for e in series.entries:
            note = f": {e.note}" if e.note else ""
            print(f"  {e.name[:4]} [{e.kind}{note}]")
    try:
        installed = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        installed = "not installed"
    print(f"installed in {sys.prefix}: vllm {installed}")
    return 0


def cmd_test(args) -> int:
    pin = read_pin(args.root, args.base)
    tree = _ensure_tree(args, pin)
    if args.base and args.gpu:
        raise ForkError(f"base {args.base}: only its CPU tests run (no GPU suite)")
    expected = pin.version if args.base else fork_version(pin, tree)
    try:
        installed = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed != expected:
        raise ForkError(
            f"installed vllm is {installed}, the series builds {expected}; "
            "run `make install"
            + (f" BASE={args.base}" if args.base else "")
            + "` first"
        )
    if (args.each_commit or args.at) and args.gpu:
        raise ForkError("--each-commit / --at run the CPU tests only")
    suite_path = (
        args.root / "forktool" / ("gpu_suite.txt" if args.gpu else "cpu_suite.txt")
    )
    if args.base:
        suite_path = base_dir(args.root, args.base) / "cpu_suite.txt"
        if not suite_path.is_file():
            raise ForkError(
                f"{suite_path}: the CPU suite of base {args.base} is missing"
            )
    # A suite with stages runs stage by stage, each in its own pytest (a
    # stage may narrow its files with -k) and time limit.
    stages = [args.stage] if args.stage else stages_of(suite_path) or [None]
    suites = [(stage, read_suite(suite_path, stage)) for stage in stages]
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    if args.gpu:
        probe = subprocess.run(
            [sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
            capture_output=True,
            text=True,
        )
        if probe.stdout.strip() != "True":
            why = (probe.stdout + probe.stderr).strip().splitlines()
            why = why[-1] if why else f"exit code {probe.returncode}"
            if args.allow_no_gpu:
                print(f"forktool test --gpu: skipped (--allow-no-gpu): no CUDA ({why})")
                return 0
            print(
                "forktool test --gpu: error: torch.cuda.is_available() is not True "
                f"({why}); a GPU runner with broken CUDA must not pass. Pass "
                "--allow-no-gpu (make test-gpu ALLOW_NO_GPU=1) to skip on purpose.",
                file=sys.stderr,
            )
            return 2
    else:
        # Triton kernels run on the CPU interpreter; an empty
        # CUDA_VISIBLE_DEVICES keeps vLLM's triton_utils from disabling Triton.
        env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
        # Upstream's tests build ModelConfig from hub model names: their
        # configs come from a local cache (forktool/hf_cache.py), offline.
        from . import hf_cache

        hf_home = hf_cache.write_hf_cache(args.root / "build" / "hf-home")
        env.update(hf_cache.offline_env(hf_home))
    if args.each_commit or args.at:
        return _test_commits(args, tree, pin, env)
    if args.base:
        # The installed package is the pinned upstream wheel: the base's
        # tree at its last commit goes first on PYTHONPATH, over its binaries.
        site, testroot, _ = prefix.prepare(
            tree, "HEAD", prefix.installed_package_dir(), args.root / "build" / "prefix"
        )
        env = prefix.prefix_env(env, site)
    else:
        # Run from a folder that holds tests/ but no vllm/ source, so that
        # `import vllm` resolves to the installed fork wheel.
        testroot = args.root / "build" / "testroot"
        shutil.rmtree(testroot, ignore_errors=True)
        testroot.mkdir(parents=True)
        # benchmarks/ too: tests of benchmark scripts load them by path.
        for folder in ("tests", "benchmarks"):
            shutil.copytree(tree / folder, testroot / folder)
        shutil.copy2(tree / "pyproject.toml", testroot / "pyproject.toml")
    results = []
    for stage, suite in suites:
        start = time.monotonic()
        rc = _run_suite(args, suite, testroot, env)
        outcome = _outcome(rc, args, time.monotonic() - start)
        results.append((stage, rc, outcome))
        if len(suites) > 1:
            print(f"forktool test: stage {stage}: {outcome}", flush=True)
    if len(suites) > 1:
        print(
            "forktool test: stages: "
            + ", ".join(f"{stage} {outcome}" for stage, _, outcome in results)
        )
    return next((rc for _, rc, _ in results if rc != 0), 0)


def _test_commits(args, tree: Path, pin, env: dict) -> int:
    """Each selected commit's own tests against the package of the tree at
    that commit (forktool/prefix.py)."""
    installed = prefix.installed_package_dir()
    work = args.root / "build" / "prefix"
    results = []
    for n, commit in prefix.prefix_commits(tree, pin.tag, args.at):
        subject = gitops.git(tree, "log", "-1", "--format=%s", commit).stdout.strip()
        site, testroot, tests = prefix.prepare(tree, commit, installed, work)
        print(f"forktool test: commit {n:04d} {subject}", flush=True)
        if not tests:
            print("  no test files of its own", flush=True)
            results.append((n, "no tests", 0))
            continue
        # The plugin the CPU suite loads for upstream's config-building tests.
        suite = ["-pforktool.hf_cache", *tests]
        rc = _run_suite(args, suite, testroot, prefix.prefix_env(env, site))
        results.append((n, _outcome(rc, args), rc))
    print("forktool test: each commit's own tests at that commit:")
    for n, outcome, _ in results:
        print(f"  {n:04d} {outcome}")
    return next((rc for _, _, rc in results if rc != 0), 0)


def _outcome(rc: int, args, seconds: float | None = None) -> str:
    """A stage's result, with its wall time where one was measured (the
    GPU suite's stages are meant to fit a time limit each)."""
    took = "" if seconds is None else f" in {seconds:.0f} s"
    if rc == 0:
        return f"passed{took}"
    if rc == 124:
        return f"cut at {args.time_limit:.0f} s"
    return f"failed (exit {rc}){took}"


def _run_suite(args, suite: list[str], testroot: Path, env: dict) -> int:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        *report_args(args.gpu),
        *args.pytest_args,
        *suite,
    ]
    path = env.get("PYTHONPATH")
    where = f"PYTHONPATH={path} " if path else ""
    print(f"+ (cd {testroot} && {where}python {' '.join(cmd[1:])})", flush=True)
    rc = run_pytest(cmd, testroot, env, args.time_limit)
    if rc == 124:
        print(
            f"forktool test: error: the run took longer than {args.time_limit:.0f} s",
            file=sys.stderr,
        )
        return 124
    if rc == 5:
        print("forktool test: error: pytest collected no tests", file=sys.stderr)
        return 1
    return rc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="forktool",
        description=__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=ROOT,
        help="fork repository (default: this checkout)",
    )
    parser.add_argument(
        "--base",
        default=None,
        metavar="VERSION",
        help="an extra base of requirements/upstream.toml (default: the primary)",
    )
    parser.add_argument(
        "--tree",
        default=None,
        help="materialized repo (default: ROOT/build/vllm-fork[-VERSION])",
    )
    parser.add_argument(
        "--sdist",
        type=Path,
        default=None,
        help="use this sdist instead of the cached download",
    )
    parser.add_argument(
        "--wheel",
        type=Path,
        default=None,
        help="use this upstream wheel instead of the cache",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    for name in ("materialize", "save", "build", "install", "check", "table", "status"):
        sub.add_parser(name)
    test = sub.add_parser("test")
    test.add_argument(
        "--gpu", action="store_true", help="run forktool/gpu_suite.txt instead"
    )
    test.add_argument(
        "--allow-no-gpu",
        action="store_true",
        help="with --gpu: skip (exit 0) instead of failing when CUDA is unusable",
    )
    test.add_argument(
        "--stage",
        default=None,
        help="run one named stage of the suite file (gpu_suite.txt: "
        + ", ".join(stages_of(ROOT / "forktool" / "gpu_suite.txt"))
        + ")",
    )
    test.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="seconds; past them pytest is interrupted (it still prints the "
        "results so far) and the run fails",
    )
    test.add_argument(
        "--each-commit",
        action="store_true",
        help="run each commit's own test files against vLLM as of that commit "
        "(the tree's Python at the commit, the installed wheel's binaries)",
    )
    test.add_argument(
        "--at",
        type=int,
        nargs="+",
        metavar="N",
        help="like --each-commit, for commits N (1-based) only",
    )
    test.add_argument("pytest_args", nargs="*", help="extra pytest arguments")
    pick = sub.add_parser("pick")
    pick.add_argument("patch", nargs="?", help="primary commit: number or patch name")
    pick.add_argument(
        "--continue",
        dest="cont",
        action="store_true",
        help="finish a pick whose conflicts are resolved",
    )
    exp = sub.add_parser("export")
    exp.add_argument("--dest", default=None)
    args = parser.parse_args(argv)
    args.root = args.root.resolve()
    handler = globals()[f"cmd_{args.cmd}"]
    try:
        if args.base is not None and args.base == read_pin(args.root).version:
            args.base = None  # the primary base
        if args.base is not None:
            read_pin(args.root, args.base)  # names a base of the pin file
        tree = "vllm-fork" + (f"-{args.base}" if args.base else "")
        args.tree = args.tree or str(args.root / "build" / tree)
        result = handler(args)
    except ForkError as e:
        print(f"forktool {args.cmd}: error: {e}", file=sys.stderr)
        return 2
    except subprocess.CalledProcessError as e:
        print(f"forktool {args.cmd}: error: {e}", file=sys.stderr)
        return 2
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
