# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""CPU tests of benchmarks/models/make_hybrid_model.py.

The generated models must be byte-for-byte reproducible, parse with vLLM's
config classes, and provide exactly the weights vLLM 0.26.0's
``Qwen3_5ForConditionalGeneration`` and ``DFlashQwen3ForCausalLM`` load.  The
last check instantiates the vLLM model classes on the CPU in a subprocess
(the CPU platform and a process group have to be set up for that).
"""

import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "models"))

import make_hybrid_model as mhm  # noqa: E402


def _tree_digest(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
    }


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("models") / "tiny"
    folders = mhm.make_models("tiny", str(out), drafter=True)
    return {k: Path(v) for k, v in folders.items()}


def test_same_command_same_bytes(tiny, tmp_path):
    again = mhm.main(["--preset", "tiny", "--out", str(tmp_path / "t"), "--drafter"])
    for key in ("target", "drafter"):
        assert _tree_digest(tiny[key]) == _tree_digest(Path(again[key]))
    other = mhm.make_models("tiny", str(tmp_path / "s1"), seed=1)
    assert (
        _tree_digest(Path(other["target"]))["model.safetensors"]
        != _tree_digest(tiny["target"])["model.safetensors"]
    )


@pytest.mark.parametrize("preset", sorted(mhm.PRESETS))
def test_config_parses_with_vllm(preset, tmp_path):
    from vllm.transformers_utils.config import get_config

    target, drafter = mhm.PRESETS[preset]
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "config.json").write_text(json.dumps(mhm.target_config(target)))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "config.json").write_text(
        json.dumps(mhm.drafter_config(target, drafter))
    )
    config = get_config(str(tmp_path / "t"), trust_remote_code=False)
    assert config.architectures == ["Qwen3_5ForConditionalGeneration"]
    text = config.text_config
    assert text.model_type == "qwen3_5_text"
    assert text.layer_types == [
        "full_attention" if i % 4 == 3 else "linear_attention"
        for i in range(target.num_hidden_layers)
    ]
    assert (text.num_attention_heads, text.num_key_value_heads, text.head_dim) == (
        24,
        4,
        256,
    )
    rope = text.rope_parameters
    assert (
        sum(rope["mrope_section"]) * 2 == text.head_dim * rope["partial_rotary_factor"]
    )
    if preset.startswith("27b-geometry"):
        assert text.hidden_size == 5120
        assert (text.linear_num_key_heads, text.linear_num_value_heads) == (16, 48)
        assert (text.linear_key_head_dim, text.linear_value_head_dim) == (128, 128)
        assert text.linear_conv_kernel_dim == 4

    draft = get_config(str(tmp_path / "d"), trust_remote_code=False)
    assert draft.architectures == ["DFlashDraftModel"]
    # vLLM's own reading of the drafter's attention: causal sliding-window
    # layers, or full non-causal ones.
    from vllm.model_executor.models.qwen3_dflash import dflash_has_any_non_causal

    if drafter.sliding_window is None:
        assert draft.layer_types == ["full_attention"] * 5
        assert dflash_has_any_non_causal(draft)
    else:
        assert draft.layer_types == ["sliding_attention"] * 5
        assert draft.sliding_window == 2048
        assert not dflash_has_any_non_causal(draft)
    assert draft.dflash_config["mask_token_id"] < text.vocab_size
    assert max(draft.dflash_config["target_layer_ids"]) < text.num_hidden_layers


def test_tensor_names_and_shapes(tiny):
    target, drafter = mhm.PRESETS["tiny"]
    for folder, specs in (
        (tiny["target"], mhm.target_tensor_specs(target, 6.0)),
        (tiny["drafter"], mhm.drafter_tensor_specs(target, drafter)),
    ):
        expected = {name: shape for name, shape, *_ in specs}
        with safe_open(str(folder / "model.safetensors"), "pt") as f:
            names = list(f.keys())  # noqa: SIM118 (a safetensors handle)
            got = {name: tuple(f.get_slice(name).get_shape()) for name in names}
            assert got == expected
            assert all(f.get_slice(n).get_dtype() == "BF16" for n in names)


def test_output_head_gives_confident_logits(tiny):
    """Logits of a unit-RMS hidden state have std ``logit_std``."""
    with safe_open(str(tiny["target"] / "model.safetensors"), "pt") as f:
        head = f.get_tensor("lm_head.weight").float()
    hidden = torch.randn(64, head.shape[1], generator=torch.Generator().manual_seed(0))
    logits = hidden @ head.T
    assert logits.std().item() == pytest.approx(6.0, rel=0.05)
    top2 = logits.topk(2, dim=-1).values
    # A margin of a few nats between the two best tokens is typical.
    assert (top2[:, 0] - top2[:, 1]).median().item() > 0.5


def test_successor_map_is_cycles_of_the_given_lengths():
    vocab = 200
    succ = mhm.successor_map(vocab, (2, 3, 5), seed=0)
    ordinary = mhm.prompt_vocab_size(vocab)
    assert sorted(succ[:ordinary]) == list(range(ordinary))  # a permutation
    assert succ[ordinary:] == list(range(ordinary, vocab))  # reserved: fixed
    lengths = []
    seen: set[int] = set()
    for t in range(ordinary):
        if t in seen:
            continue
        cycle = [t]
        while succ[cycle[-1]] != t:
            cycle.append(succ[cycle[-1]])
        seen.update(cycle)
        lengths.append(len(cycle))
    # 192 ordinary tokens: 19 rounds of 2 + 3 + 5 and a last cycle of 2.
    assert sorted(lengths) == sorted([2, 3, 5] * 19 + [2])
    assert mhm.successor_map(vocab, (2, 3, 5), seed=1) != succ
    with pytest.raises(ValueError, match="positive"):
        mhm.successor_map(vocab, (0,), seed=0)


def test_successor_head_predicts_each_successor(tmp_path):
    """With the final hidden state equal to a token's embedding (after the
    RMS norm), the head's argmax is that token's successor, by a wide
    margin, for every ordinary token; the layers' residual writes are
    scaled."""
    head = mhm.SuccessorHead(logit=40.0, cycle_lengths=(3, 7))
    folder = Path(
        mhm.make_models(
            "tiny",
            str(tmp_path / "succ"),
            logit_std=2.0,
            residual_scale=0.25,
            successor=head,
        )["target"]
    )
    info = json.loads((folder / "successor.json").read_text())
    target, _ = mhm.PRESETS["tiny"]
    succ = torch.tensor(info["successor"])
    assert info["successor"] == mhm.successor_map(target.vocab_size, (3, 7), 0)
    plain = mhm.make_models("tiny", str(tmp_path / "plain"), logit_std=2.0)
    prefix = "model.language_model"
    with (
        safe_open(str(folder / "model.safetensors"), "pt") as f,
        safe_open(str(Path(plain["target"]) / "model.safetensors"), "pt") as g,
    ):
        emb = f.get_tensor(f"{prefix}.embed_tokens.weight").float()
        w = f.get_tensor("lm_head.weight").float()
        for name in (
            f"{prefix}.layers.0.mlp.down_proj.weight",
            f"{prefix}.layers.0.linear_attn.out_proj.weight",
            f"{prefix}.layers.3.self_attn.o_proj.weight",
        ):
            ratio = f.get_tensor(name).float().std() / g.get_tensor(name).float().std()
            assert ratio.item() == pytest.approx(0.25, rel=0.02)
        assert torch.equal(
            f.get_tensor(f"{prefix}.layers.0.mlp.up_proj.weight"),
            g.get_tensor(f"{prefix}.layers.0.mlp.up_proj.weight"),
        )
    n = mhm.prompt_vocab_size(target.vocab_size)
    hidden = emb[:n] * (target.hidden_size**0.5 / emb[:n].norm(dim=-1, keepdim=True))
    logits = hidden @ w.T
    top2 = logits.topk(2, dim=-1)
    assert torch.equal(top2.indices[:, 0], succ[:n])
    assert (top2.values[:, 0] - top2.values[:, 1]).min().item() > 10.0


def test_drafter_layer_ids_spread():
    assert mhm.drafter_target_layer_ids(64) == [1, 16, 31, 46, 61]
    assert mhm.drafter_target_layer_ids(8) == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("preset", ["tiny", "27b-geometry", "qwen3.5-27b"])
def test_drafter_layers_share_one_kv_cache_group(preset, tmp_path):
    """The DFlash proposer of vLLM asserts that all drafter layers are in one KV
    cache group.  The planner keeps them together only if its group size is
    at least the drafter's 5 layers; a tiny target with 2 full-attention
    layers got group size 2 and a drafter split over 3 groups.  Planned by
    vLLM's own planner (through the capacity calculator), BF16 and INT8."""
    calc = _load_capacity_calculator()
    target, drafter = mhm.PRESETS[preset]
    for name, config in (
        ("t", mhm.target_config(target)),
        ("d", mhm.drafter_config(target, drafter)),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    args = calc.make_parser().parse_args(
        [
            "--config",
            str(tmp_path / "t" / "config.json"),
            "--drafter-config",
            str(tmp_path / "d" / "config.json"),
            "--budget-gib",
            "8",
            "--max-model-len",
            "8192",
        ]
    )
    plans = [p for p in calc.compute(args) if p.drafter]
    assert {(p.kv_cache_dtype, p.planner) for p in plans} == {
        (dtype, planner)
        for dtype in ("auto", "int8_per_token_head")
        for planner in ("upstream", "planned")
    }
    for plan in plans:
        drafter_rows = [r for r in plan.layout if r["type"].startswith("Sliding")]
        assert drafter_rows == [
            {
                "type": "SlidingWindowSpec(2048)",
                "layers": drafter.num_hidden_layers,
                "groups": 1,
                "padding": plan.group_size - drafter.num_hidden_layers,
            }
        ], (plan.kv_cache_dtype, plan.planner, plan.layout)


def _load_capacity_calculator():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "kv_cache_capacity", REPO_ROOT / "benchmarks" / "kv_cache_capacity.py"
    )
    calc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(calc)
    return calc


