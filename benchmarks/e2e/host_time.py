# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Host time of the Triton backend per step: the metadata build plus the
per-layer Python of ``forward``, INT8 per-token-head against BF16.

For each KV configuration it builds one ``TritonAttentionMetadataBuilder``
and ``--layers`` ``TritonAttentionImpl`` layers at the Qwen3.5-27B attention
shape (24 query / 4 KV heads x 256, 16-token blocks), then times, per step,
``builder.build()`` and every layer's ``forward()`` for a decode step, a
verify step (``--verify`` tokens per request) and a mixed step (the decode
rows plus one prefill chunk over cached context).

By default the attention kernels are replaced by no-ops (their Python
launchers still run), so the figures are the backend's own Python (what a
step costs the host in eager and piecewise-graph mode, and what a
host-bound small model waits for); no GPU is needed.  FlashAttention, which
INT8 prefills use on a GPU (the sectioned prefill), is replaced by a
stand-in that returns at once, so that the mixed step takes the path it
takes there; FlashAttention's own Python is not in these figures.  ``--launch``
(CUDA) runs the real kernels and times the host side of each step without
waiting for the GPU between the calls; with ``--busy-ms`` each step is
queued behind a kernel that keeps the GPU busy, so that its time is host
time only if nothing in the step waits for the device.  With FULL CUDA
graphs decode steps replay without any of this Python.

    .venv/bin/python benchmarks/e2e/host_time.py --layers 16 --batch 8
