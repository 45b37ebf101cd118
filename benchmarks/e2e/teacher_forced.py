# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Teacher-forced quality: INT8 per-token-head KV against BF16 FlashAttention.

Feeds four pinned 32K-token documents to each configuration with
``prompt_logprobs`` (so every run scores the same tokens, whatever it would
have generated) and reports, against BF16 on FLASH_ATTN:

- ΔNLL: change of the mean negative log-likelihood of the documents;
- mean |Δ logprob| of the document tokens;
- top-1 agreement: how often both runs rank the same next token first;

for INT8 on TRITON_ATTN next to BF16 on TRITON_ATTN, whose difference from
FLASH_ATTN is the scale of "numerically equivalent".  Also per 4K-position
bins, to show whether the error grows with position.

The harness refuses to mix inputs: it checksums the documents (pinned by
sha256 below), the installed vLLM's attention sources and its own scripts at
start, re-checks them before every configuration and at the end, and each
engine process reports the digests of the code it actually imported.  Any
change stops the run with exit code 2.

Example (on a GPU)::

    python benchmarks/e2e/teacher_forced.py --results-dir benchmarks/results/e2e
"""

import argparse
import hashlib
import math
import os
import sys

from e2e_common import (
    engine_kwargs,
    engine_settings,
    ensure_models,
    log,
    make_hybrid_model,
    maybe_run_worker,
    provenance,
    read_path_counter,
    save_json,
    script_parser,
    spawn,
)

NUM_DOCS, DOC_TOKENS, DOC_SEED = 4, 32768, 20261129
# Token ids below 8184 are ordinary tokens of every preset's vocabulary.
DOC_VOCAB = 8184
DOCS_SHA256 = "a9e62bd7566a30ae8c6a6d2e7f548cb09e5e8a34c42e17bcdede30009a45329f"
BIN = 4096


class InputsChanged(RuntimeError):
    pass


def make_docs() -> list[list[int]]:
    """The pinned documents; raises if they do not hash to DOCS_SHA256."""
    import torch

    gen = torch.Generator().manual_seed(DOC_SEED)
    docs = torch.randint(0, DOC_VOCAB, (NUM_DOCS, DOC_TOKENS), generator=gen)
    digest = hashlib.sha256(docs.to(torch.int32).numpy().tobytes()).hexdigest()
    if digest != DOCS_SHA256:
        raise InputsChanged(f"documents hash to {digest}, pinned {DOCS_SHA256}")
    return docs.tolist()


def worker(cfg: dict) -> dict:
    """Child process: prompt logprobs of every document in one engine."""
    from vllm import LLM, SamplingParams

    llm = LLM(**engine_kwargs(cfg))
    params = SamplingParams(max_tokens=1, prompt_logprobs=1, temperature=0.0)
    docs = []
    for i, doc in enumerate(cfg["docs"]):
        out = llm.generate([{"prompt_token_ids": doc}], params, use_tqdm=False)[0]
        token_lp, top1 = [], []
        # Position 0 has no prediction.
        for tok, entry in zip(doc[1:], out.prompt_logprobs[1:]):
            token_lp.append(entry[tok].logprob)
            top1.append(min(entry.items(), key=lambda kv: kv[1].rank)[0])
        docs.append({"token_logprobs": token_lp, "top1": top1})
        log(f"{cfg['name']}: document {i + 1}/{len(cfg['docs'])}")
    return {
        "name": cfg["name"],
        "docs": docs,
        "path_counter": read_path_counter(),
        "provenance": provenance(),
    }


def metrics(ref: dict, other: dict) -> dict:
    lp_ref = [x for d in ref["docs"] for x in d["token_logprobs"]]
    lp_oth = [x for d in other["docs"] for x in d["token_logprobs"]]
    t_ref = [x for d in ref["docs"] for x in d["top1"]]
    t_oth = [x for d in other["docs"] for x in d["top1"]]
    n = len(lp_ref)
    out = {
        "delta_nll": (sum(lp_ref) - sum(lp_oth)) / n,
        "mean_abs_delta_logprob": sum(abs(a - b) for a, b in zip(lp_ref, lp_oth)) / n,
        "top1_agreement": sum(a == b for a, b in zip(t_ref, t_oth)) / n,
        "bins": [],
    }
    per_doc = DOC_TOKENS - 1
    for start in range(0, per_doc, BIN):
        idx = [
            d * per_doc + j
            for d in range(NUM_DOCS)
            for j in range(start, min(start + BIN, per_doc))
        ]
        out["bins"].append(
            {
                "start": start,
                "mean_abs_delta_logprob": sum(abs(lp_ref[i] - lp_oth[i]) for i in idx)
                / len(idx),
                "top1_agreement": sum(t_ref[i] == t_oth[i] for i in idx) / len(idx),
            }
        )
    return out


def check_unchanged(start: dict, docs_sha: str) -> None:
    now = provenance()
    changed = [k for k in start if start[k] != now.get(k)]
    if changed:
        raise InputsChanged(f"changed since the start of the run: {changed}")
    if docs_sha != DOCS_SHA256:
        raise InputsChanged("documents changed")


def plot(path: str, results: dict) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib not installed: no plot")
        return
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, m in results.items():
        xs = [b["start"] + BIN / 2 for b in m["bins"]]
        ax.plot(xs, [b["mean_abs_delta_logprob"] for b in m["bins"]], "o-", label=name)
    ax.set_xlabel("position")
    ax.set_ylabel("mean |Δ logprob| vs bf16-fa")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    log(f"wrote {path}")


def run(args: argparse.Namespace) -> dict:
    start = provenance()
    digest = start["vllm_attention_sha256"][:16]
    log(f"vLLM attention sources {digest} in {start['vllm_dir']}")
    docs = make_docs()
    model, _ = ensure_models(
        args.model, None, args.preset, args.results_dir, args.load_format
    )
    results = {}
    for name in ["bf16-fa", "bf16-triton", "int8-triton"]:
        check_unchanged(start, DOCS_SHA256)
        cfg = {
            "name": name,
            "kv": name,
            "model": model,
            "docs": docs,
            "max_model_len": DOC_TOKENS + 16,
            "max_num_seqs": 1,
            "enforce_eager": not args.cuda_graphs,
            **engine_settings(args),
        }
        results[name] = spawn(os.path.abspath(__file__), cfg)
        got = results[name]["provenance"]
        if got["vllm_attention_sha256"] != start["vllm_attention_sha256"]:
            raise InputsChanged(f"{name} ran vLLM attention code {got}, not {start}")
    check_unchanged(start, DOCS_SHA256)
    table = {
        f"{name} vs bf16-fa": metrics(results["bf16-fa"], results[name])
        for name in ("bf16-triton", "int8-triton")
    }
    for key, m in table.items():
        log(
            f"{key}: ΔNLL {m['delta_nll']:+.5f}  mean|Δlp| "
            f"{m['mean_abs_delta_logprob']:.5f}  top-1 {m['top1_agreement']:.4f}"
        )
    report = {
        "docs": {"count": NUM_DOCS, "tokens": DOC_TOKENS, "sha256": DOCS_SHA256},
        "model": model,
        "metrics": table,
        "mean_nll": {
            n: -sum(x for d in r["docs"] for x in d["token_logprobs"])
            / (NUM_DOCS * (DOC_TOKENS - 1))
            for n, r in results.items()
        },
        "path_counter": {n: r["path_counter"] for n, r in results.items()},
        "provenance": start,
    }
    assert all(math.isfinite(v) for v in report["mean_nll"].values())
    save_json(os.path.join(args.results_dir, "teacher_forced.json"), report)
    plot(os.path.join(args.results_dir, "teacher_forced.png"), table)
    return report


def parser() -> argparse.ArgumentParser:
    p = script_parser(
        __doc__,
        model_help="target folder (default: write --preset)",
        max_num_batched_tokens=4096,
        gpu_memory_utilization=0.6,
        drafter=False,
    )
    p.add_argument(
        "--preset", default="tiny", choices=sorted(make_hybrid_model.PRESETS)
    )
    p.add_argument("--cuda-graphs", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        run(args)
    except InputsChanged as e:
        log(f"REFUSING TO CONTINUE: {e}")
        return 2
    return 0


if __name__ == "__main__":
    maybe_run_worker(worker)
    sys.exit(main())
