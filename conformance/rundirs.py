"""Run directories: one directory per run under a report root, a `latest` pointer, an index.

Conformance (`reports/conformance/`), benchmarks (`reports/benchmarks/`) and mutation testing
(`reports/mutation/`) all keep their reports the same way, so a later run can never replace an
earlier run's report and an index can never link to a report that another run overwrote:

- `ROOT/<run id>/`: everything one run wrote (`20260102-131415-gate`; a `-2` suffix when that
  second is taken; a given `--run-id` that already holds files is refused before any work);
- `ROOT/latest` -> the newest run (a relative symlink, swapped atomically) and
  `ROOT/latest.txt` with its id where symlinks are not available;
- `ROOT/runs.json` and `ROOT/index.html`, rebuilt from the run directories present after
  each run (each area supplies how to summarise one run and how to draw the table).

An explicit output directory (`--report DIR`, `--out DIR`) is written exactly there; the
caller says on the console when it replaces an earlier report (`replacing_note`).
"""

from __future__ import annotations

import html
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vtwin.errors import UserError

LATEST = "latest"
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,80}")

Summary = dict[str, Any]
Summarize = Callable[[Path], Summary | None]
"""One run directory -> its summary for the index (None: not a run of this area)."""


def write_text(path: Path | str, text: str) -> None:
    """Write `text` to a file, or to stdout when `path` is ``-`` (every output flag of vtwin
    takes ``-``)."""
    if str(path) == "-":
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")


def check_output_file(path: Path | None, flag: str) -> None:
    """An output file flag, checked before any work: ``-`` (stdout) or a file, not a
    directory."""
    if path is None or str(path) == "-":
        return
    if path.is_dir():
        raise UserError(f"{flag} {path}: is a directory; give a file name or '-' for stdout")
    if not path.parent.is_dir():  # never create directories the user did not ask for
        raise UserError(f"{flag} {path}: directory {path.parent} does not exist; create it "
                        "first, or give '-' for stdout")


def check_run_id(run_id: str) -> str:
    if not _RUN_ID.fullmatch(run_id) or run_id == LATEST:
        raise UserError(f"--run-id: letters, digits, '.', '_' and '-' only, not {LATEST!r} "
                        f"(got {run_id!r})")
    return run_id


def new_run_dir(root: Path, command: str, run_id: str | None = None,
                now: datetime | None = None) -> Path:
    """Create and return `root/<run id>`. A generated id takes a `-2`, `-3`... suffix when its
    second is taken; a given id that already holds a report is refused (nothing is overwritten
    silently). Raises `UserError` up front, before any work, if the root is not writable."""
    if run_id is None:
        stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
        base, n = f"{stamp}-{command}", 1
        run_id = base
        while (root / run_id).exists():
            n += 1
            run_id = f"{base}-{n}"
    path = root / check_run_id(run_id)
    if path.is_dir() and any(path.iterdir()):
        raise UserError(f"{path}: run {run_id!r} already has a report; pick another --run-id "
                        "(reports are never overwritten)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create the report directory {path}: {err}") from None
    return path


def check_writable_dir(path: Path, flag: str) -> None:
    """Fail now, before any work, if `path` cannot be a report directory."""
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {path}: not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".vtwin-write-check"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UserError(f"{flag} {path}: cannot write there: {err}") from None


def replacing_note(path: Path, marker: str) -> str | None:
    """A line naming the report an explicit directory already holds (None if `marker`, the
    area's main JSON file, is not there), so replacing it is never silent."""
    old = path / marker
    if not old.exists():
        return None
    generated = "?"
    data = read_json(old)
    if data is not None:
        generated = str(data.get("generated") or data.get("date") or "?")
    return f"replacing the report in {path} (from {generated})"