def test_config_only_27b_has_no_weights_and_the_real_geometry(tmp_path):
    """``--config-only`` writes what vLLM's dummy loader reads and no
    weights; the config is Qwen3.5-27B's: 64 layers, full attention every
    4th (16 layers, 4 KV heads x 256, 24 query heads), 48 GDN layers."""
    from vllm.transformers_utils.config import get_config

    out = mhm.main(
        [
            "--preset",
            "qwen3.5-27b",
            "--out",
            str(tmp_path / "q"),
            "--drafter",
            "--config-only",
        ]
    )
    target, drafter = Path(out["target"]), Path(out["drafter"])
    assert drafter == tmp_path / "q-dflash"
    assert sorted(p.name for p in target.iterdir()) == [
        "config.json",
        "generation_config.json",
    ]
    assert sorted(p.name for p in drafter.iterdir()) == ["config.json"]

    text = get_config(str(target), trust_remote_code=False).text_config
    assert text.num_hidden_layers == 64
    full = [i for i, t in enumerate(text.layer_types) if t == "full_attention"]
    assert full == list(range(3, 64, 4))  # 16 layers, every 4th
    assert text.layer_types.count("linear_attention") == 48
    assert (text.num_attention_heads, text.num_key_value_heads, text.head_dim) == (
        24,
        4,
        256,
    )
    assert (text.hidden_size, text.intermediate_size, text.vocab_size) == (
        5120,
        17408,
        248320,
    )
    assert (text.linear_num_key_heads, text.linear_num_value_heads) == (16, 48)
    draft = get_config(str(drafter), trust_remote_code=False)
    assert draft.dflash_config["target_layer_ids"] == [1, 16, 31, 46, 61]
    assert (draft.num_attention_heads, draft.num_key_value_heads) == (32, 8)
    assert draft.hidden_size == 5120

    # A successor model is its weights: it cannot be config-only.
    with pytest.raises(SystemExit):
        mhm.main(
            ["--out", str(tmp_path / "s"), "--config-only", "--successor-logit", "9"]
        )
    with pytest.raises(ValueError, match="config-only"):
        mhm.make_models(
            "tiny",
            str(tmp_path / "s2"),
            successor=mhm.SuccessorHead(9.0),
            config_only=True,
        )
    assert not (tmp_path / "s2").exists()


