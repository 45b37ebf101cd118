# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Where a serving step's time goes: per-step timings, kernel lists and JIT
compiles after the engine is ready, for several KV configurations.

For each configuration (a fresh engine with CUDA graphs, in-process engine
core) it drives vLLM's ``LLMEngine`` step by step:

1. one request with a long prompt (``--context``): the prefill steps, then
   ``--decode-steps`` decode steps, of which ``--profile-steps`` run under
   the torch profiler (kernel table: name, calls and GPU time per step);
2. the concurrency case in the same engine, first round: request A (64K)
   decodes, request B (32K) arrives; every step until B's first token is
   timed and the whole window is profiled (mixed steps);
3. every Triton JIT compile that happens after the engine reported ready
   (kernel name, constexprs, specialisation, and the phase it happened in);
4. for the slowest mixed steps, where the host spent them: the Python
   stacks of the engine's thread, sampled every few milliseconds (the
   engine core runs in this process), most frequent first.

    python benchmarks/e2e/step_profile.py --kv int8-triton bf16-fa \\
        --model /path/to/tiny --context 131072
"""

import collections
import json
import os
import statistics
import sys
import threading
import time

from e2e_common import (
    engine_kwargs,
    engine_settings,
    ensure_models,
    log,
    make_hybrid_model,
    make_prompts,
    maybe_run_worker,
    model_vocab_size,
    provenance,
    save_json,
    script_parser,
    spawn,
    spec_settings,
)

# Kernel-name fragments grouped into the rows of the summary table.
KERNEL_GROUPS = (
    (
        "attn:int8-split-kv",
        ("kernel_int8_split_kv_attention", "kernel_int8_split_kv_verify"),
    ),
    ("attn:int8-reduce", ("kernel_int8_split_kv_reduce",)),
    ("attn:unified", ("kernel_unified_attention", "reduce_segments")),
    ("attn:flash", ("flash_fwd", "flash::", "FlashAttn")),
    ("attn:sectioned-dequant", ("_dequant_int8_pth_section",)),
    ("attn:merge", ("merge_attn_states",)),
    ("kv-write", ("reshape_and_cache", "_reshape_cache")),
    ("gdn", ("chunk_", "fused_recurrent", "causal_conv1d", "gated_delta", "fused_gdn")),
    ("gemm", ("gemm", "Gemm", "sm90_xmma", "cutlass", "nvjet")),
)


def _frame_name(frame) -> str:
    code = frame.f_code
    return f"{os.path.basename(code.co_filename)}:{code.co_name}:{frame.f_lineno}"


def _is_vllm_frame(frame) -> bool:
    path = frame.f_code.co_filename
    return f"{os.sep}vllm{os.sep}" in path and f"{os.sep}torch{os.sep}" not in path


def _innermost_vllm_frame() -> str | None:
    """file:function:line of the innermost vLLM frame on this thread's stack
    (what called into torch.compile)."""
    frame = sys._getframe(1)
    while frame is not None and not _is_vllm_frame(frame):
        frame = frame.f_back
    return None if frame is None else _frame_name(frame)


class JitLog:
    """Records Triton JIT compiles after ``start()`` (chains vLLM's hook), and
    torch.compile's (Dynamo's) compiles in ``torch_compiles``: vLLM's JIT
    monitor sees the first only, but both stall the step they happen in."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.torch_compiles: list[dict] = []
        self._compile_t0: dict[str, tuple[float, str | None]] = {}
        self.phase = "ready"
        self.t0 = time.perf_counter()

    def _start_torch_compile_log(self) -> None:
        from torch._dynamo.callback import callback_handler

        def started(args) -> None:
            self._compile_t0[str(args.compile_id)] = (
                time.perf_counter(),
                _innermost_vllm_frame(),
            )

        def ended(args) -> None:
            t_end = time.perf_counter()
            t_start, caller = self._compile_t0.pop(str(args.compile_id), (t_end, None))
            self.torch_compiles.append(
                {
                    "t_s": round(t_start - self.t0, 3),
                    "phase": self.phase,
                    "compile_id": str(args.compile_id),
                    "trigger": args.callback_trigger.name,
                    "s": round(t_end - t_start, 3),
                    "caller": caller,
                }
            )

        callback_handler.register_start_callback(started)
        callback_handler.register_end_callback(ended)
        self._torch_callbacks = (started, ended)

    def stop(self) -> None:
        """Unhooks both logs (the engine's worker never needs to)."""
        from torch._dynamo.callback import callback_handler
        from triton import knobs

        started, ended = self._torch_callbacks
        callback_handler.remove_start_callback(started)
        callback_handler.remove_end_callback(ended)
        knobs.runtime.jit_post_compile_hook = self._previous_hook

    def start(self) -> None:
        self._start_torch_compile_log()
        from triton import knobs

        previous = self._previous_hook = knobs.runtime.jit_post_compile_hook

        def hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled):
            constants = (
                compile.get("constants", {}) if isinstance(compile, dict) else {}
            )
            self.events.append(
                {
                    "t_s": round(time.perf_counter() - self.t0, 3),
                    "phase": self.phase,
                    "kernel": getattr(fn, "name", str(fn)),
                    "constants": {str(k): str(v) for k, v in constants.items()},
                    "signature": str(compile.get("signature", ""))[:400]
                    if isinstance(compile, dict)
                    else "",
                    # Every argument with its specialisation (e.g. i32D:
                    # divisible by 16; *bf16D: 16-byte aligned), which tells
                    # variants with equal constants apart.
                    "args": str(repr)[:4000],
                }
            )
            if previous is not None:
                return previous(
                    key=key,
                    repr=repr,
                    fn=fn,
                    compile=compile,
                    is_manual_warmup=is_manual_warmup,
                    already_compiled=already_compiled,
                )
            return None

        knobs.runtime.jit_post_compile_hook = hook


