"""`vtwin campaign`: generated-workload campaigns on Ray, their report, and merging two.

```
vtwin campaign --systems impl,vllm==0.32.0 --families all --minutes 5      # local Ray
vtwin campaign --systems impl,vllm==0.32.0,vllm==0.33.0 --seeds 0:500 --address HOST:6379
vtwin campaign report reports/campaign                                     # report.html
vtwin campaign merge night1/ night2/ -o all/
```

The run itself is `conformance.campaign.driver`; this module parses and checks the arguments
(every problem one line, before Ray starts) and prints the summary.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from conformance.campaign.families import family_names, parse_families
from conformance.campaign.shrink import Budget
from vtwin.errors import UserError

if TYPE_CHECKING:
    from conformance.campaign.plan import Plan

DEFAULT_OUT = Path("reports") / "campaign"
INTERRUPTED = 130
TOO_LITTLE = 3
"""Exit code of a timed campaign that judged fewer workloads than its floor."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    campaign = subparsers.add_parser(
        "campaign", help="generated-workload campaigns on Ray (resumable; report, merge)",
        description="Generate workloads from (family, seed), run the systems on each (in "
                    "lockstep for two, each once and compared for more) on Ray workers, keep "
                    "every result in DIR/campaign.sqlite (the same command resumes), shrink "
                    "each new failure class into DIR/regressions/, and write a report.")
    campaign.add_argument("--systems", metavar="SPEC,SPEC[,...]",
                          help="systems, comma-separated; the first is compared with each "
                               "other one (specs: impl, upstream, vllm==X.Y.Z, module:factory)")
    campaign.add_argument("--families", default="all", metavar="all|F,F",
                          help=f"families (default all: {', '.join(family_names())})")
    campaign.add_argument("--seeds", metavar="A:B", help="seeds A..B-1 (default: 0 on, until "
                                                         "--minutes ends)")
    campaign.add_argument("--minutes", type=float, metavar="N",
                          help="time budget, start-up included (then no new tasks; running "
                               "ones get a minute to finish)")
    campaign.add_argument("--address", metavar="ADDR",
                          help="join this Ray cluster (default: a local Ray, one worker per "
                               "core)")
    campaign.add_argument("--workers", type=int, metavar="N",
                          help="workers (default: every CPU Ray offers)")
    campaign.add_argument("--out", type=Path, default=DEFAULT_OUT, metavar="DIR",
                          help=f"campaign directory: store, regressions, reports (default "
                               f"{DEFAULT_OUT})")
    campaign.add_argument("--shrink-runs", type=int, default=Budget().runs, metavar="N",
                          help="most lockstep runs to shrink one failure class (default "
                               "%(default)s)")
    campaign.set_defaults(handler=_run)
    sub = campaign.add_subparsers(dest="campaign_command", metavar="report|merge")
    report = sub.add_parser("report", help="write the HTML summary of a campaign directory")
    report.add_argument("dir", type=Path, metavar="DIR")
    report.add_argument("-o", "--output", type=Path, metavar="FILE",
                        help="default DIR/report.html")
    report.set_defaults(handler=_report)
    merge = sub.add_parser("merge", help="merge campaign directories into one")
    merge.add_argument("sources", type=Path, nargs="+", metavar="DIR")
    merge.add_argument("-o", "--output", type=Path, required=True, metavar="DIR")
    merge.set_defaults(handler=_merge)


def parse_systems(text: str | None) -> tuple[str, ...]:
    from conformance.systems.specs import parse_spec

    if not text:
        raise UserError("--systems: name at least two systems, e.g. --systems "
                        "impl,vllm==0.32.0")
    systems = tuple(s.strip() for s in text.split(",") if s.strip())
    if len(systems) < 2:
        raise UserError(f"--systems: a campaign compares at least two systems (got {text!r})")
    if len(set(systems)) != len(systems):
        raise UserError(f"--systems: a system is named twice (got {text!r})")
    for spec in systems:
        parse_spec(spec)
    return systems


