"""Materialize the fork as a git repository, export it, and save it back.

The round trip follows Debian's ``gbp pq``: ``materialize`` turns the series
into a branch of commits on top of the pristine upstream tree, you edit with
ordinary git (commit, rebase, amend), and ``save`` writes the branch back into
``patches/`` and the added files.  ``export`` writes ``git format-patch``
files that ``git am`` onto upstream's tag.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from datetime import datetime
from pathlib import Path

from .errors import ForkError
from .series import (
    AS_IS,
    DELTA_SUFFIX,
    DROPPED,
    META_FIELDS,
    TO_PORT,
    VARIANT,
    BaseEntry,
    Patch,
    Series,
    parse_entry,
    base_dir,
    make_delta,
    parse_headers,
    read_series,
    slugify,
)
from .upstream import Pin

NOTES_REF = "refs/notes/fork"
UPSTREAM_AUTHOR = ("vLLM upstream", "upstream@vllm.invalid")
STAMP = ".git/fork-series-digest"


def git(repo: Path, *args: str, env: dict | None = None, check=True, **kw):
    """Run git in ``repo`` with a neutral, reproducible configuration."""
    full_env = dict(os.environ)
    full_env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
        }
    )
    if env:
        full_env.update(env)
    cmd = [
        "git",
        "-c",
        "safe.directory=*",
        "-c",
        "core.autocrlf=false",
        "-c",
        "user.name=forktool",
        "-c",
        "user.email=forktool@localhost",
        *args,
    ]
    return subprocess.run(
        cmd,
        cwd=repo,
        env=full_env,
        check=check,
        text=kw.pop("text", True),
        capture_output=kw.pop("capture_output", True),
        **kw,
    )


def _ident_env(author: str, date: str) -> dict:
    m = re.match(r"^(.*?)\s*<([^>]*)>$", author)
    if not m:
        raise ForkError(f"From: {author!r} is not 'Name <email>'")
    name, email = m.groups()
    return {
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_AUTHOR_DATE": date,
        # Committer = author so the same series gives the same commit ids.
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
        "GIT_COMMITTER_DATE": date,
    }


def series_digest(series: Series, pin: Pin) -> str:
    """Digest of everything that goes into the fork tree: the pinned sdist
    and the series (patches and added files)."""
    h = hashlib.sha256()
    h.update(f"{pin.tag}\0{pin.sdist}\0{pin.sdist_sha256}\0".encode())
    for p in series.patches:
        h.update((series.root / "patches" / p.name).read_bytes())
        for f in p.added_files:
            h.update(f.encode() + b"\0" + series.source(f).read_bytes())
    return h.hexdigest()


def _unpack_sdist(sdist: Path, dest: Path) -> None:
    """Extract the sdist's single top-level folder's contents into ``dest``."""
    with tarfile.open(sdist) as tar:
        members = tar.getmembers()
        tops = {m.name.split("/", 1)[0] for m in members}
        if len(tops) != 1:
            raise ForkError(f"{sdist}: expected one top-level folder, got {tops}")
        prefix = tops.pop() + "/"
        inner = []
        for m in members:
            if m.name.startswith(prefix):
                m.name = m.name[len(prefix) :]
                inner.append(m)
        tar.extractall(dest, members=inner, filter="data")


def _hunk_of(diff: str, path: str, line_no: int | None) -> str:
    """Describe the hunk of ``path`` around original line ``line_no``."""
    in_file = False
    hunks = []
    for line in diff.splitlines():
        if line.startswith("diff --git "):
            in_file = line.endswith(f" b/{path}")
        elif in_file and line.startswith("@@"):
            m = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", line)
            if m:
                hunks.append((int(m.group(1)), int(m.group(2) or 1), line))
    for i, (start, length, header) in enumerate(hunks, 1):
        if line_no is None or start <= line_no <= start + max(length, 1):
            return f"hunk #{i} of {len(hunks)} ({header.split('@@')[1].strip()})"
    return f"{len(hunks)} hunk(s)"


def _apply(repo: Path, patch: Patch) -> None:
    """Apply the diff part of ``patch`` exactly (no fuzz), or explain why not."""
    if not patch.diff:
        return
    with tempfile.NamedTemporaryFile("w", suffix=".diff", delete=False) as f:
        f.write(patch.diff)
        diff_path = f.name
    try:
        res = git(
            repo, "apply", "--index", "--whitespace=nowarn", diff_path, check=False
        )
    finally:
        os.unlink(diff_path)
    if res.returncode == 0:
        return
    err = res.stderr.strip()
    corrupt = re.search(r"corrupt patch at line (\d+)", err)
    if corrupt:
        # git counts lines of the diff part and may point past its end; name
        # the hunk it was reading, by its line in the patch file (and leave
        # git's own line number out: it is not a line of the patch file).
        diff_lines = patch.diff.splitlines()
        upto = diff_lines[: int(corrupt.group(1))]
        offset = patch.render().splitlines().index(diff_lines[0])
        hunk = max((i for i, ln in enumerate(upto) if ln.startswith("@@")), default=0)
        files = [ln.split(" b/", 1)[1] for ln in upto if ln.startswith("diff --git ")]
        raise ForkError(
            f"patch {patch.name} is corrupt in the hunk at line "
            f"{hunk + offset + 1} of patches/{patch.name} "
            f"({files[-1] if files else 'first file'}): its header's line counts "
            "do not match its lines, or a line lost its leading space"
        )
    m = re.search(r"patch failed: (.+?):(\d+)", err)
    if m:
        path, line = m.group(1), int(m.group(2))
    else:
        m = re.search(r"error: (.+?): (does not exist in index|No such file)", err)
        path, line = (m.group(1), None) if m else ("?", None)
    raise ForkError(
        f"patch {patch.name} does not apply: file {path}, "
        f"{_hunk_of(patch.diff, path, line)}\n{err}"
    )


def _commit(repo: Path, series: Series, patch: Patch) -> str:
    for f in patch.added_files:
        dst = repo / f
        if (
            dst.exists()
            and git(repo, "ls-files", "--error-unmatch", f, check=False).returncode == 0
        ):
            raise ForkError(
                f"patch {patch.name}: added file {f} already exists in the tree; "
                "edits to existing files belong in the patch's diff"
            )
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(series.source(f), dst)
        git(repo, "add", "-f", f)
    env = _ident_env(patch.author, patch.date)
    git(repo, "commit", "-q", "--allow-empty", "-F", "-", input=patch.message, env=env)
    head = git(repo, "rev-parse", "HEAD").stdout.strip()
    git(
        repo,
        "notes",
        "--ref",
        NOTES_REF,
        "add",
        "-f",
        "-m",
        patch.meta_text(),
        head,
        env=env,
    )
    return head


def materialize(
    root: Path, pin: Pin, sdist: Path, out: Path, base: str | None = None
) -> str:
    """Build ``out``: pristine tree tagged ``pin.tag`` + one commit per patch.

    Everything happens in a temporary folder beside ``out``; ``out`` is only
    replaced once every patch applied, so a failure leaves the previous tree
    (or nothing) and never a half-applied tree that looks finished.
    Returns the HEAD commit id.  ``base`` names an extra base, whose series
    (``patches/bases/<base>/series``) is applied instead of the primary one.
    """
    series = read_series(root, base)
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(out)
    tmp = Path(
        tempfile.mkdtemp(prefix=f".{out.name}.partial-{os.getpid()}-", dir=out.parent)
    )
    try:
        _unpack_sdist(sdist, tmp)
        git(tmp, "init", "-q", "-b", "main")
        git(tmp, "config", "notes.rewriteRef", NOTES_REF)
        git(tmp, "config", "notes.displayRef", NOTES_REF)
        git(tmp, "add", "-f", "-A")
        env = _ident_env(
            f"{UPSTREAM_AUTHOR[0]} <{UPSTREAM_AUTHOR[1]}>", "2026-07-25T00:00:00Z"
        )
        git(
            tmp,
            "commit",
            "-q",
            "-m",
            f"vLLM {pin.version}: pristine tree of {pin.sdist}\n\n"
            f"sha256 {pin.sdist_sha256}",
            env=env,
        )
        git(tmp, "tag", pin.tag)
        for patch in series.patches:
            _apply(tmp, patch)
            _commit(tmp, series, patch)
        (tmp / STAMP).write_text(series_digest(series, pin) + "\n")
        head = git(tmp, "rev-parse", "HEAD").stdout.strip()
        if out.exists():
            old = out.with_name(out.name + ".old")
            shutil.rmtree(old, ignore_errors=True)
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(out)
        return head
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _remove_stale_partials(out: Path) -> None:
    """Remove temporary trees of materialize runs that were killed (their
    process is gone); those of a run still going on are left alone."""
    for partial in out.parent.glob(f".{out.name}.partial-*"):
        pid = partial.name.removeprefix(f".{out.name}.partial-").split("-", 1)[0]
        if pid.isdigit():
            try:
                os.kill(int(pid), 0)
                continue  # still running
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
        shutil.rmtree(partial, ignore_errors=True)


def is_current(root: Path, tree: Path, pin: Pin, base: str | None = None) -> bool:
    """Whether ``tree`` was materialized from the pin and series as they are
    now."""
    stamp = tree / STAMP
    if not stamp.is_file():
        return False
    return stamp.read_text().strip() == series_digest(read_series(root, base), pin)


def series_commits(tree: Path, tag: str) -> list[str]:
    out = git(tree, "rev-list", "--reverse", f"{tag}..HEAD").stdout.split()
    merges = git(tree, "rev-list", "--merges", f"{tag}..HEAD").stdout.split()
    if merges:
        raise ForkError(f"{tree}: merge commits in the series: {merges}")
    return out


def export(tree: Path, tag: str, dest: Path, count: int | None = None) -> list[Path]:
    """``git format-patch`` of the first ``count`` series commits (all by
    default) into ``dest``."""
    commits = series_commits(tree, tag)
    last = commits[count - 1] if count else "HEAD"
    if count == 0:
        raise ForkError("no commit of the series is meant for upstream")
    tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=dest.parent))
    try:
        git(
            tree,
            "format-patch",
            "-q",
            "--zero-commit",
            "--no-signature",
            "--binary",
            "-o",
            str(tmp),
            f"{tag}..{last}",
        )
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(dest.glob("*.patch"))


def in_order(date: str, previous: str | None) -> str:
    """``date``, or ``previous`` when ``date`` is earlier (ISO 8601 dates).

    A commit written before the one it now follows (a reordering rebase)
    takes its predecessor's date, so the saved and exported series reads in
    date order.
    """
    if previous is None:
        return date
    earlier = datetime.fromisoformat(date) < datetime.fromisoformat(previous)
    return previous if earlier else date


def _meta_of(tree: Path, commit: str) -> tuple[dict[str, str], list[str]]:
    res = git(tree, "notes", "--ref", NOTES_REF, "show", commit, check=False)
    if res.returncode != 0:
        return {"Upstream-Status": "Pending"}, []
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    return parse_headers(lines, f"note of {commit[:12]}")


def _read_commits(tree: Path, tag: str) -> list[tuple[Patch, dict[str, bytes], str]]:
    """The commits ``tag..HEAD`` of ``tree`` as patches (named by position
    and subject, metadata from their notes), each with the files it adds
    and its commit id."""
    out = []
    previous_date = None
    for i, c in enumerate(series_commits(tree, tag), 1):
        fmt = git(tree, "log", "-1", "--format=%an <%ae>%n%aI%n%B", c).stdout
        author, date, message = fmt.split("\n", 2)
        date = in_order(date, previous_date)
        previous_date = date
        subject, _, body = message.partition("\n")
        status = git(tree, "diff", "--no-renames", "--name-status", f"{c}^", c)
        added, changed = [], []
        for line in status.stdout.splitlines():
            kind, path = line.split("\t", 1)
            (added if kind == "A" else changed).append(path)
        diff = ""
        if changed:
            diff = git(
                tree, "diff", "--no-renames", "--binary", f"{c}^", c, "--", *changed
            ).stdout
        meta, _ = _meta_of(tree, c)
        headers = {"Subject": subject.strip(), "From": author, "Date": date}
        headers.update({k: v for k, v in meta.items() if k in META_FIELDS})
        name = f"{i:04d}-{slugify(subject)}.patch"
        files = {f: git(tree, "show", f"{c}:{f}", text=False).stdout for f in added}
        patch = Patch(name, headers, body.strip("\n"), diff, sorted(added))
        out.append((patch, files, c))
    return out


def save(root: Path, tree: Path, tag: str, base: str | None = None) -> list[str]:
    """Write the commits ``tag..HEAD`` of ``tree`` back into ``root``.

    Diffs against files that exist in a commit's parent go into
    ``patches/NNNN-<subject>.patch``; files a commit creates are copied to
    their upstream paths and listed under Added-Files.  Fork metadata comes
    from the commit's git note (new commits default to Upstream-Status:
    Pending).  Returns the names written to ``patches/series``.  With
    ``base``, the tree is that base's and :func:`save_base` writes it.
    """
    if base is not None:
        return save_base(root, tree, tag, base)
    old = read_series(root) if (root / "patches" / "series").exists() else None
    commits = _read_commits(tree, tag)
    patches = [patch for patch, _, _ in commits]
    for _, files, _ in commits:
        for f, data in files.items():
            dst = root / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(data)
    new_added = {f for p in patches for f in p.added_files}
    if old is not None:
        _sync_bases(root, old, patches)
        for f in set(old.added_files) - new_added:
            (root / f).unlink(missing_ok=True)
        for p in old.patches:
            (root / "patches" / p.name).unlink(missing_ok=True)
    for p in patches:
        (root / "patches" / p.name).write_text(p.render())
    (root / "patches" / "series").write_text(
        "# Applied in this order on top of the pinned upstream tree.\n"
        + "".join(p.name + "\n" for p in patches)
    )
    return [p.name for p in patches]


def _sync_bases(root: Path, old: Series, patches: list[Patch]) -> None:
    """Keep every extra base's series in step with a saved primary series:
    renamed patches (their file names follow subjects and positions) are
    renamed there too, new commits get a ``todo`` line in their place, and
    commits that left the series lose their line and variant."""
    by_subject = {p.subject: p.name for p in patches}
    renames = {}
    for i, p in enumerate(old.patches):
        new = by_subject.get(p.subject)
        if new is None and len(old.patches) == len(patches):
            new = patches[i].name  # same position, reworded subject
        renames[p.name] = new
    for folder in sorted((root / "patches" / "bases").glob("*/")):
        series_file = folder / "series"
        if not series_file.is_file():
            continue
        header, entries = [], {}
        for n, raw in enumerate(series_file.read_text().splitlines(), 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                if not entries:
                    header.append(raw)
                continue
            name, kind, note = parse_entry(line, f"{series_file}:{n}")
            new = renames.get(name, name)
            if new is None:
                (folder / name).unlink(missing_ok=True)
                continue
            if new != name and (folder / name).is_file():
                (folder / name).rename(folder / new)
            entries[new] = BaseEntry(new, kind, note).line()
        new_line = "todo {}: new in the series; not ported yet"
        lines = [entries.get(p.name, new_line.format(p.name)) for p in patches]
        series_file.write_text("\n".join([*header, *lines]) + "\n")


BASE_SERIES_HEADER = """\
# Every commit of patches/series, in its order, on this base: its file name
# (a variant when this folder holds a patch of that name, else unchanged),
# 'drop <patch>: <the upstream change that absorbed it>' or
# 'todo <patch>: <what is left to port>'.  Written by `forktool --base <v> save`.
"""


def _gives(tree: Path, commit: str, diff: str) -> bool:
    """Whether ``diff`` applied to ``commit``'s parent (at whatever offset)
    gives ``commit``'s versions of the files it changes."""
    changed = set(_DIFF_PATH_RE.findall(diff))
    status = git(tree, "diff", "--no-renames", "--name-status", f"{commit}^", commit)
    ours = {
        line.split("\t", 1)[1]
        for line in status.stdout.splitlines()
        if not line.startswith("A\t")
    }
    if changed != ours:
        return False
    if not diff:
        return True
    with tempfile.TemporaryDirectory() as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(tree, "read-tree", f"{commit}^", env=env)
        path = Path(tmp) / "patch.diff"
        path.write_text(diff)
        applied = git(
            tree,
            "apply",
            "--cached",
            "--whitespace=nowarn",
            str(path),
            env=env,
            check=False,
        )
        if applied.returncode != 0:
            return False
        same = git(
            tree,
            "diff",
            "--cached",
            "--quiet",
            commit,
            "--",
            *changed,
            env=env,
            check=False,
        )
        return same.returncode == 0


