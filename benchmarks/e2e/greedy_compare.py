# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Greedy generation: INT8 per-token-head KV cache against BF16, with DFlash.

Runs the tiny random Qwen3.5 model (benchmarks/models/make_hybrid_model.py)
greedily in these configurations, each in its own process:

- ``bf16-fa``: BF16 KV, FLASH_ATTN (the reference);
- ``bf16-triton``: BF16 KV, TRITON_ATTN;
- ``int8-triton``: ``int8_per_token_head`` KV, TRITON_ATTN;

and each again with the DFlash drafter.  Prompts of several lengths run one
at a time and then together (a batch of mixed lengths), with chunked prefill
on (``--max-num-batched-tokens`` smaller than the long prompts).

For each pair it reports the first divergent step of every prompt and, at
that step, both runs' logprobs of the two competing tokens: a divergence
where the reference run's margin between them is within rounding is a tie,
anything else is a bug.  Speculative greedy is compared with non-speculative
greedy on the same KV dtype, and DFlash acceptance (vLLM's spec-decode
metrics) is reported per KV dtype.  With a random drafter acceptance is near
zero; it is reported, not judged.

``--successor`` runs the successor test model instead (see spec_accept.py):
its greedy choices have top-2 margins of 5-25 nats.  On the random model
most margins are within a few BF16 steps, and a speculative run computes
the same tokens in other shapes (verify batches through every GEMM, the
GDN layers' speculative path, other attention kernels, other chunk
boundaries in a batch): rounding that moves a logit by 0.3-1 nat, which
the random model's flat margins turn into divergences that are not ties.
Speculative-vs-plain comparisons are only meaningful on the successor
model.

Example (on a GPU)::

    python benchmarks/e2e/greedy_compare.py --results-dir benchmarks/results/e2e
