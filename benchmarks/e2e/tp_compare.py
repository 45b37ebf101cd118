# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Tensor parallelism on the INT8 paths: two GPUs give the output of one.

Under ``--tensor-parallel-size 2`` each rank holds half of the KV heads (2 of
the test model's 4, like Qwen3.5-27B's) and plans its own KV cache, runs the
split-KV kernel, the sectioned prefill and the mixed-step split on its
shard.  For each configuration (BF16 FlashAttention, INT8, INT8 + DFlash)
the successor test model (see spec_accept.py: confident greedy choices
that every layer still shifts by a few nats) generates greedily with TP=1
and with TP=2 (eager engines, run side by side on the GPUs, each with the
same fixed KV-cache memory per GPU, 1 GiB by default).  On the plain
random model even BF16 FlashAttention diverged between TP=1 and TP=2 at a
top-2 margin of 0.375 nats (the all-reduce sums in another order), so that
model cannot tell a bug from rounding.  Reported and checked:

- TP=2 greedy against TP=1 greedy on the same KV dtype: first divergence
  per prompt, a tie when the TP=1 run's top-2 margin there is within
  ``--tie-nats``;
- at every step both agree on, how much the top-2 margin moves between
  TP=1 and TP=2 ("margin drift"): on INT8 no more than on BF16
  FlashAttention plus what the INT8 cache itself adds;
- each rank's KV-cache plan (blocks, bytes, groups, and the tokens an
  attention layer can hold): with half the heads per rank, a rank holds
  about twice the tokens in the same memory;
- on rank 0 of the INT8 engines, the Triton backend's launches per path
  (the split-KV decode and verify kernel and the sectioned prefill ran).

Decode ITL under TP=2 comes from ``serve_bench.py --tensor-parallel-size 2``.

    python benchmarks/e2e/tp_compare.py --results-dir results/e2e
