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

README = Path(__file__).resolve().parents[2] / "README.md"

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


def test_readme_shows_serving_with_and_without_dflash_and_on_two_gpus():
    commands = serve_commands()
    assert len(commands) == 3
    assert "dflash" not in commands[0] and "dflash" in commands[1]
    assert "--tensor-parallel-size 2" in commands[2]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_readme_serve_command_parses(index):
    pytest.importorskip("vllm")
    command = serve_commands()[index].replace("<DFlash drafter>", "org/drafter")
    out = subprocess.run(
        [sys.executable, "-c", PARSE, command],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    parsed = json.loads(out.stdout.strip().splitlines()[-1])
    assert parsed["model"] == "Qwen/Qwen3.5-27B"
    assert parsed["kv_cache_dtype"] == "int8_per_token_head"
    assert parsed["attention_backend"].endswith("TRITON_ATTN")
    assert parsed["max_model_len"] == 131072
    assert parsed["tensor_parallel_size"] == (2 if index == 2 else 1)
    spec = parsed["speculative_config"]
    if index == 1:
        assert spec["method"] == "dflash" and spec["num_speculative_tokens"] == 5
    else:
        assert spec is None
