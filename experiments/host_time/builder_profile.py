# SPDX-License-Identifier: Apache-2.0
"""Where the INT8 builder's host time goes in a mixed step on a GPU host
(issue 21): host_time.py's setup with the real device, the builder alone
timed and profiled (cProfile, by own time), then the pieces it is made of
timed one by one; last, each builder timed per call while the GPU queue runs
BUSY_MS (default 20) ahead of the host, as in an engine step, with the CUDA
API calls that the torch profiler sees in those builds (a pinned-memory
allocation or a blocking copy would show there).  Writes
$OUT/builder_profile.txt.

    python3 experiments/host_time/builder_profile.py
"""

import cProfile
import io
import os
import pstats
import sys
import timeit
from types import SimpleNamespace

import torch

sys.path.insert(
    0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "e2e")
)
import host_time as ht  # noqa: E402


def best(fn, n=300) -> float:
    for _ in range(30):
        fn()
    return min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6


def main() -> None:
    from vllm.v1.worker import workspace

    from vllm.model_executor.warmup.triton_attn_warmup import _warmup_batch
    from vllm.v1.attention.ops.triton_int8_sectioned_prefill import (
        build_sectioned_prefill_metadata,
    )
    from vllm.v1.attention.ops.triton_int8_split_kv_attention import (
        select_int8_split_kv_geometry,
    )

    # DEV=cpu: a dry run of the script without a GPU (no pinned pieces).
    dev = torch.device(os.environ.get("DEV", "cuda"))
    workspace.init_workspace_manager(dev)
    lines = []
    builders = _builders(dev)
    for kv, b in builders.items():
        for name, (ql, cl) in {
            "decode": ([1] * 8, [4096] * 8),
            "mixed": ([1] * 8 + [512], [4096] * 9),
        }.items():
            cam = _warmup_batch(ql, cl, ht.BLOCK_SIZE, dev)
            us = best(lambda b=b, cam=cam: b.build(0, cam))
            lines.append(f"{kv} {name} build: {us:.1f} us")
        if kv == "int8":
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(300):
                b.build(0, cam)
            pr.disable()
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
            lines.append(s.getvalue())
            qsl = cam.query_start_loc_cpu
            sl = cam.seq_lens_cpu_upper_bound
            seq_lens = cam.seq_lens
            pieces = {
                "build_sectioned_prefill_metadata": lambda: build_sectioned_prefill_metadata(
                    qsl, sl[:9], first_request=8, device=dev
                ),
                "torch.tensor(pin_memory=True)": lambda: torch.tensor(
                    [[[0, 512], [0, 4608]]], dtype=torch.int32, pin_memory=True
                ),
                "torch.tensor(pageable)": lambda: torch.tensor(
                    [[[0, 512], [0, 4608]]], dtype=torch.int32
                ),
                "pinned .to(cuda, non_blocking)": lambda: torch.tensor(
                    [[[0, 512], [0, 4608]]], dtype=torch.int32, pin_memory=True
                ).to(dev, non_blocking=True),
                "numpy split": lambda: int(
                    (__import__("numpy").diff(qsl[:10].numpy()) > 16).argmax()
                ),
                "select geometry": lambda: select_int8_split_kv_geometry(
                    1,
                    4097,
                    8,
                    8,
                    1024,
                    num_queries_per_kv=ht.NUM_HEADS // ht.NUM_KV_HEADS,
                    num_kv_heads=ht.NUM_KV_HEADS,
                ),
                "cuda slice": lambda: seq_lens[:8],
            }
            for k, fn in pieces.items():
                if dev.type != "cuda" and ("pin" in k or "cuda" in k):
                    continue
                lines.append(f"  {k:40s} {best(fn):8.1f} us")
    if dev.type == "cuda":
        lines += busy_queue(dev, builders)
    text = "\n".join(lines)
    print(text)
    with open(
        os.path.join(os.environ.get("OUT", "/tmp"), "builder_profile.txt"), "w"
    ) as f:
        f.write(text)


def _builders(dev: torch.device) -> dict:
    """host_time.py's BF16 and INT8 Triton metadata builders (its setup
    without layers and with a one-block cache)."""
    args = SimpleNamespace(layers=0, batch=8, num_blocks=1)
    return {kv: ht._setup(kv, args, dev)[0] for kv in ("bf16", "int8")}


def busy_queue(dev: torch.device, builders: dict) -> list[str]:
    """Each builder's host time per mixed-step call with the device queue
    BUSY_MS ahead, and the host-side events of such calls."""
    from torch.profiler import ProfilerActivity, profile

    from vllm.model_executor.warmup.triton_attn_warmup import _warmup_batch

    busy_ms = float(os.environ.get("BUSY_MS", 20))
    cycles = int(busy_ms * 1e6 * ht.SPIN_CYCLES_PER_NS)
    lines = [f"\nbusy queue: {busy_ms} ms of GPU work queued before each build"]
    cam = _warmup_batch([1] * 8 + [512], [4096] * 9, ht.BLOCK_SIZE, dev)
    for kv, b in builders.items():
        for queue in ("idle", "busy"):
            # Busy: the queue only grows (no sync in the loop), so the copies
            # of earlier builds are still pending, as when the host runs a
            # step ahead of the device.
            times = []
            torch.cuda.synchronize()
            for _ in range(40):
                if queue == "busy":
                    torch.cuda._sleep(cycles)
                else:
                    torch.cuda.synchronize()
                t0 = timeit.default_timer()
                b.build(0, cam)
                times.append((timeit.default_timer() - t0) * 1e6)
            torch.cuda.synchronize()
            times = sorted(times[10:])
            lines.append(
                f"{kv} mixed build, queue {queue}: median {times[len(times) // 2]:.1f}"
                f" us, max {times[-1]:.1f} us"
            )
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                torch.cuda._sleep(cycles)
                b.build(0, cam)
            torch.cuda.synchronize()
        api = [
            e
            for e in prof.key_averages()
            if e.key.startswith("cuda") or "HostAlloc" in e.key or "aten::" in e.key
        ]
        api.sort(key=lambda e: -e.cpu_time_total)
        lines.append(f"  {kv}: host-side events over 10 busy builds (total us, count)")
        for e in api[:12]:
            lines.append(f"    {e.key:45s} {e.cpu_time_total:10.1f} {e.count:5d}")
    return lines


if __name__ == "__main__":
    main()
