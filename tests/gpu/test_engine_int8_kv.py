# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Engine-level checks of the INT8 per-token-head KV cache on a hybrid model.

The tiny random Qwen3.5 model (Gated DeltaNet + full attention) with a DFlash
drafter, through the scripts in benchmarks/e2e (each engine in its own
process):

- INT8 greedy output equals BF16's, except at ties within rounding;
- scale views first set up inside a live request change nothing (vLLM
  0.26.0 overwrote Gated DeltaNet state there);
- speculative (DFlash) greedy equals non-speculative greedy per KV dtype,
  except at ties, and spec-decode metrics are reported;

The greedy comparisons run on the successor test model (top-2 margins of
5-25 nats): on the random model a speculative run's other kernel shapes
move logits by more than the tie margin, with BF16 as with INT8.
- after the engine reports ready, the first long prefill and the first mixed
  decode + prefill step compile no INT8 attention kernel.
"""

import json
import os
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "e2e"))

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def results_dir(tmp_path_factory) -> Path:
    """Where the scripts write their reports: ``$GPU_TEST_RESULTS_DIR`` if
    set (to keep them), else a temporary folder."""
    keep = os.environ.get("GPU_TEST_RESULTS_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        return Path(keep)
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="module")
def greedy_report(results_dir):
    import greedy_compare

    args = greedy_compare.parser().parse_args(
        [
            "--results-dir",
            str(results_dir),
            "--kv",
            "bf16-triton",
            "int8-triton",
            "--prompt-lengths",
            "5",
            "700",
            "2500",
            "--max-tokens",
            "32",
            "--successor",
            # The four engines side by side, 1 GiB of KV cache each.
            "--parallel",
            "4",
            "--kv-cache-memory-gib",
            "1",
            "--gpu-memory-utilization",
            "0.1",
        ]
    )
    return greedy_compare.run(args)


def _assert_only_ties(report: dict, key: str) -> None:
    summary = report["summary"][key]
    details = [
        r
        for rows in report["comparisons"][key].values()
        for r in rows
        if r["first_divergence"] is not None and not r.get("tie")
    ]
    assert summary["non_ties"] == 0, f"{key}: {details}"


def test_int8_greedy_matches_bf16(greedy_report):
    _assert_only_ties(greedy_report, "int8-triton vs bf16-triton")


@pytest.mark.parametrize("kv", ["bf16-triton", "int8-triton"])
def test_dflash_greedy_matches_plain_greedy(greedy_report, kv):
    _assert_only_ties(greedy_report, f"{kv}+dflash vs {kv}")
    stats = greedy_report["spec_decode"][f"{kv}+dflash"]
    assert stats is not None and stats.get("num_drafts", 0) > 0, stats


def test_int8_dflash_matches_bf16_dflash(greedy_report):
    _assert_only_ties(greedy_report, "int8-triton+dflash vs bf16-triton+dflash")


def test_fork_paths_ran(greedy_report):
    counters = greedy_report["path_counter"]["int8-triton+dflash"]
    assert counters is not None, "the harness did not count attention launches"
    # Target-model decode and verify steps go to the split-KV kernel; the
    # drafter's sliding-window layers may still use the unified kernel.
    assert counters.get("split_kv", 0) > 0, counters


@pytest.mark.parametrize("dflash", [False, True], ids=["plain", "dflash"])
def test_scale_views_set_up_in_live_request(results_dir, dflash):
    import scale_view_regression

    argv = ["--results-dir", str(results_dir / f"svr-{dflash}")]
    if dflash:
        argv.append("--dflash")
    report = scale_view_regression.run(scale_view_regression.parser().parse_args(argv))
    assert report["passed"], report["rows"]


def _assert_passed(report: dict, per: str, shown: tuple[str, ...]) -> None:
    """A script's report passed; else show its failed checks and, for each
    entry of ``report[per]``, the ``shown`` parts."""
    failed = {
        name: {k: v for k, v in checks.items() if not v}
        for name, checks in report["checks"].items()
    }
    details = {name: {k: r[k] for k in shown} for name, r in report[per].items()}
    assert report["passed"], (failed, details)


def test_ngram_speculation_accepts_and_is_lossless(results_dir):
    """Prompt-lookup drafts that the target accepts often: acceptance at
    least 50%, full, partial and rejected verify steps each seen, speculative
    greedy equal to plain greedy on the same KV dtype except at ties, and on
    INT8 split-KV verify launches at several query lengths."""
    import spec_accept

    args = spec_accept.parser().parse_args(
        ["--results-dir", str(results_dir / "spec_accept")]
    )
    report = spec_accept.run(args)
    _assert_passed(report, "runs", ("summary", "step_classes", "spec_decode"))


def test_ngram_verify_in_64_token_tiles_is_lossless(results_dir):
    """The same with attention blocks that are multiples of 64 (vLLM's
    ``--block-size 64`` on the hybrid model), where Hopper's verify kernel
    takes 64-token tiles with each query row rounded to int8 once instead
    of the exact high/low pair: still lossless against plain INT8 greedy,
    and verify launches at several query lengths."""
    import spec_accept

    args = spec_accept.parser().parse_args(
        [
            "--results-dir",
            str(results_dir / "spec_accept_blocks_of_64"),
            "--block-size",
            "64",
            "--kv",
            "int8-triton",
        ]
    )
    report = spec_accept.run(args)
    blocks = report["runs"]["int8-triton"]["attention_block_sizes"]
    assert blocks and all(b % 64 == 0 for b in blocks), blocks
    _assert_passed(report, "runs", ("summary", "step_classes", "spec_decode"))


@pytest.mark.skipif(
    torch.accelerator.device_count() < 2,
    reason="tensor parallelism needs two CUDA devices",
)
def test_tensor_parallel_matches_single_gpu(results_dir):
    """TP=2 against TP=1 for BF16 FlashAttention, INT8 and INT8 + DFlash:
    greedy equal except at ties, each rank holding twice the tokens in the
    same KV memory, and INT8 rank 0 running the split-KV and sectioned
    prefill paths."""
    import tp_compare

    report = tp_compare.run(
        tp_compare.parser().parse_args(["--results-dir", str(results_dir / "tp")])
    )
    _assert_passed(
        report, "configs", ("summary", "pool_tokens_per_rank", "path_counter")
    )


def _describe(compiles: list[dict]) -> str:
    """The compiles after ready, each with its arguments' specialisation
    (pytest would shorten the records to a few keys)."""
    return "\n".join(
        f"{e['phase']}: {e['kernel']}[{e.get('args', e['constants'])}]"
        for e in compiles
    )


def _describe_torch(compiles: list[dict]) -> str:
    """torch.compile's compiles after ready, each with the vLLM function that
    triggered it and its duration."""
    return "\n".join(
        f"{e['phase']}: {e['caller']} (Dynamo {e['compile_id']}, {e['s']} s)"
        for e in compiles
    )


def test_no_attention_compile_after_ready(results_dir):
    """A decoding request meets another request's first prefill chunks (mixed
    steps, the last one short enough for the decode path), after a first long
    prefill over cached context: with CUDA graphs on, none of it compiles an
    attention kernel once the engine is ready."""
    import step_profile

    b_prompt = 8 * 2047 + 5  # 2,048-token steps with one decode row
    assert (
        step_profile.main(
            [
                "--results-dir",
                str(results_dir),
                "--kv",
                "int8-triton",
                "--context",
                "32768",
                "--concurrent",
                "32768",
                str(b_prompt),
                "--decode-steps",
                "8",
                "--profile-steps",
                "2",
                "--label",
                "_no_compile",
            ]
        )
        == 0
    )
    report = json.loads((results_dir / "step_profile_no_compile.json").read_text())
    run = report["runs"]["int8-triton"]
    assert "error" not in run, run
    # Upstream's own kernels included: _compute_slot_mapping_kernel and the
    # GDN _fused_post_conv_kernel compiled here before commits 0010 and 0011.
    compiles = run["jit_after_ready"]
    assert not compiles, _describe(compiles)


@pytest.mark.parametrize("kv", ["int8-triton", "bf16-fa"])
@pytest.mark.parametrize("spec", ["dflash", "ngram"])
def test_no_spec_decode_compile_after_ready(results_dir, spec, kv):
    """With a DFlash drafter or ngram prompt lookup and CUDA graphs, for INT8
    and BF16 caches: the first request's prefill and verify steps, and a
    second request arriving while it decodes, compile no kernel once the
    engine is ready (before commit 0010, vLLM's JIT monitor listed 12 with
    DFlash; with ngram, steps without drafts compiled the Gated DeltaNet
    decode kernels), and no torch.compile graph either (before 0010, the
    computed-token correction recompiled in the first mixed steps).  One
    engine per case, so that each GPU-suite stage starts at most two
    engines."""
    import step_profile

    label = f"_spec_no_compile_{spec}_{kv}"
    args = ["--results-dir", str(results_dir), "--kv", kv, "--spec", spec]
    args += ["--context", "8192", "--concurrent", "8192", "4096"]
    args += ["--decode-steps", "8", "--profile-steps", "2"]
    assert step_profile.main([*args, "--label", label]) == 0
    path = results_dir / f"step_profile{label}.json"
    run = json.loads(path.read_text())["runs"][kv]
    assert "error" not in run, run
    compiles = run["jit_after_ready"]
    assert not compiles, f"{kv}: {_describe(compiles)}"
    # torch.compile's graphs stall steps as well, and vLLM's JIT monitor does
    # not see them: the computed-token correction of asynchronous speculative
    # decoding recompiled at each batch-size change between 1 and more.
    torch_compiles = run["torch_compiles_after_ready"]
    assert not torch_compiles, f"{kv}: {_describe_torch(torch_compiles)}"
