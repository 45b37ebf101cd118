# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Serving speed of one KV configuration on the 27B-geometry model.

Measures, through vLLM's AsyncLLM with streamed outputs (token arrival
times), for contexts of 8K/32K/64K/128K tokens, without speculation, with
DFlash and with ngram prompt lookup (``--spec``):

- TTFT of a single request;
- decode tokens/s and inter-token latency (ITL; with DFlash a step delivers
  several tokens, so ITL is step time divided by tokens delivered);
- with speculation, what each phase's drafts did, from vLLM's spec-decode
  counters (its Prometheus metrics, read in this process): drafts (verify
  steps that carried drafts), tokens proposed and accepted, acceptance rate,
  tokens per step (1 + accepted / drafts) and step time (ITL x tokens per
  step; without speculation the ITL itself).  ITL alone rewards whichever
  run happens to accept more drafts (with random weights, chance): compare
  step time between KV dtypes;

the concurrency case: request A (64K prompt) is decoding when request B
(32K prompt) arrives; A's inter-token latency while B prefills and B's TTFT
(the engine's first mixed steps: compiles left to first use show here);
and a batch of ``--batch`` requests decoding together (``--batch-context``
tokens each): aggregate decode tokens/s and per-request ITL.
``vllm bench latency`` cannot express that arrival pattern, hence AsyncLLM.

``--preset`` picks the model written when ``--model`` is not given;
``--load-format dummy`` writes it config-only and lets vLLM draw random
weights (``--preset qwen3.5-27b``: the whole 64-layer Qwen3.5-27B geometry,
about 54 GB, without writing it).

One invocation measures one configuration, named by ``--label``.  The
side-by-side comparison is three invocations plus ``--compare`` (with
``--baseline LABEL``, also every label's ratio to that one):

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
import contextlib
import glob
import json
import os
import statistics
import sys
import threading
import time

from e2e_common import (
    KV_CONFIGS,
    engine_kwargs,
    engine_settings,
    ensure_models,
    log,
    make_hybrid_model,
    make_prompts,
    maybe_run_worker,
    model_vocab_size,
    provenance,
    read_path_counter,
    save_json,
    script_parser,
    spawn,
    spec_counter_delta,
    spec_counters,
    spec_settings,
    spec_step_report,
)

CONTEXTS = [8192, 32768, 65536, 131072]
# Width of the label column of --compare's tables ("int8-triton+dflash").
LABEL_WIDTH = 22


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


def _spec_snapshot() -> dict | None:
    """The spec-decode counters of vLLM now (the AsyncLLM's Prometheus stat
    logger lives in this process); None without speculation."""
    from vllm.v1.metrics.reader import get_metrics_snapshot

    return spec_counters(get_metrics_snapshot())


async def _spec_since(before: dict | None) -> dict | None:
    """Counters since ``before``.  The engine's output handler records a
    step's stats after handing its outputs over: let it finish first."""
    await asyncio.sleep(0.2)
    return spec_counter_delta(_spec_snapshot(), before)


def _itl_stats(stats: dict, keys: tuple[str, ...]) -> dict:
    return {k: stats[k] for k in keys if k in stats}


ITL_KEYS = ("itl_mean_ms", "itl_p50_ms", "itl_p99_ms")


class MachineSampler:
    """Samples the GPU's SM clock, utilisation and power and the host's CPU
    load every ``period_s`` in a background thread, so that each measured
    case can say what the machine was doing while it ran (step times of the
    same engine moved by up to 75% between rounds on one H200 host).
    Without NVML (no GPU) it samples nothing and reports None."""

    def __init__(self, period_s: float = 0.05, device: int = 0):
        self.samples: list[tuple[float, float, float, float, float]] = []
        self._stop = threading.Event()
        self._thread = None
        try:
            import psutil
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(device)
            self._psutil = psutil
            psutil.cpu_percent()  # the first call only starts the interval
        except Exception:  # no NVML or no GPU: no samples
            return
        self._period = period_s
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        nv, h = self._nvml, self._handle
        while not self._stop.wait(self._period):
            # A failed read skips a sample.
            with contextlib.suppress(Exception):
                self.samples.append(
                    (
                        time.perf_counter(),
                        nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                        nv.nvmlDeviceGetUtilizationRates(h).gpu,
                        nv.nvmlDeviceGetPowerUsage(h) / 1e3,
                        self._psutil.cpu_percent(),
                    )
                )

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def summary(self, t0: float, t1: float) -> dict | None:
        """Medians (and the SM clock's minimum) of the samples in [t0, t1]."""
        window = [x for x in list(self.samples) if t0 <= x[0] <= t1]
        if not window:
            return None
        cols = list(zip(*window, strict=True))
        return {
            "samples": len(window),
            "sm_mhz_min": min(cols[1]),
            "sm_mhz_p50": statistics.median(cols[1]),
            "gpu_util_p50": statistics.median(cols[2]),
            "power_w_p50": statistics.median(cols[3]),
            "host_cpu_pct_p50": statistics.median(cols[4]),
        }


def _decode_window(*recs: dict) -> tuple[float, float]:
    """From the last first token to the last token of ``recs``."""
    return (
        max(r["arrivals"][0][0] for r in recs),
        max(r["arrivals"][-1][0] for r in recs),
    )


class MeasureTurns:
    """Turn-taking between serve_bench runs whose engines share one GPU.

    Engines loaded side by side measure in rounds, one at a time, so that
    drift of the machine over the minutes a comparison takes falls on every
    configuration alike.  Rounds alternate the order (run 0, run 1; run 1,
    run 0; ...), so that whatever slows the first turn after the engines
    start does not always fall on the same run.  The first turn waits until
    every run's engine is ready and then ``settle_s`` more seconds, and a run
    shuts its engine down only after the last turn: another engine's start
    (compiles, graph capture) or shutdown on the same machine slowed steps
    by half in the turns it overlapped, and the first cases measured right
    after the last engine became ready ran at 70-90% GPU utilisation where
    the same cases ran at 99-100% later.  The turn file holds the number of
    the next turn; a run that fails writes ``abort`` there and the others
    stop waiting.
    """

    def __init__(self, path: str | None, index: int, count: int, settle_s: float = 0.0):
        self.path, self.index, self.count = path, index, count
        self.settle_s = settle_s
        if path is not None and not 0 <= index < count:
            raise ValueError(f"turn {index}/{count}: need 0 <= index < count")

    def _read(self) -> str:
        with open(self.path) as f:
            return f.read().strip()

    def _write(self, text: str) -> None:
        tmp = f"{self.path}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.path)

    def _ready_path(self, index: int, first_round: int) -> str:
        return f"{self.path}.ready.{first_round}.{index}"

    def ready(self, first_round: int = 0) -> None:
        """This run's engine is up (for the rounds from ``first_round``)."""
        if self.path is not None:
            open(self._ready_path(self.index, first_round), "w").close()

    async def _until(
        self, done, what: str, timeout_s: float, raise_on_abort: bool = True
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            text = self._read() if os.path.exists(self.path) else "0"
            if text == "abort":
                if not raise_on_abort:
                    return
                raise RuntimeError("another run sharing the GPU failed")
            if done(int(text or 0)):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} never came (turn file says {text})")
            await asyncio.sleep(0.2)

    async def wait(
        self, round_idx: int, first_round: int = 0, timeout_s: float = 3600.0
    ) -> None:
        """Until this run's turn in round ``round_idx``; the first round of
        a series (``first_round``) also waits for every run's ready mark."""
        if self.path is None:
            return
        turn = self.turn(round_idx)

        def ours(n: int) -> bool:
            if n != turn:
                return False
            if round_idx != first_round:
                return True
            marks = [self._ready_path(i, first_round) for i in range(self.count)]
            if not all(os.path.exists(m) for m in marks):
                return False
            last_ready = max(os.path.getmtime(m) for m in marks)
            return time.time() >= last_ready + self.settle_s

        await self._until(ours, f"turn {turn}", timeout_s)

    async def wait_all(self, end_round: int, timeout_s: float = 3600.0) -> None:
        """Until every run has measured its rounds before ``end_round``, or
        another run failed (this one's results stand)."""
        if self.path is not None:
            await self._until(
                lambda n: n >= end_round * self.count,
                "the last turn",
                timeout_s,
                raise_on_abort=False,
            )

    def turn(self, round_idx: int) -> int:
        """The number of this run's turn in round ``round_idx``."""
        place = self.index if round_idx % 2 == 0 else self.count - 1 - self.index
        return round_idx * self.count + place

    def done(self, round_idx: int) -> None:
        if self.path is not None:
            self._write(str(self.turn(round_idx) + 1))

    def abort(self) -> None:
        if self.path is not None:
            self._write("abort")


def median_of(rounds: list):
    """Per-key median of the rounds' results (nested dicts of numbers); the
    first round's value where a key is not numeric in every round."""
    first = rounds[0]
    if isinstance(first, dict):
        return {
            k: median_of([r[k] for r in rounds if isinstance(r, dict) and k in r])
            for k in first
        }
    if all(isinstance(r, (int, float)) and not isinstance(r, bool) for r in rounds):
        return statistics.median(rounds)
    return first


async def _measure_round(
    engine,
    cfg: dict,
    vocab: int,
    round_idx: int,
    sampler: MachineSampler,
) -> dict:
    """One round: single requests at each context, then the concurrent and
    batch cases.  Each round draws its own prompts (no prefix-cache hits)."""
    result: dict = {"single": {}, "concurrent": None}
    salt = 1000 * round_idx
    # The GPU sat idle while the other runs measured: bring its clocks back
    # up first (not timed), or the first case of the turn runs slow.
    warm = make_prompts([4096], vocab, seed=99 + salt)[0]
    await _stream(engine, warm, 64, "turn-warmup")
    for ctx in cfg["contexts"]:
        prompt = make_prompts([ctx], vocab, seed=ctx + salt)[0]
        spec_before = _spec_snapshot()
        rec = await _stream(engine, prompt, cfg["decode_tokens"], f"single-{ctx}")
        stats = _decode_stats(rec)
        counters = await _spec_since(spec_before)
        stats.update(spec_step_report(counters, _itl_stats(stats, ITL_KEYS)))
        stats["machine"] = sampler.summary(*_decode_window(rec))
        result["single"][str(ctx)] = stats
        log(f"{cfg['name']} ctx {ctx}: {result['single'][str(ctx)]}")
    if cfg["concurrent"]:
        a_len, b_len = cfg["concurrent"]
        pa, pb = make_prompts([a_len, b_len], vocab, seed=7 + salt)
        spec_before = _spec_snapshot()
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
        # Both requests' drafts: A decoding, B's prefill and 4 tokens.
        counters = await _spec_since(spec_before)
        a_decode = _decode_stats(rec_a)
        # A's step time takes the phase's tokens per step.
        a_decode.update(spec_step_report(counters, _itl_stats(a_decode, ITL_KEYS)))
        result["concurrent"] = {
            "a_prompt": a_len,
            "b_prompt": b_len,
            "b_ttft_s": b_first - rec_b["submit"],
            "a_itl_during_b_prefill_mean_ms": 1e3 * statistics.fmean(itl)
            if itl
            else None,
            "a_itl_during_b_prefill_max_ms": 1e3 * max(itl) if itl else None,
            "a_steps_during_b_prefill": len(window),
            "a_decode": a_decode,
        }
        log(f"{cfg['name']} concurrent: {result['concurrent']}")
    if cfg.get("batch"):
        n, ctx = cfg["batch"], cfg["batch_context"]
        prompts = make_prompts([ctx] * n, vocab, seed=11 + salt)
        spec_before = _spec_snapshot()
        recs = await asyncio.gather(
            *(
                _stream(engine, p, cfg["decode_tokens"], f"batch-{i}")
                for i, p in enumerate(prompts)
            )
        )
        # Decode phase: from the last request's first token to the end.
        start, end = _decode_window(*recs)
        tokens = sum(n for r in recs for t, n in r["arrivals"] if t > start)
        itl = [x for r in recs for x in _itl(r["arrivals"])]
        result["batch"] = {
            "requests": n,
            "context": ctx,
            "decode_tok_s": tokens / (end - start) if end > start else None,
            "itl_p50_ms": 1e3 * statistics.median(itl),
            "itl_p99_ms": 1e3 * sorted(itl)[int(0.99 * (len(itl) - 1))],
        }
        counters = await _spec_since(spec_before)
        result["batch"].update(
            spec_step_report(counters, _itl_stats(result["batch"], ITL_KEYS))
        )
        result["batch"]["machine"] = sampler.summary(start, end)
        log(f"{cfg['name']} batch: {result['batch']}")
    return result


async def _measure(cfg: dict) -> dict:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    turns = MeasureTurns(
        cfg.get("measure_turn"),
        *cfg.get("turn", (0, 1)),
        settle_s=cfg.get("settle_s", 0.0),
    )
    sampler = MachineSampler()
    engine = None
    rounds: list[dict] = []
    try:
        # The engine core runs in its own process: vLLM's JIT monitor logs
        # every kernel compile after warm-up there ("... JIT compilation
        # during inference"); step_profile.py records them in its results.
        kwargs = dict(engine_kwargs(cfg), jit_monitor_verbose=True)
        engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))
        vocab = model_vocab_size(cfg["model"])
        # Every --spec of a run takes its own rounds of turns.
        first_round, num_rounds = cfg.get("first_round", 0), cfg.get("rounds", 1)
        turns.ready(first_round)
        for r in range(num_rounds):
            await turns.wait(first_round + r, first_round)
            log(f"{cfg['name']}: measuring, round {r + 1}/{num_rounds}")
            rounds.append(await _measure_round(engine, cfg, vocab, r, sampler))
            turns.done(first_round + r)
        # The other engines measure their last turns before this one exits.
        await turns.wait_all(first_round + num_rounds)
    except BaseException:
        turns.abort()
        raise
    finally:
        sampler.stop()
        if engine is not None:
            engine.shutdown()
    result = median_of(rounds)
    if len(rounds) > 1:
        result["rounds"] = rounds
    return result


