"""Commit subjects carry upstream's tags, as vLLM writes them."""

from __future__ import annotations

import pytest

from forktool.series import SUBJECT_RE


@pytest.mark.parametrize(
    "subject",
    [
        "[Bugfix] Per-token-head KV cache: do not fill the scale views",
        "[Perf][Spec Decode] Compile the speculative-decoding kernels",
        "[Kernel] [ROCm] Split-KV attention",
        "[CI/Build] Pin the wheel",
    ],
)
def test_upstream_subjects_pass(subject):
    assert SUBJECT_RE.match(subject)


@pytest.mark.parametrize(
    "subject",
    [
        "Fix the scale views",  # no tag
        "[Perf]Compile kernels",  # no space after the tags
        "[ Perf] Compile kernels",  # padded tag
        "[Spec  Decode] Compile kernels",  # two spaces inside a tag
        "[Perf] ",  # no text
    ],
)
def test_malformed_subjects_fail(subject):
    assert not SUBJECT_RE.match(subject)
