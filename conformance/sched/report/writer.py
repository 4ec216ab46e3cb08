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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conformance.rundirs import (
    LATEST,
    check_run_id,
    check_writable_dir,
    latest_id,
    new_run_dir,
    point_latest,
    read_json,
    replacing_note,
    summaries,
    write_index,
    write_text,
)
from conformance.sched.conform import ConformRun, WorkloadOutcome
from conformance.sched.liveness import state_json
from conformance.sched.lockstep import LockstepResult, Series
from conformance.sched.report.html import render
from conformance.sched.report.runs import render_runs
from conformance.sched.report.timeline import timeline_json
from conformance.sched.trace import state_json as trace_state_json
from vtwin.errors import UserError

REPORT_FORMAT = "vtwin-conform-report/2"
DEFAULT_REPORT_DIR = Path("reports") / "conformance"

__all__ = ["DEFAULT_REPORT_DIR", "LATEST", "REPORT_FORMAT", "check_report_dir", "check_run_id",
           "new_run_dir", "outcome_json", "point_latest", "report_json", "run_summaries",
           "update_runs_index", "write_report", "write_text"]


def series_json(series: Series) -> dict[str, list[int]]:
    out = {"active": list(series.active), "cached": list(series.cached),
           "empty": list(series.empty), "running": list(series.running),
           "waiting": list(series.waiting)}
    if series.cpu_active:  # a CPU offload tier
        out.update(cpu_active=list(series.cpu_active), cpu_cached=list(series.cpu_cached),
                   cpu_empty=list(series.cpu_empty), loaded_blocks=list(series.loaded_blocks),
                   stored_blocks=list(series.stored_blocks))
    return out


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
    return {
        "workload": outcome.workload,
        "description": outcome.description,
        "covers": outcome.covers,
        "requests": outcome.num_requests,
        "config": None if outcome.config is None else outcome.config.to_dict(),
        "level": outcome.level,
        "verdict": outcome.verdict,
        "level_reached": r.level_reached,
        "steps": r.steps,
        "seconds": round(r.seconds, 3),
        "error": r.error,
        "error_detail": r.error_detail,
        "stalled": outcome.stalled,
        "stall": stall_json(r),
        "refused": r.refused,
        "unbuilt": r.unbuilt,
        "same_failure": r.same_failure,
        "known": None if waiver is None else {"id": waiver.id, "level": waiver.level,
                                              "reason": waiver.reason},
        "divergences": [d.to_json() for d in r.divergences],
        "traces": list(outcome.traces),
        "divergence_states": {d.level: {"step": d.step, "left": trace_state_json(d.left),
                                        "right": trace_state_json(d.right)}
                              for d in r.divergence_states},
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
        "unbuilt": list(run.unbuilt),
        "startup_seconds": round(run.startup_seconds, 3),
        "stale_known_divergences": [{"id": k.id, "level": k.level, "reason": k.reason}
                                    for k in run.stale],
        "workloads": [outcome_json(o) for o in run.outcomes],
    }


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


# -- run directories (the scheme is `conformance.rundirs`, shared with benchmarks and mutation) --
def check_report_dir(path: Path) -> str | None:
    """For an explicit `--report DIR`: fail now if it cannot be written; returns a note naming
    the report it will replace (None if there is none), so replacing is never silent."""
    check_writable_dir(path, "--report")
    return replacing_note(path, "conform.json")


def run_summaries(root: Path) -> list[dict[str, Any]]:
    """One summary per run directory under `root`, newest first (from its JSON files)."""
    return summaries(root, _summary)


def _summary(path: Path) -> dict[str, Any] | None:
    conform, tests = read_json(path / "conform.json"), read_json(path / "report.json")
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


def update_runs_index(root: Path) -> Path:
    """Rebuild `root/runs.json` and `root/index.html` from the run directories present."""
    runs = run_summaries(root)
    return write_index(root, runs, render_runs(runs, latest_id(root)))
