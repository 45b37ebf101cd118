# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Serving speed of one KV configuration on the 27B-geometry model.

Measures, through vLLM's AsyncLLM with streamed outputs (token arrival
times), for contexts of 8K/32K/64K/128K tokens, without and with DFlash:

- TTFT of a single request;
- decode tokens/s and inter-token latency (ITL; with DFlash a step delivers
  several tokens, so ITL is step time divided by tokens delivered);

the concurrency case: request A (64K prompt) is decoding when request B
(32K prompt) arrives; A's inter-token latency while B prefills and B's TTFT
(the engine's first mixed steps: compiles left to first use show here);
and a batch of ``--batch`` requests decoding together (``--batch-context``
tokens each): aggregate decode tokens/s and per-request ITL.
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
import fcntl
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
        "itl_p99_ms": 1e3 * sorted(itl)[int(0.99 * (len(itl) - 1))] if itl else None,
        "tokens": sum(n for _, n in arr),
    }


async def _measure(cfg: dict) -> dict:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    # The engine core runs in its own process: vLLM's JIT monitor logs every
    # kernel compile after warm-up there ("... JIT compilation during
    # inference"); step_profile.py records them in its results instead.
    kwargs = dict(engine_kwargs(cfg), jit_monitor_verbose=True)
    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))
    vocab = model_vocab_size(cfg["model"])
    result: dict = {"single": {}, "concurrent": None}
    # Closed (and so released) by the finally clause below.
    lock = open(cfg["measure_lock"], "a") if cfg.get("measure_lock") else None  # noqa: SIM115
    try:
        if lock is not None:
            # Engines started side by side measure one at a time.
            fcntl.flock(lock, fcntl.LOCK_EX)
            log(f"{cfg['name']}: measuring")
        # A first short request, as a user's would be (not timed).
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
        if cfg.get("batch"):
            n, ctx = cfg["batch"], cfg["batch_context"]
            prompts = make_prompts([ctx] * n, vocab, seed=11)
            recs = await asyncio.gather(
                *(
                    _stream(engine, p, cfg["decode_tokens"], f"batch-{i}")
                    for i, p in enumerate(prompts)
                )
            )
            # Decode phase: from the last request's first token to the end.
            start = max(r["arrivals"][0][0] for r in recs)
            end = max(r["arrivals"][-1][0] for r in recs)
            tokens = sum(n for r in recs for t, n in r["arrivals"] if t > start)
            itl = [x for r in recs for x in _itl(r["arrivals"])]
            result["batch"] = {
                "requests": n,
                "context": ctx,
                "decode_tok_s": tokens / (end - start) if end > start else None,
                "itl_p50_ms": 1e3 * statistics.median(itl),
                "itl_p99_ms": 1e3 * sorted(itl)[int(0.99 * (len(itl) - 1))],
            }
            log(f"{cfg['name']} batch: {result['batch']}")
    finally:
        engine.shutdown()
        if lock is not None:
            lock.close()  # releases the lock
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
        "max_num_seqs": max(4, args.batch),
        "enforce_eager": args.enforce_eager,
        "num_spec_tokens": args.num_spec_tokens,
        **engine_settings(args),
        "concurrent": None if args.no_concurrent else [65536, 32768],
        "concurrent_a_tokens": args.concurrent_a_tokens,
        "batch": args.batch,
        "batch_context": args.batch_context,
        "measure_lock": args.measure_lock,
    }
    report = {"label": args.label, "kv": args.kv, "runs": {}}
    for spec in args.spec:
        name = f"{args.label}{'+dflash' if spec == 'dflash' else ''}"
        cfg = dict(base, name=name, drafter=drafter if spec == "dflash" else None)
        report["runs"][spec] = spawn(os.path.abspath(__file__), cfg, timeout=3600)
        # After each engine, so a later one that fails or runs out of time
        # loses nothing measured before it.
        save_json(os.path.join(args.results_dir, f"serve_{args.label}.json"), report)
    return report