"""

import argparse
import os
import sys

from e2e_common import (
    engine_settings,
    ensure_successor_model,
    finish_report,
    log,
    make_prompts,
    maybe_run_worker,
    model_vocab_size,
    script_parser,
    spawn_all,
)
from greedy_compare import TIE_NATS, compare, summarize
from greedy_compare import worker as greedy_worker
from spec_accept import drift_within, margin_drift

CONFIGS = ("bf16-fa", "int8-triton", "int8-triton+dflash")
# Shorter than a block, one chunk, several chunks (the sectioned prefill).
PROMPT_LENGTHS = (5, 700, 2500, 6000)


def pool_tokens(kv_cache: list[dict]) -> list[int]:
    """Tokens an attention layer can hold, per rank."""
    return [rank["pool_tokens"] for rank in kv_cache]


def run(args: argparse.Namespace) -> dict:
    model = ensure_successor_model(
        args.model, args.results_dir, drafter=True, load_format=args.load_format
    )
    drafter = args.drafter or f"{model.rstrip('/')}-dflash"
    prompts = make_prompts(args.prompt_lengths, model_vocab_size(model), seed=0)
    base = {
        "model": model,
        "prompts": prompts,
        "max_tokens": args.max_tokens,
        "max_model_len": max(args.prompt_lengths) + args.max_tokens + 64,
        "enforce_eager": True,
        "num_spec_tokens": args.num_spec_tokens,
        "logprobs": 2,
        **engine_settings(args),
    }
    cfgs = []
    for name in args.configs:
        kv, _, spec = name.partition("+")
        for tp in (1, 2):
            cfgs.append(
                dict(
                    base,
                    name=f"{name} tp{tp}",
                    kv=kv,
                    drafter=drafter if spec else None,
                    tensor_parallel_size=tp,
                )
            )
    results = spawn_all(os.path.abspath(__file__), cfgs, args.parallel)

    report: dict = {"prompt_lengths": list(args.prompt_lengths), "configs": {}}
    checks: dict = {}
    for name in args.configs:
        one, two = results[f"{name} tp1"], results[f"{name} tp2"]
        comparison = compare(one, two, args.tie_nats)
        summary = summarize(comparison)
        pools = {
            "tp1": pool_tokens(one["kv_cache"]),
            "tp2": pool_tokens(two["kv_cache"]),
        }
        ratio = (
            min(pools["tp2"]) / pools["tp1"][0]
            if pools["tp1"] and pools["tp2"] and pools["tp1"][0]
            else None
        )
        report["configs"][name] = {
            "summary": summary,
            "margin_drift_tp2_vs_tp1": margin_drift(one, two),
            "comparison": comparison,
            "kv_cache": {"tp1": one["kv_cache"], "tp2": two["kv_cache"]},
            "pool_tokens_per_rank": pools,
            "pool_ratio_tp2_per_rank_vs_tp1": ratio,
            "path_counter": {
                "tp1": one["path_counter"],
                "tp2_rank0": two["path_counter"],
            },
            "spec_decode": {"tp1": one["spec_decode"], "tp2": two["spec_decode"]},
        }
        checks[name] = {
            "no_divergence_but_ties": summary["non_ties"] == 0,
            "ranks_hold_twice_the_tokens": ratio is not None and ratio >= 1.9,
        }
        if name.startswith("int8"):
            counts = two["path_counter"] or {}
            checks[name]["tp2_ran_split_kv_and_sectioned_prefill"] = (
                counts.get("split_kv", 0) > 0 and counts.get("sectioned_prefill", 0) > 0
            )
        log(f"{name}: TP2 vs TP1 {summary}, pool per rank {pools}")
    if "bf16-fa" in args.configs:
        ref = report["configs"]["bf16-fa"]["margin_drift_tp2_vs_tp1"]
        for name in args.configs:
            if not name.startswith("int8"):
                continue
            # What the INT8 cache adds at TP=1: its drift against BF16.
            cross = margin_drift(results["bf16-fa tp1"], results[f"{name} tp1"])
            report["configs"][name]["margin_drift_vs_bf16_fa_tp1"] = cross
            ours = report["configs"][name]["margin_drift_tp2_vs_tp1"]
            checks[name]["margin_drift_within_bf16_plus_int8"] = drift_within(
                ours, ref, cross.get("max", 0.0)
            )
    report["checks"] = checks
    rows = [
        f"{'config':<22}{'identical':>10}{'ties':>6}{'other':>7}{'drift p99':>10}"
        f"{'max':>6}  pool tokens/rank"
    ]
    for name, r in report["configs"].items():
        s, d = r["summary"], r["margin_drift_tp2_vs_tp1"]
        rows.append(
            f"{name:<22}{s['identical']:>7}/{s['prompts']:<2}{s['ties']:>6}"
            f"{s['non_ties']:>7}{d.get('p99', 0):>10.2f}{d.get('max', 0):>6.2f}  "
            f"{r['pool_tokens_per_rank']}"
        )
    return finish_report(
        report, os.path.join(args.results_dir, "tp_compare.json"), rows
    )


def parser() -> argparse.ArgumentParser:
    p = script_parser(
        __doc__,
        model_help="successor model folder (default: write one)",
        max_num_batched_tokens=2048,
        gpu_memory_utilization=0.1,
    )
    # Three engines at a time (at most three on the first GPU) fit 16 GB GPUs.
    p.set_defaults(kv_cache_memory_gib=1.0)
    p.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    p.add_argument(
        "--prompt-lengths", type=int, nargs="+", default=list(PROMPT_LENGTHS)
    )
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--num-spec-tokens", type=int, default=5)
    p.add_argument("--tie-nats", type=float, default=TIE_NATS)
    p.add_argument("--parallel", type=int, default=3, help="engines started at once")
    return p


def main(argv: list[str] | None = None) -> int:
    report = run(parser().parse_args(argv))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    maybe_run_worker(greedy_worker)
    sys.exit(main())