def _kernel_table(prof, steps: int) -> list[dict]:
    rows = []
    for evt in prof.key_averages():
        dev_us = getattr(evt, "self_device_time_total", None)
        if dev_us is None:
            dev_us = getattr(evt, "self_cuda_time_total", 0)
        if dev_us <= 0 or evt.key.startswith("ProfilerStep"):
            continue
        rows.append(
            {
                "kernel": evt.key[:160],
                "calls_per_step": evt.count / steps,
                "us_per_step": dev_us / steps,
            }
        )
    rows.sort(key=lambda r: -r["us_per_step"])
    return rows


def _group(rows: list[dict]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rows:
        name = next(
            (g for g, keys in KERNEL_GROUPS if any(k in r["kernel"] for k in keys)),
            "other",
        )
        out[name] = out.get(name, 0.0) + r["us_per_step"]
    return {k: round(v, 1) for k, v in sorted(out.items(), key=lambda kv: -kv[1])}


class HostSampler:
    """Samples one thread's Python stack every ``interval_s`` into per-step
    counters (``step`` names the step being sampled), so that a step which
    is slow on the host shows where it spent its time."""

    def __init__(self, thread_id: int, interval_s: float = 0.005, depth: int = 16):
        self.thread_id = thread_id
        self.interval_s = interval_s
        self.depth = depth
        self.step = 0
        self.counts: dict[int, collections.Counter] = collections.defaultdict(
            collections.Counter
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _stack(self) -> str | None:
        frame = sys._current_frames().get(self.thread_id)
        frames = []
        while frame is not None:
            frames.append(frame)
            frame = frame.f_back
        if not frames:
            return None
        # The innermost frames, then the innermost vLLM frames below them
        # (what called into torch.compile, Triton or the sampler).
        names = [_frame_name(f) for f in frames[: self.depth // 2]]
        vllm = [f for f in frames[self.depth // 2 :] if _is_vllm_frame(f)]
        if vllm:
            names.append("...")
            names += [_frame_name(f) for f in vllm[: self.depth - len(names)]]
        return " <- ".join(names)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            stack = self._stack()
            if stack is not None:
                self.counts[self.step][stack] += 1

    def __enter__(self) -> "HostSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def top(self, step: int, n: int = 8) -> list[dict]:
        """The step's most frequent stacks (innermost frame first), with the
        time they stand for."""
        return [
            {"ms": round(c * self.interval_s * 1e3, 1), "stack": stack}
            for stack, c in self.counts[step].most_common(n)
        ]


def _step(engine) -> tuple[float, list]:
    t = time.perf_counter()
    outs = engine.step()
    return time.perf_counter() - t, outs


def worker(cfg: dict) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from vllm import SamplingParams
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.llm_engine import LLMEngine

    jit = JitLog()
    kwargs = engine_kwargs(cfg)
    t_start = time.perf_counter()
    engine = LLMEngine.from_engine_args(EngineArgs(**kwargs))
    startup_s = time.perf_counter() - t_start
    jit.start()
    vocab = model_vocab_size(cfg["model"])
    result: dict = {"name": cfg["name"], "startup_s": round(startup_s, 1)}

    def params(n: int) -> SamplingParams:
        return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)

    # 1. A long single request.
    jit.phase = "single-prefill"
    ctx = cfg["context"]
    batch = cfg.get("batch", 1)
    for i, prompt in enumerate(make_prompts([ctx] * batch, vocab, 1)):
        engine.add_request(
            f"single{i}", {"prompt_token_ids": prompt}, params(cfg["decode_steps"] + 2)
        )
    prefill_steps = []
    started: set[str] = set()
    t0 = time.perf_counter()
    while len(started) < batch:
        dt, outs = _step(engine)
        prefill_steps.append(dt)
        started |= {o.request_id for o in outs if len(o.outputs[0].token_ids)}
    ttft = time.perf_counter() - t0
    jit.phase = "single-decode"
    decode = []
    for _ in range(cfg["decode_steps"] - cfg["profile_steps"]):
        decode.append(_step(engine)[0])
    torch.accelerator.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(cfg["profile_steps"]):
            decode.append(_step(engine)[0])
        torch.accelerator.synchronize()
    decode_rows = _kernel_table(prof, cfg["profile_steps"])
    while engine.has_unfinished_requests():
        engine.step()
    result["single"] = {
        "context": ctx,
        "batch": batch,
        "spec": cfg.get("spec"),
        "ttft_s": round(ttft, 3),
        "prefill_steps": len(prefill_steps),
        "decode_step_ms_p50": round(1e3 * statistics.median(decode), 3),
        "decode_step_ms_mean": round(1e3 * statistics.fmean(decode), 3),
        "decode_groups_us": _group(decode_rows),
        "decode_kernels": decode_rows[:40],
    }
    log(
        f"{cfg['name']} single: "
        + json.dumps({k: v for k, v in result["single"].items() if "kernels" not in k})
    )

    # 2. Concurrency, first round: A decodes, B arrives.
    if not cfg["concurrent"]:
        result["provenance"] = provenance()
        result["jit_after_ready"] = jit.events
        result["torch_compiles_after_ready"] = jit.torch_compiles
        return result
    a_len, b_len = cfg["concurrent"]
    pa, pb = make_prompts([a_len, b_len], vocab, seed=7)
    jit.phase = "A-prefill"
    engine.add_request("A", {"prompt_token_ids": pa}, params(512))
    a_tokens = 0
    while a_tokens < 16:
        _, outs = _step(engine)
        a_tokens = (
            sum(len(o.outputs[0].token_ids) for o in outs if o.request_id == "A")
            or a_tokens
        )
    jit.phase = "B-prefill (mixed steps)"
    engine.add_request("B", {"prompt_token_ids": pb}, params(4))
    mixed = []
    t0 = time.perf_counter()
    with (
        profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof,
        HostSampler(threading.get_ident()) as sampler,
    ):
        while True:
            sampler.step = len(mixed)
            dt, outs = _step(engine)
            mixed.append(dt)
            if any(o.request_id == "B" and len(o.outputs[0].token_ids) for o in outs):
                break
        torch.accelerator.synchronize()
    b_ttft = time.perf_counter() - t0
    slowest = sorted(range(len(mixed)), key=lambda i: -mixed[i])[:2]
    mixed_rows = _kernel_table(prof, len(mixed))
    jit.phase = "after-B"
    while engine.has_unfinished_requests():
        engine.step()
    result["concurrent"] = {
        "a_prompt": a_len,
        "b_prompt": b_len,
        "b_ttft_s": round(b_ttft, 3),
        "mixed_steps": len(mixed),
        "mixed_step_ms": [round(1e3 * x, 2) for x in mixed],
        "mixed_groups_us_per_step": _group(mixed_rows),
        "mixed_kernels": mixed_rows[:40],
        "mixed_host_stacks": {
            str(i): {"ms": round(1e3 * mixed[i], 2), "top": sampler.top(i)}
            for i in slowest
        },
    }
    log(
        f"{cfg['name']} concurrent: B TTFT {b_ttft:.3f}s, "
        f"steps ms {result['concurrent']['mixed_step_ms']}"
    )
    for i, step in result["concurrent"]["mixed_host_stacks"].items():
        for row in step["top"][:3]:
            head = f"  mixed step {i} ({step['ms']:.0f} ms)"
            log(f"{head}: {row['ms']} ms in {row['stack']}")
    result["jit_after_ready"] = jit.events
    result["torch_compiles_after_ready"] = jit.torch_compiles
    log(
        f"{cfg['name']}: {len(jit.events)} JIT compiles after ready: "
        + ", ".join(sorted({f"{e['phase']}:{e['kernel']}" for e in jit.events}))
    )
    log(
        f"{cfg['name']}: {len(jit.torch_compiles)} torch.compile compiles after "
        "ready: "
        + ", ".join(
            f"{e['phase']}:{e['caller']} ({e['s']} s)" for e in jit.torch_compiles
        )
    )
    result["provenance"] = provenance()
    return result


def main(argv: list[str] | None = None) -> int:
    p = script_parser(
        __doc__,
        model_help="target folder (default: write the tiny preset)",
        max_num_batched_tokens=2048,
        gpu_memory_utilization=0.6,
    )
    p.add_argument(
        "--preset",
        default="tiny",
        choices=sorted(make_hybrid_model.PRESETS),
        help="model written when --model is not given",
    )
    p.add_argument("--kv", nargs="+", default=["int8-triton", "bf16-fa"])
    p.add_argument("--context", type=int, default=131072)
    p.add_argument("--decode-steps", type=int, default=48)
    p.add_argument("--profile-steps", type=int, default=8)
    p.add_argument("--concurrent", type=int, nargs=2, default=[65536, 32768])
    p.add_argument("--label", default="", help="suffix of the output file name")
    p.add_argument(
        "--batch", type=int, default=1, help="requests decoding together in part 1"
    )
    p.add_argument(
        "--spec",
        choices=["none", "dflash", "ngram"],
        default="none",
        help="speculative decoding: the DFlash drafter, or ngram prompt lookup",
    )
    p.add_argument(
        "--no-concurrent",
        action="store_true",
        help="skip part 2 (A decodes, B arrives)",
    )
    args = p.parse_args(argv)
    model, drafter = ensure_models(
        args.model, args.drafter, args.preset, args.results_dir, args.load_format
    )
    report = {"runs": {}}
    for kv in args.kv:
        cfg = {
            "name": kv,
            "model": model,
            "kv": kv,
            "context": args.context,
            "decode_steps": args.decode_steps,
            "profile_steps": args.profile_steps,
            "batch": args.batch,
            **spec_settings(args.spec, drafter),
            "concurrent": None if args.no_concurrent else args.concurrent,
            "max_model_len": max(args.context, sum(args.concurrent)) + 2048,
            "max_num_seqs": max(8, args.batch),
            "enforce_eager": False,
            **engine_settings(args),
        }
        try:
            report["runs"][kv] = spawn(os.path.abspath(__file__), cfg, timeout=1200)
        except Exception as e:  # keep the other configurations' results
            log(f"{kv} failed: {e}")
            report["runs"][kv] = {"error": str(e)}
    path = os.path.join(args.results_dir, f"step_profile{args.label}.json")
    save_json(path, report)
    print(
        f"\n{'config':<14}{'TTFT s':>8}{'decode ms':>11}{'B TTFT s':>10}"
        "  groups (us/decode step)"
    )
    for kv, r in report["runs"].items():
        if "error" in r:
            print(f"{kv:<14} error: {r['error']}")
            continue
        s, c = r["single"], r.get("concurrent")
        b_ttft = f"{c['b_ttft_s']:>10.2f}" if c else f"{'-':>10}"
        print(
            f"{kv:<14}{s['ttft_s']:>8.2f}{s['decode_step_ms_p50']:>11.3f}"
            f"{b_ttft}  {s['decode_groups_us']}"
        )
        mixed = (
            f"; mixed steps max {max(c['mixed_step_ms'])} ms; "
            f"mixed groups {c['mixed_groups_us_per_step']}"
            if c
            else ""
        )
        torch_compiles = len(r.get("torch_compiles_after_ready", []))
        print(
            f"{'':<14}JIT after ready: {len(r['jit_after_ready'])}, "
            f"torch.compile after ready: {torch_compiles}{mixed}"
        )
    return 0


if __name__ == "__main__":
    maybe_run_worker(worker)
    sys.exit(main())