_DIFF_PATH_RE = re.compile(r"^diff --git a/\S+ b/(\S+)$", re.MULTILINE)


def save_base(root: Path, tree: Path, tag: str, base: str) -> list[str]:
    """Write an extra base's tree back: each commit is matched to the
    primary commit with its subject; one that equals the primary patch
    (message, diff and added files) is listed as it is, any other becomes
    this base's variant (``patches/bases/<base>/<name>``, added files that
    differ under ``files/``).  Primary commits the tree lacks keep their
    drop/todo line.  Returns the names of the commits written."""
    primary = read_series(root)
    old = read_series(root, base)
    folder = base_dir(root, base)
    by_subject = {p.subject: p for p in primary.patches}
    order = {p.name: i for i, p in enumerate(primary.patches)}
    kept = {e.name: e for e in old.entries or [] if e.kind in (DROPPED, TO_PORT)}
    active: dict[str, tuple[Patch, dict[str, bytes], str]] = {}
    last = -1
    for patch, files, commit in _read_commits(tree, tag):
        ref = by_subject.get(patch.subject)
        if ref is None:
            raise ForkError(
                f"{tree}: commit {patch.subject!r} has no commit of that subject "
                "in patches/series; a base carries the primary series' commits"
            )
        if order[ref.name] < last:
            raise ForkError(f"{tree}: {ref.subject!r} is out of the primary order")
        last = order[ref.name]
        patch.name = ref.name
        active[ref.name] = (patch, files, commit)
    for e in old.entries or []:
        if e.kind in (AS_IS, VARIANT) and e.name not in active:
            raise ForkError(
                f"{tree} lacks {e.name}, which {folder / 'series'} lists; write "
                f"'drop {e.name}: <reason>' or 'todo {e.name}: <what is left>' there "
                "first"
            )
    variants = {}
    for ref in primary.patches:
        if ref.name not in active:
            continue
        patch, files, commit = active[ref.name]
        same_files = patch.added_files == ref.added_files and all(
            (root / f).is_file() and (root / f).read_bytes() == data
            for f, data in files.items()
        )
        if (
            same_files
            and _gives(tree, commit, ref.diff)
            and patch.body == ref.body
            and patch.author == ref.author
        ):
            continue  # the primary commit, unchanged
        if not patch.headers.get("Base-Note"):
            raise ForkError(
                f"{tree}: {patch.subject!r} differs from patches/{ref.name}, so it "
                "is a variant and needs a Base-Note (what differs on this base, "
                f"and why): git notes --ref {NOTES_REF} append -m 'Base-Note: ...' "
                "<commit>"
            )
        variants[ref.name] = (patch, files)
    # Rewrite the folder: variants and their own files.
    for f in folder.glob("*.patch"):
        f.unlink()
    shutil.rmtree(folder / "files", ignore_errors=True)
    lines = []
    for ref in primary.patches:
        if ref.name not in active:
            lines.append(kept[ref.name].line())
            continue
        lines.append(ref.name)
        if ref.name not in variants:
            continue
        patch, files = variants[ref.name]
        for f, data in files.items():
            primary_copy = root / f
            if primary_copy.is_file() and primary_copy.read_bytes() == data:
                continue
            delta = None
            if primary_copy.is_file():
                delta = make_delta(f, primary_copy.read_bytes(), data)
            dst = folder / "files" / (f + DELTA_SUFFIX if delta else f)
            dst.parent.mkdir(parents=True, exist_ok=True)
            if delta:
                dst.write_text(delta)
            else:
                dst.write_bytes(data)
        (folder / ref.name).write_text(patch.render())
    (folder / "series").write_text(
        BASE_SERIES_HEADER + "".join(line + "\n" for line in lines)
    )
    return list(active)


