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
import difflib
import re
import shutil
import subprocess
import tempfile
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
    "Base-Note",
    "Added-Files",
)
REQUIRED = ("Subject", "From", "Date", "Upstream-Status")
# Fork metadata: kept with the patch and in git notes, never in the commit
# (every header but the three that make the git commit).
META_FIELDS = tuple(k for k in HEADER_ORDER if k not in ("Subject", "From", "Date"))
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
    # Another base's series (patches/bases/<version>/): every commit of the
    # primary series with what happened to it there, in the primary order.
    base: str | None = None
    entries: list[BaseEntry] | None = None

    @property
    def files_dir(self) -> Path | None:
        """Where a base keeps its variants' added files that differ."""
        return base_dir(self.root, self.base) / "files" if self.base else None

    def source(self, path: str) -> Path:
        """The file an added ``path`` is copied from: the base's own copy
        (only variants have one: the whole file, or ``<path>.diff`` against
        the repository's copy, applied into ``build/bases/``), else the
        repository's upstream path."""
        if self.files_dir is not None:
            if (self.files_dir / path).is_file():
                return self.files_dir / path
            delta = self.files_dir / (path + DELTA_SUFFIX)
            if delta.is_file():
                return apply_delta(self.root, self.base, path, delta)
        return self.root / path

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


# What happened to a commit of the primary series on another base.
AS_IS, VARIANT, DROPPED, TO_PORT = "as-is", "variant", "dropped", "to port"
_ENTRY_WORDS = {"drop": DROPPED, "todo": TO_PORT}


@dataclasses.dataclass(frozen=True)
class BaseEntry:
    """One line of a base's series: a primary commit's fate on that base."""

    name: str  # the primary patch's file name
    kind: str  # AS_IS, VARIANT, DROPPED or TO_PORT
    note: str  # the variant's Base-Note, or why dropped / what is left

    def line(self) -> str:
        word = {v: k for k, v in _ENTRY_WORDS.items()}.get(self.kind)
        return f"{word} {self.name}: {self.note}" if word else self.name


def base_dir(root: Path, base: str) -> Path:
    return root / "patches" / "bases" / base


# A base's copy of an added file, kept as a unified diff against the
# repository's copy (what differs on that base, readable as such).
DELTA_SUFFIX = ".diff"