def worker(cfg: dict) -> dict:
    result = asyncio.run(_measure(cfg))
    result.update(
        name=cfg["name"], path_counter=read_path_counter(), provenance=provenance()
    )
    return result


def run(args: argparse.Namespace) -> dict:
    model, drafter = ensure_models(
        args.model, args.drafter, args.preset, args.results_dir, args.load_format
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
        "measure_turn": args.measure_turn,
        "turn": tuple(int(x) for x in args.turn.split("/")),
        "rounds": args.rounds,
        "settle_s": args.settle_s,
    }
    report = {
        "label": args.label,
        "kv": args.kv,
        "model": model,
        "load_format": args.load_format,
        "quantization": args.quantization,
        "runs": {},
    }
    path = os.path.join(args.results_dir, f"serve_{args.label}.json")
    if args.merge:
        report["runs"] = previous_runs(path, report)
    for i, spec in enumerate(args.spec):
        name = args.label if spec == "none" else f"{args.label}+{spec}"
        cfg = dict(
            base,
            name=name,
            first_round=i * args.rounds,
            **spec_settings(spec, drafter, args.num_spec_tokens),
        )
        report["runs"][spec] = spawn(os.path.abspath(__file__), cfg, timeout=3600)
        # After each engine, so a later one that fails or runs out of time
        # loses nothing measured before it.
        save_json(path, report)
    return report