def _subjects(tree: Path, tag: str) -> list[tuple[str, str]]:
    """(commit, subject) of the commits ``tag..HEAD`` of ``tree``, in order."""
    out = git(tree, "log", "--reverse", "--format=%H %s", f"{tag}..HEAD").stdout
    return [tuple(line.split(" ", 1)) for line in out.splitlines()]


def pick(
    root: Path,
    primary_tree: Path,
    primary_tag: str,
    tree: Path,
    tag: str,
    patch_name: str,
) -> str:
    """Cherry-pick the primary series' commit ``patch_name`` onto the
    extra base's ``tree`` with its fork note, placed in the primary order.

    Returns "picked", or "conflict" when git stopped for a resolution
    (then :func:`pick_continue` finishes the pick once it is resolved).
    """
    names = [p.name for p in read_series(root).patches]
    if patch_name not in names:
        raise ForkError(f"{patch_name}: not a patch of patches/series")
    if _in_progress(tree):
        raise ForkError(
            f"{tree}: a cherry-pick or rebase is in progress; finish it first"
        )
    commit, subject = _subjects(primary_tree, primary_tag)[names.index(patch_name)]
    if subject in {s for _, s in _subjects(tree, tag)}:
        raise ForkError(f"{tree} already has {subject!r}")
    git(tree, "fetch", "-q", str(primary_tree), commit)
    note = git(primary_tree, "notes", "--ref", NOTES_REF, "show", commit).stdout
    (tree / ".git" / "fork-pick-note").write_text(note)
    res = git(tree, "cherry-pick", commit, check=False)
    if res.returncode != 0:
        return "conflict"
    pick_continue(root, tree, tag)
    return "picked"


