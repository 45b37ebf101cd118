"""The patch series: `patches/series` plus one patch file per commit.

A patch file is the fork's record of one commit:

    Subject: [Bugfix] per-token-head KV: do not fill the scale views
    From: Name <email>
    Date: 2026-11-29T12:00:00+00:00
    Upstream-Status: Pending
    Why: one line for the commit table
    Effect: one line: the measured effect
    Removal: when this commit can be dropped
    Added-Files:
     tests/v1/attention/test_per_token_head_scale_views.py

    Commit message body (what, why, measured effect), ending with
    Signed-off-by: Name <email>
    ---
    diff --git a/vllm/... b/vllm/...   (edits to files upstream already has)

The header block mirrors Debian's DEP-3 fields; Subject, From, Date and the
body make the git commit; the other fields are fork metadata that never
reach the upstream patch.  Files the commit adds live in this repository at
their upstream paths and are listed under Added-Files.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from .errors import ForkError

HEADER_ORDER = (
    "Subject",
    "From",
    "Date",
    "Upstream-Status",
    "Why",
    "Effect",
    "Removal",
    "Added-Files",
)
REQUIRED = ("Subject", "From", "Date", "Upstream-Status")
# Fork metadata: kept with the patch and in git notes, never in the commit.
META_FIELDS = ("Upstream-Status", "Why", "Effect", "Removal", "Added-Files")
STATUS_RE = re.compile(r"^(Pending|Forwarded \S+|Accepted \S+|Fork-only .+)$")
# Upstream's subject tags: "[Bugfix]", "[Perf][Spec Decode]" (words inside a
# tag are single-space separated).
_TAG = r"\[[A-Za-z0-9_./-]+(?: [A-Za-z0-9_./-]+)*\]"
SUBJECT_RE = re.compile(rf"^{_TAG}( ?{_TAG})* \S")
# Where added files may live: the upstream tree's own top-level folders.
ADDED_ROOTS = ("vllm/", "tests/", "benchmarks/", "csrc/")
DIFF_SEPARATOR = "---"


@dataclasses.dataclass
class Patch:
    """One commit of the series."""

    name: str
    headers: dict[str, str]
    body: str
    diff: str
    added_files: list[str]

    @property
    def subject(self) -> str:
        return self.headers["Subject"]

    @property
    def author(self) -> str:
        return self.headers["From"]

    @property
    def date(self) -> str:
        return self.headers["Date"]

    @property
    def message(self) -> str:
        """The git commit message: subject, blank line, body."""
        body = self.body.strip("\n")
        return f"{self.subject}\n\n{body}\n" if body else f"{self.subject}\n"

    def meta_text(self) -> str:
        """Fork metadata as stored in the commit's git note."""
        return render_headers(
            {k: v for k, v in self.headers.items() if k in META_FIELDS},
            self.added_files,
        )

    @property
    def fork_only(self) -> bool:
        return self.headers.get("Upstream-Status", "").startswith("Fork-only")

    def render(self) -> str:
        text = render_headers(self.headers, self.added_files)
        text += "\n" + self.body.strip("\n") + "\n"
        text += DIFF_SEPARATOR + "\n"
        if self.diff:
            text += self.diff if self.diff.endswith("\n") else self.diff + "\n"
        return text


def render_headers(headers: dict[str, str], added_files: list[str]) -> str:
    lines = []
    for key in HEADER_ORDER:
        if key == "Added-Files":
            if added_files:
                lines.append("Added-Files:")
                lines.extend(f" {p}" for p in added_files)
        elif headers.get(key):
            lines.append(f"{key}: {headers[key]}")
    for key, value in headers.items():
        if key not in HEADER_ORDER and value:
            lines.append(f"{key}: {value}")
    return "\n".join(lines) + "\n"


def parse_headers(lines: list[str], where: str) -> tuple[dict[str, str], list[str]]:
    headers: dict[str, str] = {}
    added: list[str] = []
    key = None
    for n, line in enumerate(lines, 1):
        if line.startswith((" ", "\t")):
            if key is None:
                raise ForkError(f"{where}:{n}: continuation line before any header")
            if key == "Added-Files":
                added.append(line.strip())
            else:
                headers[key] += " " + line.strip()
            continue
        m = re.match(r"^([A-Za-z][A-Za-z0-9-]*):\s?(.*)$", line)
        if not m:
            raise ForkError(f"{where}:{n}: not a header line: {line!r}")
        key, value = m.group(1), m.group(2).strip()
        if key in headers or (key == "Added-Files" and added):
            raise ForkError(f"{where}:{n}: header {key!r} given twice")
        if key == "Added-Files":
            added.extend(value.split())
        else:
            headers[key] = value
    return headers, added


