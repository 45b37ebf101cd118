# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""CPU tests of the engine-level harness in benchmarks/e2e (no engine).

The GPU runs are expensive; whatever decides whether their numbers mean
anything must be right before they start: the pinned teacher-forced
documents, the quality metrics, the refusal to continue when the code under
test or the scripts change mid-run, and the first-divergence report.
"""

import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "benchmarks" / "e2e"))

import e2e_common  # noqa: E402
import teacher_forced  # noqa: E402


def test_documents_match_their_pin():
    docs = teacher_forced.make_docs()
    assert len(docs) == teacher_forced.NUM_DOCS
    assert all(len(d) == teacher_forced.DOC_TOKENS for d in docs)
    assert all(0 <= t < teacher_forced.DOC_VOCAB for d in docs for t in d)
    # Documents differ from each other (the generator is not reset per doc).
    assert len({tuple(d[:64]) for d in docs}) == teacher_forced.NUM_DOCS


def test_documents_refuse_a_wrong_pin(monkeypatch):
    monkeypatch.setattr(teacher_forced, "DOCS_SHA256", "0" * 64)
    with pytest.raises(teacher_forced.InputsChanged, match="pinned"):
        teacher_forced.make_docs()


def test_metrics_against_a_direct_computation(monkeypatch):
    monkeypatch.setattr(teacher_forced, "NUM_DOCS", 2)
    monkeypatch.setattr(teacher_forced, "DOC_TOKENS", 5)  # 4 scored tokens/doc
    monkeypatch.setattr(teacher_forced, "BIN", 3)
    ref = {
        "docs": [
            {"token_logprobs": [-1.0, -2.0, -0.5, -3.0], "top1": [1, 2, 3, 4]},
            {"token_logprobs": [-0.25, -1.5, -2.5, -1.0], "top1": [5, 6, 7, 8]},
        ]
    }
    other = {
        "docs": [
            {"token_logprobs": [-1.5, -2.0, -0.25, -3.0], "top1": [1, 9, 3, 4]},
            {"token_logprobs": [-0.25, -1.0, -2.5, -2.0], "top1": [5, 6, 0, 8]},
        ]
    }
    m = teacher_forced.metrics(ref, other)
    deltas = [0.5, 0.0, 0.25, 0.0, 0.0, 0.5, 0.0, 1.0]
    assert m["mean_abs_delta_logprob"] == pytest.approx(sum(deltas) / 8)
    # NLL(other) - NLL(ref): other's logprobs sum to -12.5, ref's to -11.75.
    assert m["delta_nll"] == pytest.approx((12.5 - 11.75) / 8)
    assert m["top1_agreement"] == pytest.approx(6 / 8)
    # Bins of 3 positions per document: positions 0-2 of both docs, then 3.
    first, second = m["bins"]
    assert first["start"] == 0 and second["start"] == 3
    assert first["mean_abs_delta_logprob"] == pytest.approx(
        (0.5 + 0.0 + 0.25 + 0.0 + 0.5 + 0.0) / 6
    )
    assert first["top1_agreement"] == pytest.approx(4 / 6)
    assert second["mean_abs_delta_logprob"] == pytest.approx((0.0 + 1.0) / 2)
    assert second["top1_agreement"] == pytest.approx(1.0)
    assert not any(math.isnan(v) for v in (m["delta_nll"], m["top1_agreement"]))


def test_run_stops_when_scripts_change(tmp_path, monkeypatch):
    scripts = tmp_path / "e2e"
    scripts.mkdir()
    shutil.copy(REPO_ROOT / "benchmarks" / "e2e" / "e2e_common.py", scripts)
    monkeypatch.setattr(e2e_common, "HERE", scripts)
    start = e2e_common.provenance()
    assert set(start) >= {"vllm_attention_sha256", "scripts_sha256"}

    teacher_forced.check_unchanged(start, teacher_forced.DOCS_SHA256)  # no change
    with pytest.raises(teacher_forced.InputsChanged, match="documents"):
        teacher_forced.check_unchanged(start, "f" * 64)

    (scripts / "e2e_common.py").write_text("# edited mid-run\n")
    with pytest.raises(teacher_forced.InputsChanged, match="scripts_sha256"):
        teacher_forced.check_unchanged(start, teacher_forced.DOCS_SHA256)


def test_tree_digest_covers_names_and_bytes(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    before = e2e_common.tree_digest(tmp_path, "*.py")
    assert e2e_common.tree_digest(tmp_path, "*.py") == before
    (tmp_path / "a.py").rename(tmp_path / "b.py")
    renamed = e2e_common.tree_digest(tmp_path, "*.py")
    assert renamed != before
    (tmp_path / "b.py").write_text("x = 2\n")
    assert e2e_common.tree_digest(tmp_path, "*.py") not in (before, renamed)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([1, 2, 3], [1, 2, 3], None),
        ([1, 2, 3], [1, 5, 3], 1),
        ([7], [8], 0),
        ([1, 2], [1, 2, 3], 2),  # one run stopped early
        ([], [], None),
    ],
)
def test_first_divergence(a, b, expected):
    assert e2e_common.first_divergence(a, b) == expected
    assert e2e_common.first_divergence(b, a) == expected


def test_spec_step_classes_from_per_position_counts():
    import spec_accept

    # 10 verify steps with 4 drafted tokens: 3 accepted all, 4 accepted 1-3,
    # 3 accepted none.  Position i counts the steps that accepted token i.
    per_step = [4, 4, 4, 1, 2, 3, 1, 0, 0, 0]
    per_pos = [sum(a > i for a in per_step) for i in range(4)]
    stats = {"num_drafts": len(per_step), "accepted_per_pos": per_pos}
    assert spec_accept.step_classes(stats, 4) == {
        "full": 3,
        "partial": 4,
        "reject": 3,
    }


def test_spec_attention_block_sizes_from_the_kv_cache_report():
    import spec_accept

    def group(block_size, attention):
        return {"block_size": block_size, "attention": attention}

    result = {
        "kv_cache": [
            {"groups": [group(434, False), group(256, True)]},
            {"groups": [group(434, False), group(128, True), group(256, True)]},
        ]
    }
    assert spec_accept.attention_block_sizes(result) == [128, 256]
    assert spec_accept.attention_block_sizes({"kv_cache": None}) == []


def test_spec_margin_stats():
    import spec_accept

    runs = {
        "single": [
            {"logprobs": [{"1": -0.1, "2": -2.1}, {"3": -0.05, "4": -0.15}]},
            {"logprobs": [{"5": -0.5, "6": -1.5}, {"7": -0.01}]},
        ]
    }
    stats = spec_accept.margin_stats(runs)
    assert stats["steps"] == 3  # a step with one logprob has no margin
    assert stats["below_tie_fraction"] == pytest.approx(1 / 3)
    assert stats["p50"] == pytest.approx(1.0)


def test_spec_lookup_matches_vllms_ngram_proposer():
    """The prediction replays vLLM's own prompt-lookup rule: the earliest of
    the longest suffix matches, up to k tokens after it."""
    import random

    import numpy as np
    import spec_accept

    from vllm.v1.spec_decode.ngram_proposer import (
        _find_longest_matched_ngram_and_propose_tokens as vllm_lookup,
    )

    rng = random.Random(0)
    for _ in range(300):
        context = [rng.randrange(4) for _ in range(rng.randrange(1, 40))]
        k = rng.randrange(1, 7)
        expected = vllm_lookup(np.array(context, dtype=np.int32), 2, 4, 10_000, k)
        assert spec_accept.lookup(context, k, 2, 4) == expected.tolist(), context
    # Hand examples: the 4-gram [1, 2, 3, 4] first occurs at 0; with a
    # 3-gram only, the earliest one wins.
    assert spec_accept.lookup([1, 2, 3, 4, 9, 1, 2, 3, 4], 2, 2, 4) == [9, 1]
    assert spec_accept.lookup([7, 2, 3, 5, 8, 2, 3, 6, 2, 3], 3, 2, 4) == [5, 8, 2]


def test_spec_prediction_of_a_cycle():
    import spec_accept

    # Greedy follows the cycle 0 -> 1 -> 2 -> 0; k = 3, n-grams of 2-4.
    # The prefill samples the first 1.  Then, worked by hand:
    # - context ends [0, 1]: the earliest [0, 1] is in the prompt, draft
    #   [2, 9, 0]; 2 is accepted, 9 rejected (partial, 2 tokens out);
    # - ends [2, 0]: no earlier [2, 0], no draft (1 token out);
    # - ends [0, 1]: draft [2, 9, 0] again (partial, 2 tokens out);
    # - ends [0, 1, 2, 0]: the generated cycle matches, draft [1, 2, 0], all
    #   accepted (full, 4 tokens out: all ten tokens are done).
    prompt = [5, 0, 1, 2, 9, 0]
    tokens = [1, 2, 0, 1, 2, 0, 1, 2, 0, 1]
    assert spec_accept.predict(prompt, tokens, 3, 2, 4) == {
        "drafted": 9,
        "accepted": 5,
        "full": 1,
        "partial": 2,
        "reject": 0,
    }


def test_spec_prompts_end_in_cycles_and_hold_traps():
    import spec_accept

    vocab = 400
    succ = e2e_common.make_hybrid_model.successor_map(vocab + 8, (2, 3, 8, 12), 0)
    prompts = spec_accept.make_prompts(succ, vocab, (2, 8, 12), seed=1)
    assert prompts == spec_accept.make_prompts(succ, vocab, (2, 8, 12), seed=1)
    for length, prompt in zip((2, 8, 12), prompts):
        assert len(spec_accept.cycle_of(succ, prompt[-1])) == length
        assert all(0 <= t < vocab for t in prompt)
        if length < spec_accept.MIN_TRAP_CYCLE:
            continue
        cycle = set(spec_accept.cycle_of(succ, prompt[-1]))
        # Each trap: a run of cycle tokens, then a token that is not the
        # successor of the run's last one.
        runs, i = [], 0
        body = prompt[:-1]
        while i < len(body):
            if body[i] in cycle:
                j = i
                while j + 1 < len(body) and body[j + 1] == succ[body[j]]:
                    j += 1
                runs.append(j - i + 1)
                assert j + 1 < len(body) and body[j + 1] != succ[body[j]]
                i = j + 1
            else:
                i += 1
        assert sorted(r for r in runs if r >= 2) == sorted(spec_accept.TRAPS)
    with pytest.raises(ValueError, match="no successor cycle of length 5"):
        spec_accept.make_prompts(succ, vocab, (5,), seed=1)


def test_spec_margin_drift():
    import spec_accept

    ref = {
        "runs": {
            "single": [
                {
                    "tokens": [1, 2, 3],
                    "logprobs": [
                        {"1": 0, "9": -3},
                        {"2": 0, "9": -5},
                        {"3": 0, "9": -1},
                    ],
                },
            ]
        }
    }
    other = {
        "runs": {
            "single": [
                {
                    "tokens": [1, 2, 4],
                    "logprobs": [
                        {"1": 0, "9": -3.5},
                        {"2": 0, "9": -4},
                        {"4": 0, "9": -9},
                    ],
                },
            ]
        }
    }
    drift = spec_accept.margin_drift(ref, other)
    # Step 3 diverged and is not counted.
    assert drift["steps"] == 2
    assert drift["max"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "script",
    [
        "greedy_compare.py",
        "scale_view_regression.py",
        "serve_bench.py",
        "spec_accept.py",
        "step_profile.py",
        "teacher_forced.py",
        "tp_compare.py",
    ],
)
def test_every_script_prints_its_help(script):
    """Each script's command line works without a GPU: --help exits 0 and
    shows the options every script shares and its own description."""
    import subprocess

    path = REPO_ROOT / "benchmarks" / "e2e" / script
    out = subprocess.run(
        [sys.executable, str(path), "--help"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("usage:")
    assert "--results-dir" in out.stdout and "--model" in out.stdout
    assert "--load-format {auto,dummy}" in out.stdout
    first_line = path.read_text().split('"""', 2)[1].strip().splitlines()[0]
    assert " ".join(first_line.split()[:3]) in " ".join(out.stdout.split())