"""

import argparse
import json
import os
import statistics
import sys
import time
from types import SimpleNamespace

import torch

NUM_HEADS, NUM_KV_HEADS, HEAD_SIZE, BLOCK_SIZE = 24, 4, 256, 16
# torch.cuda._sleep spins for a number of GPU clock cycles; about 2 GHz.
SPIN_CYCLES_PER_NS = 2
KV_DTYPES = {"int8": "int8_per_token_head", "bf16": "auto"}


def _vllm_config(max_num_seqs: int) -> SimpleNamespace:
    """The parts of a VllmConfig the builder and the layer read."""
    from vllm.config import CUDAGraphMode

    return SimpleNamespace(
        model_config=SimpleNamespace(
            get_num_attention_heads=lambda parallel_config: NUM_HEADS,
            get_num_kv_heads=lambda parallel_config: NUM_KV_HEADS,
            get_head_size=lambda: HEAD_SIZE,
            rswa_window=None,
            dtype=torch.bfloat16,
        ),
        parallel_config=SimpleNamespace(decode_context_parallel_size=1),
        compilation_config=SimpleNamespace(
            cudagraph_mode=CUDAGraphMode.NONE,
            cudagraph_capture_sizes=[],
            static_forward_context={},
        ),
        speculative_config=None,
        scheduler_config=SimpleNamespace(max_num_seqs=max_num_seqs),
        cache_config=SimpleNamespace(cache_dtype="auto"),
    )


def _count(calls: "dict[str, int] | _CallsByKV", name: str) -> None:
    calls[name] = calls.get(name, 0) + 1


class _NoLaunch:
    """A Triton kernel whose launches are only counted in ``calls``."""

    def __init__(self, calls: dict[str, int], name: str):
        self.calls, self.name = calls, name

    def __getitem__(self, grid):
        return lambda *args, **kwargs: _count(self.calls, self.name)


def _stub_kernels(calls: dict[str, int]) -> None:
    """Replace the attention kernels by no-ops counted in ``calls``: their
    launchers still run, so that the launchers' Python (argument checks,
    geometry, strides) is timed with the backend's.  Without a GPU there is
    no FlashAttention either, and INT8 layers would run their prefills on the
    unified kernel: they get a stand-in for it (and no-op launches of the
    sectioned prefill's dequantiser)."""
    from vllm.v1.attention.backends import fa_utils, triton_int8_per_token_head
    from vllm.v1.attention.ops import (
        triton_int8_sectioned_prefill,
        triton_int8_split_kv_attention,
        triton_unified_attention,
    )

    for module, names in (
        (triton_unified_attention, ("kernel_unified_attention", "reduce_segments")),
        (
            triton_int8_split_kv_attention,
            (
                "kernel_int8_split_kv_attention",
                "kernel_int8_split_kv_verify",
                "kernel_int8_split_kv_verify_wgmma",
                "kernel_int8_split_kv_reduce",
            ),
        ),
        (triton_int8_sectioned_prefill, ("_dequant_int8_pth_section_kernel",)),
    ):
        for name in names:
            setattr(module, name, _NoLaunch(calls, name))

    def section_attn_fn(fa_version):
        def attn(q, k, v, out, *args):
            _count(calls, "flash_attn (stand-in)")
            # The log-sum-exp FlashAttention returns: [heads, query tokens].
            return torch.zeros(q.shape[1], q.shape[0], dtype=torch.float32)

        return attn

    fa_utils.is_flash_attn_varlen_func_available = lambda: True
    fa_utils.get_flash_attn_version = lambda **kwargs: None
    triton_int8_per_token_head._flash_attn_section_fn = section_attn_fn


class _CallsByKV:
    """Launch counts kept per KV configuration: those of ``kv``, the one
    being timed, are counted."""

    def __init__(self, kvs: list[str]):
        self.by_kv: dict[str, dict[str, int]] = {kv: {} for kv in kvs}
        self.kv = kvs[0]

    def get(self, name: str, default: int) -> int:
        return self.by_kv[self.kv].get(name, default)

    def __setitem__(self, name: str, value: int) -> None:
        self.by_kv[self.kv][name] = value


def _setup(kv: str, args: argparse.Namespace, device: torch.device):
    """One metadata builder, ``args.layers`` layers and their cache."""
    from vllm.v1.attention.backends import triton_attn
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVQuantMode

    quant = KVQuantMode.INT8_PER_TOKEN_HEAD if kv == "int8" else KVQuantMode.NONE
    spec = FullAttentionSpec(
        block_size=BLOCK_SIZE,
        num_kv_heads=NUM_KV_HEADS,
        head_size=HEAD_SIZE,
        dtype=torch.bfloat16,
        kv_quant_mode=quant,
    )
    builder = triton_attn.TritonAttentionMetadataBuilder(
        spec, [], _vllm_config(max(args.batch + 1, 16)), device
    )
    impls = [
        triton_attn.TritonAttentionImpl(
            NUM_HEADS,
            HEAD_SIZE,
            HEAD_SIZE**-0.5,
            NUM_KV_HEADS,
            None,
            None,
            KV_DTYPES[kv],
        )
        for _ in range(args.layers)
    ]
    shape = triton_attn.TritonAttentionBackend.get_kv_cache_shape(
        args.num_blocks, BLOCK_SIZE, NUM_KV_HEADS, HEAD_SIZE, KV_DTYPES[kv]
    )
    cache_dtype = torch.int8 if kv == "int8" else torch.bfloat16
    kv_cache = torch.zeros(shape, dtype=cache_dtype, device=device)
    return builder, impls, kv_cache


def measure(args: argparse.Namespace) -> dict[str, dict]:
    """Time every step of every KV configuration in ``args.kv``.

    The configurations take turns step by step (one step of each, then the
    next round), so that a change of the machine's speed during the run
    (frequency, other processes) reaches all of them alike: their ratio
    moves much less from run to run than their times."""
    from vllm.model_executor.warmup.triton_attn_warmup import _warmup_batch
    from vllm.v1.worker import workspace

    device = torch.device("cuda" if args.launch else "cpu")
    calls = _CallsByKV(args.kv)
    if not args.launch:
        _stub_kernels(calls)
    workspace.init_workspace_manager(device)
    try:
        setups = {kv: _setup(kv, args, device) for kv in args.kv}
        layer = SimpleNamespace(
            _q_scale=torch.ones(1, device=device),
            _k_scale=torch.ones(1, device=device),
            _v_scale=torch.ones(1, device=device),
        )
        steps = {
            "decode": ([1] * args.batch, [args.context] * args.batch),
            f"verify-{args.verify}": (
                [args.verify] * args.batch,
                [args.context] * args.batch,
            ),
            "mixed": (
                [1] * args.batch + [args.chunk],
                [args.context] * (args.batch + 1),
            ),
        }
        results: dict[str, dict] = {kv: {} for kv in args.kv}
        for step, (query_lens, context_lens) in steps.items():
            # The warm-up's batches: block tables at block 0, read only.
            cam = _warmup_batch(query_lens, context_lens, BLOCK_SIZE, device)
            n = cam.num_actual_tokens
            query = torch.zeros(n, NUM_HEADS, HEAD_SIZE, dtype=torch.bfloat16)
            query = query.to(device)
            key = torch.zeros(n, NUM_KV_HEADS, HEAD_SIZE, dtype=torch.bfloat16)
            key = key.to(device)
            output = torch.empty_like(query)
            build_s = {kv: [] for kv in args.kv}
            forward_s = {kv: [] for kv in args.kv}
            for i in range(args.warmup + args.steps):
                for kv, (builder, impls, kv_cache) in setups.items():
                    calls.kv = kv
                    if args.launch:
                        torch.accelerator.synchronize()
                        if args.busy_ms:
                            # Queue the step behind a kernel that spins: a
                            # step that waits for the device shows it in
                            # its time.
                            torch.cuda._sleep(
                                int(args.busy_ms * 1e6 * SPIN_CYCLES_PER_NS)
                            )
                    t0 = time.perf_counter()
                    meta = builder.build(0, cam)
                    t1 = time.perf_counter()
                    for impl in impls:
                        impl.forward(layer, query, key, key, kv_cache, meta, output)
                    t2 = time.perf_counter()
                    if i >= args.warmup:
                        build_s[kv].append(t1 - t0)
                        forward_s[kv].append(t2 - t1)
            for kv in args.kv:
                build_us = 1e6 * statistics.median(build_s[kv])
                forward_us = 1e6 * statistics.median(forward_s[kv])
                results[kv][step] = {
                    "build_us": round(build_us, 1),
                    "forward_us_per_layer": round(forward_us / args.layers, 1),
                    "step_us": round(build_us + forward_us, 1),
                }
        for kv in args.kv:
            results[kv]["launches_stubbed"] = calls.by_kv[kv]
        return results
    finally:
        workspace.reset_workspace_manager()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    p.add_argument("--kv", nargs="+", default=["bf16", "int8"], choices=KV_DTYPES)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--context", type=int, default=4096)
    p.add_argument("--verify", type=int, default=6)
    p.add_argument("--chunk", type=int, default=512)
    p.add_argument("--num-blocks", type=int, default=64)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--launch", action="store_true", help="run the kernels (CUDA)")
    p.add_argument(
        "--busy-ms",
        type=float,
        default=0.0,
        help="with --launch: queue each step behind a kernel that keeps the GPU "
        "busy this long, so that a step whose host side waits for the device "
        "(a synchronising copy, .item()) takes at least this long",
    )
    p.add_argument("--output", help="write the results as JSON here")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        if args.launch:
            p.error("--launch needs a CUDA device")
        # The launchers' Python imports Triton's language; without a GPU,
        # Triton has a driver only in its interpreter, and vLLM replaces
        # Triton by a placeholder unless exactly one driver is active.
        os.environ.setdefault("TRITON_INTERPRET", "1")
        os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    results = measure(args)
    report = {"args": vars(args), "results": results}
    if args.output:
        with open(args.output, "w") as f:
            json.dump(report, f, indent=1)
    steps = [k for k in results[args.kv[0]] if k != "launches_stubbed"]
    print(f"{'step':<12}" + "".join(f"{kv + ' us':>14}" for kv in args.kv), end="")
    print("   (builder + forward of all layers, median)")
    for step in steps:
        row = "".join(f"{results[kv][step]['step_us']:>14.1f}" for kv in args.kv)
        print(f"{step:<12}{row}")
    if "bf16" in results and "int8" in results:
        for step in steps:
            ratio = results["int8"][step]["step_us"] / results["bf16"][step]["step_us"]
            print(f"int8 / bf16 {step}: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