"""

import argparse
import os
import sys

from e2e_common import (
    KV_CONFIGS,
    count_attention_paths_in_workers,
    drop_scale_views,
    engine_kwargs,
    engine_settings,
    ensure_models,
    ensure_successor_model,
    first_divergence,
    kv_cache_report,
    log,
    make_prompts,
    maybe_run_worker,
    model_vocab_size,
    provenance,
    read_path_counter,
    read_worker_path_counters,
    save_json,
    script_parser,
    spawn_all,
    spec_decode_stats,
)

# Prompt lengths: shorter than one block, one chunk, several chunks, and
# past the drafter's 2,048-token window.
PROMPT_LENGTHS = [5, 100, 700, 2500, 4000]
# Logits come out of the output head in BF16; with the generator's logit std
# of 6 the top logits lie around 16-32, where one BF16 step is 0.125 nats.
# A reference margin of at most two steps is a tie within rounding.
TIE_NATS = 0.25


def worker(cfg: dict) -> dict:
    """Child process: one engine, singles then the mixed batch."""
    from vllm import LLM, SamplingParams

    llm = LLM(**engine_kwargs(cfg))
    tp = cfg.get("tensor_parallel_size", 1)
    if tp > 1:
        count_attention_paths_in_workers(llm)

    def launches() -> dict[str, int]:
        counts = read_worker_path_counters(llm)[0] if tp > 1 else read_path_counter()
        return counts or {}

    # Launches of the engine's own warm-up (every decode query length, ...)
    # are not the requests'.
    at_ready = launches()
    if cfg.get("drop_scale_views"):
        log(f"dropped scale views of {drop_scale_views(llm)} attention impls")
    params = SamplingParams(
        temperature=0.0,
        max_tokens=cfg["max_tokens"],
        logprobs=cfg.get("logprobs", 20),
        ignore_eos=True,
    )
    prompts = [{"prompt_token_ids": p} for p in cfg["prompts"]]
    runs = {}
    for mode in cfg.get("modes", ["single", "batch"]):
        if mode == "single":
            outs = [llm.generate([p], params, use_tqdm=False)[0] for p in prompts]
        else:
            outs = llm.generate(prompts, params, use_tqdm=False)
        runs[mode] = [
            {
                "tokens": list(o.outputs[0].token_ids),
                # Top-k logprobs per step, token id -> logprob.
                "logprobs": [
                    {str(t): lp.logprob for t, lp in step.items()}
                    for step in (o.outputs[0].logprobs or [])
                ],
            }
            for o in outs
        ]
        log(f"{cfg['name']}: {mode} done")
    return {
        "name": cfg["name"],
        "runs": runs,
        "spec_decode": spec_decode_stats(llm)
        if cfg.get("drafter") or cfg.get("speculative_config")
        else None,
        # Launches during the requests (rank 0 under tensor parallelism).
        "path_counter": {
            k: v - at_ready.get(k, 0)
            for k, v in launches().items()
            if v > at_ready.get(k, 0)
        },
        "path_counter_warmup": at_ready,
        "kv_cache": kv_cache_report(llm),
        "provenance": provenance(),
    }


def compare(ref: dict, other: dict, tie_nats: float = TIE_NATS) -> dict:
    """Per-prompt first divergence of ``other`` against ``ref``."""
    result = {}
    for mode, ref_runs in ref["runs"].items():
        rows = []
        for i, (a, b) in enumerate(zip(ref_runs, other["runs"].get(mode, []))):
            step = first_divergence(a["tokens"], b["tokens"])
            row: dict = {"prompt": i, "first_divergence": step}
            if step is not None and step < min(len(a["tokens"]), len(b["tokens"])):
                ta, tb = str(a["tokens"][step]), str(b["tokens"][step])
                la, lb = a["logprobs"][step], b["logprobs"][step]
                # None: the token was not in that run's top-k logprobs.
                row["tokens"] = [int(ta), int(tb)]
                row["ref_logprobs"] = [la.get(ta), la.get(tb)]
                row["other_logprobs"] = [lb.get(ta), lb.get(tb)]
                margin = None if la.get(tb) is None else la[ta] - la[tb]
                row["ref_margin"] = margin
                row["tie"] = margin is not None and margin <= tie_nats
            rows.append(row)
        result[mode] = rows
    return result


def summarize(comparison: dict) -> dict:
    rows = [r for mode in comparison.values() for r in mode]
    diverged = [r for r in rows if r["first_divergence"] is not None]
    return {
        "prompts": len(rows),
        "identical": len(rows) - len(diverged),
        "ties": sum(bool(r.get("tie")) for r in diverged),
        "non_ties": sum(not r.get("tie") for r in diverged),
    }


def plot(path: str, comparisons: dict, max_tokens: int) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: no plot")
        return
    names = list(comparisons)
    fig, ax = plt.subplots(figsize=(10, 0.5 + 0.4 * len(names)))
    for y, name in enumerate(names):
        for mode, rows in comparisons[name].items():
            xs = [
                max_tokens if r["first_divergence"] is None else r["first_divergence"]
                for r in rows
            ]
            ax.scatter(xs, [y] * len(xs), marker="o" if mode == "single" else "x")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel(f"first divergent step ({max_tokens} = identical)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    log(f"wrote {path}")


def models(args: argparse.Namespace) -> tuple[str, str]:
    """Target and drafter folders: the given ones, or the preset's (random
    or, with ``--successor``, the successor model), written if missing."""
    if not args.successor:
        return ensure_models(
            args.model, args.drafter, "tiny", args.results_dir, args.load_format
        )
    model = ensure_successor_model(
        args.model, args.results_dir, drafter=True, load_format=args.load_format
    )
    return model, args.drafter or f"{model.rstrip('/')}-dflash"


def run(args: argparse.Namespace) -> dict:
    model, drafter = models(args)
    prompts = make_prompts(args.prompt_lengths, model_vocab_size(model), seed=0)
    base = {
        "model": model,
        "prompts": prompts,
        "max_tokens": args.max_tokens,
        "max_model_len": max(args.prompt_lengths) + args.max_tokens + 64,
        "enforce_eager": not args.cuda_graphs,
        "num_spec_tokens": args.num_spec_tokens,
        **engine_settings(args),
    }
    names = []
    for kv in args.kv:
        names.append(kv)
        if not args.no_dflash:
            names.append(f"{kv}+dflash")
    cfgs = []
    for name in names:
        kv, _, spec = name.partition("+")
        cfgs.append(dict(base, name=name, kv=kv, drafter=drafter if spec else None))
    results = spawn_all(os.path.abspath(__file__), cfgs, args.parallel)

    pairs = [
        ("bf16-fa", "bf16-triton"),
        ("bf16-fa", "int8-triton"),
        ("bf16-triton", "int8-triton"),
    ]
    pairs += [(kv, f"{kv}+dflash") for kv in args.kv]
    if not args.no_dflash:
        pairs += [
            ("bf16-fa+dflash", "int8-triton+dflash"),
            ("bf16-triton+dflash", "int8-triton+dflash"),
        ]
    comparisons, summary = {}, {}
    for ref, other in pairs:
        if ref in results and other in results:
            key = f"{other} vs {ref}"
            comparisons[key] = compare(results[ref], results[other], args.tie_nats)
            summary[key] = summarize(comparisons[key])
            log(f"{key}: {summary[key]}")
    report = {
        "model": "successor" if args.successor else "random",
        "prompt_lengths": args.prompt_lengths,
        "max_tokens": args.max_tokens,
        "tie_nats": args.tie_nats,
        "summary": summary,
        "comparisons": comparisons,
        "spec_decode": {n: r["spec_decode"] for n, r in results.items()},
        "path_counter": {n: r["path_counter"] for n, r in results.items()},
        "kv_cache": {n: r.get("kv_cache") for n, r in results.items()},
        "provenance": {n: r["provenance"] for n, r in results.items()},
        "tokens": {n: r["runs"] for n, r in results.items()},
    }
    save_json(os.path.join(args.results_dir, "greedy_compare.json"), report)
    plot(
        os.path.join(args.results_dir, "greedy_compare.png"),
        comparisons,
        args.max_tokens,
    )
    return report


def parser() -> argparse.ArgumentParser:
    p = script_parser(
        __doc__,
        model_help="tiny target folder (default: write one)",
        max_num_batched_tokens=512,
    )
    p.add_argument("--kv", nargs="+", default=list(KV_CONFIGS), choices=KV_CONFIGS)
    p.add_argument("--no-dflash", action="store_true")
    p.add_argument("--prompt-lengths", type=int, nargs="+", default=PROMPT_LENGTHS)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--num-spec-tokens", type=int, default=5)
    p.add_argument(
        "--tie-nats",
        type=float,
        default=TIE_NATS,
        help="a divergence is a tie when the reference's margin is at most this",
    )
    p.add_argument(
        "--cuda-graphs", action="store_true", help="do not pass enforce_eager"
    )
    p.add_argument(
        "--successor",
        action="store_true",
        help="run the successor test model (confident greedy choices) instead "
        "of the random one",
    )
    p.add_argument(
        "--parallel",
        type=int,
        default=1,
        help="engines run at once on the GPU (give each a share with "
        "--kv-cache-memory-gib and a small --gpu-memory-utilization)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    report = run(args)
    non_ties = sum(s["non_ties"] for s in report["summary"].values())
    log(f"divergences that are not ties: {non_ties}")
    return 1 if non_ties else 0


if __name__ == "__main__":
    maybe_run_worker(worker)
    sys.exit(main())