def test_config_only_tiny_matches_the_full_write(tiny, tmp_path):
    """The config-only folders hold the same config files, byte for byte,
    as the folders with weights."""
    out = mhm.make_models("tiny", str(tmp_path / "t"), drafter=True, config_only=True)
    for key in ("target", "drafter"):
        full = _tree_digest(tiny[key])
        only = _tree_digest(Path(out[key]))
        assert only == {k: v for k, v in full.items() if k.endswith(".json")}
        assert any(k.endswith(".safetensors") for k in full)


def test_qwen35_27b_preset_agrees_with_the_capacity_calculator():
    """make_hybrid_model's qwen3.5-27b and the capacity calculator's preset
    of the same name (and its DFlash drafter) describe one model."""
    calc = _load_capacity_calculator()
    target, drafter = mhm.PRESETS["qwen3.5-27b"]
    ours = mhm.target_config(target)["text_config"]
    theirs = calc.PRESETS["qwen3.5-27b"]["text_config"]
    for key, value in theirs.items():
        assert ours[key] == value, key
    ours_d = mhm.drafter_config(target, drafter)
    theirs_d = calc.DRAFTER_PRESETS["qwen3.5-27b-dflash"]
    for key in (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "vocab_size",
        "sliding_window",
        "layer_types",
        "block_size",
        "max_position_embeddings",
    ):
        assert ours_d[key] == theirs_d[key], key
    assert (
        ours_d["dflash_config"]["target_layer_ids"]
        == theirs_d["dflash_config"]["target_layer_ids"]
    )


