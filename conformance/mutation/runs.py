"""Mutation reports, each run in a directory of its own: `reports/mutation/<run id>/`.

One report replacing the last hid how the score moved from one bounded run to the next (and a
`report` re-render replaced the numbers of the run that measured them). Now each run keeps its
`index.html` and `mutation.json`, `reports/mutation/latest` points at the newest, and
`reports/mutation/index.html` lists every run with its score (`conformance.rundirs`). A report
written straight into `reports/mutation/` by an earlier version is moved into a run directory
of its own (named after its time) before the index is written over its `index.html`.
"""

from __future__ import annotations

from pathlib import Path

from conformance.rundirs import (
    IndexPage,
    Summary,
    adopt_flat_report,
    check_run_id,
    check_writable_dir,
    e,
    latest_id,
    new_run_dir,
    point_latest,
    read_json,
    replacing_note,
    update_index,
)
from vtwin.errors import UserError

ROOT = Path("reports") / "mutation"
REPORT_FILES = ("mutation.json", "index.html")


def out_dir(command: str, out: Path | None, run_id: str | None,
            root: Path = ROOT) -> tuple[Path, Path | None, str | None]:
    """Where this run's report goes, decided before any work: `--out DIR` exactly (with a
    note when it replaces a report), else a new run directory under `root`. Returns the
    directory, the root whose latest/index to update (None for `--out`) and the note."""
    if out is not None:
        if run_id is not None:
            raise UserError("--run-id names a run directory under reports/mutation; it does "
                            "not combine with --out DIR")
        check_writable_dir(out, "--out")
        return out, None, replacing_note(out, "mutation.json")
    if run_id is not None:
        check_run_id(run_id)
    return new_run_dir(root, f"mutation-{command}", run_id), root, None


def latest_report(out: Path | None, root: Path = ROOT) -> Path:
    """The mutation.json to read (for `hunt`): `--out DIR`'s, else the newest run's."""
    if out is not None:
        return out / "mutation.json"
    latest = latest_id(root)
    if latest is None:
        if (root / "mutation.json").is_file():  # written before run directories
            return root / "mutation.json"
        raise UserError(f"no mutation report under {root}: run `python -m conformance.mutation "
                        "report` first")
    return root / latest / "mutation.json"


def summarize(path: Path) -> Summary | None:
    data = read_json(path / "mutation.json")
    summary = None if data is None else data.get("summary")
    if not isinstance(summary, dict):
        return None
    assert data is not None
    return {"id": path.name, "generated": data.get("generated"), **summary}


def _row(run: Summary) -> list[str]:
    passed = run.get("passed")
    score = (f"<span class='{'ok' if passed else 'bad'}'>{run.get('score')}%</span> "
             f"(target {run.get('target')}%)")
    counts = " / ".join(str(run.get(k, "")) for k in
                        ("total", "killed", "survived", "equivalent", "not_run"))
    stale = len(run.get("stale_equivalents") or [])
    minutes = run.get("minutes")
    return [e(run.get("generated") or "-"), score, counts,
            f"<span class='bad'>{stale}</span>" if stale else "0",
            "-" if minutes is None else f"{minutes:.1f}",
            f"<a href='{e(run['id'])}/mutation.json'>json</a>"]


INDEX = IndexPage(
    title="vtwin mutation runs",
    intro="Each run is <code>nox -s mutation</code> (<code>python -m conformance.mutation "
          "run</code>: a bounded mutmut run of impl/core and impl/sched, the differential "
          "suite as the killer) or a re-render of the cached verdicts (<code>report</code>). "
          "Score: killed / (total - equivalent - not run).",
    headers=("generated", "score", "total / killed / survived / equivalent / not run",
             "stale equivalents", "minutes", "files"),
    row=_row,
    main_page="index.html",
)


def finish(run_dir: Path, root: Path | None) -> Path | None:
    """After the report is written: repoint latest and rebuild the index (default runs only).
    Returns the index page, or None for an explicit `--out`."""
    if root is None:
        return None
    adopted = adopt_flat_report(root, "mutation.json", REPORT_FILES, "mutation")
    if adopted is not None:
        print(f"mutation: moved the report written straight into {root} to {adopted}")
    point_latest(root, run_dir)
    return update_index(root, summarize, INDEX)
