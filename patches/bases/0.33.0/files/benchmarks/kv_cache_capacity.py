# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""KV cache capacity calculator.

Builds the per-layer KV cache specs of a model (and an optional speculative
drafter) the way vLLM does, runs vLLM's KV cache planner on a memory budget and
prints the group layout, the padding each layer type pays, the bytes one token
of context costs and the token slots of the pool. No weights and no GPU are
needed; only the HF ``config.json`` files.

The planner runs twice: as vLLM 0.33.0 planned ("upstream": the n:1 group-size
heuristic), and as this vLLM plans ("planned"). ``--group-size`` adds a forced
size for comparison.

Example:
    python benchmarks/kv_cache_capacity.py --preset qwen3.5-27b \\
        --drafter-preset qwen3.5-27b-dflash --budget-gib 12

"""

import argparse
import contextlib
import json
import math
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any
from unittest import mock

GiB = 1 << 30

# Public config.json facts; only the fields the KV cache depends on.
PRESETS: dict[str, dict[str, Any]] = {
    "qwen3.5-27b": {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "torch_dtype": "bfloat16",
        "text_config": {
            "model_type": "qwen3_5_text",
            "hidden_size": 5120,
            "intermediate_size": 17408,
            "num_hidden_layers": 64,
            "full_attention_interval": 4,
            "num_attention_heads": 24,
            "num_key_value_heads": 4,
            "head_dim": 256,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 48,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "linear_conv_kernel_dim": 4,
            "max_position_embeddings": 262144,
            "vocab_size": 248320,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 10000000,
                "partial_rotary_factor": 0.25,
                "mrope_section": [11, 11, 10],
                "mrope_interleaved": True,
            },
        },
        "vision_config": {"depth": 27},
    },
}

DRAFTER_PRESETS: dict[str, dict[str, Any]] = {
    # 5 DFlash layers, all with a 2,048-token sliding window.
    "qwen3.5-27b-dflash": {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "torch_dtype": "bfloat16",
        "hidden_size": 5120,
        "intermediate_size": 17408,
        "num_hidden_layers": 5,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 262144,
        "vocab_size": 248320,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000000,
        "sliding_window": 2048,
        "layer_types": ["sliding_attention"] * 5,
        "block_size": 16,
        "dflash_config": {
            "swa_window_size": 2048,
            "target_layer_ids": [1, 16, 31, 46, 61],
        },
    },
}

# Keys each kind of layer needs in the (text) config.
_ATTENTION_KEYS = ("num_hidden_layers", "hidden_size", "num_attention_heads")
_GDN_KEYS = (
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)


class CapacityError(Exception):
    """Bad input; reported as a one-line error with exit code 2."""


@dataclass
class Plan:
    planner: str
    kv_cache_dtype: str
    drafter: bool
    group_size: int
    num_groups: int
    block_size: int
    page_size_bytes: int
    num_blocks: int
    # Per layer type: layers, groups and padding slots.
    layout: list[dict[str, Any]] = field(default_factory=list)
    bytes_per_token: float = 0.0
    fixed_bytes_per_request: int = 0
    pool_tokens: int = 0
    max_model_len: int = 0


def load_config(path: str | None, preset: str | None, what: str) -> dict | None:
    """Return the HF config dict from a path or a preset name."""
    if path is None and preset is None:
        return None
    if preset is not None:
        presets = PRESETS if what == "model" else DRAFTER_PRESETS
        if preset not in presets:
            raise CapacityError(
                f"unknown {what} preset {preset!r}; known: {', '.join(presets)}"
            )
        return json.loads(json.dumps(presets[preset]))
    assert path is not None
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    try:
        with open(path) as f:
            config = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise CapacityError(f"cannot read {what} config {path}: {e}") from e
    if not isinstance(config, dict):
        raise CapacityError(f"{what} config {path} is not a JSON object")
    return config


def _layer_types(text_config: dict) -> list[str]:
    if "layer_types" in text_config:
        return list(text_config["layer_types"])
    num_layers = text_config["num_hidden_layers"]
    if "full_attention_interval" in text_config:
        interval = text_config["full_attention_interval"]
        return [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(num_layers)
        ]
    return ["full_attention"] * num_layers


def validate_config(config: dict, what: str) -> None:
    """Fail early on missing keys; vLLM's config classes would fill in
    defaults silently and size the cache of a different model."""
    if not config.get("architectures"):
        raise CapacityError(f"{what} config has no 'architectures'")
    text_config = config.get("text_config", config)
    missing = [k for k in _ATTENTION_KEYS if k not in text_config]
    if not missing:
        layer_types = _layer_types(text_config)
        if "linear_attention" in layer_types:
            missing += [k for k in _GDN_KEYS if k not in text_config]
        if "sliding_attention" in layer_types and not (
            "sliding_window" in text_config
            or "swa_window_size" in (text_config.get("dflash_config") or {})
        ):
            missing.append("sliding_window")
    if missing:
        raise CapacityError(f"{what} config lacks {', '.join(missing)}")


def _write_config(config: dict, root: str, name: str) -> str:
    path = os.path.join(root, name)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f)
    return path


def build_vllm_config(
    model_dir: str,
    drafter_dir: str | None,
    kv_cache_dtype: str,
    args: argparse.Namespace,
):
    """Build the VllmConfig vLLM would build for these arguments on one GPU."""
    from vllm.config import (
        CacheConfig,
        DeviceConfig,
        ModelConfig,
        ParallelConfig,
        SpeculativeConfig,
        VllmConfig,
    )
    from vllm.config.vllm import set_current_vllm_config
    from vllm.platforms.interface import Platform
    from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend

    model_config = ModelConfig(
        model=model_dir,
        skip_tokenizer_init=True,
        max_model_len=args.max_model_len,
    )
    parallel_config = ParallelConfig()
    speculative_config = None
    if drafter_dir is not None:
        speculative_config = SpeculativeConfig(
            method=args.drafter_method,
            model=drafter_dir,
            num_speculative_tokens=args.num_speculative_tokens,
            target_model_config=model_config,
            target_parallel_config=parallel_config,
        )
    vllm_config = VllmConfig(
        model_config=model_config,
        cache_config=CacheConfig(
            cache_dtype=kv_cache_dtype,
            mamba_ssm_cache_dtype=args.mamba_ssm_cache_dtype,
            enable_prefix_caching=not args.no_prefix_caching,
        ),
        parallel_config=parallel_config,
        speculative_config=speculative_config,
        device_config=DeviceConfig(device="cpu"),
    )
    # VllmConfig turns the hybrid KV cache manager off on a host without a
    # GPU platform; the plan is for a CUDA GPU, where it is on.
    vllm_config.scheduler_config.disable_hybrid_kv_cache_manager = False
    # What Platform.update_block_size_for_backend does on a GPU, for the
    # Triton backend (the one with the int8_per_token_head KV cache).
    backend = TritonAttentionBackend
    cache_config = vllm_config.cache_config
    # The engine core resolves the layout from the workers' backends; the
    # Triton and GDN backends resolve this one.
    cache_config.kv_cache_layout = "LBNHC"
    with set_current_vllm_config(vllm_config):
        cache_config.block_size = backend.get_preferred_block_size(
            CacheConfig.DEFAULT_BLOCK_SIZE
        )
    if model_config.is_hybrid:
        Platform._align_hybrid_block_size(vllm_config, backend)
    return vllm_config, backend


def build_kv_cache_spec(vllm_config, backend) -> dict[str, Any]:
    """Per-layer KV cache specs, as the model's attention and mamba layers
    return them from ``get_kv_cache_spec``."""
    from vllm.model_executor.layers.attention.attention import (
        _largest_kernel_block_within,
    )
    from vllm.model_executor.models import ModelRegistry
    from vllm.utils.torch_utils import get_kv_cache_torch_dtype
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        MambaSpec,
        SlidingWindowSpec,
        get_kv_quant_mode,
    )
    from vllm.v1.worker.utils import customize_attention_spec

    model_config = vllm_config.model_config
    cache_config = vllm_config.cache_config
    parallel_config = vllm_config.parallel_config
    spec_config = vllm_config.speculative_config
    cache_dtype = cache_config.cache_dtype
    kv_dtype = get_kv_cache_torch_dtype(cache_dtype, model_config.dtype)
    quant_mode = get_kv_quant_mode(cache_dtype)

    def attention_spec(
        num_kv_heads: int, head_size: int, sliding_window: int | None
    ) -> Any:
        # The model runner lets the backend customize each layer's spec.
        spec = _attention_spec(num_kv_heads, head_size, sliding_window)
        return customize_attention_spec(backend, spec)

    def _attention_spec(
        num_kv_heads: int, head_size: int, sliding_window: int | None
    ) -> Any:
        if sliding_window is None:
            return FullAttentionSpec(
                block_size=cache_config.block_size,
                num_kv_heads=num_kv_heads,
                head_size=head_size,
                dtype=kv_dtype,
                kv_quant_mode=quant_mode,
            )
        per_token_spec = backend.customize_spec(
            SlidingWindowSpec(
                block_size=1,
                num_kv_heads=num_kv_heads,
                head_size=head_size,
                dtype=kv_dtype,
                kv_quant_mode=quant_mode,
                sliding_window=sliding_window,
            )
        )
        per_token = per_token_spec.real_page_size_bytes
        return SlidingWindowSpec(
            block_size=_largest_kernel_block_within(
                backend,
                per_token,
                per_token * cache_config.block_size,
                cache_config.block_size,
                per_token_spec,
            ),
            num_kv_heads=num_kv_heads,
            head_size=head_size,
            dtype=kv_dtype,
            kv_quant_mode=quant_mode,
            sliding_window=sliding_window,
        )

    specs: dict[str, Any] = {}
    text_config = model_config.hf_text_config
    layer_types = _layer_types(text_config.to_dict())
    mamba_spec = None
    if "linear_attention" in layer_types:
        model_cls, _ = ModelRegistry.resolve_model_cls(
            model_config.architecture, model_config=model_config
        )
        mamba_spec = MambaSpec(
            shapes=model_cls.get_mamba_state_shape_from_config(vllm_config),
            dtypes=model_cls.get_mamba_state_dtype_from_config(vllm_config),
            block_size=cache_config.mamba_block_size,
            page_size_padded=cache_config.mamba_page_size_padded,
            mamba_cache_mode=cache_config.mamba_cache_mode,
            num_speculative_blocks=(
                spec_config.num_speculative_tokens if spec_config else 0
            ),
        )
    num_kv_heads = model_config.get_num_kv_heads(parallel_config)
    head_size = model_config.get_head_size()
    for i, layer_type in enumerate(layer_types):
        if layer_type == "linear_attention":
            specs[f"model.layers.{i}.linear_attn"] = mamba_spec
        else:
            window = (
                text_config.sliding_window
                if layer_type == "sliding_attention"
                else None
            )
            specs[f"model.layers.{i}.self_attn.attn"] = attention_spec(
                num_kv_heads, head_size, window
            )

    if spec_config is not None:
        from vllm.model_executor.models.qwen3_dflash import _resolve_layer_attention

        draft_model_config = spec_config.draft_model_config
        draft_config = draft_model_config.hf_config
        draft_kv_heads = draft_model_config.get_num_kv_heads(
            spec_config.draft_parallel_config
        )
        draft_head_size = draft_model_config.get_head_size()
        for i in range(draft_config.num_hidden_layers):
            if spec_config.method == "dflash":
                try:
                    window, _ = _resolve_layer_attention(draft_config, i)
                except ValueError as e:
                    raise CapacityError(f"drafter config: {e}") from e
            else:
                window = getattr(draft_config, "sliding_window", None)
            specs[f"draft_model.layers.{i}.self_attn.attn"] = replace(
                attention_spec(draft_kv_heads, draft_head_size, window),
                is_draft=True,
            )
    return specs


@contextlib.contextmanager
def _group_size_rule(rule: str | int) -> Iterator[None]:
    """Run the planner as this vLLM plans ("planned"), as vLLM 0.33.0 did
    ("upstream": the n:1 group-size heuristic) or with a fixed group size."""
    from vllm.v1.core import kv_cache_planning

    if rule == "planned" or (
        # vLLM 0.33.0 itself has only the n:1 heuristic.
        rule == "upstream"
        and not hasattr(kv_cache_planning, "_get_kv_cache_group_size")
    ):
        yield
        return

    def choose(vllm_config, layer_buckets: list, spec_buckets: list) -> int:
        if rule == "upstream":
            return kv_cache_planning._get_default_kv_cache_group_size(
                [len(layers) for layers in layer_buckets]
            )
        return int(rule)

    with mock.patch.object(kv_cache_planning, "_get_kv_cache_group_size", choose):
        yield


def run_planner(
    vllm_config, specs: dict[str, Any], budget_bytes: int, rule: str | int
) -> Plan:
    """Plan the KV cache with vLLM's planner and summarize the result."""
    from vllm.v1.core.kv_cache_planning import (
        get_global_kv_cache_groups,
        get_kv_cache_configs,
    )
    from vllm.v1.core.kv_cache_utils import get_kv_cache_capacity
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    # Auto-fit (--max-model-len -1) rewrites max_model_len; restore it so
    # every plan starts from the same request length. A plan that cannot hold
    # one request of that length falls back to the longest length that fits.
    model_config = vllm_config.model_config
    max_model_len = model_config.max_model_len
    original_max_model_len = model_config.original_max_model_len
    try:
        with _group_size_rule(rule):
            global_groups = get_global_kv_cache_groups(vllm_config, [dict(specs)])
            try:
                (config,) = get_kv_cache_configs(
                    vllm_config, [dict(specs)], [budget_bytes], global_groups
                )
            except ValueError:
                if original_max_model_len == -1:
                    raise
                model_config.original_max_model_len = -1
                (config,) = get_kv_cache_configs(
                    vllm_config, [dict(specs)], [budget_bytes], global_groups
                )
        pool_tokens, _ = get_kv_cache_capacity(vllm_config, config)
        fitted_max_model_len = model_config.max_model_len
    except ValueError as e:
        raise CapacityError(
            f"vLLM cannot plan a {budget_bytes / GiB:.2f} GiB KV cache: {e}"
        ) from e
    finally:
        model_config.max_model_len = max_model_len
        model_config.original_max_model_len = original_max_model_len
    if config.num_blocks < 1:
        raise CapacityError(
            f"{budget_bytes / GiB:.2f} GiB is too small for one KV cache block"
        )
    groups = config.kv_cache_groups
    group_size = max(len(g.layer_names) for g in groups)
    page_size = groups[0].kv_cache_spec.page_size_bytes
    block_bytes = group_size * page_size

    layout: dict[str, dict[str, Any]] = {}
    bytes_per_token = 0.0
    fixed_bytes = 0
    for group in groups:
        spec = group.kv_cache_spec
        name = type(spec).__name__
        if getattr(spec, "sliding_window", None) and name == "SlidingWindowSpec":
            name += f"({spec.sliding_window})"
        entry = layout.setdefault(
            name, {"type": name, "layers": 0, "groups": 0, "padding": 0}
        )
        entry["layers"] += len(group.layer_names)
        entry["groups"] += 1
        entry["padding"] += group_size - len(group.layer_names)
        if isinstance(spec, FullAttentionSpec):
            bytes_per_token += block_bytes / spec.block_size
        else:
            pages = math.ceil(spec.max_memory_usage_bytes(vllm_config) / page_size)
            fixed_bytes += pages * block_bytes
    return Plan(
        planner=str(rule),
        kv_cache_dtype=vllm_config.cache_config.cache_dtype,
        drafter=vllm_config.speculative_config is not None,
        group_size=group_size,
        num_groups=len(groups),
        block_size=vllm_config.cache_config.block_size,
        page_size_bytes=page_size,
        num_blocks=config.num_blocks,
        layout=list(layout.values()),
        bytes_per_token=bytes_per_token,
        fixed_bytes_per_request=fixed_bytes,
        pool_tokens=pool_tokens,
        max_model_len=fitted_max_model_len,
    )


