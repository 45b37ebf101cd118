"""A miniature upstream (sdist + wheel) and fork repository for tool tests."""

from __future__ import annotations

import base64
import hashlib
import io
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

AUTHOR = "Jane Dev <jane@example.org>"
UPSTREAM_FILES = {
    "vllm/__init__.py": "from .version import __version__\n",
    "vllm/version.py": "from ._version import __version__\n",
    "vllm/_version.py": "__version__ = version = '1.2.0'\n",
    "vllm/attn.txt": "".join(f"line {i}\n" for i in range(1, 41)),
    "tests/test_attn.py": "def test_x():\n    assert True\n",
    "setup.py": "# upstream setup\n",
}


def _tar_sdist(
    path: Path, files: dict[str, str] = UPSTREAM_FILES, top: str = "vllm-1.2.0"
) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            info.mtime = 1
            tar.addfile(info, io.BytesIO(data))


def _record(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _wheel(path: Path) -> None:
    files = {
        n: t.encode() for n, t in UPSTREAM_FILES.items() if n.startswith("vllm/")
    }
    files["vllm/_C.abi3.so"] = b"\x7fELF binary payload"
    info = "vllm-1.2.0.dist-info/"
    files[info + "METADATA"] = b"Metadata-Version: 2.1\nName: vllm\nVersion: 1.2.0\n"
    files[info + "WHEEL"] = (
        b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-any\n"
    )
    files[info + "top_level.txt"] = b"vllm\n"
    record = "".join(f"{n},{_record(d)},{len(d)}\n" for n, d in files.items())
    record += f"{info}RECORD,,\n"
    with zipfile.ZipFile(path, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
        z.writestr(info + "RECORD", record)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


PATCH = """\
Subject: [Bugfix] Change line 20 of attn
From: {author}
Date: 2026-11-01T10:00:00+00:00
Upstream-Status: Pending
Why: line 20 was wrong
Effect: line 20 is right
Removal: when upstream fixes line 20
Added-Files:
 tests/test_new.py

Fix line 20.

It was wrong.

Signed-off-by: {author}
---
diff --git a/vllm/attn.txt b/vllm/attn.txt
index 0000000..1111111 100644
--- a/vllm/attn.txt
+++ b/vllm/attn.txt
@@ -18,5 +18,5 @@ line 17
 line 18
 line 19
-line 20
+line 20 (fixed)
 line 21
 line 22
"""


# The fork's README: hand-written prose around the series table that
# `forktool table` generates between the markers.
README = """\
# Miniature fork

## The series

<!-- readme-series:start -->
| # | commit | measured effect |
|---|---|---|
<!-- readme-series:end -->

Prose after the table.
"""


@pytest.fixture
def fork(tmp_path: Path) -> Path:
    """A fork repository (root) pinned to the miniature upstream."""
    up = tmp_path / "upstream"
    up.mkdir()
    sdist, wheel = up / "vllm-1.2.0.tar.gz", up / "vllm-1.2.0-py3-none-any.whl"
    _tar_sdist(sdist)
    _wheel(wheel)
    root = tmp_path / "fork"
    (root / "requirements").mkdir(parents=True)
    (root / "requirements" / "upstream.toml").write_text(
        f"""[upstream]
name = "vllm"
version = "1.2.0"
tag = "v1.2.0"
[upstream.sdist]
filename = "{sdist.name}"
sha256 = "{sha256(sdist)}"
[upstream.wheel]
filename = "{wheel.name}"
sha256 = "{sha256(wheel)}"
[fork]
local_label = "fork"
"""
    )
    (root / "patches").mkdir()
    (root / "patches" / "series").write_text("0001-fix.patch\n")
    (root / "patches" / "0001-fix.patch").write_text(PATCH.format(author=AUTHOR))
    (root / "README.md").write_text(README)
    (root / "tests").mkdir()
    (root / "tests" / "test_new.py").write_text("def test_new():\n    pass\n")
    cache = root / ".cache" / "upstream"
    cache.mkdir(parents=True)
    for f in (sdist, wheel):
        (cache / f.name).write_bytes(f.read_bytes())
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root
