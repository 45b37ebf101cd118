"""Pinned against pageable staging of the sectioned prefill's call bounds, host time with real launches (issue 21).

profile_launch.py (H100, 2026-12-06) put ~264 us of the INT8 mixed step's ~320-350 us builder time in the
``pin_memory()`` of the step's call bounds (a few hundred bytes), where builder_profile.py's tight loop had timed
pinning and copying at 12 us.  This runs host_time.py (--launch, its default 16 layers, batch 8, 100 steps) with the series'
pinned staging and with the bounds copied from pageable memory (``is_pin_memory_available`` patched to False in
the sectioned-prefill module), each with the GPU queue idle and 20 ms busy (a step that waited for the device would
take >= 20 ms), and the three step kinds' builder and per-layer times.
Needs a CUDA device and the fork installed.  Usage (repo root): python experiments/host_time/pin_ab.py [OUT_DIR]"""
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, "benchmarks/e2e")
import host_time  # noqa: E402
from vllm.v1.attention.ops import triton_int8_sectioned_prefill as sp  # noqa: E402

out = sys.argv[1] if len(sys.argv) > 1 else "/tmp"
pinned = sp.is_pin_memory_available
res = {}
for rep in range(2):
    for staging in ("pinned", "pageable"):
        sp.is_pin_memory_available = pinned if staging == "pinned" else (lambda: False)
        for busy in (0.0, 20.0):
            key = f"{staging}_busy{int(busy)}_rep{rep}"
            path = os.path.join(tempfile.mkdtemp(), "host_time.json")
            before = torch.cuda.host_memory_stats()
            host_time.main(["--launch", "--steps", "100", "--warmup", "10", "--busy-ms", str(busy), "--output", path])
            after = torch.cuda.host_memory_stats()
            res[key] = json.load(open(path))["results"]
            # How often the pinned allocator called cudaHostAlloc (a miss of its cache) during the run.
            res[key]["host_alloc"] = {k: after[k] - before.get(k, 0) for k in after
                                      if "alloc" in k and isinstance(after[k], (int, float))}
            print(key, "host allocator:", res[key]["host_alloc"], flush=True)
            r = res[key]
            print(key, "int8 mixed build", r["int8"]["mixed"]["build_us"], "us, step", r["int8"]["mixed"]["step_us"],
                  "| bf16 mixed step", r["bf16"]["mixed"]["step_us"], flush=True)
json.dump(res, open(os.path.join(out, "pin_ab.json"), "w"), indent=1)
print("\nstaging  busy  rep | int8 build us decode/verify/mixed | int8 step / bf16 step decode, verify, mixed")
for key, r in res.items():
    steps = ("decode", "verify-6", "mixed")
    builds = "/".join(str(r["int8"][s]["build_us"]) for s in steps)
    ratios = ", ".join(f"{r['int8'][s]['step_us'] / r['bf16'][s]['step_us']:.2f}" for s in steps)
    print(f"{key:<24} | {builds:<24} | {ratios}")
