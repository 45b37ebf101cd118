# SPDX-License-Identifier: Apache-2.0
"""Issue 24, deliverable 5: our split-KV INT8 kernel against vLLM 0.33.0's
unified Triton kernel (its split-K "3D" path takes verify steps of up to 8
query tokens) on the same planar INT8 cache, under the 0.26.0 runtime.

0.33.0 pins torch 2.14, which the lent GPU image lacks, but its attention
kernel is Python: `extract` copies its two files out of the pinned 0.33.0
sdist (sha256 checked against requirements/upstream.toml) into an ignored
folder (never committed), and `check` / `bench` import them from there.

    # here (CPU): extract, then check on the Triton interpreter
    .venv/bin/python experiments/second_base/unified_033_ab.py extract
    TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES= \\
        .venv/bin/python experiments/second_base/unified_033_ab.py check
    # on the GPU (carry .carry/v033ops): correctness, then the table
    python experiments/second_base/unified_033_ab.py check
    python experiments/second_base/unified_033_ab.py bench --json $OUT/ab.json

The cache is the fork's planar layout (0005), which 0.33.0's unified kernel
reads through the same views (0005's tests pass on 0.33.0).  Timing: CUDA
graphs of 24 calls cycling through cache copies larger than L2, median of
15 replays (benchmarks/kernels/benchmark_int8_kv_attention.py's method).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import sys
import tarfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OPS_DIR = ROOT / ".carry" / "v033ops"
PACKAGE = "v033ops"
FILES = ("triton_unified_attention.py", "triton_attention_helpers.py")
# 0.33.0's 3D path takes verify steps of up to this many query tokens.
MAX_3D_QUERY_LEN = 8
HELPER_IMPORT = "from vllm.v1.attention.ops.triton_attention_helpers import"


def extract(sdist: Path, out: Path) -> None:
    pin = tomllib.loads((ROOT / "requirements/upstream.toml").read_text())
    want = pin["bases"]["0.33.0"]["sdist"]["sha256"]
    got = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if got != want:
        raise SystemExit(f"{sdist}: sha256 {got}, the pin says {want}")
    pkg = out / PACKAGE
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    with tarfile.open(sdist) as tar:
        for name in FILES:
            member = f"vllm-0.33.0/vllm/v1/attention/ops/{name}"
            text = tar.extractfile(member).read().decode()
            # The helpers come from this package, not from the installed vLLM.
            text = text.replace(HELPER_IMPORT, "from .triton_attention_helpers import")
            (pkg / name).write_text(text)
    print(f"extracted {', '.join(FILES)} of {sdist.name} into {pkg}")


def load_unified_033():
    if not (OPS_DIR / PACKAGE / FILES[0]).is_file():
        raise SystemExit(f"{OPS_DIR}: run `extract` first")
    sys.path.insert(0, str(OPS_DIR))
    from v033ops import triton_unified_attention as mod  # noqa: E402

    return mod


def load_benchmark():
    path = ROOT / "benchmarks/kernels/benchmark_int8_kv_attention.py"
    spec = importlib.util.spec_from_file_location("bench_int8", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def use_unified_033(bench, mod, max_query_len: int) -> None:
    """Make the benchmark's own unified variant (its "triton_int8_unified",
    same arguments as the Triton backend passes) call 0.33.0's kernel, with
    the one difference 0.33.0 needs: its 3D scratch holds a row per query
    token, not per request, so the benchmark's per-request buffers are
    swapped for buffers of ``threshold * max_query_len`` rows (allocated on
    the first call, which comes before any graph capture, then reused)."""
    import torch

    scratch = {}

    def unified_attention(**kw):
        out = kw["softmax_segm_output"]
        key = out.shape
        if key not in scratch:
            rows = kw["seq_threshold_3D"] * max_query_len
            scratch[key] = (
                torch.empty(rows, *out.shape[1:], device=out.device),
                torch.empty(rows, *kw["softmax_segm_max"].shape[1:], device=out.device),
                torch.empty(rows, *kw["softmax_segm_expsum"].shape[1:], device=out.device),
            )
        segm = scratch[key]
        kw.update(
            softmax_segm_output=segm[0],
            softmax_segm_max=segm[1],
            softmax_segm_expsum=segm[2],
        )
        mod.unified_attention(**kw)

    bench.unified_attention = unified_attention


def _args(bench, **kw):
    ns = argparse.Namespace(
        num_q_heads=24,
        num_kv_heads=4,
        head_size=256,
        copy_bytes=4 << 30,
        with_unified=True,
    )
    vars(ns).update(kw)
    return ns


def small_case(bench, args, batch, ctx, qlen, block):
    """bench.Case on the CPU interpreter: float16 queries (the interpreter
    mis-computes bfloat16 dots), one cache copy."""
    import torch

    case = bench.Case.__new__(bench.Case)
    case.batch, case.ctx, case.qlen, case.bs = batch, ctx, qlen, block
    case.nq, case.nkv, case.hs = args.num_q_heads, args.num_kv_heads, args.head_size
    blocks_per_seq = -(-ctx // block)
    num_blocks = batch * blocks_per_seq
    g = torch.Generator().manual_seed(0)
    case.q = torch.randn(batch * qlen, case.nq, case.hs, generator=g).half()
    case.cu_q = torch.arange(0, (batch + 1) * qlen, qlen, dtype=torch.int32)
    case.seq_lens = torch.full((batch,), ctx, dtype=torch.int32)
    case.block_table = (
        torch.randperm(num_blocks, generator=g).view(batch, blocks_per_seq).int()
    )
    k = torch.randn(num_blocks, block, case.nkv, case.hs, generator=g).half()
    v = torch.randn(num_blocks, block, case.nkv, case.hs, generator=g).half()
    case.int8 = [case._quantize(k, v)]
    case.copies = case.copies_bf16 = 1
    case.bf16 = [(k, v)]
    case.out = torch.empty_like(case.q)
    case.scale = case.hs**-0.5
    return case


def check(small: bool) -> int:
    """Both kernels against a float64 reference on the first request."""
    bench = load_benchmark()
    use_unified_033(bench, load_unified_033(), MAX_3D_QUERY_LEN)
    if small:
        bench.DEVICE = "cpu"
        args = _args(bench, num_q_heads=8, num_kv_heads=2, head_size=128, copy_bytes=1)
        cases = [(2, 96, q) for q in (1, 2, 4, 8)]
    else:
        args = _args(bench)
        cases = [(b, c, q) for b in (1, 4) for c in (2000, 33000) for q in (1, 3, 6, 8)]
    block = 16
    worst = 0.0
    for batch, ctx, qlen in cases:
        if small:
            case = small_case(bench, args, batch, ctx, qlen, block)
        else:
            case = bench.Case(args, batch, ctx, qlen, block)
        ref = case.ref_first_request(*case.dequant_first_request())
        impls = bench.make_impls(case, args)
        runs = {
            "split_kv": impls["int8_split_kv"][0],
            "unified_033": impls["triton_int8_unified"][0],
        }
        for name, fn in runs.items():
            case.out.zero_()
            fn(0)
            err = bench.rel_err(case.out[:qlen], ref)
            worst = max(worst, err)
            print(f"batch {batch} ctx {ctx} q {qlen} {name}: rel err {err:.2e}")
    ok = worst < 2e-2
    print(f"check: worst relative error {worst:.2e} ({'ok' if ok else 'TOO LARGE'})")
    return 0 if ok else 1


def bench_table(json_path: str | None) -> int:
    import torch

    bench = load_benchmark()
    use_unified_033(bench, load_unified_033(), MAX_3D_QUERY_LEN)
    args = _args(bench)
    rows = []
    for ctx in (32768, 131072):
        for batch in (1, 8):
            for qlen in (1, 2, 3, 4, 6, 8):
                case = bench.Case(args, batch, ctx, qlen, 16)
                impls = bench.make_impls(case, args)
                runs = {
                    "split_kv": (impls["int8_split_kv"][0], case.copies),
                    "unified_033": (impls["triton_int8_unified"][0], case.copies),
                }
                fa = next((k for k in impls if k.startswith("fa")), None)
                if fa:
                    runs[fa] = (impls[fa][0], case.copies_bf16)
                row = {"ctx": ctx, "batch": batch, "q": qlen}
                for name, (fn, copies) in runs.items():
                    row[name] = bench.time_graph(fn, copies)
                rows.append(row)
                print(json.dumps(row), flush=True)
                del case, impls, runs
                torch.cuda.empty_cache()
    fa = next((k for k in rows[0] if k.startswith("fa")), None)
    print(f"\n{'ctx':>7} {'b':>2} {'q':>2} {'split_kv':>9} {'0.33 unif':>9} {fa or '':>9}"
          "  unif/split")
    for r in rows:
        print(
            f"{r['ctx']:>7} {r['batch']:>2} {r['q']:>2} {r['split_kv']:>9.1f} "
            f"{r['unified_033']:>9.1f} {r.get(fa, float('nan')):>9.1f}"
            f"  {r['unified_033'] / r['split_kv']:.2f}"
        )
    if json_path:
        gpu = torch.cuda.get_device_name()
        Path(json_path).write_text(json.dumps({"gpu": gpu, "rows": rows}, indent=1))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("extract")
    ex.add_argument(
        "--sdist", type=Path, default=ROOT / ".cache/upstream/vllm-0.33.0.tar.gz"
    )
    ex.add_argument("--out", type=Path, default=OPS_DIR)
    sub.add_parser("check")
    b = sub.add_parser("bench")
    b.add_argument("--json", default=None)
    args = parser.parse_args()
    if args.cmd == "extract":
        extract(args.sdist, args.out)
        return 0
    if args.cmd == "check":
        return check(small=os.environ.get("TRITON_INTERPRET") == "1")
    return bench_table(args.json)


if __name__ == "__main__":
    sys.exit(main())
