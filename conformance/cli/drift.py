"""``vtwin drift``: every difference class between two systems over workloads (`drift`).

``vtwin drift --left SPEC --right SPEC [--workload W ...] [--ignore-field F ...] [--json OUT]
[--report DIR]`` starts both systems (start-up timed apart), runs each workload on both to the
end and prints one line per difference class, behavioural first; ``--json`` writes every class
with its workloads, first steps, counts, example values and hints, plus each side's time per
step; ``--report DIR`` writes ``drift.json``, ``drift.txt``, ``drift.html`` (the classes and
workloads as a page, `conformance.drift.html`) and ``upstream.log`` there. Exit 0
when nothing differs, 1 when something does (as ``diff``), 2 for bad input (one line) or when
a system could not be built ("SYSTEM could not be built: REASON": never a difference class).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from conformance.drift.classes import FIELD_KINDS
from conformance.drift.html import render_drift
from conformance.drift.run import default_workloads, run_drift
from conformance.rundirs import check_output_file
from conformance.sched.divergences import DEFAULT_PATH, load_known
from conformance.systems.specs import FORMS
from vtwin.errors import UserError


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
    check_output_file(args.json, "--json")
    if args.report is not None and args.report.exists() and not args.report.is_dir():
        raise UserError(f"--report {args.report}: exists and is not a directory")


def summary_lines(data: dict[str, Any]) -> list[str]:
    s, t = data["summary"], data["timing"]
    lines = [f"vtwin drift: {data['left']} vs {data['right']}: {s['classes']} difference "
             f"classes ({s['behavioural']} behavioural, {s['cosmetic']} cosmetic) in "
             f"{s['workloads_differing']}/{s['workloads']} workloads"]
    lines += [f"vtwin drift: error: {u['reason']} (not run: {', '.join(u['workloads'][:3])}"
              f"{', ...' if len(u['workloads']) > 3 else ''}; {len(u['workloads'])} of "
              f"{s['workloads']} workloads)" for u in data["unbuilt"]]
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
    startup = ", ".join(f"{spec} {seconds:.1f} s" for spec, seconds in
                        t["startup_seconds"].items()) or "none"
    lines.append(f"vtwin drift: start-up {startup}; per step {ms['left']:.3f} ms "
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
    return drift_exit_code(data)


def drift_exit_code(data: dict[str, Any]) -> int:
    """1: something differs; 2: nothing differs but a system could not be built for some
    workload (the verdict is that error, not "no difference"); 0: no difference."""
    if data["classes"]:
        return 1
    return 2 if data["unbuilt"] else 0
