"""The README's serve commands parse with the installed vLLM's own CLI
parser (on a machine without a GPU: the parser needs a platform, so the
check runs it with vLLM's CPU platform)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# The capacity calculator's plan behind the README's 16 GB command.
CARD_16GB = (
    ROOT
    / "results"
    / "capacity"
    / "kv_cache_capacity_qwen3_5_27b_16gb_card_util095.json"
)
DRAFTER = "z-lab/Qwen3.5-27B-DFlash"

PARSE = r"""
import json, shlex, sys
import vllm.platforms as platforms
from vllm.platforms.cpu import CpuPlatform
platforms._current_platform = CpuPlatform()
from vllm.entrypoints.openai.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
args = make_arg_parser(FlexibleArgumentParser()).parse_args(shlex.split(sys.argv[1]))
print(json.dumps({
    "model": args.model_tag,
    "kv_cache_dtype": args.kv_cache_dtype,
    "attention_backend": str(args.attention_backend),
    "max_model_len": args.max_model_len,
    "speculative_config": args.speculative_config,
    "tensor_parallel_size": args.tensor_parallel_size,
    "gpu_memory_utilization": args.gpu_memory_utilization,
}))
"""


def serve_commands() -> list[str]:
    """`vllm serve` commands of the README's first bash block."""
    block = re.search(r"```bash\n(.*?)```", README.read_text(), re.DOTALL).group(1)
    joined = block.replace("\\\n", " ")
    return [
        line.split("vllm serve", 1)[1].split("#", 1)[0]
        for line in joined.splitlines()
        if "vllm serve" in line
    ]


def card_16gb_max_model_len() -> int:
    """max_model_len of the fork's INT8 + DFlash plan for the 16 GB card."""
    plans = json.loads(CARD_16GB.read_text())["plans"]
    (plan,) = [
        p
        for p in plans
        if p["planner"] == "planned"
        and p["kv_cache_dtype"] == "int8_per_token_head"
        and p["drafter"]
    ]
    return plan["max_model_len"]


def test_readme_shows_serving_with_and_without_dflash_on_two_gpus_and_16gb():
    commands = serve_commands()
    assert len(commands) == 4
    assert "dflash" not in commands[0] and "dflash" in commands[1]
    assert "--tensor-parallel-size 2" in commands[2]
    assert "--gpu-memory-utilization 0.95" in commands[3] and "dflash" in commands[3]


def test_readme_quotes_the_16gb_context_of_the_capacity_calculator():
    """The 16 GB command's --max-model-len is the calculator's figure, and
    the README says where it comes from."""
    length = card_16gb_max_model_len()
    assert f"--max-model-len {length}" in serve_commands()[3]
    assert CARD_16GB.name in README.read_text()


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_readme_serve_command_parses(index):
    pytest.importorskip("vllm")
    out = subprocess.run(
        [sys.executable, "-c", PARSE, serve_commands()[index]],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    parsed = json.loads(out.stdout.strip().splitlines()[-1])
    assert parsed["kv_cache_dtype"] == "int8_per_token_head"
    assert parsed["attention_backend"].endswith("TRITON_ATTN")
    assert parsed["tensor_parallel_size"] == (2 if index == 2 else 1)
    if index == 3:
        assert parsed["max_model_len"] == card_16gb_max_model_len()
        assert parsed["gpu_memory_utilization"] == 0.95
    else:
        assert parsed["model"] == "Qwen/Qwen3.5-27B"
        assert parsed["max_model_len"] == 131072
    spec = parsed["speculative_config"]
    if index in (1, 3):
        assert spec["method"] == "dflash" and spec["num_speculative_tokens"] == 5
        assert spec["model"] == DRAFTER
    else:
        assert spec is None
