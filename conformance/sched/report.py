"""The conformance report of a `ConformRun`: `conform.json` plus a self-contained `conform.html`,
each run in a directory of its own.

Runs never overwrite each other: without `--report DIR` a run writes under
`reports/conformance/<run id>/` (`20260102-131415-gate`, a `-2` suffix if that second is
taken), repoints `reports/conformance/latest` at it and rebuilds the index of runs
(`reports/conformance/index.html`, `runs.json`) from every run directory present, so the index
can never link to a report that another run replaced. An explicit `--report DIR` writes exactly
there and says on the console when it replaces an earlier report. The names leave
`report.json` / `index.html` inside a run directory to the pytest-based report that
`nox -s conformance` writes beside the lockstep one.

The JSON is the source of truth (the HTML page is rendered from it): per workload the verdict
at the requested level, the level reached, the steps compared, the engine config, every level's
first divergence with both records and the ones before it, and the per-step series the plots are
drawn from. A stalled run adds `stalled` (one line) and `stall` (side, step, and per side the
reason, queues and block counts); both are null for a run that ended normally.
"""

from __future__ import annotations

import json
import os
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conformance.errors import UserError
from conformance.sched.conform import ConformRun, WorkloadOutcome
from conformance.sched.html import render
from conformance.sched.html_runs import render_runs
from conformance.sched.html_timeline import timeline_json
from conformance.sched.liveness import state_json
from conformance.sched.lockstep import LockstepResult, Series

REPORT_FORMAT = "vtwin-conform-report/2"
DEFAULT_REPORT_DIR = Path("reports") / "conformance"
LATEST = "latest"
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,80}")


def series_json(series: Series) -> dict[str, list[int]]:
    return {"active": list(series.active), "cached": list(series.cached),
            "empty": list(series.empty), "running": list(series.running),
            "waiting": list(series.waiting)}


def stall_json(result: LockstepResult) -> dict[str, Any] | None:
    stall = result.stall
    if stall is None:
        return None
    sides = {}
    for side, name, stalled, state in (("left", result.left, stall.left, stall.left_state),
                                       ("right", result.right, stall.right, stall.right_state)):
        sides[side] = stalled.to_json() if stalled is not None else {
            "system": name, "step": None, "reason": None, "detail": None, **state_json(state)}
    return {"side": stall.side, "agreed": stall.agreed, "step": stall.step, **sides}


def outcome_json(outcome: WorkloadOutcome) -> dict[str, Any]:
    r = outcome.result
    waiver = outcome.waiver
    source = outcome.source
    return {
        "workload": outcome.workload,
        "description": outcome.description,
        "covers": outcome.covers,
        "requests": outcome.num_requests,
        "config": None if source is None else source.config.to_dict(),
        "level": outcome.level,
        "verdict": outcome.verdict,
        "level_reached": r.level_reached,
        "steps": r.steps,
        "seconds": round(r.seconds, 3),
        "error": r.error,
        "error_detail": r.error_detail,
        "stalled": outcome.stalled,
        "stall": stall_json(r),
        "known": None if waiver is None else {"id": waiver.id, "level": waiver.level,
                                              "reason": waiver.reason},
        "divergences": [d.to_json() for d in r.divergences],
        "traces": list(outcome.traces),
        "series": {"left": series_json(r.left_series), "right": series_json(r.right_series)},
    }


def report_json(run: ConformRun, generated: str | None = None,
                meta: dict[str, Any] | None = None) -> dict[str, Any]:
    if generated is None:
        generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return {
        "format": REPORT_FORMAT,
        "generated": generated,
        **(meta or {}),
        "left": run.left,
        "right": run.right,
        "level": run.level,
        "ok": run.ok,
        "startup_seconds": round(run.startup_seconds, 3),
        "stale_known_divergences": [{"id": k.id, "level": k.level, "reason": k.reason}
                                    for k in run.stale],
        "workloads": [outcome_json(o) for o in run.outcomes],
    }


def write_text(path: Path | str, text: str) -> None:
    """Write `text` to a file, or to stdout when `path` is ``-`` (as everywhere in vtwin)."""
    if str(path) == "-":
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
        return
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")


def write_report(run: ConformRun, out_dir: Path, json_path: Path | None = None,
                 meta: dict[str, Any] | None = None) -> Path:
    """Write conform.json and conform.html under `out_dir` (and the JSON to `json_path` too,
    ``-`` for stdout). Returns the HTML page's path."""
    data = report_json(run, meta=meta)
    for workload in data["workloads"]:
        workload["timeline"] = timeline_json(out_dir, workload)
    text = json.dumps(data, indent=1)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "conform.json").write_text(text, encoding="utf-8")
        page = out_dir / "conform.html"
        page.write_text(render(data), encoding="utf-8")
        if json_path is not None:
            write_text(json_path, text)
    except OSError as err:
        raise UserError(f"cannot write the report: {err}") from None
    return page


# -- run directories ---------------------------------------------------------------------------
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


def check_report_dir(path: Path) -> str | None:
    """For an explicit `--report DIR`: fail now if it cannot be written; returns a note naming
    the report it will replace (None if there is none), so replacing is never silent."""
    if path.exists() and not path.is_dir():
        raise UserError(f"--report {path}: not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".vtwin-write-check"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise UserError(f"--report {path}: cannot write there: {err}") from None
    old = path / "conform.json"
    if not old.exists():
        return None
    try:
        generated = json.loads(old.read_text(encoding="utf-8")).get("generated", "?")
    except (OSError, ValueError, AttributeError):
        generated = "?"
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


def run_summaries(root: Path) -> list[dict[str, Any]]:
    """One summary per run directory under `root`, newest first (from its JSON files)."""
    runs = []
    for path in sorted((p for p in root.iterdir() if p.is_dir() and not p.is_symlink()),
                       key=lambda p: p.name, reverse=True):
        runs.append(_summary(path))
    return [r for r in runs if r is not None]


def _summary(path: Path) -> dict[str, Any] | None:
    conform, tests = _read(path / "conform.json"), _read(path / "report.json")
    if conform is None and tests is None:
        return None
    out: dict[str, Any] = {"id": path.name, "files": sorted(
        f.name for f in path.iterdir() if f.suffix in (".html", ".json", ".log", ".xml"))}
    if conform is not None:
        workloads = conform.get("workloads", [])
        out.update(command=conform.get("command"), generated=conform.get("generated"),
                   ok=conform.get("ok"), level=conform.get("level"),
                   systems=f"{conform.get('left')} vs {conform.get('right')}",
                   workloads=len(workloads),
                   reached=sum(w.get("verdict") in ("passed", "known") for w in workloads))
    if tests is not None:
        results = tests.get("results", [])
        out["tests"] = {k: sum(r.get("outcome") == k for r in results)
                        for k in ("passed", "failed", "error", "skipped")}
        out.setdefault("generated", tests.get("generated"))
    return out


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def update_runs_index(root: Path) -> Path:
    """Rebuild `root/runs.json` and `root/index.html` from the run directories present."""
    runs = run_summaries(root)
    latest = (root / "latest.txt").read_text().strip() if (root / "latest.txt").exists() else None
    (root / "runs.json").write_text(json.dumps({"latest": latest, "runs": runs}, indent=1),
                                    encoding="utf-8")
    page = root / "index.html"
    page.write_text(render_runs(runs, latest), encoding="utf-8")
    return page