def make_delta(path: str, old: bytes, new: bytes) -> str | None:
    """A unified diff turning ``old`` into ``new`` (both ``path``), or None
    when the texts cannot round-trip through one (binary, no final
    newline)."""
    try:
        a, b = old.decode(), new.decode()
    except UnicodeDecodeError:
        return None
    if not a.endswith("\n") or not b.endswith("\n"):
        return None
    lines = difflib.unified_diff(
        a.splitlines(keepends=True),
        b.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    return "".join(lines)


def apply_delta(root: Path, base: str, path: str, delta: Path) -> Path:
    """``root/path`` with ``delta`` applied, written under
    ``root/build/bases/<base>/files/`` (regenerated when older than either
    input); raises ForkError when the diff no longer applies."""
    out = root / "build" / "bases" / base / "files" / path
    src = root / path
    if out.is_file() and out.stat().st_mtime_ns >= max(
        src.stat().st_mtime_ns, delta.stat().st_mtime_ns
    ):
        return out
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / path
        work.parent.mkdir(parents=True)
        shutil.copy2(src, work)
        res = subprocess.run(
            [
                "git",
                "apply",
                "--whitespace=nowarn",
                str(delta.resolve()),
            ],
            cwd=tmp,
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            raise ForkError(
                f"{delta}: does not apply to {path} any more ({res.stderr.strip()}); "
                f"the base's copy of {path} is that diff over the repository's copy"
            )
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(work, out)
    return out


def read_series(root: Path, base: str | None = None) -> Series:
    """Load and validate the series without touching anything.

    Raises ForkError for a missing series file or patch, malformed headers,
    an added file listed by two commits, or an added file that is missing
    from the repository.  With ``base``, the series of that extra base
    (:func:`_read_base_series`).
    """
    if base is not None:
        return _read_base_series(root, base)
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
    for name in names:
        path = root / "patches" / name
        if not path.is_file():
            raise ForkError(
                f"{series_file}: patch {name!r} is named in the series "
                f"but {path} does not exist"
            )
        patch = parse_patch(path)
        if patch.headers.get("Base-Note"):
            raise ForkError(
                f"{path}: Base-Note belongs to a variant in patches/bases/<version>/"
            )
        patches.append(patch)
    series = Series(root, patches)
    _validate(series, lambda p: root / "patches" / p.name)
    return series


def _validate(series: Series, path_of) -> None:
    """Upstream-Status values, one owner per added file, added files present."""
    owners: dict[str, str] = {}
    for patch in series.patches:
        path = path_of(patch)
        if not STATUS_RE.match(patch.headers["Upstream-Status"]):
            raise ForkError(
                f"{path}: Upstream-Status must be 'Pending', 'Forwarded <url>', "
                f"'Accepted <url>' or 'Fork-only <reason>', not "
                f"{patch.headers['Upstream-Status']!r}"
            )
        for f in patch.added_files:
            if f in owners:
                if owners[f] == patch.name:
                    raise ForkError(f"{patch.name}: added file {f} is listed twice")
                raise ForkError(
                    f"added file {f} is listed by two commits: {owners[f]} "
                    f"and {patch.name}"
                )
            owners[f] = patch.name
            if not f.startswith(ADDED_ROOTS) or ".." in Path(f).parts:
                raise ForkError(
                    f"{path}: added file {f} must live under one of "
                    f"{', '.join(ADDED_ROOTS)}"
                )
            if not series.source(f).is_file():
                raise ForkError(f"{path}: added file {f} is missing from {series.root}")


def parse_entry(line: str, where: str) -> tuple[str, str, str]:
    """(name, kind, note) of one base-series line."""
    word, _, rest = line.partition(" ")
    if word in _ENTRY_WORDS:
        name, sep, note = rest.partition(":")
        if not sep or not note.strip():
            raise ForkError(
                f"{where}: '{word} <patch>: <reason>' needs its reason "
                "(for a drop, name the upstream change that absorbed the commit)"
            )
        return name.strip(), _ENTRY_WORDS[word], note.strip()
    if " " in line:
        raise ForkError(
            f"{where}: not a base-series line: {line!r} (a primary patch's file "
            "name, or 'drop <patch>: <reason>', or 'todo <patch>: <what is left>')"
        )
    return line, "", ""


def _read_base_series(root: Path, base: str) -> Series:
    """The series of an extra base: ``patches/bases/<base>/series`` names
    every commit of the primary series, in its order, one line each:

    ``NNNN-x.patch``
        the commit, on that base.  If ``patches/bases/<base>/NNNN-x.patch``
        exists it is this base's variant (its own body and diff; same
        Subject, and a ``Base-Note:`` saying what differs and why), else the
        primary patch applies there unchanged.
    ``drop NNNN-x.patch: <reason>``
        not needed on that base (name the upstream change that absorbed it).
    ``todo NNNN-x.patch: <what is left>``
        not ported yet.

    Added files of a variant that differ from the repository's copy live at
    ``patches/bases/<base>/files/<upstream path>``.
    """
    primary = read_series(root)
    folder = base_dir(root, base)
    series_file = folder / "series"
    if not series_file.is_file():
        raise ForkError(f"{series_file}: series file of base {base} not found")
    order = {p.name: i for i, p in enumerate(primary.patches)}
    by_name = {p.name: p for p in primary.patches}
    entries: list[BaseEntry] = []
    patches: list[Patch] = []
    listed: set[str] = set()
    last = -1
    for n, raw in enumerate(series_file.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{series_file}:{n}"
        name, kind, note = parse_entry(line, where)
        if name not in order:
            raise ForkError(f"{where}: {name} is not a patch of patches/series")
        if name in listed:
            raise ForkError(f"{where}: {name} listed twice")
        listed.add(name)
        if order[name] < last:
            raise ForkError(f"{where}: {name} is out of the primary series' order")
        last = order[name]
        if not kind:
            variant = folder / name
            if variant.is_file():
                patch = parse_patch(variant)
                if patch.subject != by_name[name].subject:
                    raise ForkError(
                        f"{variant}: Subject differs from patches/{name}'s; a "
                        "variant is the same commit on another base"
                    )
                if not patch.headers.get("Base-Note"):
                    raise ForkError(
                        f"{variant}: a variant needs a Base-Note: header (what "
                        "differs on this base, and why)"
                    )
                kind, note = VARIANT, patch.headers["Base-Note"]
            else:
                patch, kind = by_name[name], AS_IS
            patches.append(patch)
        entries.append(BaseEntry(name, kind, note))
    missing = [p.name for p in primary.patches if p.name not in listed]
    if missing:
        raise ForkError(
            f"{series_file}: no line for {', '.join(missing)}; every commit of "
            "patches/series needs one (as-is or variant, drop or todo)"
        )
    variant_names = {e.name for e in entries if e.kind == VARIANT}
    stray = sorted(
        f.name for f in folder.glob("*.patch") if f.name not in variant_names
    )
    if stray:
        raise ForkError(
            f"{folder}: {', '.join(stray)} is not a variant the series uses; "
            "remove it, or list it in the base's series"
        )
    series = Series(root, patches, base=base, entries=entries)
    variant_files = {
        f for p, e in _active(series) if e.kind == VARIANT for f in p.added_files
    }
    files_dir = series.files_dir
    if files_dir.is_dir():
        for f in sorted(files_dir.rglob("*")):
            rel = f.relative_to(files_dir).as_posix()
            if (
                rel.endswith(DELTA_SUFFIX)
                and rel[: -len(DELTA_SUFFIX)] in variant_files
            ):
                rel = rel[: -len(DELTA_SUFFIX)]
            if f.is_file() and rel not in variant_files:
                raise ForkError(
                    f"{f}: no variant of base {base} adds {rel}; a base's own "
                    "copy of an added file belongs to a variant that adds it"
                )
    _validate(
        series,
        lambda p: folder / p.name
        if (folder / p.name).is_file()
        else root / "patches" / p.name,
    )
    return series


def _active(series: Series) -> list[tuple[Patch, BaseEntry]]:
    """A base series' commits with their entries (drops and todos left out)."""
    active = [e for e in series.entries or [] if e.kind in (AS_IS, VARIANT)]
    return list(zip(series.patches, active, strict=True))


def unclaimed_files(root: Path, tracked: list[str], series: Series) -> list[str]:
    """Files under the upstream folders that no commit lists as added."""
    claimed = series.added_files
    return sorted(f for f in tracked if f.startswith(ADDED_ROOTS) and f not in claimed)


def slugify(subject: str) -> str:
    """File name part for a subject, the way `git format-patch` makes it."""
    slug = re.sub(r"[^A-Za-z0-9._]+", "-", subject).strip("-.")
    slug = re.sub(r"\.+", ".", slug)
    return slug[:52].rstrip("-.")