def previous_runs(path: str, report: dict) -> dict:
    """The runs already in ``path`` (``--merge``: one --spec per invocation
    fits a time limit), if it measured the same KV config, model, load
    format and weight quantization; otherwise stop rather than mix them."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        old = json.load(f)
    for key in ("kv", "model", "load_format", "quantization"):
        if old.get(key) != report.get(key):
            raise SystemExit(
                f"{path} has {key}={old.get(key)!r}, "
                f"this run {report.get(key)!r}: not merged"
            )
    return old["runs"]


def _with_steps(stats: dict | None, spec: str) -> dict | None:
    """``stats`` with its step-time fields; reports written before they
    existed get them where they follow from the ITL alone (no speculation:
    one token per step), and stay without them otherwise."""
    if stats is None or "tokens_per_step" in stats or spec != "none":
        return stats
    itl = {k: stats[k] for k in ITL_KEYS if k in stats}
    return {**stats, **spec_step_report(None, itl)}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def ratios(rows: list[dict], extra: list[dict], baseline: str) -> list[dict]:
    """Every label's figures over ``baseline``'s, per spec and context (ITL,
    step time, TTFT), and for the concurrency and batch cases."""
    base = {(r["spec"], r["ctx"]): r for r in rows if r["label"] == baseline}
    base_extra = {e["spec"]: e for e in extra if e["label"] == baseline}
    out = []
    for r in rows:
        b = base.get((r["spec"], r["ctx"]))
        if r["label"] == baseline or b is None:
            continue
        out.append(
            {
                "label": r["label"],
                "spec": r["spec"],
                "ctx": r["ctx"],
                **{
                    f"{key}_ratio": _ratio(r.get(key), b.get(key))
                    for key in ("itl_p50_ms", "step_p50_ms", "ttft_s")
                },
            }
        )
    for e in extra:
        b = base_extra.get(e["spec"])
        if e["label"] == baseline or b is None:
            continue
        c, bc = e["concurrent"] or {}, b["concurrent"] or {}
        bt, bbt = e["batch"] or {}, b["batch"] or {}
        out.append(
            {
                "label": e["label"],
                "spec": e["spec"],
                "ctx": "concurrent/batch",
                "b_ttft_s_ratio": _ratio(c.get("b_ttft_s"), bc.get("b_ttft_s")),
                "a_itl_max_ratio": _ratio(
                    c.get("a_itl_during_b_prefill_max_ms"),
                    bc.get("a_itl_during_b_prefill_max_ms"),
                ),
                "batch_tok_s_ratio": _ratio(
                    bt.get("decode_tok_s"), bbt.get("decode_tok_s")
                ),
                "batch_step_p50_ratio": _ratio(
                    bt.get("step_p50_ms"), bbt.get("step_p50_ms")
                ),
            }
        )
    return out


def _dig(d: dict | None, keys: tuple) -> float | None:
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def round_ratios(reports: list[dict], baseline: str) -> list[dict]:
    """Step time p50 over ``baseline``'s, round by round (runs measured in
    turns with ``--rounds``), per spec and case: how much of a ratio is
    drift of the machine rather than the configuration."""
    base = next((r for r in reports if r["label"] == baseline), None)
    out = []
    for rep in reports:
        if base is None or rep is base:
            continue
        for spec, run in rep["runs"].items():
            brun = base["runs"].get(spec)
            if brun is None or "rounds" not in run or "rounds" not in brun:
                continue
            pairs = list(zip(run["rounds"], brun["rounds"]))
            cases = [(ctx, ("single", ctx)) for ctx in run["single"]]
            if run.get("batch"):
                cases.append(("batch", ("batch",)))
            for ctx, keys in cases:
                values = [
                    _ratio(
                        _dig(a, (*keys, "step_p50_ms")), _dig(b, (*keys, "step_p50_ms"))
                    )
                    for a, b in pairs
                ]
                out.append(
                    {
                        "label": rep["label"],
                        "spec": spec,
                        "ctx": ctx,
                        "step_p50_ratios": values,
                    }
                )
    return out


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def compare(paths: list[str], out_dir: str, baseline: str | None = None) -> dict:
    """Side-by-side table and plot of several ``serve_<label>.json`` files.

    Between KV dtypes, compare step time: with speculation the ITL also
    moves with acceptance (``tok/step``), which random weights leave to
    chance.
    """
    reports = []
    for path in paths:
        with open(path) as f:
            reports.append(json.load(f))
    rows, extra = [], []
    for rep in reports:
        for spec, r in rep["runs"].items():
            for ctx, s in r["single"].items():
                s = _with_steps(s, spec)
                rows.append({"label": rep["label"], "spec": spec, "ctx": int(ctx), **s})
            extra.append(
                {
                    "label": rep["label"],
                    "spec": spec,
                    "concurrent": r.get("concurrent"),
                    "batch": _with_steps(r.get("batch"), spec),
                }
            )
    if not rows:
        raise SystemExit(
            f"nothing to compare: no measured case in {', '.join(paths)} "
            "(did the runs fail? see their logs)"
        )
    print(
        f"{'label':<{LABEL_WIDTH}}{'spec':<8}{'ctx':>8}{'TTFT s':>9}{'tok/s':>9}"
        f"{'ITL p50':>9}{'ITL p99':>9}{'drafts':>8}{'accept':>8}"
        f"{'tok/step':>9}{'step p50':>9}"
    )
    for r in sorted(rows, key=lambda r: (r["spec"], r["ctx"], r["label"])):
        print(
            f"{r['label']:<{LABEL_WIDTH}}{r['spec']:<8}{r['ctx']:>8}{r['ttft_s']:>9.3f}"
            f"{r['decode_tok_s'] or 0:>9.1f}{r['itl_p50_ms'] or 0:>9.2f}"
            f"{r.get('itl_p99_ms') or 0:>9.2f}{_fmt(r.get('drafts'), 'd'):>8}"
            f"{_fmt(r.get('acceptance_rate'), '.3f'):>8}"
            f"{_fmt(r.get('tokens_per_step'), '.2f'):>9}"
            f"{_fmt(r.get('step_p50_ms'), '.2f'):>9}"
        )
    print(
        f"\n{'label':<{LABEL_WIDTH}}{'spec':<8}{'B TTFT s':>9}{'A ITL mean/max ms':>19}"
        f"{'batch tok/s':>12}{'batch ITL p50/p99':>19}{'tok/step':>9}"
        f"{'step p50':>9}"
    )
    for e in extra:
        c, b = e["concurrent"] or {}, e["batch"] or {}
        print(
            f"{e['label']:<{LABEL_WIDTH}}{e['spec']:<8}{c.get('b_ttft_s', 0):>9.3f}"
            f"{c.get('a_itl_during_b_prefill_mean_ms', 0):>10.1f}/"
            f"{c.get('a_itl_during_b_prefill_max_ms', 0):<8.1f}"
            f"{b.get('decode_tok_s') or 0:>12.1f}"
            f"{b.get('itl_p50_ms', 0):>10.2f}/{b.get('itl_p99_ms', 0):<8.2f}"
            f"{_fmt(b.get('tokens_per_step'), '.2f'):>9}"
            f"{_fmt(b.get('step_p50_ms'), '.2f'):>9}"
        )
    summary: dict = {"rows": rows, "extra": extra}
    if baseline is not None:
        summary["baseline"] = baseline
        summary["ratios"] = ratios(rows, extra, baseline)
        print(f"\nratios to {baseline} (step time: ITL x tokens per step)")
        for q in summary["ratios"]:
            cells = "  ".join(
                f"{k.removesuffix('_ratio')} {_fmt(v, '.3f')}"
                for k, v in q.items()
                if k.endswith("_ratio")
            )
            print(f"{q['label']:<{LABEL_WIDTH}}{q['spec']:<8}{q['ctx']!s:>17}  {cells}")
        summary["round_ratios"] = round_ratios(reports, baseline)
        for q in summary["round_ratios"]:
            cells = " ".join(_fmt(v, ".3f") for v in q["step_p50_ratios"])
            print(
                f"{q['label']:<{LABEL_WIDTH}}{q['spec']:<8}{q['ctx']!s:>17}"
                f"  per round: {cells}"
            )
    save_json(os.path.join(out_dir, "serve_compare.json"), summary)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: no plot")
        return summary
    specs = sorted({r["spec"] for r in rows})
    labels = sorted({r["label"] for r in rows})
    fig, axes = plt.subplots(len(specs), 3, figsize=(15, 4 * len(specs)), squeeze=False)
    for row, spec in zip(axes, specs):
        for label in labels:
            pts = sorted(
                (r["ctx"], r.get("step_p50_ms") or 0, r["ttft_s"])
                for r in rows
                if r["label"] == label and r["spec"] == spec
            )
            if not pts:
                continue
            row[0].plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
            row[1].plot([p[0] for p in pts], [p[2] for p in pts], "o-", label=label)
        titles = ("decode step p50 (ms; ITL x tokens/step)", "TTFT (s)")
        for ax, title in zip(row[:2], titles):
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
    return summary


def parser() -> argparse.ArgumentParser:
    p = script_parser(
        __doc__,
        model_help="target folder (default: write --preset)",
        max_num_batched_tokens=2048,
        gpu_memory_utilization=0.85,
    )
    p.add_argument(
        "--preset",
        default="27b-geometry",
        choices=sorted(make_hybrid_model.PRESETS),
        help="model written when --model is not given (config-only with "
        "--load-format dummy)",
    )
    p.add_argument("--label", default="run", help="name of this configuration")
    p.add_argument("--kv", default="int8-triton", choices=KV_CONFIGS)
    p.add_argument("--contexts", type=int, nargs="+", default=CONTEXTS)
    p.add_argument("--decode-tokens", type=int, default=128)
    p.add_argument("--concurrent-a-tokens", type=int, default=512)
    p.add_argument(
        "--spec",
        nargs="+",
        default=["none", "dflash"],
        choices=["none", "dflash", "ngram"],
        help="speculative decoding of each engine run: none, the DFlash drafter, "
        "or ngram prompt lookup (with random prompts it rarely finds a match, "
        "so most steps carry no drafts)",
    )
    p.add_argument("--num-spec-tokens", type=int, default=5)
    p.add_argument("--batch", type=int, default=8, help="concurrent decodes (0: skip)")
    p.add_argument("--batch-context", type=int, default=32768)
    p.add_argument("--enforce-eager", action="store_true")
    p.add_argument(
        "--measure-turn",
        help="turn file shared by serve_bench runs started together: their "
        "engines load side by side and measure one at a time, in rounds",
    )
    p.add_argument(
        "--turn",
        default="0/1",
        help="with --measure-turn: this run's place, INDEX/COUNT (0/2, 1/2)",
    )
    p.add_argument(
        "--settle-s",
        type=float,
        default=20.0,
        help="with --measure-turn: seconds the first turn waits after the "
        "last engine is ready (the first cases after it ran slow)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="measure everything this many times (with --measure-turn, in "
        "turns with the other runs); results are per-key medians, each round "
        "kept under 'rounds'",
    )
    p.add_argument(
        "--no-concurrent",
        action="store_true",
        help="skip the 32K prompt arriving while a 64K request decodes",
    )
    p.add_argument(
        "--merge",
        action="store_true",
        help="keep the other --spec runs of serve_<label>.json (same --kv, "
        "model and load format): one engine per invocation",
    )
    p.add_argument("--compare", nargs="+", help="serve_<label>.json files to compare")
    p.add_argument("--baseline", help="with --compare: label the others are divided by")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.compare:
        paths = [p for pat in args.compare for p in sorted(glob.glob(pat))]
        compare(
            [p for p in paths if not p.endswith("serve_compare.json")],
            args.results_dir,
            args.baseline,
        )
    else:
        run(args)
    return 0


if __name__ == "__main__":
    maybe_run_worker(worker)
    sys.exit(main())
