"""``vtwin drift``: every difference class between two systems over workloads (`drift`).

``vtwin drift --left SPEC --right SPEC [--workload W ...] [--ignore-field F ...] [--json OUT]
[--report DIR]`` starts both systems (start-up timed apart), runs each workload on both to the
end and prints one line per difference class, behavioural first; ``--json`` writes every class
with its workloads, first steps, counts, example values and hints, plus each side's time per
step; ``--report DIR`` writes ``drift.json``, ``drift.txt``, ``drift.html`` (the classes and
workloads as a page, `drift_html`) and ``upstream.log`` there. Exit 0
when nothing differs, 1 when something does (as ``diff``), 2 for bad input (one line).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from conformance.drift import DriftClass, WorkloadDrift, drift_workload
from conformance.drift_classes import FIELD_KINDS
from conformance.drift_html import render_drift
from conformance.errors import UserError
from conformance.sched.conform import start_systems, upstream_logs
from conformance.sched.divergences import DEFAULT_PATH, KnownDivergence, load_known
from conformance.sched.suite import resolve_workload, suite_names
from conformance.sched.system import close_system, resolve_system
from conformance.specs import FORMS
from workloads.model import Workload

PROBES_DIR = Path(__file__).resolve().parents[1] / "workloads" / "data" / "drift"
"""Small workloads that each isolate one rule known to have changed between releases (a
threshold applied to a request alone, stats for a lookup that is not admitted, where freed
blocks without a hash go): run by default after the suite."""


def default_workloads() -> list[str]:
    """The default suite, every drift probe, then the regressions (among them the workloads
    that pin each release switch of `impl.behaviour`, so drift between two releases names
    those changes too)."""
    from conformance.sched.suite import regression_files

    return [*suite_names(), *(str(p) for p in sorted(PROBES_DIR.glob("*.jsonl"))),
            *regression_files()]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    drift = subparsers.add_parser(
        "drift", help="every behavioural difference between two systems, not only the first",
        description="Run two systems on each workload, each to its own end, and list every "
                    "class of difference: workloads, first step, counts, examples, and whether "
                    "it changes behaviour or only what is reported. Exit 0: no difference.")
    specs = f"a system spec ({', '.join(FORMS)})"
    drift.add_argument("--left", required=True, metavar="SPEC", help=specs)
    drift.add_argument("--right", required=True, metavar="SPEC", help=specs)
    drift.add_argument("--workload", action="append", metavar="NAME|FILE", dest="workloads",
                       help="a suite entry, bundled workload or file (repeatable; default: "
                            "the default suite, workloads/data/drift/ and "
                            "conformance/regressions/)")
    drift.add_argument("--ignore-field", action="append", default=[], metavar="FIELD",
                       dest="ignore", help="leave a record field out (repeatable): "
                                           f"{', '.join(FIELD_KINDS)}")
    drift.add_argument("--json", type=Path, metavar="OUT", help="write JSON here ('-': stdout)")
    drift.add_argument("--report", type=Path, metavar="DIR",
                       help="write drift.json, drift.txt, drift.html and upstream.log into DIR")
    drift.add_argument("--known", type=Path, default=DEFAULT_PATH, metavar="FILE",
                       help="known divergences: entries for this pair mark the classes they "
                            "name as known (default conformance/divergences.toml)")
    drift.add_argument("--max-steps", type=int, default=None, metavar="N",
                       help="stop a side after N steps (default: generous)")
    drift.set_defaults(handler=_drift)


def _check(args: argparse.Namespace) -> None:
    unknown = [f for f in args.ignore if f not in FIELD_KINDS]
    if unknown:
        raise UserError(f"--ignore-field {unknown[0]}: not a record field (fields: "
                        f"{', '.join(FIELD_KINDS)})")
    if args.max_steps is not None and args.max_steps < 1:
        raise UserError(f"--max-steps must be a positive integer, got {args.max_steps}")
    if args.json is not None and str(args.json) != "-" and args.json.is_dir():
        raise UserError(f"--json {args.json}: is a directory; give a file name or '-'")
    if args.report is not None and args.report.exists() and not args.report.is_dir():
        raise UserError(f"--report {args.report}: exists and is not a directory")


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
        },
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


def summary_lines(data: dict[str, Any]) -> list[str]:
    s, t = data["summary"], data["timing"]
    lines = [f"vtwin drift: {data['left']} vs {data['right']}: {s['classes']} difference "
             f"classes ({s['behavioural']} behavioural, {s['cosmetic']} cosmetic) in "
             f"{s['workloads_differing']}/{s['workloads']} workloads"]
    for c in data["classes"]:
        ex = c["example"]
        # The example's own hint first (the earliest root step), then the commonest other.
        hints = [ex["hint"]] if "hint" in ex else []
        hints += [h["hint"] for h in c["hints"] if h["hint"] not in hints][:2 - len(hints)]
        hint = "".join(f"; {h}" for h in hints)
        root = f"root in {len(c['root_in'])}" if c["root_in"] else "downstream only"
        known = " (known)" if c.get("known") else ""
        lines.append(f"  {c['effect']:<11} {c['kind']:<9} {c['class']}{known}: {c['workloads']} "
                     f"workloads ({root}), {c['steps']} steps; first {ex['workload']} step "
                     f"{ex['step']} {ex['path']}: {_short(ex['left'])} != "
                     f"{_short(ex['right'])}{hint}")
    ms = t["ms_per_step"]
    lines.append(f"vtwin drift: start-up {t['startup_seconds']}; per step {ms['left']:.3f} ms "
                 f"({data['left']}) vs {ms['right']:.3f} ms ({data['right']}); wall "
                 f"{t['wall_seconds']:.1f}s")
    return lines


def _short(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _drift(args: argparse.Namespace) -> int:
    _check(args)
    names = args.workloads or default_workloads()
    log_path = (args.report / "upstream.log" if args.report is not None
                else Path(tempfile.gettempdir()) / "vtwin-drift-upstream.log")
    known = load_known(args.known)
    data = run_drift(args.left, args.right, names, ignore=args.ignore,
                     max_steps=args.max_steps, log_path=log_path, known=known)
    lines = summary_lines(data)
    text = json.dumps(data, indent=1, default=str)
    if args.report is not None:
        args.report.mkdir(parents=True, exist_ok=True)
        (args.report / "drift.json").write_text(text + "\n", encoding="utf-8")
        (args.report / "drift.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (args.report / "drift.html").write_text(render_drift(json.loads(text)),
                                                encoding="utf-8")
    if args.json is not None:
        if str(args.json) == "-":
            print(text)
        else:
            args.json.write_text(text + "\n", encoding="utf-8")
    print("\n".join(lines), file=sys.stderr)
    return 1 if data["classes"] else 0
