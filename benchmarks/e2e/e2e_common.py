# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""Shared pieces of the end-to-end INT8 KV-cache scripts in this folder.

Every engine configuration runs in its own subprocess: a vLLM engine does not
give its GPU memory back cleanly within a process.  A script calls
:func:`spawn` with a JSON-able config; the child re-enters the same script
with ``--_worker`` and calls the script's ``worker(config)`` function.

Settings the engines share (Qwen3.5 text-only, no tokenizer, GDN prefill in
Triton, ...) live in :func:`engine_kwargs`.
"""

import argparse
import hashlib
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "models"))

import make_hybrid_model  # noqa: E402

# Engine configurations by name: (attention backend, KV-cache dtype).
KV_CONFIGS = {
    "bf16-fa": ("FLASH_ATTN", "auto"),
    "bf16-triton": ("TRITON_ATTN", "auto"),
    "int8-triton": ("TRITON_ATTN", "int8_per_token_head"),
}

# vLLM load formats the scripts offer: the model's own weights, or random
# ones from vLLM's dummy loader (config.json is all it reads).
LOAD_FORMATS = ("auto", "dummy")
# Online weight quantizations the harness passes to vLLM (--quantization).
QUANTIZATIONS = ("fp8",)

# The Triton backend's attention launchers, by the path name the reports use.
# count_attention_paths() wraps them in the backend modules that call them,
# in the engine's process (eager steps only: CUDA-graph replays run no
# Python).
ATTENTION_PATHS = {
    "int8_split_kv_attention": "split_kv",
    "sectioned_prefill_attention": "sectioned_prefill",
    "unified_attention": "unified",
}
_PATH_COUNTS: dict[str, int] | None = None


def log(msg: str) -> None:
    """Progress line with a timestamp (long GPU runs print as they go)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------
# Inputs


def make_prompts(lengths: list[int], vocab_size: int, seed: int) -> list[list[int]]:
    """Deterministic token-id prompts, drawn from the ordinary text tokens."""
    import torch

    limit = make_hybrid_model.prompt_vocab_size(vocab_size)
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, limit, (n,), generator=gen).tolist() for n in lengths]


def model_vocab_size(model_dir: str) -> int:
    config = json.loads(Path(model_dir, "config.json").read_text())
    return config["text_config"]["vocab_size"]


def ensure_models(
    model: str | None,
    drafter: str | None,
    preset: str,
    results_dir: str,
    load_format: str = "auto",
) -> tuple[str, str]:
    """Use the given model folders, or write the preset's into results_dir.

    With ``load_format="dummy"`` (vLLM's random weights) the preset is
    written config-only, to ``models/<preset>-config-only``.  With
    ``"auto"`` a given folder must hold weights.
    """
    if model is not None:
        if load_format != "dummy":
            _require_weights(model)
        return model, drafter or f"{model.rstrip('/')}-dflash"
    config_only = load_format == "dummy"
    out = os.path.join(
        results_dir, "models", f"{preset}-config-only" if config_only else preset
    )
    if not os.path.exists(os.path.join(out, "config.json")):
        what = "config-only" if config_only else "random"
        log(f"writing {what} {preset} model + DFlash drafter to {out}")
        make_hybrid_model.make_models(
            preset, out, drafter=True, config_only=config_only
        )
    return out, drafter or f"{out}-dflash"


def _require_weights(model: str) -> None:
    """Stop early when a local model folder has a config and no weights."""
    folder = Path(model)
    if (
        (folder / "config.json").exists()
        and not any(folder.glob("*.safetensors"))
        and not any(folder.glob("*.bin"))
    ):
        raise SystemExit(
            f"{model} has no weights (written with --config-only?): run with "
            "--load-format dummy"
        )


# The successor test model: random logits of std 2 nats, a successor logit
# of 40 nats and each layer's residual writes scaled by 0.3.  Its greedy
# top-2 margins lie around 5-25 nats and move by about 3 nats (std) with
# the context (HF transformers' Qwen3.5 on the CPU, 3 prompts x 96 steps).
SUCCESSOR_MODEL = {"logit_std": 2.0, "residual_scale": 0.3, "successor_logit": 40.0}


