"""The pinned upstream release: read the pin, fetch and verify its files.

Downloads go through pip's own index configuration (``pip download`` for
the wheel; for the sdist, the simple-repository API of the index pip is
configured with), so no registry host is written here.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import urllib.parse
import urllib.request
from pathlib import Path

from .errors import ForkError


@dataclasses.dataclass(frozen=True)
class Pin:
    name: str
    version: str
    tag: str
    sdist: str
    sdist_sha256: str
    wheel: str
    wheel_sha256: str
    local_label: str


def _pin_of(table: dict, local_label: str) -> Pin:
    return Pin(
        name=table["name"],
        version=table["version"],
        tag=table["tag"],
        sdist=table["sdist"]["filename"],
        sdist_sha256=table["sdist"]["sha256"].lower(),
        wheel=table["wheel"]["filename"],
        wheel_sha256=table["wheel"]["sha256"].lower(),
        local_label=local_label,
    )


def _read_pin_file(root: Path) -> tuple[Path, dict]:
    path = root / "requirements" / "upstream.toml"
    try:
        return path, tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ForkError(f"{path}: pin file not found") from None
    except tomllib.TOMLDecodeError as e:
        raise ForkError(f"{path}: malformed pin file ({e})") from None


def read_pin(root: Path, base: str | None = None) -> Pin:
    """The pin of the primary base (``[upstream]``), or of another base
    (``[bases."<version>"]``, same keys) when ``base`` names one."""
    path, data = _read_pin_file(root)
    try:
        label = data["fork"]["local_label"]
        primary = data["upstream"]
        if base is None or base == primary["version"]:
            return _pin_of(primary, label)
        others = data.get("bases", {})
        if base not in others:
            known = ", ".join([primary["version"], *others]) or "none"
            raise ForkError(f"{path}: no base {base!r} (bases: {known})")
        pin = _pin_of(dict(others[base], name=primary["name"]), label)
    except (KeyError, TypeError, AttributeError) as e:
        raise ForkError(f"{path}: malformed pin file ({e})") from None
    if pin.version != base:
        raise ForkError(
            f"{path}: [bases.{base!r}] pins version {pin.version!r}; the table's "
            "name must be its version"
        )
    return pin


def base_versions(root: Path) -> list[str]:
    """Versions of the extra bases, in the pin file's order."""
    _, data = _read_pin_file(root)
    return list(data.get("bases", {}))


# sha256 of files already hashed in this process, by (path, size, mtime):
# one command verifies the 300 MB wheel once, not once per step.
_HASHED: dict[tuple[str, int, int], str] = {}


def sha256_of(path: Path) -> str:
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _HASHED:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _HASHED[key] = h.hexdigest()
    return _HASHED[key]


def verify(path: Path, expected: str) -> None:
    got = sha256_of(path)
    if got != expected:
        raise ForkError(
            f"{path}: sha256 mismatch\n  expected {expected}\n  got      {got}\n"
            "refusing to use it (see requirements/upstream.toml)"
        )


def verify_pin(root: Path, pin: Pin, sdist: Path | None, wheel: Path | None) -> None:
    """Check the pinned upstream files against the pin's sha256.

    The sdist is fetched when it is not cached (every command that needs the
    fork tree needs it); the upstream wheel is checked when it is given or
    cached, and left to :func:`fetch_wheel` otherwise.  Raises ForkError on
    the first mismatch, so a wrong hash stops any command before it trusts
    a tree or a wheel built from those files.
    """
    fetch_sdist(root, pin, sdist)
    _given_or_cached(root, wheel, pin.wheel, pin.wheel_sha256, "wheel")


def cache_dir(root: Path) -> Path:
    return Path(os.environ.get("FORK_CACHE", root / ".cache")) / "upstream"


def _pip_index_urls() -> list[str]:
    """Index URLs in pip's own configuration order (index-url first)."""

    def pip_config(key: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", key],
            capture_output=True,
            text=True,
        )
        return out.stdout.strip() if out.returncode == 0 else ""

    index = os.environ.get("PIP_INDEX_URL") or pip_config("global.index-url")
    if not index:
        from pip._internal.models.index import PyPI

        index = PyPI.simple_url
    extra = os.environ.get("PIP_EXTRA_INDEX_URL") or pip_config(
        "global.extra-index-url"
    )
    return [index, *extra.split()]


def _find_in_index(index: str, project: str, filename: str) -> str | None:
    url = index.rstrip("/") + f"/{project}/"
    req = urllib.request.Request(
        url,
        headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"},
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            ctype = resp.headers.get("Content-Type", "")
            data = resp.read()
    except (OSError, ValueError):
        return None
    if "json" in ctype:
        for f in json.loads(data).get("files", []):
            if f.get("filename") == filename:
                return urllib.parse.urljoin(url, f["url"])
        return None
    for href in re.findall(rb'href="([^"]+)"', data):
        link = href.decode()
        if link.split("#", 1)[0].rsplit("/", 1)[-1] == filename:
            return urllib.parse.urljoin(url, link.split("#", 1)[0])
    return None


def _download(url: str, dest: Path) -> None:
    with urllib.request.urlopen(url, timeout=300) as resp, open(dest, "wb") as f:
        shutil.copyfileobj(resp, f)


def _given_or_cached(
    root: Path, given: Path | None, filename: str, sha256: str, what: str
) -> Path:
    """The verified given file, else the cache path (verified if present).

    A missing cache file is left for the caller to download; its parent
    folder exists on return.
    """
    if given is not None:
        if not given.is_file():
            raise ForkError(f"{given}: {what} not found")
        verify(given, sha256)
        return given
    cached = cache_dir(root) / filename
    if cached.is_file():
        verify(cached, sha256)
    else:
        cached.parent.mkdir(parents=True, exist_ok=True)
    return cached


def fetch_sdist(root: Path, pin: Pin, given: Path | None = None) -> Path:
    """Path of the verified sdist: the given file, or the cached download."""
    cached = _given_or_cached(root, given, pin.sdist, pin.sdist_sha256, "sdist")
    if cached.is_file():
        return cached
    print(f"fetching {pin.sdist} through pip's index configuration", flush=True)
    for index in _pip_index_urls():
        url = _find_in_index(index, pin.name, pin.sdist)
        if url is None:
            continue
        with tempfile.TemporaryDirectory(dir=cached.parent) as tmp:
            part = Path(tmp) / pin.sdist
            _download(url, part)
            verify(part, pin.sdist_sha256)
            part.replace(cached)
        return cached
    raise ForkError(f"{pin.sdist}: not found on any configured package index")


def fetch_wheel(root: Path, pin: Pin, given: Path | None = None) -> Path:
    """Path of the verified upstream wheel (``pip download`` into the cache)."""
    cached = _given_or_cached(root, given, pin.wheel, pin.wheel_sha256, "wheel")
    if cached.is_file():
        return cached
    print(f"fetching {pin.wheel} with pip download", flush=True)
    with tempfile.TemporaryDirectory(dir=cached.parent) as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--python-version",
                "3.12",
                "--platform",
                "manylinux_2_28_x86_64",
                "--dest",
                tmp,
                f"{pin.name}=={pin.version}",
            ],
            check=True,
        )
        part = Path(tmp) / pin.wheel
        if not part.is_file():
            raise ForkError(f"pip download did not produce {pin.wheel}")
        verify(part, pin.wheel_sha256)
        part.replace(cached)
    return cached
