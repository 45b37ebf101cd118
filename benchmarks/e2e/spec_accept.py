# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Speculative decoding that accepts drafts, on the INT8 and BF16 caches.

A random DFlash drafter never agrees with a random target, so acceptance is
zero and the accept / partial-accept / reject paths never run.  Here the
drafter is vLLM's ``ngram`` prompt lookup and the target is a "successor"
test model (``make_hybrid_model.py --successor-logit``): its output head
maps every token to a fixed successor, the successors form cycles of known
lengths, and each layer still shifts the logits by a few nats.  Greedy
decoding follows the cycle of the last prompt token, so once one cycle has
been generated the prompt lookup finds it and the target accepts the drafts.

Each prompt ends in a token of a cycle of a chosen length.  For cycles of 8
tokens or more the prompt also holds "traps": runs of 2-7 tokens of that
cycle followed by a wrong token.  Prompt lookup takes the earliest of the
longest matches, so it proposes a trap's continuation whenever the context
ends inside one: some drafts are accepted, then the wrong one is rejected.
Cycles shorter than the number of drafted tokens give shorter drafts when
first found, hence verify steps of several query lengths.

For each KV configuration (``--kv``) one engine generates greedily without
speculation and one with ngram speculation (eager, in-process engine core,
each in its own process).  Reported and checked:

- acceptance from vLLM's own spec-decode metrics, and how many verify steps
  accepted all ``k`` drafts, some of them, or none (from the per-position
  accepted counts); alongside, what prompt lookup would have accepted on
  the plain run's own tokens (an independent prediction);
- speculative greedy against plain greedy on the same KV dtype: the first
  divergent step of each prompt and the plain run's top-2 margin there (a
  tie when within ``--tie-nats``), and divergences per 1,000 tokens;
- at every step both runs agree on, the change of the top-2 margin between
  them ("margin drift"), by the kind of step that produced the token: on
  INT8 it may exceed BF16's by no more than the drift between the INT8 and
  BF16 plain runs (what the quantised cache itself does);
- the plain run's top-1 margin distribution (how often ties can happen);
- with the fork's INT8 path, how many split-KV launches ran at each query
  length (verify steps of 1 + drafted tokens).

    python benchmarks/e2e/spec_accept.py --results-dir results/e2e
"""

import argparse
import json
import os
import random
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

from e2e_common import (
    KV_CONFIGS,
    engine_settings,
    ensure_successor_model,
    finish_report,
    log,
    make_hybrid_model,
    maybe_run_worker,
    save_json,
    script_parser,
    spawn_all,
)
from greedy_compare import TIE_NATS, compare, summarize
from greedy_compare import worker as greedy_worker

NUM_SPEC_TOKENS = 5
PROMPT_LOOKUP = (2, 4)  # prompt_lookup_min, prompt_lookup_max
CYCLES = (2, 3, 4, 6, 8, 12, 16, 24, 32, 48)
# Trap lengths (cycle tokens before the wrong one), for cycles of 8 or more.
TRAPS = (2, 2, 3, 4, 4, 4, 5, 6, 7)
MIN_TRAP_CYCLE = 8


def cycle_of(succ: list[int], token: int) -> list[int]:
    """The successor cycle that starts at ``token``."""
    cycle, t = [token], succ[token]
    while t != token:
        cycle.append(t)
        t = succ[t]
    return cycle


def make_prompts(
    succ: list[int],
    vocab: int,
    cycles: tuple[int, ...],
    seed: int,
    block_tokens: int = 32,
) -> list[list[int]]:
    """One prompt per cycle length: random tokens, traps, the start token.

    Args:
        succ: Successor of every token (``successor.json``).
        vocab: Prompts draw their random tokens from ``[0, vocab)``.
        cycles: Cycle length of each prompt's last token.
        seed: Seed of the random tokens and trap positions.
        block_tokens: Random tokens before the traps and 8 after them.

    """
    rng = random.Random(seed)
    starts: dict[int, int] = {}
    for t in range(vocab):
        starts.setdefault(len(cycle_of(succ, t)), t)
    prompts = []
    for length in cycles:
        if length not in starts:
            raise ValueError(f"the model has no successor cycle of length {length}")
        cycle = cycle_of(succ, starts[length])
        prompt = [rng.randrange(vocab) for _ in range(block_tokens)]
        if length >= MIN_TRAP_CYCLE:
            for run in TRAPS:
                at = rng.randrange(length)
                prompt += [cycle[(at + i) % length] for i in range(run)]
                wrong = succ[prompt[-1]]
                while wrong == succ[prompt[-1]]:
                    wrong = rng.randrange(vocab)
                prompt += [wrong] + [rng.randrange(vocab) for _ in range(3)]
        prompt += [rng.randrange(vocab) for _ in range(8)] + [cycle[0]]
        prompts.append(prompt)
    return prompts


def lookup(context: list[int], k: int, n_min: int, n_max: int) -> list[int]:
    """Prompt lookup as vLLM's ngram proposer does it: the earliest
    occurrence of the longest suffix n-gram (``n_min..n_max``) before the
    suffix itself, and up to ``k`` tokens after it."""
    for n in range(min(n_max, len(context) - 1), n_min - 1, -1):
        suffix = context[-n:]
        for i in range(len(context) - n):
            if context[i : i + n] == suffix:
                return context[i + n : i + n + k]
    return []


def replay(
    prompt: list[int], tokens: list[int], k: int, n_min: int, n_max: int
) -> Iterator[tuple[list[int], int]]:
    """The speculative steps that vLLM's prompt lookup takes on a greedy
    run's own tokens: ``(draft, accepted drafts)`` per step after the
    prefill's (which samples the first token, with no draft)."""
    done = 1
    while done < len(tokens):
        draft = lookup(prompt + tokens[:done], k, n_min, n_max)
        truth = tokens[done : done + len(draft)]
        accepted = 0
        while accepted < len(truth) and draft[accepted] == truth[accepted]:
            accepted += 1
        yield draft, accepted
        done += accepted + 1