def ensure_successor_model(
    model: str | None,
    results_dir: str,
    drafter: bool = False,
    load_format: str = "auto",
) -> str:
    """The given successor model folder, or write the default one (with a
    DFlash drafter at ``<model>-dflash`` if asked).  The successor model is
    its weights: vLLM's dummy loader would replace them."""
    if load_format == "dummy":
        raise SystemExit(
            "the successor model's behaviour is in its weights; "
            "--load-format dummy would replace them with random ones"
        )
    if model is None:
        model = os.path.join(results_dir, "models", "tiny-successor")
        missing_drafter = drafter and not os.path.exists(
            os.path.join(f"{model}-dflash", "config.json")
        )
        if missing_drafter or not os.path.exists(os.path.join(model, "successor.json")):
            log(f"writing the successor test model to {model}")
            make_hybrid_model.make_models(
                "tiny",
                model,
                logit_std=SUCCESSOR_MODEL["logit_std"],
                residual_scale=SUCCESSOR_MODEL["residual_scale"],
                successor=make_hybrid_model.SuccessorHead(
                    SUCCESSOR_MODEL["successor_logit"]
                ),
                drafter=drafter,
            )
    if not os.path.exists(os.path.join(model, "successor.json")):
        raise SystemExit(
            f"{model} has no successor.json: write it with make_hybrid_model.py "
            "--successor-logit"
        )
    return model


# --------------------------------------------------------------------------
# Command line


def script_parser(
    doc: str,
    *,
    model_help: str,
    max_num_batched_tokens: int,
    gpu_memory_utilization: float = 0.5,
    drafter: bool = True,
) -> argparse.ArgumentParser:
    """Parser with the arguments every script here shares.

    Args:
        doc: The script's docstring: first paragraph as description, the
            rest as epilog.
        model_help: Help of ``--model`` (which model the script writes when
            none is given).
        max_num_batched_tokens: Default of ``--max-num-batched-tokens``.
        gpu_memory_utilization: Default of ``--gpu-memory-utilization``.
        drafter: Whether the script takes ``--drafter``.

    """
    p = argparse.ArgumentParser(
        description=doc.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=doc.split("\n\n", 1)[1],
    )
    p.add_argument("--model", help=model_help)
    if drafter:
        p.add_argument(
            "--drafter", help="DFlash drafter folder (default <model>-dflash)"
        )
    p.add_argument("--results-dir", default="benchmarks/results/e2e")
    p.add_argument("--max-num-batched-tokens", type=int, default=max_num_batched_tokens)
    p.add_argument(
        "--gpu-memory-utilization", type=float, default=gpu_memory_utilization
    )
    p.add_argument(
        "--kv-cache-memory-gib",
        type=float,
        default=None,
        help="fixed KV-cache size per GPU instead of profiling (lets several "
        "engines share one GPU)",
    )
    p.add_argument(
        "--tensor-parallel-size",
        type=int,
        default=1,
        help="GPUs per engine (vLLM's tensor parallelism)",
    )
    p.add_argument(
        "--async-scheduling",
        choices=("auto", "on", "off"),
        default="auto",
        help="vLLM's asynchronous scheduling (host work of the next step "
        "overlapping the GPU work of this one); auto lets vLLM decide",
    )
    p.add_argument(
        "--load-format",
        choices=LOAD_FORMATS,
        default="auto",
        help="vLLM's load_format: auto reads the model's weights; dummy gives "
        "random weights and needs only config.json (make_hybrid_model.py "
        "--config-only): speed and memory only, no quality",
    )
    p.add_argument(
        "--block-size",
        type=int,
        default=None,
        help="vLLM's --block-size; on a hybrid model the attention block is "
        "the smallest multiple of it that holds a Gated DeltaNet state, so 64 "
        "makes it a multiple of 64 (default: vLLM's choice)",
    )
    p.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        default=None,
        help="vLLM's online weight quantization of the target (fp8: the linear "
        "layers' weights quantized per tensor at load time, about half the "
        "BF16 bytes; works with --load-format dummy); default: BF16 weights",
    )
    return p


