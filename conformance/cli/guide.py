"""``vtwin guide``: generation guided by coverage, against uniform draws (`conformance.guided`).

``vtwin guide [--strategy guided|uniform|both] [--families F,..] [--minutes M] [--runs N]
[--left SPEC] [--right SPEC] [--corpus DIR ...] [--planted NAME] [--stop-on-failure]
[--out DIR] [--run-id ID]`` runs each strategy in its own process with the same budget and
writes ``reports/guided/RUN_ID/``: ``summary.json`` and ``index.html`` (arcs of the twin and of
upstream over time per strategy, arcs per hour, failures with their shrunk workloads), and per
strategy its corpus (``STRATEGY/corpus/*.jsonl``, which ``--corpus`` resumes from). Exit 0 when
no strategy found a failure, 1 when one did, 2 for bad input (one line), 130 when interrupted
(the report then holds what each strategy had).
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import date
from pathlib import Path

from conformance.campaign.families import FOCUS, family_names, focus_of_the_night, parse_families
from conformance.guided.run import REPORT_ROOT, GuideOptions, run_guide
from conformance.guided.search import STRATEGIES, Strategy
from vtwin.errors import UserError

NIGHT = "@night"
"""The focus group whose turn it is today (`focus_of_the_night`): what the nightly searches."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    guide = subparsers.add_parser(
        "guide", help="search for divergences guided by coverage, against uniform draws",
        description="Vary workloads that reached new twin or upstream branches (AFL-style "
                    "havoc on workloads) and compare, with the same time budget, against "
                    "uniform draws of the campaign families. Exit 0: nothing failed.")
    guide.add_argument("--strategy", choices=(*STRATEGIES, "both"), default="both")
    guide.add_argument("--families", default="all", metavar="F,..",
                       help="campaign families and @FOCUS groups ("
                       f"{', '.join('@' + g for g in FOCUS)}; @night: the group whose turn "
                       f"it is today, as `nox -s nightly` runs it; default all: "
                       f"{', '.join(family_names())})")
    guide.add_argument("--minutes", type=float, metavar="M", help="time budget per strategy")
    guide.add_argument("--runs", type=int, metavar="N", help="workload runs per strategy")
    guide.add_argument("--left", default="impl", metavar="SPEC",
                       help="the system under test, traced in process (default impl)")
    guide.add_argument("--right", default="upstream", metavar="SPEC",
                       help="the reference, traced in process (default upstream: 0.32.0)")
    guide.add_argument("--seed", type=int, default=0, help="first seed of the fresh draws")
    guide.add_argument("--seed-runs", type=int, default=16, metavar="N",
                       help="guided: fresh draws before the first mutant (default 16)")
    guide.add_argument("--corpus", type=Path, action="append", default=[], metavar="DIR",
                       help="guided: start from an earlier run's corpus (repeatable)")
    guide.add_argument("--planted", metavar="NAME",
                       help="run in a scratch copy with this planted bug applied "
                            "(conformance/mutation/semantic/NAME.patch)")
    guide.add_argument("--stop-on-failure", action="store_true",
                       help="each strategy stops at its first failure (time to find a bug)")
    guide.add_argument("--shrink-runs", type=int, default=60, metavar="N",
                       help="runs spent shrinking each failure (0: keep it as found)")
    guide.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), metavar="N",
                       help="strategies run at once (default: 2, or 1 on one core)")
    guide.add_argument("--out", type=Path, default=REPORT_ROOT, metavar="DIR")
    guide.add_argument("--run-id", metavar="ID")
    guide.set_defaults(handler=_guide)


def _guide(args: argparse.Namespace) -> int:
    for flag, value in (("--minutes", args.minutes), ("--runs", args.runs),
                        ("--jobs", args.jobs)):
        if value is not None and value <= 0:
            raise UserError(f"{flag} must be positive, not {value}")
    strategies: tuple[Strategy, ...] = (STRATEGIES if args.strategy == "both"
                                         else (args.strategy,))
    text = args.families
    if text.strip() == NIGHT:
        text = "@" + focus_of_the_night(date.today().toordinal())
        print(f"vtwin guide: tonight's focus: {text} ({', '.join(parse_families(text))})",
              file=sys.stderr)
    families = parse_families(text)
    options = GuideOptions(strategies, families, args.left, args.right, args.seed,
                           args.minutes, args.runs, args.seed_runs, tuple(args.corpus),
                           args.planted, args.stop_on_failure, args.shrink_runs, args.jobs,
                           args.out, args.run_id)
    run_dir, summary = run_guide(options)
    found = 0
    for name, numbers in summary["strategies"].items():
        found += len(numbers["found"])
        first = min((f["seconds"] for f in numbers["found"]), default=None)
        print(f"{name}: {numbers['runs']} runs, {numbers['twin_arcs']} twin arcs, "
              f"{numbers['upstream_arcs']} upstream arcs, {numbers['arcs_per_hour']} arcs/hour, "
              f"{len(numbers['found'])} failure signature(s)"
              + ("" if first is None else f", first after {first:.0f} s"), file=sys.stderr)
    print(f"report: {run_dir / 'index.html'}", file=sys.stderr)
    if summary["interrupted"]:
        print("interrupted: the report holds what each strategy had found", file=sys.stderr)
        return 130
    return 1 if found else 0