# --------------------------------------------------------------------------
# Config-only models, vLLM's dummy loader, and what speculative runs report


def test_load_format_parses_and_reaches_the_engine_kwargs():
    import serve_bench

    p = serve_bench.parser()
    cfg = {"model": "m", "kv": "int8-triton"}
    args = p.parse_args(["--load-format", "dummy"])
    assert e2e_common.engine_settings(args)["load_format"] == "dummy"
    kwargs = e2e_common.engine_kwargs({**cfg, **e2e_common.engine_settings(args)})
    assert kwargs["load_format"] == "dummy"
    default = p.parse_args([])
    assert (
        e2e_common.engine_kwargs({**cfg, **e2e_common.engine_settings(default)})[
            "load_format"
        ]
        == "auto"
    )
    assert e2e_common.engine_kwargs(cfg)["load_format"] == "auto"
    with pytest.raises(SystemExit):
        p.parse_args(["--load-format", "safetensors"])
    with pytest.raises(ValueError, match="load_format"):
        e2e_common.engine_kwargs({**cfg, "load_format": "bogus"})


def test_block_size_parses_and_reaches_the_engine_kwargs():
    """--block-size becomes vLLM's ``block_size`` engine argument in every
    script; without it the engine gets none (vLLM chooses)."""
    import dataclasses

    import greedy_compare
    import spec_accept

    from vllm.engine.arg_utils import EngineArgs

    assert "block_size" in {f.name for f in dataclasses.fields(EngineArgs)}
    cfg = {"model": "m", "kv": "int8-triton"}
    for p in (greedy_compare.parser(), spec_accept.parser()):
        args = p.parse_args(["--block-size", "64"])
        kwargs = e2e_common.engine_kwargs({**cfg, **e2e_common.engine_settings(args)})
        assert kwargs["block_size"] == 64
        default = e2e_common.engine_settings(p.parse_args([]))
        assert "block_size" not in e2e_common.engine_kwargs({**cfg, **default})
        with pytest.raises(SystemExit):
            p.parse_args(["--block-size", "sixty-four"])