def engine_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The engine settings of :func:`script_parser`'s arguments (cfg keys)."""
    return {
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "kv_cache_memory_gib": args.kv_cache_memory_gib,
        "tensor_parallel_size": args.tensor_parallel_size,
        "async_scheduling": {"auto": None, "on": True, "off": False}[
            args.async_scheduling
        ],
        "load_format": args.load_format,
        "quantization": args.quantization,
        "block_size": args.block_size,
    }


# --------------------------------------------------------------------------
# Engine


def engine_kwargs(cfg: dict[str, Any]) -> dict[str, Any]:
    """``LLM``/``AsyncEngineArgs`` keyword arguments for one configuration.

    ``cfg`` keys: model, kv (a KV_CONFIGS name), drafter (folder or None),
    num_spec_tokens, max_model_len, max_num_batched_tokens, enforce_eager,
    gpu_memory_utilization, kv_cache_memory_gib, load_format (also the
    drafter's: vLLM loads it with the target's load config), quantization
    (None or one of QUANTIZATIONS: vLLM's online weight quantization),
    block_size (None: vLLM's choice).
    """
    load_format = cfg.get("load_format", "auto")
    if load_format not in LOAD_FORMATS:
        raise ValueError(f"load_format {load_format!r} not in {LOAD_FORMATS}")
    backend, kv_dtype = KV_CONFIGS[cfg["kv"]]
    kwargs: dict[str, Any] = dict(
        model=cfg["model"],
        # vLLM 0.26 registers no text-only Qwen3.5 architecture.
        language_model_only=True,
        skip_tokenizer_init=True,
        dtype="bfloat16",
        kv_cache_dtype=kv_dtype,
        attention_backend=backend,
        # FlashInfer's GDN prefill is picked on SM90 without checking that
        # flashinfer is installed; Triton's runs everywhere.
        gdn_prefill_backend="triton",
        enable_chunked_prefill=True,
        # Prefix caching would let one prompt reuse another's KV blocks and
        # hide differences between runs.
        enable_prefix_caching=False,
        max_model_len=cfg.get("max_model_len", 8192),
        max_num_batched_tokens=cfg.get("max_num_batched_tokens", 512),
        max_num_seqs=cfg.get("max_num_seqs", 16),
        enforce_eager=cfg.get("enforce_eager", True),
        gpu_memory_utilization=cfg.get("gpu_memory_utilization", 0.5),
        seed=0,
        disable_log_stats=False,
        max_logprobs=cfg.get("max_logprobs", 20),
        tensor_parallel_size=cfg.get("tensor_parallel_size", 1),
        # None: vLLM decides (on unless something is incompatible).
        async_scheduling=cfg.get("async_scheduling"),
        load_format=load_format,
    )
    quantization = cfg.get("quantization")
    if quantization is not None:
        if quantization not in QUANTIZATIONS:
            raise ValueError(f"quantization {quantization!r} not in {QUANTIZATIONS}")
        kwargs["quantization"] = quantization
    if cfg.get("block_size"):
        kwargs["block_size"] = cfg["block_size"]
    if cfg.get("kv_cache_memory_gib"):
        kwargs["kv_cache_memory_bytes"] = int(cfg["kv_cache_memory_gib"] * 2**30)
    if cfg.get("speculative_config"):
        kwargs["speculative_config"] = dict(cfg["speculative_config"])
    elif cfg.get("drafter"):
        kwargs["speculative_config"] = {
            "method": "dflash",
            "model": cfg["drafter"],
            "num_speculative_tokens": cfg.get("num_spec_tokens", 5),
        }
    return kwargs