def budgets(args: argparse.Namespace) -> dict[bool, float]:
    """KV cache budget in GiB, without and with the drafter."""
    if not args.card:
        return {False: args.budget_gib, True: args.budget_gib}
    base = args.card_gib - args.weights_gib - args.overhead_gib
    return {False: base, True: base - args.drafter_gib}


def compute(args: argparse.Namespace) -> list[Plan]:
    if args.max_model_len is None:
        # A small card may not fit 128K tokens; let vLLM fit the length there.
        args.max_model_len = -1 if args.card else 131072
    model = load_config(args.config, args.preset, "model")
    if model is None:
        raise CapacityError("give --config or --preset")
    drafter = load_config(args.drafter_config, args.drafter_preset, "drafter")
    validate_config(model, "model")
    if drafter is not None:
        validate_config(drafter, "drafter")
    rules: list[str | int] = ["upstream", "planned", *args.group_size]
    plans: list[Plan] = []
    with tempfile.TemporaryDirectory() as root:
        model_dir = _write_config(model, root, "model")
        drafter_dir = (
            None if drafter is None else _write_config(drafter, root, "drafter")
        )
        for kv_cache_dtype in args.kv_cache_dtype:
            for with_drafter in [False, True] if drafter_dir else [False]:
                budget_gib = budgets(args)[with_drafter]
                if budget_gib <= 0:
                    raise CapacityError(
                        f"no memory left for the KV cache ({budget_gib:.2f} GiB)"
                    )
                vllm_config, backend = build_vllm_config(
                    model_dir,
                    drafter_dir if with_drafter else None,
                    kv_cache_dtype,
                    args,
                )
                specs = build_kv_cache_spec(vllm_config, backend)
                for rule in rules:
                    plans.append(
                        run_planner(vllm_config, specs, int(budget_gib * GiB), rule)
                    )
    return plans


