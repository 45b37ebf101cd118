# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""CPU tests for benchmarks/kv_cache_capacity.py."""

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "kv_cache_capacity.py"


@pytest.fixture(scope="module")
def calc():
    spec = importlib.util.spec_from_file_location("kv_cache_capacity", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


QWEN = ["--preset", "qwen3.5-27b", "--drafter-preset", "qwen3.5-27b-dflash"]


def plans(calc, argv):
    return {
        (p.kv_cache_dtype, p.drafter, p.planner): p
        for p in calc.compute(calc.make_parser().parse_args(argv))
    }


def test_qwen3_5_dflash_12gib(calc):
    result = plans(calc, [*QWEN, "--kv-cache-dtype", "auto", "--group-size", "4"])
    upstream = result[("auto", True, "upstream")]
    planned = result[("auto", True, "planned")]
    forced_4 = result[("auto", True, "4")]
    assert (upstream.group_size, upstream.num_groups) == (5, 15)
    assert (planned.group_size, planned.num_groups) == (8, 9)
    assert (forced_4.group_size, forced_4.num_groups) == (4, 18)
    assert upstream.bytes_per_token == 80 * 1024
    assert planned.bytes_per_token == forced_4.bytes_per_token == 64 * 1024
    assert upstream.pool_tokens == 139_773
    assert planned.pool_tokens == 169_023
    # Size 4 has the same padding with twice the groups (block rounding aside).
    assert forced_4.pool_tokens == pytest.approx(planned.pool_tokens, rel=0.002)
    # The seed measured 141,631 and 171,868 tokens on a GPU.
    assert upstream.pool_tokens == pytest.approx(141_631, rel=0.02)
    assert planned.pool_tokens == pytest.approx(171_868, rel=0.02)
    # Without the drafter nothing changes.
    assert result[("auto", False, "planned")].group_size == 16
    no_drafter = result[("auto", False, "planned")].pool_tokens
    assert no_drafter == result[("auto", False, "upstream")].pool_tokens


def test_int8_per_token_head_capacity(calc):
    result = plans(calc, ["--preset", "qwen3.5-27b"])
    bf16 = result[("auto", False, "planned")]
    int8 = result[("int8_per_token_head", False, "planned")]
    # 4 KV heads * (256 + 256 + 2 * 4 bytes of scales) per token and layer.
    assert int8.bytes_per_token == 16 * 4 * 520
    assert (bf16.pool_tokens, int8.pool_tokens) == (188_321, 358_647)
    assert int8.pool_tokens >= 1.8 * bf16.pool_tokens


def test_int8_per_token_head_dflash_12gib(calc):
    result = plans(calc, [*QWEN, "--kv-cache-dtype", "int8_per_token_head"])
    upstream = result[("int8_per_token_head", True, "upstream")]
    planned = result[("int8_per_token_head", True, "planned")]
    assert (upstream.group_size, upstream.num_groups) == (5, 15)
    assert (planned.group_size, planned.num_groups) == (8, 9)
    # Every page is padded to the drafter's 1,600-token page: 1,600 tokens
    # * 8 KV heads * (128 + 128 + 2 * 4 bytes of scales).
    assert upstream.page_size_bytes == planned.page_size_bytes == 1600 * 8 * 264
    # 16 full-attention layers, plus 4 padding slots with the n:1 size 5.
    assert upstream.bytes_per_token == (16 + 4) * 8 * 264
    assert planned.bytes_per_token == 16 * 8 * 264
    assert upstream.pool_tokens == 247_833
    assert planned.pool_tokens == 295_688
    assert upstream.max_model_len == planned.max_model_len == 131_072


def test_card_estimate_json(calc, capsys):
    argv = [*QWEN, "--card", "--json", "--kv-cache-dtype", "int8_per_token_head"]
    assert calc.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["estimate"] is True
    assert out["budget_gib"] == {"False": pytest.approx(7.6), "True": 5.5}
    assert {p["planner"] for p in out["plans"]} == {"upstream", "planned"}
    # --card fits max_model_len to the 5.5 GiB left with the drafter.
    result = {(p["drafter"], p["planner"]): p for p in out["plans"]}
    assert result[(True, "upstream")]["max_model_len"] == 108_800
    assert result[(True, "planned")]["max_model_len"] == 136_000
    assert result[(True, "planned")]["pool_tokens"] == 136_626
    no_drafter = result[(False, "planned")]
    assert no_drafter["max_model_len"] == 232_800
    assert no_drafter == result[(False, "upstream")] | {"planner": "planned"}


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--preset", "nope"], "unknown model preset 'nope'"),
        (["--preset", "qwen3.5-27b", "--drafter-preset", "x"], "unknown drafter"),
        ([], "give --config or --preset"),
        (["--config", "/nonexistent/config.json"], "cannot read model config"),
        (["--preset", "qwen3.5-27b", "--budget-gib", "0"], "no memory left"),
    ],
)
def test_bad_input(calc, capsys, argv, message):
    assert calc.main(argv) == 2
    assert message in capsys.readouterr().err


def test_missing_config_keys(calc, capsys, tmp_path):
    config = dict(calc.PRESETS["qwen3.5-27b"])
    config["text_config"] = dict(config["text_config"])
    del config["text_config"]["linear_num_value_heads"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert calc.main(["--config", str(path)]) == 2
    assert "lacks linear_num_value_heads" in capsys.readouterr().err


def test_budget_too_small(calc, capsys):
    argv = ["--preset", "qwen3.5-27b", "--kv-cache-dtype", "auto"]
    assert calc.main([*argv, "--budget-gib", "0.01"]) == 2
    assert "vLLM cannot plan a 0.01 GiB KV cache" in capsys.readouterr().err