def spec_settings(
    spec: str, drafter: str | None, num_speculative_tokens: int = 5
) -> dict[str, Any]:
    """The run configuration's speculative-decoding entries (cfg keys) for a
    ``--spec`` name: none, a DFlash drafter folder, or ngram prompt lookup
    (spec_accept.py's lookup lengths)."""
    if spec == "dflash":
        return {
            "spec": spec,
            "drafter": drafter,
            "num_spec_tokens": num_speculative_tokens,
        }
    if spec == "ngram":
        import spec_accept

        n_min, n_max = spec_accept.PROMPT_LOOKUP
        return {
            "spec": spec,
            "drafter": None,
            "speculative_config": {
                "method": "ngram",
                "num_speculative_tokens": num_speculative_tokens,
                "prompt_lookup_min": n_min,
                "prompt_lookup_max": n_max,
            },
        }
    if spec != "none":
        raise ValueError(f"spec {spec!r} not in ('none', 'dflash', 'ngram')")
    return {"spec": None, "drafter": None}


def worker_env() -> dict[str, str]:
    """Environment of an engine subprocess."""
    env = dict(os.environ)
    # Without flashinfer installed its sampler import fails.
    env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    # Keep the engine core in-process, so that collective_rpc callables and
    # module-level counters are reachable without serialising code.
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    env.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    return env


def spawn(script: str, cfg: dict[str, Any], timeout: float = 1800) -> dict[str, Any]:
    """Run ``worker(cfg)`` of ``script`` in a fresh process; return its result."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg_path, out_path = Path(tmp, "cfg.json"), Path(tmp, "out.json")
        cfg_path.write_text(json.dumps(cfg))
        log(f"subprocess: {cfg.get('name', cfg)}")
        proc = subprocess.run(
            [sys.executable, script, "--_worker", str(cfg_path), str(out_path)],
            env=worker_env(),
            timeout=timeout,
        )
        if proc.returncode != 0 or not out_path.exists():
            raise RuntimeError(
                f"worker {cfg.get('name')} failed with exit code {proc.returncode}"
            )
        return json.loads(out_path.read_text())


def spawn_all(
    script: str, cfgs: list[dict[str, Any]], parallel: int
) -> dict[str, dict[str, Any]]:
    """:func:`spawn` each config, ``parallel`` at a time (engines side by
    side on the GPUs); results by config name."""
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        outs = list(pool.map(lambda cfg: spawn(script, cfg), cfgs))
    return {cfg["name"]: out for cfg, out in zip(cfgs, outs)}


def maybe_run_worker(worker) -> None:
    """Child side of :func:`spawn`: call ``worker`` and exit if asked to."""
    if len(sys.argv) == 4 and sys.argv[1] == "--_worker":
        cfg = json.loads(Path(sys.argv[2]).read_text())
        count_attention_paths()
        result = worker(cfg)
        Path(sys.argv[3]).write_text(json.dumps(result))
        sys.exit(0)


# --------------------------------------------------------------------------
# Introspection of a live engine (in-process engine core, see worker_env)


def count_attention_paths() -> None:
    """Count the Triton backend's launches per attention path from now on.

    Wraps the launchers the backend module calls (the engine core runs
    in-process, see worker_env), so nothing in vLLM keeps a counter.  The
    split-KV kernel also records each query length it ran with
    (``split_kv_q<N>``).  Launchers this vLLM lacks are skipped.
    """
    global _PATH_COUNTS
    if _PATH_COUNTS is not None:
        return
    import importlib

    # The unified kernel is launched from triton_attn, the INT8 paths from
    # the backend's INT8 module (where this vLLM has one).
    modules = []
    for name in ("triton_attn", "triton_int8_per_token_head"):
        try:
            modules.append(
                importlib.import_module(f"vllm.v1.attention.backends.{name}")
            )
        except ImportError:
            continue
    counts: dict[str, int] = {}
    for module in modules:
        for name, path in ATTENTION_PATHS.items():
            fn = getattr(module, name, None)
            if fn is None:
                continue

            def counted(*args, _fn=fn, _path=path, **kwargs):
                counts[_path] = counts.get(_path, 0) + 1
                if _path == "split_kv":
                    key = f"split_kv_q{kwargs.get('max_query_len')}"
                    counts[key] = counts.get(key, 0) + 1
                return _fn(*args, **kwargs)

            setattr(module, name, counted)
    _PATH_COUNTS = counts


def read_path_counter() -> dict[str, int] | None:
    """Launch counts since :func:`count_attention_paths`, or None before."""
    return None if _PATH_COUNTS is None else dict(_PATH_COUNTS)


def _count_paths_rpc(worker) -> bool:
    count_attention_paths()
    return _PATH_COUNTS is not None


def _read_paths_rpc(worker) -> dict[str, int] | None:
    return read_path_counter()


def count_attention_paths_in_workers(llm) -> None:
    """:func:`count_attention_paths` in every worker process.

    With tensor parallelism the workers run in processes of their own, where
    a counter installed in the engine's process sees nothing.
    """
    try:
        llm.collective_rpc(_count_paths_rpc)
    except Exception as e:  # noqa: BLE001 (a report, not a check)
        log(f"no launch counts from the workers: {e!r}")


def read_worker_path_counters(llm) -> list[dict[str, int] | None]:
    """Each worker's launch counts (rank order); None where not counted."""
    try:
        return llm.collective_rpc(_read_paths_rpc)
    except Exception as e:  # noqa: BLE001
        log(f"no launch counts from the workers: {e!r}")
        return [None]


