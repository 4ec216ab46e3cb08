"""Drift between two systems over workloads: both systems started once, each workload run on both
to its own end (`diff.drift_workload`), every class of difference collected, as the JSON `vtwin
drift --json` writes. What `vtwin drift`, the release matrix and tests call."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from conformance.drift.diff import DriftClass, WorkloadDrift, drift_workload
from conformance.paths import DRIFT_PROBES_DIR
from conformance.sched.divergences import KnownDivergence
from conformance.sched.startup import start_systems, upstream_logs
from conformance.sched.suite import regression_files, resolve_workload, suite_names
from conformance.systems.protocol import close_system
from conformance.systems.registry import resolve_system
from workloads.model import Workload

PROBES_DIR = DRIFT_PROBES_DIR
"""Small workloads that each isolate one rule known to have changed between releases (a
threshold applied to a request alone, stats for a lookup that is not admitted, where freed
blocks without a hash go): run by default after the suite."""


def default_workloads() -> list[str]:
    """The default suite, every drift probe, then the regressions (among them the workloads
    that pin each release switch of `impl.behaviour`, so drift between two releases names
    those changes too)."""
    return [*suite_names(), *(str(p) for p in sorted(PROBES_DIR.glob("*.jsonl"))),
            *regression_files()]


def run_drift(left_spec: str, right_spec: str, names: Sequence[str], *,
              ignore: Sequence[str] = (), max_steps: int | None = None,
              out: TextIO | None = None, log_path: Path | None = None,
              known: Sequence[KnownDivergence] = ()) -> dict[str, Any]:
    """Drift between two specs over workloads, as the JSON `vtwin drift --json` writes."""
    stream = sys.stderr if out is None else out
    started = time.monotonic()
    left, right = resolve_system(left_spec), resolve_system(right_spec)
    try:
        workloads: list[Workload] = [resolve_workload(n)[0] for n in names]
        found: dict[str, DriftClass] = {}
        results: list[WorkloadDrift] = []
        with upstream_logs(log_path) as counts:
            startup = start_systems(((left_spec, left), (right_spec, right)),
                                    workloads[0].config, stream, "vtwin drift") \
                if workloads else {}
            bar = tqdm(workloads, unit="workload", file=stream, leave=False,
                       disable=not stream.isatty(), dynamic_ncols=True)
            for index, workload in enumerate(bar, 1):
                bar.set_description(workload.name)
                result = drift_workload(
                    workload, (left, right), found, ignore=ignore, max_steps=max_steps,
                    progress=lambda name, step: bar.set_postfix_str(f"step {step}"))
                results.append(result)
                line = (f"vtwin drift: [{index}/{len(workloads)}] {_workload_line(result)}")
                (bar.write(line, file=stream) if not bar.disable
                 else print(line, file=stream, flush=True))
            bar.close()
    finally:
        close_system(left)
        close_system(right)
    data = _as_json(left_spec, right_spec, results, found, ignore, startup,
                    time.monotonic() - started, dict(counts))
    _mark_known(data, [k for k in known if k.for_pair(left_spec, right_spec)])
    return data


def _mark_known(data: dict[str, Any], known: Sequence[KnownDivergence]) -> None:
    """Occurrences a known-divergence entry of this pair names (``WORKLOAD:FIELD``) carry its
    reason; a class known in every workload it shows in is `known` itself."""
    reasons = {k.id: k.reason for k in known}
    for c in data["classes"]:
        field_name = c["class"].split(".", 1)[0]
        for workload, occurrence in c["per_workload"].items():
            reason = reasons.get(f"{workload}:{field_name}")
            if reason is not None:
                occurrence["known"] = reason
        c["known"] = all("known" in o for o in c["per_workload"].values())


def _workload_line(r: WorkloadDrift) -> str:
    if r.unbuilt is not None:
        return f"{r.workload}: error: {r.unbuilt}"
    if r.refused is not None:
        return f"{r.workload}: {r.refused} (agreement)"
    ends = "" if (r.left.end, r.right.end) == ("finished", "finished") else \
        f"; ends: {r.left.end} / {r.right.end}"
    first = "no difference" if r.first is None else \
        f"first {r.first} at step {r.first_step}, {len(r.classes)} classes"
    return (f"{r.workload}: {max(r.left.steps, r.right.steps)} steps, {first}{ends} "
            f"({r.left.seconds:.1f}s + {r.right.seconds:.1f}s)")


def _as_json(left: str, right: str, results: list[WorkloadDrift], found: dict[str, DriftClass],
             ignore: Sequence[str], startup: dict[str, float], seconds: float,
             log_counts: dict[str, int]) -> dict[str, Any]:
    first_seen = {name: index for index, name in
                  enumerate(c for r in results for c in r.classes)}
    ordered = sorted(found.values(), key=lambda c: (
        c.cosmetic, all(o.downstream for o in c.occurrences.values()), first_seen[c.name]))
    classes = [c.to_json() for c in ordered]
    steps = [sum(getattr(r, side).steps for r in results) for side in ("left", "right")]
    run_seconds = [sum(getattr(r, side).seconds for r in results) for side in ("left", "right")]
    per_step = [1000 * s / max(n, 1) for s, n in zip(run_seconds, steps, strict=True)]
    ignored: dict[str, int] = {}
    for r in results:
        for name, n in r.ignored.items():
            ignored[name] = ignored.get(name, 0) + n
    return {
        "left": left, "right": right,
        "systems": {"left": next((r.left.name for r in results), left),
                    "right": next((r.right.name for r in results), right)},
        "summary": {
            "workloads": len(results), "classes": len(classes),
            "behavioural": sum(c["effect"] == "behavioural" for c in classes),
            "cosmetic": sum(c["effect"] == "cosmetic" for c in classes),
            "workloads_differing": sum(r.first is not None for r in results),
            "unbuilt": sum(r.unbuilt is not None for r in results),
        },
        "unbuilt": _unbuilt(results),
        "classes": classes,
        "ignored": {"fields": list(ignore), "steps_differing": ignored},
        "workloads": [r.to_json() for r in results],
        "timing": {
            "startup_seconds": {k: round(v, 3) for k, v in startup.items()},
            "run_seconds": {"left": round(run_seconds[0], 3), "right": round(run_seconds[1], 3)},
            "ms_per_step": {"left": round(per_step[0], 4), "right": round(per_step[1], 4)},
            "right_over_left": round(per_step[1] / per_step[0], 3) if per_step[0] else None,
            "wall_seconds": round(seconds, 3),
        },
        "upstream_logs": log_counts,
    }


def _unbuilt(results: list[WorkloadDrift]) -> list[dict[str, Any]]:
    """Each "SYSTEM could not be built: REASON" with the workloads it kept from running (a
    release refusing a config the other accepts is named here, never as a class)."""
    by_reason: dict[str, list[str]] = {}
    for r in results:
        if r.unbuilt is not None:
            by_reason.setdefault(r.unbuilt, []).append(r.workload)
    return [{"reason": reason, "workloads": names} for reason, names in by_reason.items()]
