"""Launch the token-split verify kernel (ts_verify.py) through the series'
launcher a few times for Nsight Compute: batch $BATCH (1), context $CTX
(131072), $QLEN (16) tokens, block 16; settings as ts_ab.py's TS_SETTINGS."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
from breakdown import SERIES_REDUCE, SERIES_VERIFY, bench, bench_args, kernels  # noqa: E402
from ts_ab import settings  # noqa: E402

import ts_verify  # noqa: E402

args = bench_args()
q = int(os.environ.get("QLEN", 16))
case = bench.Case(args, int(os.environ.get("BATCH", 1)), int(os.environ.get("CTX", 131072)), q, 16)
fn = bench.make_impls(case, args)["int8_split_kv"][0]
with kernels(ts_verify.TokenSplitVerify(SERIES_VERIFY, 6 * q, **settings()), SERIES_REDUCE):
    for i in range(3):
        fn(i % case.copies)
torch.accelerator.synchronize()