def parse_seeds(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    start, sep, stop = text.partition(":")
    try:
        bounds = (int(start), int(stop))
    except ValueError:
        bounds = (-1, -1)
    if not sep or bounds[0] < 0 or bounds[1] <= bounds[0]:
        raise UserError(f"--seeds: A:B with 0 <= A < B, seeds A..B-1 (got {text!r})")
    return bounds


def _run(args: argparse.Namespace) -> int:
    from conformance.campaign.plan import Plan

    systems = parse_systems(args.systems)
    families = parse_families(args.families)
    seeds = parse_seeds(args.seeds)
    if seeds is None and args.minutes is None:
        raise UserError("give --seeds A:B, --minutes N or both (an open-ended campaign needs "
                        "a time budget)")
    for flag, value in (("--minutes", args.minutes), ("--workers", args.workers),
                        ("--shrink-runs", args.shrink_runs)):
        if value is not None and value <= 0:
            raise UserError(f"{flag} must be positive, got {value}")
    if importlib.util.find_spec("ray") is None:
        raise UserError("vtwin campaign runs on Ray, which is not installed: "
                        "pip install -e '.[campaign]' (ray==2.60.0)")
    plan = Plan(systems, families, args.out, seeds, args.minutes, args.address, args.workers,
                Budget(runs=args.shrink_runs))
    if args.address is None:  # a cluster's workers build their own machines' environments
        build_environments(systems, sys.stderr)
    return run_and_print(plan)


def run_and_print(plan: Plan) -> int:
    """Run a campaign and print its summary lines; the exit code (0: no failure in this run,
    1: failures, 130: interrupted)."""
    from conformance.campaign.driver import run_campaign

    summary = run_campaign(plan)
    page = summary.run_dir / "report.html"
    line = (f"vtwin campaign: {summary.tasks} workloads ({summary.failures} failing) in "
            f"{summary.seconds:.0f}s on {summary.workers} workers, start-up "
            f"{summary.startup_seconds:.0f}s: {summary.throughput:.1f} workloads/min/core")
    print(line, file=sys.stderr)
    for path in summary.regressions:
        print(f"vtwin campaign: shrunk regression {path}", file=sys.stderr)
    print(f"vtwin campaign: report {page} (store {plan.out / 'campaign.sqlite'})",
          file=sys.stderr)
    if summary.status == "interrupted":
        print("vtwin campaign: interrupted; every result that arrived is kept, and the same "
              "command resumes", file=sys.stderr)
        return INTERRUPTED
    if summary.failures:
        return 1
    for reason, count in summary.unbuilt:  # the verdict of a setup that cannot run
        print(f"vtwin campaign: error: {reason} ({count} workloads not run)", file=sys.stderr)
    if summary.unbuilt:
        return 2
    shortfall = summary.too_little(plan.minutes)
    if shortfall is not None:
        print(f"vtwin campaign: failed: {shortfall}", file=sys.stderr)
        return TOO_LITTLE
    return 0


def build_environments(systems: tuple[str, ...], out: TextIO) -> None:
    """Build the managed environment of every release among `systems` before the campaign's
    clock starts, one progress line each (a first campaign on a new machine would otherwise
    spend its budget installing vLLM inside a worker)."""
    from conformance.systems.remote.envs import create, env_dir, env_info
    from conformance.systems.specs import parse_spec

    for text in systems:
        spec = parse_spec(text)
        if not spec.needs_env or env_info(env_dir(spec)) is not None:
            continue
        print(f"vtwin campaign: building the environment of {spec.base} before the clock "
              "starts (a few minutes, once per machine) ...", file=out, flush=True)
        create(spec.base, out)


def _report(args: argparse.Namespace) -> int:
    from conformance.campaign.report import write_report
    from conformance.campaign.store import STORE_NAME, Store

    if not (args.dir / STORE_NAME).is_file():
        raise UserError(f"{args.dir}: no campaign store ({STORE_NAME}) there")
    store = Store.of(args.dir)
    try:
        output = args.output or args.dir / "report.html"
        href = os.path.relpath(args.dir / "regressions", output.parent)
        page = write_report(store, output, regressions_href=href)
    finally:
        store.close()
    print(f"vtwin campaign report: {page}", file=sys.stderr)
    return 0


def _merge(args: argparse.Namespace) -> int:
    from conformance.campaign.report import write_report
    from conformance.campaign.store import Store, merge

    if args.output.resolve() in {s.resolve() for s in args.sources}:
        raise UserError(f"-o {args.output}: must not be one of the sources")
    counts = merge(args.sources, args.output)
    store = Store.of(args.output)
    try:
        regressions = args.output / "regressions"
        for row in store.rows("SELECT name, content FROM regressions WHERE content IS NOT NULL"):
            regressions.mkdir(parents=True, exist_ok=True)
            (regressions / row["name"]).write_text(row["content"], encoding="utf-8")
        page = write_report(store, args.output / "report.html")
    finally:
        store.close()
    print(f"vtwin campaign merge: {counts['results']} results, {counts['regressions']} "
          f"regressions, {counts['runs']} runs into {args.output}; {counts['conflicts']} keys "
          f"judged differently by two sources (first kept); report {page}", file=sys.stderr)
    return 0
