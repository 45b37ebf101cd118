# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Regression check: per-token-head scale views first set up in a live request.

``TritonAttentionImpl._ensure_scale_caches`` builds float32 views over the
scale slots of the INT8 per-token-head KV cache.  In a hybrid model the raw
KV storage is shared with Gated DeltaNet state, and vLLM 0.26.0 wrote 1.0
through those views (``fill_``), overwriting live recurrent state whenever
the views were first built while a request was running.

This script runs the tiny model with an ``int8_per_token_head`` cache twice,
each in its own process and eager (so attention runs in Python every step):
normally, and with every impl's ``_k_scale_cache``/``_v_scale_cache`` set to
None after engine init, so that their setup runs inside the first request.
The outputs must be identical.  On pristine vLLM 0.26.0 they diverge from
step 1; on the fork they must not.  Exit code 1 on any divergence.

Example (on a GPU)::

    python benchmarks/e2e/scale_view_regression.py --results-dir benchmarks/results/e2e
"""

import argparse
import os
import sys

from e2e_common import (
    engine_settings,
    ensure_models,
    first_divergence,
    log,
    make_prompts,
    model_vocab_size,
    save_json,
    script_parser,
    spawn,
)

GREEDY_SCRIPT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "greedy_compare.py"
)


def run(args: argparse.Namespace) -> dict:
    model, drafter = ensure_models(
        args.model, args.drafter, "tiny", args.results_dir, args.load_format
    )
    prompts = make_prompts(args.prompt_lengths, model_vocab_size(model), seed=1)
    base = {
        "model": model,
        "kv": "int8-triton",
        "prompts": prompts,
        "max_tokens": args.max_tokens,
        "max_model_len": max(args.prompt_lengths) + args.max_tokens + 64,
        # Eager: the views are rebuilt by Python code in the forward pass.
        "enforce_eager": True,
        "modes": ["batch"],
        "drafter": drafter if args.dflash else None,
        **engine_settings(args),
    }
    normal = spawn(GREEDY_SCRIPT, dict(base, name="int8-normal"))
    dropped = spawn(
        GREEDY_SCRIPT, dict(base, name="int8-views-dropped", drop_scale_views=True)
    )
    rows = []
    for i, (a, b) in enumerate(zip(normal["runs"]["batch"], dropped["runs"]["batch"])):
        step = first_divergence(a["tokens"], b["tokens"])
        rows.append({"prompt": i, "length": len(prompts[i]), "first_divergence": step})
        log(f"prompt {i} ({len(prompts[i])} tokens): first divergence {step}")
    report = {
        "passed": all(r["first_divergence"] is None for r in rows),
        "dflash": bool(args.dflash),
        "rows": rows,
        "provenance": normal["provenance"],
        "tokens": {"normal": normal["runs"], "dropped": dropped["runs"]},
    }
    save_json(os.path.join(args.results_dir, "scale_view_regression.json"), report)
    return report


def parser() -> argparse.ArgumentParser:
    p = script_parser(
        __doc__,
        model_help="tiny target folder (default: write one)",
        max_num_batched_tokens=512,
    )
    p.add_argument("--prompt-lengths", type=int, nargs="+", default=[16, 300, 1500])
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument(
        "--dflash",
        action="store_true",
        help="with the drafter (its context-KV writes set up views too)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    report = run(parser().parse_args(argv))
    log("PASS" if report["passed"] else "FAIL: outputs differ")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
