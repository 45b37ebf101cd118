# SPDX-License-Identifier: Apache-2.0
# SPDX-FileCopyrightText: Copyright contributors to the vLLM project
"""End-to-end GPU tests of the INT8 per-token-head KV cache (marker ``gpu``).

Registered here rather than in upstream's pyproject.toml, which the fork
does not edit.  Run on any CUDA machine with the fork installed:

    python -m pytest -m gpu tests/gpu -v

Without a CUDA device every test is skipped with the reason.
"""

import pytest
import torch


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "gpu: end-to-end engine tests that need a CUDA device"
    )


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available())")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