def _run_vllm_load_check(*args: str) -> None:
    proc = subprocess.run(
        # -P: do not put this folder (it has a "transformers" package) on sys.path.
        [sys.executable, "-P", __file__, *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "LOAD-CHECK OK" in proc.stdout


def test_vllm_loads_every_tiny_weight(tiny):
    _run_vllm_load_check("files", str(tiny["target"]), str(tiny["drafter"]))


def test_vllm_accepts_27b_geometry_shapes(tmp_path):
    # Configs only, fed with zero tensors of the generator's shapes.  A small
    # vocabulary and MLP keep it light; the attention and GDN shapes, the
    # ones that matter here, are the real ones.
    target, drafter = mhm.PRESETS["27b-geometry"]
    target = mhm.dataclasses.replace(
        target, num_hidden_layers=4, vocab_size=1024, intermediate_size=256
    )
    drafter = mhm.dataclasses.replace(drafter, intermediate_size=256)
    for name, config in (
        ("t", mhm.target_config(target)),
        ("d", mhm.drafter_config(target, drafter)),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    _run_vllm_load_check("specs", str(tmp_path / "t"), str(tmp_path / "d"))


# --------------------------------------------------------------------------
# Subprocess side of the load check.


def _load_check(source: str, target_dir: str, drafter_dir: str) -> None:
    """Instantiate vLLM's model classes on the CPU and load weights into them.

    With ``source == "files"`` the tensors come from the written files, with
    ``"specs"`` they are zeros of the shapes the generator writes.  Every
    parameter starts as NaN and must be overwritten, except those a DFlash
    drafter shares with its target.
    """
    import tempfile

    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform

    # The CUDA wheel on a machine without a GPU detects no platform; the CPU
    # platform lets the layers be built (no kernel runs here).
    vllm.platforms._current_platform = CpuPlatform()
    # SiluAndMul resolves its custom op at construction; nothing calls it.
    lib = torch.library.Library("_C", "FRAGMENT")
    if not hasattr(torch.ops._C, "silu_and_mul"):
        lib.define("silu_and_mul(Tensor! out, Tensor input) -> ()")

    from vllm.config import set_current_vllm_config
    from vllm.distributed import (
        init_distributed_environment,
        initialize_model_parallel,
    )
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader.utils import initialize_model

    args = EngineArgs(
        model=target_dir,
        language_model_only=True,
        skip_tokenizer_init=True,
        dtype="bfloat16",
        max_model_len=4096,
        enforce_eager=True,
        speculative_config={
            "method": "dflash",
            "model": drafter_dir,
            "num_speculative_tokens": 5,
        },
    )
    config = args.create_engine_config()
    target_cfg = json.loads(Path(target_dir, "config.json").read_text())
    draft_cfg = json.loads(Path(drafter_dir, "config.json").read_text())

    def shape_of(cfg: dict) -> mhm.TargetShape:
        text = cfg["text_config"]
        fields = {f.name for f in mhm.dataclasses.fields(mhm.TargetShape)}
        return mhm.TargetShape(**{k: v for k, v in text.items() if k in fields})

    tshape = shape_of(target_cfg)
    dshape = mhm.DrafterShape(
        num_hidden_layers=draft_cfg["num_hidden_layers"],
        intermediate_size=draft_cfg["intermediate_size"],
        num_attention_heads=draft_cfg["num_attention_heads"],
        num_key_value_heads=draft_cfg["num_key_value_heads"],
        head_dim=draft_cfg["head_dim"],
    )

    def weights(folder: str, specs):
        if source == "specs":
            for name, shape, *_ in specs:
                yield name, torch.zeros(shape, dtype=torch.bfloat16)
            return
        with safe_open(str(Path(folder, "model.safetensors")), "pt") as f:
            for name in f.keys():  # noqa: SIM118
                yield name, f.get_tensor(name)

    with set_current_vllm_config(config):
        init_distributed_environment(
            world_size=1,
            rank=0,
            local_rank=0,
            distributed_init_method=f"file://{tempfile.mktemp()}",
            backend="gloo",
        )
        initialize_model_parallel(1, 1)
        for model_config, specs, shared in (
            (config.model_config, mhm.target_tensor_specs(tshape, 6.0), ()),
            (
                config.speculative_config.draft_model_config,
                mhm.drafter_tensor_specs(tshape, dshape),
                # DFlash drafters share these with the target model.
                ("embed_tokens", "lm_head", "mask_embedding"),
            ),
        ):
            with torch.device("cpu"):
                model = initialize_model(vllm_config=config, model_config=model_config)
            params = dict(model.named_parameters())
            for p in params.values():
                if p.is_floating_point():
                    p.data.fill_(math.nan)
            folder = target_dir if model_config is config.model_config else drafter_dir
            model.load_weights(weights(folder, specs))
            not_loaded = sorted(
                n
                for n, p in params.items()
                if p.is_floating_point()
                and p.isnan().any()
                and not any(s in n for s in shared)
            )
            assert not not_loaded, f"{type(model).__name__}: {not_loaded}"
            print(f"{type(model).__name__}: {len(params)} parameters loaded")
    print("LOAD-CHECK OK")


if __name__ == "__main__":
    _load_check(*sys.argv[1:4])