def _in_progress(tree: Path) -> bool:
    git_dir = tree / ".git"
    return any(
        (git_dir / name).exists()
        for name in ("CHERRY_PICK_HEAD", "rebase-merge", "rebase-apply")
    )


def pick_continue(root: Path, tree: Path, tag: str) -> None:
    """Finish a pick: commit a resolved cherry-pick, attach the primary
    commit's note, and move the commit to its place in the primary order."""
    pending = tree / ".git" / "fork-pick-note"
    if not pending.is_file():
        raise ForkError(f"{tree}: no pick in progress")
    if (tree / ".git" / "CHERRY_PICK_HEAD").exists():
        res = git(
            tree, "-c", "core.editor=true", "cherry-pick", "--continue", check=False
        )
        if res.returncode != 0:
            raise ForkError(
                f"{tree}: the cherry-pick is not resolved yet:\n"
                f"{res.stdout}{res.stderr}"
            )
    git(tree, "notes", "--ref", NOTES_REF, "add", "-f", "-F", str(pending), "HEAD")
    pending.unlink()
    order = {p.subject: i for i, p in enumerate(read_series(root).patches)}
    commits = _subjects(tree, tag)
    ranked = sorted(commits, key=lambda cs: order.get(cs[1], len(order)))
    if ranked == commits:
        return
    with tempfile.NamedTemporaryFile("w", suffix=".todo", delete=False) as f:
        f.write("".join(f"pick {c}\n" for c, _ in ranked))
        todo = f.name
    try:
        git(
            tree,
            "rebase",
            "-q",
            "-i",
            tag,
            env={"GIT_SEQUENCE_EDITOR": f"cp {todo}"},
        )
    finally:
        os.unlink(todo)