def test_quantization_parses_and_reaches_the_engine_kwargs():
    """--quantization fp8 becomes vLLM's ``quantization`` engine argument
    (an EngineArgs field); without it the engine gets none (BF16 weights),
    and names vLLM does not get from the harness are refused."""
    import dataclasses

    import serve_bench

    from vllm.engine.arg_utils import EngineArgs

    p = serve_bench.parser()
    cfg = {"model": "m", "kv": "int8-triton"}
    args = p.parse_args(["--quantization", "fp8", "--load-format", "dummy"])
    kwargs = e2e_common.engine_kwargs({**cfg, **e2e_common.engine_settings(args)})
    assert kwargs["quantization"] == "fp8" and kwargs["load_format"] == "dummy"
    assert "quantization" in {f.name for f in dataclasses.fields(EngineArgs)}
    default = e2e_common.engine_settings(p.parse_args([]))
    assert "quantization" not in e2e_common.engine_kwargs({**cfg, **default})
    with pytest.raises(SystemExit):
        p.parse_args(["--quantization", "gguf"])
    with pytest.raises(ValueError, match="quantization"):
        e2e_common.engine_kwargs({**cfg, "quantization": "awq"})


@pytest.mark.parametrize("spec", ["none", "dflash", "ngram"])
def test_spec_reaches_the_engine_kwargs(spec):
    """step_profile's and serve_bench's --spec (one shared function) pick the
    drafter folder (DFlash) or ngram prompt lookup (spec_accept's settings),
    and the engine gets the matching speculative config with the requested
    number of drafts; none gives it none."""
    import serve_bench
    import spec_accept
    import step_profile

    assert step_profile.spec_settings is e2e_common.spec_settings
    assert serve_bench.parser().parse_args(["--spec", spec]).spec == [spec]
    for drafts in (5, 3):
        settings = e2e_common.spec_settings(spec, "drafter-folder", drafts)
        kwargs = e2e_common.engine_kwargs({"model": "m", "kv": "bf16-fa", **settings})
        config = kwargs.get("speculative_config")
        if spec == "none":
            assert config is None and settings["spec"] is None
            continue
        assert config["num_speculative_tokens"] == drafts and settings["spec"] == spec
        if spec == "dflash":
            assert config["method"] == "dflash"
            assert config["model"] == "drafter-folder"
        else:
            assert config["method"] == "ngram"
            assert (config["prompt_lookup_min"], config["prompt_lookup_max"]) == (
                spec_accept.PROMPT_LOOKUP
            )
    with pytest.raises(ValueError, match="spec"):
        e2e_common.spec_settings("eagle", None)