def _kv_cache_rpc(worker) -> dict[str, Any]:
    from vllm.v1.kv_cache_interface import AttentionSpec

    config = worker.model_runner.kv_cache_config
    groups = [
        {
            "spec": type(g.kv_cache_spec).__name__,
            "layers": len(g.layer_names),
            "block_size": g.kv_cache_spec.block_size,
            "attention": isinstance(g.kv_cache_spec, AttentionSpec),
        }
        for g in config.kv_cache_groups
    ]
    block_sizes = {g["block_size"] for g in groups if g["attention"]}
    return {
        "rank": worker.rank,
        "num_blocks": config.num_blocks,
        "kv_cache_bytes": sum(t.size for t in config.kv_cache_tensors),
        "groups": groups,
        # The attention kernels' block of each group (vLLM splits larger
        # KV-manager blocks into kernel blocks).
        "kernel_block_sizes": list(
            getattr(worker.model_runner, "_kernel_block_sizes", None) or []
        ),
        # Tokens each attention layer can hold (one block per layer and
        # block_size tokens per block).
        "pool_tokens": config.num_blocks * min(block_sizes) if block_sizes else 0,
    }


def kv_cache_report(llm) -> list[dict[str, Any]]:
    """The KV-cache plan of every worker (rank order): blocks, bytes,
    groups, and the tokens each attention layer can hold."""
    try:
        return llm.collective_rpc(_kv_cache_rpc)
    except Exception as e:  # noqa: BLE001
        log(f"no KV-cache plan from the workers: {e!r}")
        return []


def _drop_scale_views_rpc(worker) -> int:
    from vllm.v1.attention.backends.triton_attn import TritonAttentionImpl

    layers = worker.model_runner.vllm_config.compilation_config.static_forward_context
    dropped = 0
    for layer in layers.values():
        impl = getattr(layer, "impl", None)
        if isinstance(impl, TritonAttentionImpl):
            impl._k_scale_cache = None
            impl._v_scale_cache = None
            dropped += 1
    return dropped


def drop_scale_views(llm) -> int:
    """Forget every TritonAttentionImpl's per-token-head scale views.

    Their next setup then happens inside the next forward pass, i.e. while a
    request is live.  Covers drafter layers too (they are in the static
    forward context).  Returns the number of impls touched.
    """
    return sum(llm.collective_rpc(_drop_scale_views_rpc))


def spec_counters(metrics) -> dict[str, Any] | None:
    """The spec-decode counters of vLLM in a metrics snapshot (``LLM.get_metrics()``
    or ``vllm.v1.metrics.reader.get_metrics_snapshot()``): num_drafts (verify
    steps of a request that had drafts), num_draft_tokens,
    num_accepted_tokens, accepted_per_pos; None without speculation."""
    totals: dict[str, Any] = {}
    for metric in metrics:
        if metric.name.startswith("vllm:spec_decode_num_") and hasattr(metric, "value"):
            key = metric.name.removeprefix("vllm:spec_decode_")
            totals[key] = totals.get(key, 0) + int(metric.value)
        elif metric.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            # Steps whose draft token i was accepted, per position i.
            totals["accepted_per_pos"] = [int(v) for v in metric.values]
    return totals or None