PRIMARY_REF = "refs/forktool/primary"
# The header line of each pair: "<n>:  <hash> <mark> <m>:  <hash> <subject>",
# a side without the commit written "-:  -------".
_RANGE_DIFF_PAIR_RE = re.compile(
    r"^(\s*(?:\d+|-):)\s+(?:[0-9a-f]{7,}|-{7,}) (\S)(\s+(?:\d+|-):)\s+"
    r"(?:[0-9a-f]{7,}|-{7,}) ",
    re.M,
)


def range_diff(primary_tree: Path, primary_tag: str, tree: Path, tag: str) -> str:
    """``git range-diff`` of the primary series (``primary_tag..HEAD`` of
    ``primary_tree``) against an extra base's series (``tag..HEAD`` of
    ``tree``), without colour, notes or commit hashes, so that the text
    changes only when a commit does."""
    git(
        tree,
        "fetch",
        "-q",
        "--no-tags",
        str(primary_tree),
        f"+HEAD:{PRIMARY_REF}",
        f"+refs/tags/{primary_tag}:{PRIMARY_REF}-base",
    )
    out = git(
        tree,
        "range-diff",
        "--no-color",
        "--no-notes",
        f"{PRIMARY_REF}-base..{PRIMARY_REF}",
        f"{tag}..HEAD",
    ).stdout
    return _RANGE_DIFF_PAIR_RE.sub(r"\1 \2\3 ", out)