def format_table(plans: list[Plan], args: argparse.Namespace) -> str:
    header = (
        "| KV dtype | drafter | planner | group size | groups | padding per type "
        "| bytes/token of context | fixed MiB/request | max_model_len "
        "| pool tokens | vs upstream |"
    )
    lines = [header, "|" + "---|" * 11]
    upstream: dict[tuple[str, bool], int] = {}
    for plan in plans:
        key = (plan.kv_cache_dtype, plan.drafter)
        if plan.planner == "upstream":
            upstream[key] = plan.pool_tokens
        padding = ", ".join(
            f"{e['type']} {e['layers']}+{e['padding']}" for e in plan.layout
        )
        gain = plan.pool_tokens / upstream[key] - 1 if upstream.get(key) else 0.0
        lines.append(
            f"| {plan.kv_cache_dtype} | {'yes' if plan.drafter else 'no'} "
            f"| {plan.planner} | {plan.group_size} | {plan.num_groups} | {padding} "
            f"| {plan.bytes_per_token:,.0f} ({plan.bytes_per_token / 1024:.1f} KiB) "
            f"| {plan.fixed_bytes_per_request / (1 << 20):,.0f} "
            f"| {plan.max_model_len:,} | {plan.pool_tokens:,} | {gain:+.1%} |"
        )
    b = budgets(args)
    if args.card:
        title = (
            f"ESTIMATE for a {args.card_gib:g} GiB card: weights {args.weights_gib:g}"
            f" GiB, runtime overhead {args.overhead_gib:g} GiB, drafter "
            f"{args.drafter_gib:g} GiB -> KV cache {b[False]:.2f} GiB without "
            f"the drafter, {b[True]:.2f} GiB with it (not a measurement)"
        )
    else:
        title = f"KV cache pool of {args.budget_gib:g} GiB"
    title += "; pool tokens = vLLM's 'GPU KV cache size' at max_model_len"
    return title + "\n\n" + "\n".join(lines)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="KV cache capacity of a model under vLLM's KV cache planner."
    )
    model = parser.add_mutually_exclusive_group()
    model.add_argument("--config", help="HF config.json (or its directory)")
    model.add_argument("--preset", help=f"one of: {', '.join(PRESETS)}")
    drafter = parser.add_mutually_exclusive_group()
    drafter.add_argument("--drafter-config", help="drafter config.json")
    drafter.add_argument(
        "--drafter-preset", help=f"one of: {', '.join(DRAFTER_PRESETS)}"
    )
    parser.add_argument("--drafter-method", default="dflash")
    # The seed's deployment: 5 DFlash tokens per step, fp32 GDN state.
    parser.add_argument("--num-speculative-tokens", type=int, default=5)
    parser.add_argument("--budget-gib", type=float, default=12.0)
    parser.add_argument(
        "--kv-cache-dtype",
        nargs="+",
        default=["auto", "int8_per_token_head"],
        help="KV cache dtypes to compare",
    )
    parser.add_argument(
        "--mamba-ssm-cache-dtype",
        default="float32",
        help="vLLM's own default 'auto' follows the model dtype (bfloat16)",
    )
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="pool tokens are vLLM's 'GPU KV cache size' at this length; "
        "-1 fits the longest length, as vLLM's --max-model-len -1 does "
        "(default: 131072, or -1 with --card)",
    )
    parser.add_argument("--no-prefix-caching", action="store_true")
    parser.add_argument(
        "--group-size",
        type=int,
        nargs="*",
        default=[],
        help="also plan with these forced group sizes",
    )
    card = parser.add_argument_group("deployment estimate (--card)")
    card.add_argument("--card", action="store_true", help="estimate a card budget")
    card.add_argument("--card-gib", type=float, default=16.0)
    card.add_argument("--weights-gib", type=float, default=7.1)
    card.add_argument("--overhead-gib", type=float, default=1.3)
    card.add_argument("--drafter-gib", type=float, default=2.1)
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--plot", metavar="PNG", help="also draw the pool tokens as a bar chart"
    )
    return parser