def step_kind(draft: list[int], accepted: int, k: int) -> str:
    """``no-draft``, or a verify step that accepted all ``k`` drafts
    (``full``), some (``partial``) or none (``reject``)."""
    if not draft:
        return "no-draft"
    return "full" if accepted == k else "partial" if accepted else "reject"


def predict(
    prompt: list[int], tokens: list[int], k: int, n_min: int, n_max: int
) -> dict[str, int]:
    """Prompt lookup replayed on a greedy run's own tokens.

    Returns drafted and accepted tokens and the verify steps that accepted
    all ``k`` drafts, some, or none (steps without a draft are not verify
    steps).
    """
    out = {"drafted": 0, "accepted": 0, "full": 0, "partial": 0, "reject": 0}
    for draft, accepted in replay(prompt, tokens, k, n_min, n_max):
        if draft:
            out["drafted"] += len(draft)
            out["accepted"] += accepted
            out[step_kind(draft, accepted, k)] += 1
    return out


def step_classes(stats: dict, num_spec_tokens: int) -> dict[str, int]:
    """Verify steps that accepted all ``k`` drafts, some, or none.

    ``accepted_per_pos[i]`` counts the steps whose draft token ``i`` was
    accepted (so also every token before it): steps with at least one
    accepted token are ``accepted_per_pos[0]``, steps with all of them the
    last entry.  A shorter draft accepted whole counts as partial.
    """
    per_pos = stats.get("accepted_per_pos") or [0] * num_spec_tokens
    drafts = int(stats.get("num_drafts", 0))
    some, every = int(per_pos[0]), int(per_pos[num_spec_tokens - 1])
    return {"full": every, "partial": some - every, "reject": drafts - some}


def _margins(step: dict) -> float | None:
    top = sorted(step.values(), reverse=True)
    return top[0] - top[1] if len(top) >= 2 else None


def margin_stats(runs: dict) -> dict[str, float]:
    """Top-1 minus top-2 logprob of every generated step of a plain run."""
    margins = [
        m
        for rows in runs.values()
        for row in rows
        for m in map(_margins, row["logprobs"])
        if m is not None
    ]
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


def _drifts(a: dict, b: dict) -> Iterator[tuple[int, float]]:
    """``(step, |top-2 margin of a - that of b|)`` for the steps of two runs
    of one prompt before their first divergence."""
    steps = zip(a["tokens"], b["tokens"], a["logprobs"], b["logprobs"])
    for i, (ta, tb, la, lb) in enumerate(steps):
        if ta != tb:
            return
        ma, mb = _margins(la), _margins(lb)
        if ma is not None and mb is not None:
            yield i, abs(ma - mb)