def test_ensure_models_writes_config_only_for_the_dummy_loader(tmp_path):
    model, drafter = e2e_common.ensure_models(
        None, None, "tiny", str(tmp_path), load_format="dummy"
    )
    assert Path(model) == tmp_path / "models" / "tiny-config-only"
    assert drafter == f"{model}-dflash"
    for folder in (model, drafter):
        assert (Path(folder) / "config.json").exists()
        assert not list(Path(folder).glob("*.safetensors"))
    # The config-only folder is refused where weights are read ...
    with pytest.raises(SystemExit, match="--load-format dummy"):
        e2e_common.ensure_models(model, None, "tiny", str(tmp_path), "auto")
    # ... and accepted by the dummy loader.
    assert (
        e2e_common.ensure_models(model, None, "tiny", str(tmp_path), "dummy")[0]
        == model
    )
    # The successor model's behaviour is its weights.
    with pytest.raises(SystemExit, match="weights"):
        e2e_common.ensure_successor_model(None, str(tmp_path), load_format="dummy")


_ENGINE_CONFIG_CHECK = """
import json, sys
sys.path.insert(0, sys.argv[1])
import vllm.platforms
from vllm.platforms.cpu import CpuPlatform
vllm.platforms._current_platform = CpuPlatform()
import serve_bench
from e2e_common import engine_kwargs, engine_settings
from vllm.engine.arg_utils import EngineArgs
args = serve_bench.parser().parse_args(sys.argv[3:])
cfg = {"model": sys.argv[2], "kv": "int8-triton", "drafter": sys.argv[2] + "-dflash",
       **engine_settings(args)}
config = EngineArgs(**engine_kwargs(cfg)).create_engine_config()
text = config.model_config.hf_text_config
draft = config.speculative_config.draft_model_config
print("RESULT " + json.dumps({
    "load_format": str(config.load_config.load_format),
    "layer_types": text.layer_types,
    "kv_heads": text.num_key_value_heads,
    "head_dim": text.head_dim,
    "draft_layers": draft.hf_config.num_hidden_layers,
    "method": config.speculative_config.method,
}))
"""