def _log_to_stderr() -> None:
    """Keep vLLM's log lines out of the JSON on stdout."""
    import logging

    import vllm.logger  # noqa: F401  (configures vLLM's handlers)

    for handler in logging.getLogger("vllm").handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
            handler.setStream(sys.stderr)


def _vllm_version() -> str:
    import vllm

    return vllm.__version__


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    if args.json:
        _log_to_stderr()
    try:
        plans = compute(args)
    except CapacityError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(
            json.dumps(
                {
                    "vllm_version": _vllm_version(),
                    "estimate": args.card,
                    "budget_gib": {str(k): v for k, v in budgets(args).items()},
                    "plans": [p.__dict__ for p in plans],
                },
                indent=2,
            )
        )
    else:
        print(format_table(plans, args))
    if args.plot:
        try:
            plot(plans, args, args.plot)
        except ImportError:
            print(
                "error: --plot needs matplotlib (pip install matplotlib)",
                file=sys.stderr,
            )
            return 2
    return 0


def plot(plans: list[Plan], args: argparse.Namespace, path: str) -> None:
    """Pool tokens per KV dtype / drafter, one bar per planner."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys((p.kv_cache_dtype, p.drafter) for p in plans))
    planners = list(dict.fromkeys(p.planner for p in plans))
    labels = {"upstream": "vLLM 0.33.0", "planned": "this vLLM"}
    tokens = {(p.kv_cache_dtype, p.drafter, p.planner): p.pool_tokens for p in plans}
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.9 * len(cases)))
    height = 0.8 / len(planners)
    for i, planner in enumerate(planners):
        ys = [c + i * height for c in range(len(cases))]
        values = [tokens.get((*case, planner), 0) for case in cases]
        bars = ax.barh(ys, values, height, label=labels.get(planner, planner))
        ax.bar_label(bars, labels=[f"{v:,}" for v in values], padding=3, fontsize=8)
    ax.set_yticks(
        [c + height * (len(planners) - 1) / 2 for c in range(len(cases))],
        [
            f"{'BF16' if d == 'auto' else d}\n{'+ drafter' if dr else 'no drafter'}"
            for d, dr in cases
        ],
    )
    ax.invert_yaxis()
    ax.set_xlabel("pool tokens (vLLM's GPU KV cache size)")
    b = budgets(args)
    where = (
        f"{args.card_gib:g} GiB card ESTIMATE (KV {b[False]:.1f} / {b[True]:.1f} GiB)"
        if args.card
        else f"{args.budget_gib:g} GiB KV cache pool"
    )
    model = args.preset or os.path.basename(
        os.path.dirname(os.path.abspath(args.config))
    )
    ax.set_title(f"{model}: KV cache capacity, {where}", fontsize=10)
    ax.legend(loc="lower right", fontsize=8)
    ax.margins(x=0.2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