def spec_counter_delta(
    after: dict[str, Any] | None, before: dict[str, Any] | None
) -> dict[str, Any] | None:
    """What the counters counted between two snapshots."""
    if after is None:
        return None
    before = before or {}
    delta: dict[str, Any] = {}
    for key, value in after.items():
        if key == "accepted_per_pos":
            old = before.get(key, [])
            delta[key] = [
                v - (old[i] if i < len(old) else 0) for i, v in enumerate(value)
            ]
        else:
            delta[key] = value - before.get(key, 0)
    return delta


def spec_step_report(
    counters: dict[str, Any] | None, itl_ms: dict[str, float | None] | None = None
) -> dict[str, Any]:
    """What a speculative run measured, from its spec-decode counters.

    - ``drafts``: verify steps that carried drafts (per request);
      ``draft_tokens``: tokens proposed; ``accepted_tokens``: accepted;
    - ``acceptance_rate``: accepted / proposed;
    - ``tokens_per_step``: tokens a request gets from one step, 1 +
      accepted / drafts (1 without speculation);
    - ``step_<stat>`` for each ``itl_<stat>`` given: ITL x tokens per step,
      the time of one engine step.  ITL alone rewards a drafter that is
      accepted more; step time compares what each step costs.
    """
    c = counters or {}
    drafts = int(c.get("num_drafts", 0))
    drafted = int(c.get("num_draft_tokens", 0))
    accepted = int(c.get("num_accepted_tokens", 0))
    tokens_per_step = 1 + accepted / drafts if drafts else 1.0
    report: dict[str, Any] = {
        "drafts": drafts,
        "draft_tokens": drafted,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / drafted if drafted else None,
        "tokens_per_step": tokens_per_step,
    }
    for key, value in (itl_ms or {}).items():
        if not key.startswith("itl_"):
            raise ValueError(f"{key} is not an ITL statistic")
        step_key = "step_" + key.removeprefix("itl_")
        report[step_key] = None if value is None else value * tokens_per_step
    return report


def spec_decode_stats(llm) -> dict[str, float] | None:
    """Draft acceptance from vLLM's own spec-decode metrics."""
    totals = spec_counters(llm.get_metrics())
    if totals is None:
        return None
    drafted = totals.get("num_draft_tokens", 0.0)
    accepted = totals.get("num_accepted_tokens", 0.0)
    totals["acceptance_rate"] = accepted / drafted if drafted else 0.0
    drafts = totals.get("num_drafts", 0.0)
    totals["mean_acceptance_length"] = 1 + accepted / drafts if drafts else 0.0
    return totals


# --------------------------------------------------------------------------
# Provenance


def vllm_package_dir() -> Path:
    """Folder of the vllm package that ``import vllm`` would load."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("vllm is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def tree_digest(root: Path, pattern: str) -> str:
    """sha256 over the relative paths and bytes of ``root.glob(pattern)``."""
    h = hashlib.sha256()
    for path in sorted(root.glob(pattern)):
        if path.is_file():
            h.update(str(path.relative_to(root)).encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def provenance() -> dict[str, str]:
    """Digests of the installed vLLM's attention code and of these scripts."""
    vdir = vllm_package_dir()
    return {
        "vllm_dir": str(vdir),
        "vllm_attention_sha256": tree_digest(vdir, "v1/attention/**/*.py"),
        "vllm_triton_attn_sha256": tree_digest(
            vdir, "v1/attention/backends/triton_attn.py"
        ),
        "scripts_sha256": tree_digest(HERE, "*.py"),
    }


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token, or None when equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def finish_report(report: dict, path: str, table: list[str]) -> dict:
    """Set ``report["passed"]`` from its ``checks`` (name -> check -> bool),
    write it to ``path`` and print ``table`` and the verdict."""
    report["passed"] = all(all(c.values()) for c in report["checks"].values())
    save_json(path, report)
    print("\n".join([*table, f"passed: {report['passed']}"]), flush=True)
    return report


def save_json(path: str, obj: Any) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
    log(f"wrote {path}")