def _spread(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {
        "p50": values[len(values) // 2],
        "p99": values[min(len(values) - 1, int(0.99 * len(values)))],
        "max": values[-1],
    }


def margin_drift(ref: dict, other: dict) -> dict[str, float]:
    """How much the top-2 margin moves between two runs, over the steps
    before each prompt's first divergence."""
    drift = [
        d
        for mode, rows in ref["runs"].items()
        for a, b in zip(rows, other["runs"].get(mode, []))
        for _, d in _drifts(a, b)
    ]
    return {"steps": len(drift), **_spread(drift)} if drift else {"steps": 0}


def drift_within(ours: dict, ref: dict, slack: float) -> bool:
    """``ours`` (a :func:`margin_drift`) exceeds ``ref`` by at most
    ``slack`` nats at the median, the 99th percentile and the maximum."""
    return all(
        ours.get(q, 0.0) <= ref.get(q, 0.0) + slack for q in ("p50", "p99", "max")
    )


def drift_by_step(
    prompts: list[list[int]], plain: dict, spec: dict, k: int, n_min: int, n_max: int
) -> dict[str, dict[str, float]]:
    """Margin drift by where a token came from in the speculative run.

    The speculative run's steps are replayed with :func:`replay` on the
    plain run's tokens (vLLM's rule, so the same steps as long as both runs
    agree).  Each generated token is labelled by the kind of step that
    produced it (``prefill``, or a :func:`step_kind`) and whether it was an
    accepted draft or the step's own sampled token (``accepted`` /
    ``sampled``).
    """
    groups: dict[str, list[float]] = {}
    for mode, rows in plain["runs"].items():
        for prompt, a, b in zip(prompts, rows, spec["runs"].get(mode, [])):
            labels = ["prefill sampled"]
            for draft, n in replay(prompt, a["tokens"], k, n_min, n_max):
                kind = step_kind(draft, n, k)
                labels += [f"{kind} accepted"] * n + [f"{kind} sampled"]
            for i, d in _drifts(a, b):
                groups.setdefault(labels[i], []).append(d)
    return {
        label: {"tokens": len(drift), **_spread(drift)}
        for label, drift in sorted(groups.items())
    }


def run(args: argparse.Namespace) -> dict:
    model = ensure_successor_model(
        args.model, args.results_dir, load_format=args.load_format
    )
    info = json.loads(Path(model, "successor.json").read_text())
    vocab = make_hybrid_model.prompt_vocab_size(len(info["successor"]))
    prompts = make_prompts(info["successor"], vocab, tuple(args.cycles), seed=5)
    n_min, n_max = PROMPT_LOOKUP
    spec_config = {
        "method": "ngram",
        "num_speculative_tokens": args.num_spec_tokens,
        "prompt_lookup_min": n_min,
        "prompt_lookup_max": n_max,
    }
    base = {
        "model": model,
        "prompts": prompts,
        "max_tokens": args.max_tokens,
        "max_model_len": max(map(len, prompts)) + args.max_tokens + 64,
        "enforce_eager": True,
        "modes": ["single", "batch"],
        "logprobs": 2,
        **engine_settings(args),
    }
    cfgs = [
        dict(
            base,
            name=kv + ("+ngram" if spec else ""),
            kv=kv,
            speculative_config=spec,
        )
        for kv in args.kv
        for spec in (None, spec_config)
    ]
    results = spawn_all(os.path.abspath(__file__), cfgs, args.parallel)
    save_json(
        os.path.join(args.results_dir, "spec_accept_runs.json"),
        {
            "model": info | {"successor": None},
            "prompts": prompts,
            "results": {
                name: {k: v for k, v in r.items() if k != "provenance"}
                for name, r in results.items()
            },
        },
    )
    return build_report(info, prompts, results, args)


def attention_block_sizes(result: dict) -> list[int]:
    """Tokens per block of the attention layers' KV-cache groups in one
    engine run (every worker), from its ``kv_cache`` report."""
    return sorted(
        {
            group["block_size"]
            for worker in result.get("kv_cache") or []
            for group in worker["groups"]
            if group["attention"]
        }
    )


def build_report(
    info: dict, prompts: list[list[int]], results: dict, args: argparse.Namespace
) -> dict:
    """Checks and statistics of the engine runs (``results`` by config name:
    ``<kv>`` and ``<kv>+ngram``); also written to ``spec_accept.json``."""
    n_min, n_max = PROMPT_LOOKUP
    report: dict = {"model": info | {"successor": None}, "runs": {}, "checks": {}}
    for kv in args.kv:
        plain, spec = results[kv], results[f"{kv}+ngram"]
        summary = summarize(compare(plain, spec, args.tie_nats))
        tokens = sum(len(r["tokens"]) for rows in spec["runs"].values() for r in rows)
        stats = spec["spec_decode"] or {}
        classes = step_classes(stats, args.num_spec_tokens)
        predicted: dict[str, int] = {}
        for rows in plain["runs"].values():
            for prompt, row in zip(prompts, rows):
                p = predict(prompt, row["tokens"], args.num_spec_tokens, n_min, n_max)
                for key, value in p.items():
                    predicted[key] = predicted.get(key, 0) + value
        counts = spec["path_counter"] or {}
        verify_lengths = {
            int(k.removeprefix("split_kv_q")): v
            for k, v in counts.items()
            if k.startswith("split_kv_q")
        }
        drift = margin_drift(plain, spec)
        report["runs"][kv] = {
            "attention_block_sizes": attention_block_sizes(spec),
            "summary": summary,
            "divergences_per_1000_tokens": 1000 * summary["ties"] / max(tokens, 1),
            "spec_decode": stats,
            "step_classes": classes,
            "predicted_from_plain_tokens": predicted,
            "split_kv_launches_by_query_len": dict(sorted(verify_lengths.items())),
            "plain_top1_margin": margin_stats(plain["runs"]),
            "margin_drift_spec_vs_plain": drift,
            "margin_drift_by_step": drift_by_step(
                prompts, plain, spec, args.num_spec_tokens, n_min, n_max
            ),
            "comparison": compare(plain, spec, args.tie_nats),
        }
        checks = {
            "acceptance_at_least_half": stats.get("acceptance_rate", 0.0) >= 0.5,
            "each_step_class_seen": min(classes.values()) >= args.min_steps,
            "no_divergence_but_ties": summary["non_ties"] == 0,
            "ties_per_1000_tokens_within_limit": 1000 * summary["ties"] / max(tokens, 1)
            <= args.max_ties_per_1000,
        }
        if kv == "int8-triton":
            checks["several_verify_lengths"] = (
                len([q for q in verify_lengths if q > 1]) >= 3
            )
        report["checks"][kv] = checks
        log(
            f"{kv}: acceptance {stats.get('acceptance_rate', 0):.2f} (predicted "
            f"{predicted.get('accepted', 0) / max(predicted.get('drafted', 1), 1):.2f})"
            f", classes {classes}, verify lengths {verify_lengths}, {summary}, "
            f"drift {drift}"
        )
    if "int8-triton" in results and "bf16-triton" in results:
        # The INT8 cache may add its own rounding (the plain INT8 run's drift
        # against plain BF16) to what speculation does to BF16, no more.
        cross = margin_drift(results["bf16-triton"], results["int8-triton"])
        report["margin_drift_int8_vs_bf16_plain"] = cross
        ours = report["runs"]["int8-triton"]["margin_drift_spec_vs_plain"]
        ref = report["runs"]["bf16-triton"]["margin_drift_spec_vs_plain"]
        slack = cross.get("max", 0.0)
        report["checks"]["int8-triton"]["margin_drift_within_bf16_plus_int8"] = (
            drift_within(ours, ref, slack)
        )
    rows = [
        f"{'kv':<14}{'accept':>8}{'full':>6}{'part':>6}{'rej':>6}{'div':>5}"
        f"{'drift':>7}  verify q: launches"
    ]
    for kv, r in report["runs"].items():
        c = r["step_classes"]
        rows.append(
            f"{kv:<14}{r['spec_decode'].get('acceptance_rate', 0):>8.2f}"
            f"{c['full']:>6}{c['partial']:>6}{c['reject']:>6}"
            f"{r['summary']['prompts'] - r['summary']['identical']:>5}"
            f"{r['margin_drift_spec_vs_plain'].get('max', 0):>7.2f}  "
            f"{r['split_kv_launches_by_query_len']}"
        )
    return finish_report(
        report, os.path.join(args.results_dir, "spec_accept.json"), rows
    )


def parser() -> argparse.ArgumentParser:
    p = script_parser(
        __doc__,
        model_help="successor model folder (default: write one)",
        max_num_batched_tokens=512,
        gpu_memory_utilization=0.1,
        drafter=False,
    )
    # Four engines side by side fit a 16 GB GPU.
    p.set_defaults(kv_cache_memory_gib=1.0)
    p.add_argument(
        "--kv",
        nargs="+",
        default=["int8-triton", "bf16-triton"],
        choices=list(KV_CONFIGS),
    )
    p.add_argument(
        "--cycles",
        type=int,
        nargs="+",
        default=list(CYCLES),
        help="successor cycle length of each prompt's last token",
    )
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
    p.add_argument(
        "--from-runs",
        help="recompute the report from a saved spec_accept_runs.json (no GPU)",
    )
    p.add_argument(
        "--parallel",
        type=int,
        default=4,
        help="engines run at once on the GPU (each with its own KV-cache share)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.from_runs:
        with open(args.from_runs) as f:
            saved = json.load(f)
        report = build_report(saved["model"], saved["prompts"], saved["results"], args)
    else:
        report = run(args)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    maybe_run_worker(greedy_worker)
    sys.exit(main())