def parse_patch(path: Path) -> Patch:
    """Read one patch file; errors name the file and line."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    try:
        blank = lines.index("")
    except ValueError:
        raise ForkError(f"{path}: no blank line after the header block") from None
    headers, added = parse_headers(lines[:blank], str(path))
    missing = [k for k in REQUIRED if not headers.get(k)]
    if missing:
        raise ForkError(f"{path}: missing header(s): {', '.join(missing)}")
    rest = lines[blank + 1 :]
    try:
        sep = rest.index(DIFF_SEPARATOR)
    except ValueError:
        raise ForkError(
            f"{path}: no '{DIFF_SEPARATOR}' line between message and diff"
        ) from None
    body = "\n".join(rest[:sep]).strip("\n")
    diff = "\n".join(rest[sep + 1 :])
    diff = diff.strip("\n") + "\n" if diff.strip() else ""
    if diff and not diff.startswith("diff --git "):
        raise ForkError(f"{path}: the part after '---' must be a git diff")
    return Patch(path.name, headers, body, diff, added)


@dataclasses.dataclass
class Series:
    """The ordered patches of `patches/series`."""

    root: Path
    patches: list[Patch]

    @property
    def num_upstream(self) -> int:
        """How many leading commits are meant for upstream: every patch but
        the Fork-only ones, which must come last (``forktool export`` writes
        only these, so ``git am`` of the export gives the tree at that
        commit)."""
        n = 0
        while n < len(self.patches) and not self.patches[n].fork_only:
            n += 1
        for later in self.patches[n:]:
            if not later.fork_only:
                raise ForkError(
                    f"{later.name} is meant for upstream but comes after the "
                    f"Fork-only {self.patches[n].name}; move Fork-only commits "
                    "to the end of the series"
                )
        return n

    @property
    def added_files(self) -> dict[str, str]:
        """Added file path -> name of the patch that adds it."""
        return {f: p.name for p in self.patches for f in p.added_files}


def read_series(root: Path) -> Series:
    """Load and validate the series without touching anything.

    Raises ForkError for a missing series file or patch, malformed headers,
    an added file listed by two commits, or an added file that is missing
    from the repository.
    """
    series_file = root / "patches" / "series"
    if not series_file.is_file():
        raise ForkError(f"{series_file}: series file not found")
    names = []
    for n, raw in enumerate(series_file.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line in names:
            raise ForkError(f"{series_file}:{n}: {line} listed twice")
        names.append(line)
    patches = []
    owners: dict[str, str] = {}
    for name in names:
        path = root / "patches" / name
        if not path.is_file():
            raise ForkError(
                f"{series_file}: patch {name!r} is named in the series "
                f"but {path} does not exist"
            )
        patch = parse_patch(path)
        if not STATUS_RE.match(patch.headers["Upstream-Status"]):
            raise ForkError(
                f"{path}: Upstream-Status must be 'Pending', 'Forwarded <url>', "
                f"'Accepted <url>' or 'Fork-only <reason>', not "
                f"{patch.headers['Upstream-Status']!r}"
            )
        for f in patch.added_files:
            if f in owners:
                if owners[f] == name:
                    raise ForkError(f"{name}: added file {f} is listed twice")
                raise ForkError(
                    f"added file {f} is listed by two commits: {owners[f]} and {name}"
                )
            owners[f] = name
            if not f.startswith(ADDED_ROOTS) or ".." in Path(f).parts:
                raise ForkError(
                    f"{path}: added file {f} must live under one of "
                    f"{', '.join(ADDED_ROOTS)}"
                )
            if not (root / f).is_file():
                raise ForkError(f"{path}: added file {f} is missing from {root}")
        patches.append(patch)
    return Series(root, patches)


def unclaimed_files(root: Path, tracked: list[str], series: Series) -> list[str]:
    """Files under the upstream folders that no commit lists as added."""
    claimed = series.added_files
    return sorted(f for f in tracked if f.startswith(ADDED_ROOTS) and f not in claimed)


def slugify(subject: str) -> str:
    """File name part for a subject, the way `git format-patch` makes it."""
    slug = re.sub(r"[^A-Za-z0-9._]+", "-", subject).strip("-.")
    slug = re.sub(r"\.+", ".", slug)
    return slug[:52].rstrip("-.")
