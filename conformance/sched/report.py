"""The conformance report of a `ConformRun`: `conform.json` plus a self-contained `conform.html`.

The names leave `report.json` / `index.html` in the same directory to the pytest-based report
that `nox -s conformance` writes there.

The JSON is the source of truth (the HTML page is rendered from it): per workload the verdict
at the requested level, the level reached, the steps compared, every level's first divergence
with both records and the ones before it, and the per-step series the plots are drawn from.
A stalled run adds `stalled` (one line: "both stalled at step N: ..." or "left system X
stalled at step N: ...") and `stall` (side, step, and per side the reason, queues and block
counts); both are null for a run that ended normally.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conformance.errors import UserError
from conformance.sched.conform import ConformRun, WorkloadOutcome
from conformance.sched.html import render
from conformance.sched.liveness import state_json
from conformance.sched.lockstep import LockstepResult, Series

REPORT_FORMAT = "vtwin-conform-report/1"
DEFAULT_REPORT_DIR = Path("reports") / "conformance"


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
    return {
        "workload": outcome.workload,
        "description": outcome.description,
        "requests": outcome.num_requests,
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
        "series": {"left": series_json(r.left_series), "right": series_json(r.right_series)},
    }


def report_json(run: ConformRun, generated: str | None = None) -> dict[str, Any]:
    if generated is None:
        generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return {
        "format": REPORT_FORMAT,
        "generated": generated,
        "left": run.left,
        "right": run.right,
        "level": run.level,
        "ok": run.ok,
        "stale_known_divergences": [{"id": k.id, "level": k.level, "reason": k.reason}
                                    for k in run.stale],
        "workloads": [outcome_json(o) for o in run.outcomes],
    }


def write_report(run: ConformRun, out_dir: Path, json_path: Path | None = None) -> Path:
    """Write conform.json and conform.html under `out_dir` (and the JSON to `json_path` too).

    Returns the HTML page's path."""
    data = report_json(run)
    text = json.dumps(data, indent=1)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "conform.json").write_text(text, encoding="utf-8")
        page = out_dir / "conform.html"
        page.write_text(render(data), encoding="utf-8")
        if json_path is not None:
            json_path.parent.mkdir(parents=True, exist_ok=True)
            json_path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise UserError(f"cannot write the report: {err}") from None
    return page