def test_dummy_load_format_reaches_vllms_engine_config(tmp_path):
    """On the config-only 64-layer model, vLLM's own EngineArgs take the
    script's settings: load format dummy, 16 full-attention layers of 4 KV
    heads x 256, the DFlash drafter (CPU platform, in a subprocess)."""
    import json
    import subprocess

    import make_hybrid_model

    out = make_hybrid_model.make_models(
        "qwen3.5-27b", str(tmp_path / "q"), drafter=True, config_only=True
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-P",
            "-c",
            _ENGINE_CONFIG_CHECK,
            str(REPO_ROOT / "benchmarks" / "e2e"),
            out["target"],
            "--load-format",
            "dummy",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")][-1]
    got = json.loads(line.removeprefix("RESULT "))
    assert got["load_format"] == "dummy"
    assert got["layer_types"].count("full_attention") == 16
    assert len(got["layer_types"]) == 64
    assert (got["kv_heads"], got["head_dim"]) == (4, 256)
    assert (got["draft_layers"], got["method"]) == (5, "dflash")


def _metric(cls, name, labels, **kw):
    return cls(name=name, labels=labels, **kw)


def test_spec_counters_from_a_metrics_snapshot():
    from vllm.v1.metrics.reader import Counter, Gauge, Vector

    labels = [{"engine": "0"}, {"engine": "1"}]
    metrics = [
        _metric(Counter, "vllm:spec_decode_num_drafts", labels[0], value=10),
        _metric(Counter, "vllm:spec_decode_num_drafts", labels[1], value=5),
        _metric(Counter, "vllm:spec_decode_num_draft_tokens", labels[0], value=75),
        _metric(Counter, "vllm:spec_decode_num_accepted_tokens", labels[0], value=30),
        _metric(
            Vector,
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            labels[0],
            values=[12, 9, 6, 3, 0],
        ),
        _metric(Counter, "vllm:generation_tokens", labels[0], value=999),
        _metric(Gauge, "vllm:num_requests_running", labels[0], value=1.0),
    ]
    assert e2e_common.spec_counters(metrics) == {
        "num_drafts": 15,  # both engines
        "num_draft_tokens": 75,
        "num_accepted_tokens": 30,
        "accepted_per_pos": [12, 9, 6, 3, 0],
    }
    assert e2e_common.spec_counters(metrics[-2:]) is None


def test_spec_step_report_from_given_counters():
    before = {
        "num_drafts": 10,
        "num_draft_tokens": 50,
        "num_accepted_tokens": 20,
        "accepted_per_pos": [8, 6, 4, 2],
    }
    after = {
        "num_drafts": 30,
        "num_draft_tokens": 150,
        "num_accepted_tokens": 50,
        "accepted_per_pos": [20, 14, 10, 5, 1],
    }
    delta = e2e_common.spec_counter_delta(after, before)
    assert delta == {
        "num_drafts": 20,
        "num_draft_tokens": 100,
        "num_accepted_tokens": 30,
        "accepted_per_pos": [12, 8, 6, 3, 1],
    }
    report = e2e_common.spec_step_report(
        delta, {"itl_p50_ms": 4.0, "itl_mean_ms": 5.0, "itl_p99_ms": None}
    )
    assert report["drafts"] == 20
    assert report["draft_tokens"] == 100
    assert report["accepted_tokens"] == 30
    assert report["acceptance_rate"] == pytest.approx(0.3)
    # 20 steps delivered 20 + 30 tokens.
    assert report["tokens_per_step"] == pytest.approx(2.5)
    assert report["step_p50_ms"] == pytest.approx(10.0)
    assert report["step_mean_ms"] == pytest.approx(12.5)
    assert report["step_p99_ms"] is None
    # Without speculation a step delivers one token: step time is the ITL.
    plain = e2e_common.spec_step_report(None, {"itl_p50_ms": 4.0})
    assert plain["tokens_per_step"] == 1.0 and plain["step_p50_ms"] == 4.0
    assert plain["drafts"] == 0 and plain["acceptance_rate"] is None
    assert e2e_common.spec_counter_delta(None, before) is None
    assert e2e_common.spec_counter_delta(after, None) == after
    with pytest.raises(ValueError, match="ITL"):
        e2e_common.spec_step_report(delta, {"ttft_s": 1.0})


def _serve_report(label, itl, tokens_per_step, b_ttft, batch_tok_s):
    def single(i, t):
        s = {"ttft_s": 1.0, "decode_tok_s": 100.0, "itl_p50_ms": i, "tokens": 64}
        if t is not None:
            s.update(
                e2e_common.spec_step_report(
                    {
                        "num_drafts": 10,
                        "num_draft_tokens": 50,
                        "num_accepted_tokens": round(10 * (t - 1)),
                    },
                    {"itl_p50_ms": i},
                )
            )
        return s

    return {
        "label": label,
        "runs": {
            # An old report: no spec fields on the plain run.
            "none": {
                "single": {"32768": single(itl[0], None)},
                "concurrent": {"b_ttft_s": b_ttft, "a_itl_during_b_prefill_max_ms": 50},
                "batch": {"decode_tok_s": batch_tok_s, "itl_p50_ms": itl[0]},
            },
            "dflash": {
                "single": {"32768": single(itl[1], tokens_per_step)},
                "concurrent": None,
                "batch": None,
            },
        },
    }


def test_compare_uses_step_time_between_kv_dtypes(tmp_path, monkeypatch):
    """BF16 accepted more drafts by chance: its ITL is lower, its step time
    is not.  The ratios say so."""
    import json

    import serve_bench

    paths = []
    for label, itl, tps, b_ttft, tok_s in (
        ("bf16-fa", (2.0, 4.0), 3.0, 1.0, 400.0),
        ("int8", (1.9, 5.0), 2.0, 1.05, 440.0),
    ):
        path = tmp_path / f"serve_{label}.json"
        path.write_text(json.dumps(_serve_report(label, itl, tps, b_ttft, tok_s)))
        paths.append(str(path))
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # no plot here
    summary = serve_bench.compare(paths, str(tmp_path), baseline="bf16-fa")
    rows = {(r["label"], r["spec"]): r for r in summary["rows"]}
    assert rows["bf16-fa", "dflash"]["step_p50_ms"] == pytest.approx(12.0)
    assert rows["int8", "dflash"]["step_p50_ms"] == pytest.approx(10.0)
    assert rows["int8", "none"]["step_p50_ms"] == pytest.approx(1.9)  # old report
    ratios = {(q["spec"], q["ctx"]): q for q in summary["ratios"]}
    assert all(q["label"] == "int8" for q in summary["ratios"])
    dflash = ratios["dflash", 32768]
    assert dflash["itl_p50_ms_ratio"] == pytest.approx(1.25)
    assert dflash["step_p50_ms_ratio"] == pytest.approx(10.0 / 12.0)
    assert ratios["none", 32768]["step_p50_ms_ratio"] == pytest.approx(0.95)
    extra = ratios["none", "concurrent/batch"]
    assert extra["b_ttft_s_ratio"] == pytest.approx(1.05)
    assert extra["batch_tok_s_ratio"] == pytest.approx(1.1)
    assert json.loads((tmp_path / "serve_compare.json").read_text())["ratios"]


def test_compare_stops_when_nothing_was_measured(tmp_path, monkeypatch):
    """Runs that failed before measuring (their reports hold no case) give
    one clear message, not a plotting error with nothing written."""
    import json

    import serve_bench

    paths = []
    for label in ("int8", "bf16-fa"):
        path = tmp_path / f"serve_{label}.json"
        path.write_text(json.dumps({"label": label, "kv": label, "runs": {}}))
        paths.append(str(path))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(SystemExit, match="nothing to compare"):
        serve_bench.compare(paths, str(tmp_path), baseline="bf16-fa")
    assert not (tmp_path / "serve_compare.json").exists()


def test_measure_turns_alternate_runs_and_stop_on_failure(tmp_path):
    """Two runs sharing a GPU measure in turns A B, B A, A B, whatever order
    their engines become ready in, the first turn only ``settle_s`` after the
    last engine is ready; a run that fails releases the other."""
    import asyncio

    import serve_bench

    path = str(tmp_path / "turns")
    open(path, "w").close()  # mktemp's empty file: turn 0
    order = []
    times = {}

    async def run(index, ready_after):
        turns = serve_bench.MeasureTurns(path, index, 2, settle_s=0.4)
        await asyncio.sleep(ready_after)  # the engine starting
        order.append((index, "ready"))
        times[index, "ready"] = time.time()
        turns.ready()
        for r in range(3):
            await turns.wait(r, timeout_s=10)
            order.append((index, r))
            times[index, r] = time.time()
            await asyncio.sleep(0.05)  # measuring
            turns.done(r)
        await turns.wait_all(3, timeout_s=10)
        order.append((index, "exit"))

    async def both():
        # Run 1's engine is ready last: run 0 must not measure before.
        await asyncio.gather(run(0, 0.0), run(1, 0.5))

    asyncio.run(both())
    assert order[:2] == [(0, "ready"), (1, "ready")]
    assert order[2:8] == [(0, 0), (1, 0), (1, 1), (0, 1), (0, 2), (1, 2)]
    # The ready mark's time stamp has the file system's resolution.
    assert times[0, 0] >= times[1, "ready"] + 0.3
    # Run 0 finished first but exits only after run 1's last turn.
    assert sorted(order[8:]) == [(0, "exit"), (1, "exit")]

    open(path, "w").close()

    async def failing():
        waiter = serve_bench.MeasureTurns(path, 1, 2)
        serve_bench.MeasureTurns(path, 0, 2).abort()
        await waiter.wait(0, timeout_s=10)

    with pytest.raises(RuntimeError, match="failed"):
        asyncio.run(failing())

    async def finished_then_other_failed():
        # A run that measured all its turns keeps its results when the other
        # fails afterwards: waiting for the last turn just ends.
        await serve_bench.MeasureTurns(path, 0, 2).wait_all(3, timeout_s=10)

    asyncio.run(finished_then_other_failed())
    with pytest.raises(ValueError):
        serve_bench.MeasureTurns(path, 2, 2)


def _sleep_in_a_named_function(seconds):
    time.sleep(seconds)


def test_host_sampler_attributes_each_step_to_its_stack():
    """step_profile's host sampler: the step that sleeps in a known function
    is attributed to that function, and a step that does nothing has (almost)
    no samples.  (The time bounds are loose: a loaded CI machine delays the
    sampling thread.)"""
    import threading

    import step_profile

    with step_profile.HostSampler(threading.get_ident(), interval_s=0.002) as s:
        s.step = 0
        _sleep_in_a_named_function(0.2)
        s.step = 1
        time.sleep(0.01)
    top = s.top(0)
    assert "test_e2e_harness.py:_sleep_in_a_named_function" in top[0]["stack"]
    assert 20 <= top[0]["ms"] <= 300
    assert sum(row["ms"] for row in s.top(1)) < 50


def test_machine_sampler_summarises_the_decode_window():
    import serve_bench

    sampler = serve_bench.MachineSampler.__new__(serve_bench.MachineSampler)
    # (time, SM MHz, GPU util %, power W, host CPU %)
    sampler.samples = [
        (0.5, 345, 0, 80.0, 5.0),
        (1.0, 1980, 90, 400.0, 20.0),
        (1.5, 1500, 95, 420.0, 60.0),
        (2.0, 1980, 92, 410.0, 30.0),
        (3.0, 345, 0, 80.0, 5.0),
    ]
    recs = [
        {"arrivals": [(0.9, 1), (1.6, 1), (2.0, 1)]},
        {"arrivals": [(1.0, 1), (1.9, 1)]},
    ]
    t0, t1 = serve_bench._decode_window(*recs)
    assert (t0, t1) == (1.0, 2.0)
    summary = sampler.summary(t0, t1)
    assert summary == {
        "samples": 3,
        "sm_mhz_min": 1500,
        "sm_mhz_p50": 1980,
        "gpu_util_p50": 92,
        "power_w_p50": 410.0,
        "host_cpu_pct_p50": 30.0,
    }
    assert sampler.summary(5.0, 6.0) is None


def test_rounds_give_medians_and_per_round_ratios(tmp_path, monkeypatch):
    import json

    import serve_bench

    rounds = [
        {"single": {"32768": {"step_p50_ms": v, "drafts": 3}}, "batch": None}
        for v in (10.0, 30.0, 12.0)
    ]
    merged = serve_bench.median_of(rounds)
    assert merged["single"]["32768"] == {"step_p50_ms": 12.0, "drafts": 3}
    assert merged["batch"] is None

    def report(label, values):
        rs = [
            {
                "single": {
                    "32768": {
                        "ttft_s": 1.0,
                        "decode_tok_s": 1.0,
                        "itl_p50_ms": v,
                        "step_p50_ms": v,
                    }
                },
                "concurrent": None,
                "batch": {"step_p50_ms": 2 * v, "decode_tok_s": 1.0},
            }
            for v in values
        ]
        run = dict(serve_bench.median_of(rs), rounds=rs)
        return {"label": label, "runs": {"dflash": run}}

    paths = []
    for label, values in (("bf16", (10.0, 20.0, 10.0)), ("int8", (9.0, 10.0, 11.0))):
        path = tmp_path / f"serve_{label}.json"
        path.write_text(json.dumps(report(label, values)))
        paths.append(str(path))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    summary = serve_bench.compare(paths, str(tmp_path), baseline="bf16")
    per_round = {q["ctx"]: q["step_p50_ratios"] for q in summary["round_ratios"]}
    assert per_round["32768"] == pytest.approx([0.9, 0.5, 1.1])
    assert per_round["batch"] == pytest.approx([0.9, 0.5, 1.1])
    # The medians' ratio: 10 / 10.
    ratios = {q["ctx"]: q for q in summary["ratios"]}
    assert ratios[32768]["step_p50_ms_ratio"] == pytest.approx(1.0)


def test_merge_keeps_other_runs_of_the_same_configuration(tmp_path):
    import json

    import serve_bench

    path = tmp_path / "serve_x.json"
    report = {"kv": "int8-triton", "model": "/m", "load_format": "dummy"}
    assert serve_bench.previous_runs(str(path), report) == {}
    path.write_text(json.dumps({**report, "runs": {"none": {"single": {}}}}))
    assert serve_bench.previous_runs(str(path), report) == {"none": {"single": {}}}
    with pytest.raises(SystemExit, match="load_format"):
        serve_bench.previous_runs(str(path), {**report, "load_format": "auto"})
    # Reports written before --quantization existed had BF16 weights.
    assert serve_bench.previous_runs(str(path), {**report, "quantization": None})
    with pytest.raises(SystemExit, match="quantization"):
        serve_bench.previous_runs(str(path), {**report, "quantization": "fp8"})


def test_host_time_times_each_path_without_a_gpu(tmp_path):
    """host_time.py runs the backend's Python with the kernels replaced by
    no-ops: INT8 decode and verify steps reach the split-KV kernels, the
    mixed step its decode rows' split-KV kernel and the sectioned prefill
    (dequantiser and FlashAttention's stand-in), as on a GPU; BF16 steps
    the unified kernel; every step reports a positive host time."""
    import subprocess

    out = tmp_path / "host_time.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "benchmarks" / "e2e" / "host_time.py"),
            "--layers=2",
            "--batch=2",
            "--steps=3",
            "--warmup=1",
            f"--output={out}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(out.read_text())["results"]
    # 4 steps (warm-up included) x 3 step kinds x 2 layers.
    int8 = results["int8"]["launches_stubbed"]
    assert int8["kernel_int8_split_kv_attention"] == 4 * 2 * 2  # decode, mixed
    assert int8["kernel_int8_split_kv_verify"] == 4 * 2  # verify-6
    assert int8["_dequant_int8_pth_section_kernel"] == 4 * 2  # mixed
    assert int8["flash_attn (stand-in)"] == 4 * 2  # mixed: one call per layer
    assert "kernel_unified_attention" not in int8
    assert set(results["bf16"]["launches_stubbed"]) == {
        "kernel_unified_attention",
        "reduce_segments",
    }
    for kv in ("int8", "bf16"):
        for step in ("decode", "verify-6", "mixed"):
            assert results[kv][step]["step_us"] > 0


def test_path_counters_wrap_the_launchers_where_the_backend_calls_them(monkeypatch):
    """The engine-level path counts (split-KV with its query lengths, the
    sectioned prefill, the unified kernel) wrap each launcher in the backend
    module whose code calls it, so no launch goes uncounted (kernels
    replaced by stand-ins)."""
    from vllm.v1.attention.backends import triton_attn
    from vllm.v1.attention.backends import triton_int8_per_token_head as int8

    launchers = (
        (int8, "int8_split_kv_attention", int8.forward_int8_per_token_head),
        (int8, "sectioned_prefill_attention", int8.forward_int8_per_token_head),
        (
            triton_attn,
            "unified_attention",
            triton_attn.TritonAttentionImpl._forward_unified,
        ),
    )
    for module, name, caller in launchers:
        assert name in caller.__code__.co_names, (module.__name__, name)
        monkeypatch.setattr(module, name, lambda *args, **kwargs: None)
    monkeypatch.setattr(e2e_common, "_PATH_COUNTS", None)
    e2e_common.count_attention_paths()
    int8.int8_split_kv_attention(max_query_len=6)
    int8.sectioned_prefill_attention()
    triton_attn.unified_attention()
    triton_attn.unified_attention()
    assert e2e_common.read_path_counter() == {
        "split_kv": 1,
        "split_kv_q6": 1,
        "sectioned_prefill": 1,
        "unified": 2,
    }


def test_jit_log_records_torch_compiles_with_their_vllm_caller():
    """step_profile's JitLog also records torch.compile's compiles, which
    vLLM's JIT monitor (Triton only) does not see, each with the vLLM
    function that triggered it: here the computed-token correction of
    asynchronous speculative decoding, compiled by its warm-up, then run for
    two requests (no recompile)."""
    import step_profile
    import torch

    from vllm.v1.spec_decode import utils

    torch._dynamo.reset()
    log = step_profile.JitLog()
    log.start()
    try:
        log.phase = "warm-up"
        num_computed = torch.zeros(4, dtype=torch.int32)
        num_accepted = torch.zeros(4, dtype=torch.int32)
        prev_positions = torch.zeros(4, dtype=torch.int64)
        prev_drafts = torch.zeros(4, dtype=torch.int32)
        utils.warmup_update_num_computed_tokens_for_batch_change(
            num_computed, num_accepted, prev_positions, prev_drafts
        )
        log.phase = "serving"
        with torch.inference_mode():
            utils.update_num_computed_tokens_for_batch_change(
                num_computed,
                num_accepted[:2],
                prev_positions[:2],
                torch.ones(3, dtype=torch.int32),
                prev_drafts,
                torch.zeros(2, dtype=torch.int32),
            )
    finally:
        log.stop()
    assert [e["phase"] for e in log.torch_compiles] == ["warm-up"], log.torch_compiles
    event = log.torch_compiles[0]
    assert event["trigger"] == "DYNAMO" and event["s"] > 0
    assert event["caller"].startswith(
        "utils.py:update_num_computed_tokens_for_batch_change:"
    ), event
