# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Serving speed of one KV configuration on the 27B-geometry model.

Measures, through vLLM's AsyncLLM with streamed outputs (token arrival
times), for contexts of 8K/32K/64K/128K tokens, without and with DFlash:

- TTFT of a single request;
- decode tokens/s and inter-token latency (ITL; with DFlash a step delivers
  several tokens, so ITL is step time divided by tokens delivered);

and the concurrency case: request A (64K prompt) is decoding when request B
(32K prompt) arrives; A's inter-token latency while B prefills and B's TTFT.
``vllm bench latency`` cannot express that arrival pattern, hence AsyncLLM.

One invocation measures one configuration, named by ``--label``.  The
side-by-side comparison is three invocations plus ``--compare``:

    # BF16, FlashAttention
    python benchmarks/e2e/serve_bench.py --label bf16-fa --kv bf16-fa
    # INT8, vLLM 0.26.0's own Triton path: run on the pristine install
    python benchmarks/e2e/serve_bench.py --label int8-upstream --kv int8-triton
    # INT8, the fork: run after overlaying the fork's patches
    python benchmarks/e2e/serve_bench.py --label int8-fork --kv int8-triton
    python benchmarks/e2e/serve_bench.py --compare benchmarks/results/e2e/serve_*.json
"""

import argparse
import asyncio
import glob
import json
import os
import statistics
import sys
import time

from e2e_common import (
    KV_CONFIGS,
    engine_kwargs,
    engine_settings,
    ensure_models,
    log,
    make_prompts,
    maybe_run_worker,
    model_vocab_size,
    provenance,
    read_path_counter,
    save_json,
    script_parser,
    spawn,
)

CONTEXTS = [8192, 32768, 65536, 131072]


async def _stream(
    engine, prompt: list[int], max_tokens: int, rid: str, rec: dict | None = None
) -> dict:
    """Submit one request; return its submit time and token arrival times.

    ``rec`` (filled in as tokens arrive) lets a caller watch a running
    request.
    """
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    params = SamplingParams(
        temperature=0.0,
        max_tokens=max_tokens,
        ignore_eos=True,
        output_kind=RequestOutputKind.DELTA,
    )
    rec = {} if rec is None else rec
    rec.update(submit=time.perf_counter(), arrivals=[])
    async for out in engine.generate({"prompt_token_ids": prompt}, params, rid):
        n = len(out.outputs[0].token_ids)
        if n:
            rec["arrivals"].append((time.perf_counter(), n))
    return rec


def _itl(arrivals: list[tuple[float, int]]) -> list[float]:
    """Per-token latency of every step after the first."""
    return [(t1 - t0) / n for (t0, _), (t1, n) in zip(arrivals, arrivals[1:])]


def _decode_stats(rec: dict) -> dict:
    arr = rec["arrivals"]
    tokens_after_first = sum(n for _, n in arr[1:])
    span = arr[-1][0] - arr[0][0]
    itl = _itl(arr)
    return {
        "ttft_s": arr[0][0] - rec["submit"],
        "decode_tok_s": tokens_after_first / span if span > 0 else None,
        "itl_mean_ms": 1e3 * statistics.fmean(itl) if itl else None,
        "itl_p50_ms": 1e3 * statistics.median(itl) if itl else None,
        "tokens": sum(n for _, n in arr),
    }


async def _measure(cfg: dict) -> dict:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**engine_kwargs(cfg)))
    vocab = model_vocab_size(cfg["model"])
    result: dict = {"single": {}, "concurrent": None}
    try:
        # Warm-up: compile and autotune outside the timed requests.
        warm = make_prompts([1024], vocab, seed=99)[0]
        await _stream(engine, warm, 8, "warmup")
        for ctx in cfg["contexts"]:
            prompt = make_prompts([ctx], vocab, seed=ctx)[0]
            rec = await _stream(engine, prompt, cfg["decode_tokens"], f"single-{ctx}")
            result["single"][str(ctx)] = _decode_stats(rec)
            log(f"{cfg['name']} ctx {ctx}: {result['single'][str(ctx)]}")
        if cfg["concurrent"]:
            a_len, b_len = cfg["concurrent"]
            pa, pb = make_prompts([a_len, b_len], vocab, seed=7)
            live_a: dict = {"arrivals": []}
            task_a = asyncio.create_task(
                _stream(engine, pa, cfg["concurrent_a_tokens"], "A", live_a)
            )
            # Let A finish its prefill and decode a little first.
            while sum(n for _, n in live_a["arrivals"]) < 16:
                await asyncio.sleep(0.01)
                if task_a.done():
                    raise RuntimeError("A finished before B arrived")
            rec_b = await _stream(engine, pb, 4, "B")
            rec_a = await task_a
            b_first = rec_b["arrivals"][0][0]
            window = [
                (t, n) for t, n in rec_a["arrivals"] if rec_b["submit"] <= t <= b_first
            ]
            # The A step that straddles B's arrival counts too.
            before = [x for x in rec_a["arrivals"] if x[0] < rec_b["submit"]][-1:]
            itl = _itl(before + window)
            result["concurrent"] = {
                "a_prompt": a_len,
                "b_prompt": b_len,
                "b_ttft_s": b_first - rec_b["submit"],
                "a_itl_during_b_prefill_mean_ms": 1e3 * statistics.fmean(itl)
                if itl
                else None,
                "a_itl_during_b_prefill_max_ms": 1e3 * max(itl) if itl else None,
                "a_steps_during_b_prefill": len(window),
                "a_decode": _decode_stats(rec_a),
            }
            log(f"{cfg['name']} concurrent: {result['concurrent']}")
    finally:
        engine.shutdown()
    return result


def worker(cfg: dict) -> dict:
    result = asyncio.run(_measure(cfg))
    result.update(
        name=cfg["name"], path_counter=read_path_counter(), provenance=provenance()
    )
    return result


def run(args: argparse.Namespace) -> dict:
    model, drafter = ensure_models(
        args.model, args.drafter, "27b-geometry", args.results_dir
    )
    base = {
        "model": model,
        "kv": args.kv,
        "contexts": args.contexts,
        "decode_tokens": args.decode_tokens,
        "max_model_len": max(args.contexts) + args.decode_tokens + 1024,
        "max_num_seqs": 4,
        "enforce_eager": args.enforce_eager,
        "num_spec_tokens": args.num_spec_tokens,
        **engine_settings(args),
        "concurrent": [65536, 32768],
        "concurrent_a_tokens": args.concurrent_a_tokens,
    }
    report = {"label": args.label, "kv": args.kv, "runs": {}}
    for spec in args.spec:
        name = f"{args.label}{'+dflash' if spec == 'dflash' else ''}"
        cfg = dict(base, name=name, drafter=drafter if spec == "dflash" else None)
        report["runs"][spec] = spawn(os.path.abspath(__file__), cfg, timeout=3600)
    save_json(os.path.join(args.results_dir, f"serve_{args.label}.json"), report)
    return report


def compare(paths: list[str], out_dir: str) -> None:
    """Side-by-side table and plot of several ``serve_<label>.json`` files."""
    reports = []
    for path in paths:
        with open(path) as f:
            reports.append(json.load(f))
    rows = []
    for rep in reports:
        for spec, r in rep["runs"].items():
            for ctx, s in r["single"].items():
                rows.append({"label": rep["label"], "spec": spec, "ctx": int(ctx), **s})
    print(f"{'label':<16}{'spec':<8}{'ctx':>8}{'TTFT s':>9}{'tok/s':>9}{'ITL ms':>9}")
    for r in sorted(rows, key=lambda r: (r["spec"], r["ctx"], r["label"])):
        print(
            f"{r['label']:<16}{r['spec']:<8}{r['ctx']:>8}{r['ttft_s']:>9.3f}"
            f"{r['decode_tok_s'] or 0:>9.1f}{r['itl_mean_ms'] or 0:>9.2f}"
        )
    save_json(os.path.join(out_dir, "serve_compare.json"), {"rows": rows})
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: no plot")
        return
    specs = sorted({r["spec"] for r in rows})
    fig, axes = plt.subplots(1, len(specs), figsize=(6 * len(specs), 4), squeeze=False)
    for ax, spec in zip(axes[0], specs):
        for label in sorted({r["label"] for r in rows}):
            pts = sorted(
                (r["ctx"], r["decode_tok_s"] or 0)
                for r in rows
                if r["label"] == label and r["spec"] == spec
            )
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(f"decode tokens/s ({spec})")
        ax.set_xlabel("context tokens")
        ax.legend()
    fig.tight_layout()
    path = os.path.join(out_dir, "serve_compare.png")
    fig.savefig(path, dpi=120)
    log(f"wrote {path}")


def parser() -> argparse.ArgumentParser:
    p = script_parser(
        __doc__,
        model_help="27B-geometry target folder (default: write one)",
        max_num_batched_tokens=2048,
        gpu_memory_utilization=0.85,
    )
    p.add_argument("--label", default="run", help="name of this configuration")
    p.add_argument("--kv", default="int8-triton", choices=KV_CONFIGS)
    p.add_argument("--contexts", type=int, nargs="+", default=CONTEXTS)
    p.add_argument("--decode-tokens", type=int, default=128)
    p.add_argument("--concurrent-a-tokens", type=int, default=512)
    p.add_argument(
        "--spec", nargs="+", default=["none", "dflash"], choices=["none", "dflash"]
    )
    p.add_argument("--num-spec-tokens", type=int, default=5)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument("--compare", nargs="+", help="serve_<label>.json files to compare")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.compare:
        paths = [p for pat in args.compare for p in sorted(glob.glob(pat))]
        compare(
            [p for p in paths if not p.endswith("serve_compare.json")], args.results_dir
        )
    else:
        run(args)
    return 0


if __name__ == "__main__":
    maybe_run_worker(worker)
    sys.exit(main())