def compare(paths: list[str], out_dir: str) -> None:
    """Side-by-side table and plot of several ``serve_<label>.json`` files."""
    reports = []
    for path in paths:
        with open(path) as f:
            reports.append(json.load(f))
    rows, extra = [], []
    for rep in reports:
        for spec, r in rep["runs"].items():
            for ctx, s in r["single"].items():
                rows.append({"label": rep["label"], "spec": spec, "ctx": int(ctx), **s})
            extra.append(
                {
                    "label": rep["label"],
                    "spec": spec,
                    "concurrent": r.get("concurrent"),
                    "batch": r.get("batch"),
                }
            )
    print(
        f"{'label':<16}{'spec':<8}{'ctx':>8}{'TTFT s':>9}{'tok/s':>9}"
        f"{'ITL p50':>9}{'ITL p99':>9}"
    )
    for r in sorted(rows, key=lambda r: (r["spec"], r["ctx"], r["label"])):
        print(
            f"{r['label']:<16}{r['spec']:<8}{r['ctx']:>8}{r['ttft_s']:>9.3f}"
            f"{r['decode_tok_s'] or 0:>9.1f}{r['itl_p50_ms'] or 0:>9.2f}"
            f"{r.get('itl_p99_ms') or 0:>9.2f}"
        )
    print(
        f"\n{'label':<16}{'spec':<8}{'B TTFT s':>9}{'A ITL mean/max ms':>19}"
        f"{'batch tok/s':>12}{'batch ITL p50/p99':>19}"
    )
    for e in extra:
        c, b = e["concurrent"] or {}, e["batch"] or {}
        print(
            f"{e['label']:<16}{e['spec']:<8}{c.get('b_ttft_s', 0):>9.3f}"
            f"{c.get('a_itl_during_b_prefill_mean_ms', 0):>10.1f}/"
            f"{c.get('a_itl_during_b_prefill_max_ms', 0):<8.1f}"
            f"{b.get('decode_tok_s') or 0:>12.1f}"
            f"{b.get('itl_p50_ms', 0):>10.2f}/{b.get('itl_p99_ms', 0):<8.2f}"
        )
    save_json(
        os.path.join(out_dir, "serve_compare.json"), {"rows": rows, "extra": extra}
    )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: no plot")
        return
    specs = sorted({r["spec"] for r in rows})
    labels = sorted({r["label"] for r in rows})
    fig, axes = plt.subplots(len(specs), 3, figsize=(15, 4 * len(specs)), squeeze=False)
    for row, spec in zip(axes, specs):
        for label in labels:
            pts = sorted(
                (r["ctx"], r["itl_p50_ms"] or 0, r["ttft_s"])
                for r in rows
                if r["label"] == label and r["spec"] == spec
            )
            if not pts:
                continue
            row[0].plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
            row[1].plot([p[0] for p in pts], [p[2] for p in pts], "o-", label=label)
        for ax, title in zip(row[:2], ("decode ITL p50 (ms)", "TTFT (s)")):
            ax.set_xscale("log", base=2)
            ax.set_title(f"{title}, {spec}")
            ax.set_xlabel("context tokens")
            ax.grid(alpha=0.3)
            ax.legend()
        mine = [e for e in extra if e["spec"] == spec and e["concurrent"]]
        names = [e["label"] for e in mine]
        x = range(len(mine))
        row[2].bar(
            [i - 0.2 for i in x],
            [e["concurrent"]["b_ttft_s"] for e in mine],
            0.4,
            label="B's TTFT (s)",
        )
        row[2].bar(
            [i + 0.2 for i in x],
            [e["concurrent"]["a_itl_during_b_prefill_max_ms"] / 1e3 for e in mine],
            0.4,
            label="A's max ITL during B (s)",
        )
        row[2].set_xticks(list(x), names)
        row[2].set_title(f"B (32K) arrives while A (64K) decodes, {spec}")
        row[2].legend()
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
    p.add_argument("--batch", type=int, default=8, help="concurrent decodes (0: skip)")
    p.add_argument("--batch-context", type=int, default=32768)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument(
        "--measure-lock",
        help="file to lock while measuring: several serve_bench runs started "
        "together load their engines side by side and measure one at a time",
    )
    p.add_argument(
        "--no-concurrent",
        action="store_true",
        help="skip the 32K prompt arriving while a 64K request decodes",
    )
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
