# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Speculative decoding that accepts drafts, on the INT8 and BF16 caches.

A random DFlash drafter never agrees with a random target, so acceptance is
zero and the accept / partial-accept / reject paths never run.  Here the
drafter is vLLM's ``ngram`` prompt lookup: greedy decoding of the random
test model falls into repeated cycles, and prompts that are one random block
repeated several times give it n-grams to find from the first step.

For each KV configuration (``--kv``) one engine generates greedily without
speculation and one with ngram speculation (eager, in-process engine core,
each in its own process).  Reported and checked:

- acceptance from vLLM's own spec-decode metrics, and how many verify steps
  accepted every draft, some of them, or none (from the per-position
  accepted counts);
- speculative greedy against plain greedy on the same KV dtype: the first
  divergent step of each prompt and the plain run's top-2 margin there (a
  tie when within ``--tie-nats``), and divergences per 1,000 tokens;
- the plain run's top-1 margin distribution (how often ties can happen);
- with the fork's INT8 path, how many split-KV launches ran at each query
  length (verify steps of 1 + drafted tokens).

    python benchmarks/e2e/spec_accept.py --results-dir results/e2e
"""

import argparse
import os
import statistics
import sys

from e2e_common import (
    engine_settings,
    ensure_models,
    log,
    make_prompts,
    maybe_run_worker,
    model_vocab_size,
    save_json,
    script_parser,
    spawn,
)
from greedy_compare import TIE_NATS, compare, summarize
from greedy_compare import worker as greedy_worker

NUM_SPEC_TOKENS = 4


def step_classes(stats: dict, num_spec_tokens: int) -> dict[str, int]:
    """Verify steps that accepted every draft, some, or none.

    ``accepted_per_pos[i]`` counts the steps whose draft token ``i`` was
    accepted (so also every token before it): steps with at least one
    accepted token are ``accepted_per_pos[0]``, steps with all of them the
    last entry.
    """
    per_pos = stats.get("accepted_per_pos") or [0] * num_spec_tokens
    drafts = int(stats.get("num_drafts", 0))
    some, every = int(per_pos[0]), int(per_pos[num_spec_tokens - 1])
    return {"full": every, "partial": some - every, "reject": drafts - some}


def margin_stats(runs: dict) -> dict[str, float]:
    """Top-1 minus top-2 logprob of every generated step of a plain run."""
    margins = []
    for rows in runs.values():
        for row in rows:
            for step in row["logprobs"]:
                top = sorted(step.values(), reverse=True)
                if len(top) >= 2:
                    margins.append(top[0] - top[1])
    if not margins:
        return {"steps": 0}
    q = statistics.quantiles(margins, n=100) if len(margins) > 1 else margins * 99
    return {
        "steps": len(margins),
        "p1": q[0],
        "p10": q[9],
        "p50": q[49],
        "below_tie_fraction": sum(m <= TIE_NATS for m in margins) / len(margins),
    }


def run(args: argparse.Namespace) -> dict:
    model, _ = ensure_models(args.model, None, "tiny", args.results_dir)
    vocab = model_vocab_size(model)
    blocks = make_prompts([args.block_tokens] * args.prompts, vocab, seed=5)
    prompts = [b * args.repeats for b in blocks]
    spec_config = {
        "method": "ngram",
        "num_speculative_tokens": args.num_spec_tokens,
        "prompt_lookup_max": 4,
        "prompt_lookup_min": 2,
    }
    base = {
        "model": model,
        "prompts": prompts,
        "max_tokens": args.max_tokens,
        "max_model_len": args.block_tokens * args.repeats + args.max_tokens + 64,
        "enforce_eager": True,
        "modes": ["single", "batch"],
        "logprobs": 2,
        **engine_settings(args),
    }
    results, report = {}, {"runs": {}, "checks": {}}
    for kv in args.kv:
        for spec in (None, spec_config):
            name = kv + ("+ngram" if spec else "")
            cfg = dict(base, name=name, kv=kv, speculative_config=spec)
            results[name] = spawn(os.path.abspath(__file__), cfg)
    for kv in args.kv:
        plain, spec = results[kv], results[f"{kv}+ngram"]
        comparison = compare(plain, spec, args.tie_nats)
        summary = summarize(comparison)
        tokens = sum(len(r["tokens"]) for rows in spec["runs"].values() for r in rows)
        stats = spec["spec_decode"] or {}
        classes = step_classes(stats, args.num_spec_tokens)
        counts = spec["path_counter"] or {}
        verify_lengths = {
            int(k.removeprefix("split_kv_q")): v
            for k, v in counts.items()
            if k.startswith("split_kv_q")
        }
        report["runs"][kv] = {
            "summary": summary,
            "divergences_per_1000_tokens": 1000 * summary["ties"] / max(tokens, 1),
            "spec_decode": stats,
            "step_classes": classes,
            "split_kv_launches_by_query_len": verify_lengths,
            "plain_top1_margin": margin_stats(plain["runs"]),
            "comparison": comparison,
        }
        report["checks"][kv] = {
            "acceptance_at_least_half": stats.get("acceptance_rate", 0.0) >= 0.5,
            "each_step_class_seen": min(classes.values()) >= args.min_steps,
            "no_divergence_but_ties": summary["non_ties"] == 0,
            "ties_per_1000_tokens_within_limit": 1000 * summary["ties"] / max(tokens, 1)
            <= args.max_ties_per_1000,
        }
        if kv == "int8-triton":
            report["checks"][kv]["several_verify_lengths"] = (
                len([q for q in verify_lengths if q > 1]) >= 2
            )
        log(f"{kv}: {report['checks'][kv]}; classes {classes}; {summary}")
    report["passed"] = all(all(c.values()) for c in report["checks"].values())
    save_json(os.path.join(args.results_dir, "spec_accept.json"), report)
    return report


def parser() -> argparse.ArgumentParser:
    p = script_parser(
        __doc__,
        model_help="tiny target folder (default: write one)",
        max_num_batched_tokens=512,
        drafter=False,
    )
    p.add_argument("--kv", nargs="+", default=["int8-triton", "bf16-triton"])
    p.add_argument("--prompts", type=int, default=6)
    p.add_argument("--block-tokens", type=int, default=48)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--num-spec-tokens", type=int, default=NUM_SPEC_TOKENS)
    p.add_argument("--tie-nats", type=float, default=TIE_NATS)
    p.add_argument(
        "--max-ties-per-1000",
        type=float,
        default=2.0,
        help="divergences at ties allowed per 1,000 generated tokens",
    )
    p.add_argument(
        "--min-steps",
        type=int,
        default=10,
        help="full-accept, partial-accept and reject steps each seen this often",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    report = run(parser().parse_args(argv))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    maybe_run_worker(greedy_worker)
    sys.exit(main())