def point_latest(root: Path, run_dir: Path) -> None:
    """`root/latest` -> the run directory (a relative symlink, swapped atomically), and
    `root/latest.txt` with its id where symlinks are not available."""
    link = root / LATEST
    temp = root / f".{LATEST}.{os.getpid()}"
    try:
        if temp.is_symlink():
            temp.unlink()
        temp.symlink_to(run_dir.name, target_is_directory=True)
        os.replace(temp, link)
    except OSError:
        pass
    (root / "latest.txt").write_text(run_dir.name + "\n", encoding="utf-8")


def latest_id(root: Path) -> str | None:
    path = root / "latest.txt"
    return path.read_text(encoding="utf-8").strip() if path.exists() else None


def summaries(root: Path, summarize: Summarize) -> list[Summary]:
    """One summary per run directory under `root`, newest first."""
    if not root.is_dir():
        return []
    runs = (summarize(p) for p in sorted(
        (p for p in root.iterdir() if p.is_dir() and not p.is_symlink()),
        key=lambda p: p.name, reverse=True))
    return [r for r in runs if r is not None]


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_index(root: Path, runs: list[Summary], page: str) -> Path:
    """Write `root/runs.json` (latest id and every run's summary) and `root/index.html`."""
    (root / "runs.json").write_text(
        json.dumps({"latest": latest_id(root), "runs": runs}, indent=1), encoding="utf-8")
    index = root / "index.html"
    index.write_text(page, encoding="utf-8")
    return index


# -- a plain index page, for areas without one of their own --------------------------------------
@dataclass(frozen=True, slots=True)
class IndexPage:
    """How an area's index of runs looks: its title, a paragraph saying what a run is, the
    column headers and one row of (already escaped) cells per run summary."""

    title: str
    intro: str
    headers: tuple[str, ...]
    row: Callable[[Summary], Sequence[str]]
    main_page: str
    """The file inside a run directory that the run's id links to."""


INDEX_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;
color:#1f2328}
table{border-collapse:collapse;width:100%} td,th{border:1px solid #d0d7de;padding:4px 8px;
text-align:left;vertical-align:top} th{background:#f6f8fa}
.ok{color:#1a7f37;font-weight:bold} .bad{color:#cf222e;font-weight:bold}
"""


def render_index(spec: IndexPage, runs: list[Summary], latest: str | None) -> str:
    head = "".join(f"<th>{e(h)}</th>" for h in ("run", *spec.headers))
    rows = []
    for run in runs:
        mark = " <b>(latest)</b>" if run["id"] == latest else ""
        first = f"<a href='{e(run['id'])}/{e(spec.main_page)}'><code>{e(run['id'])}</code></a>"
        cells = "".join(f"<td>{cell}</td>" for cell in spec.row(run))
        rows.append(f"<tr><td>{first}{mark}</td>{cells}</tr>")
    latest_html = (f"<p>Latest run: <a href='latest/{e(spec.main_page)}'>{e(latest)}</a> "
                   "(<code>latest</code> points at it).</p>" if latest else "")
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(spec.title)}</title><style>{INDEX_STYLE}</style></head><body>
<h1>{e(spec.title)}</h1>
{latest_html}<p>{spec.intro} Each run has a directory of its own; nothing is overwritten.</p>
<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>
</body></html>
"""


def update_index(root: Path, summarize: Summarize, spec: IndexPage) -> Path:
    runs = summaries(root, summarize)
    return write_index(root, runs, render_index(spec, runs, latest_id(root)))


def adopt_flat_report(root: Path, marker: str, files: Sequence[str], command: str) -> Path | None:
    """Move a report written straight into `root` (the layout before run directories) into a
    run directory of its own, named after its time, so the index of runs does not overwrite
    it. Returns the new directory (None if there was nothing to move)."""
    old = root / marker
    if not old.is_file():
        return None
    stamp = datetime.fromtimestamp(old.stat().st_mtime, UTC)
    target = new_run_dir(root, f"{command}-earlier", now=stamp)
    for name in files:
        if (root / name).is_file():
            os.replace(root / name, target / name)
    return target


def e(text: object) -> str:
    return html.escape("" if text is None else str(text), quote=True)
