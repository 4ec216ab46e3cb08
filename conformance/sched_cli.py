"""``vtwin conform`` and ``vtwin gate``: the scheduler-level lockstep harness from the shell.

``vtwin conform --workload NAME|FILE [--against upstream] [--level L] [--json OUT]
[--report DIR]`` runs the twin (or ``--system``) and another system side by side on each
workload and exits 0 only when every workload reaches the level (or its first divergence is a
known one). ``vtwin gate`` runs the default suite the same way; CI runs it on pull requests.
Both write ``conform.json`` and ``conform.html`` under the report directory. ``vtwin gate`` also
runs every ``*.jsonl`` in ``conformance/regressions/``; ``--emit-regression DIR`` writes each
failed or errored workload there as a standalone regression file (`suite.write_regression`).
Also runnable as ``python -m conformance.sched_cli`` before the subcommands are registered in
`conformance.cli`.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from conformance.errors import UserError
from conformance.sched.compare import LEVELS, check_level
from conformance.sched.conform import ConformRun, WorkloadOutcome, run_conform
from conformance.sched.divergences import DEFAULT_PATH, load_known
from conformance.sched.report import DEFAULT_REPORT_DIR, write_report
from conformance.sched.suite import (
    REGRESSIONS_DIR,
    gate_workloads,
    suite_names,
    write_regression,
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    conform = subparsers.add_parser(
        "conform", help="run two systems in lockstep on workloads, report the first divergence",
        description="Run the twin and upstream vLLM (or any two systems) side by side on each "
                    "workload; exit 0 only if every workload reaches --level.")
    conform.add_argument("--workload", action="append", metavar="NAME|FILE", dest="workloads",
                         help="a suite entry, bundled workload or workload file (repeatable; "
                              "default: the default suite)")
    conform.add_argument("--system", default="impl", metavar="NAME",
                         help="the system under test: impl, upstream or module:factory "
                              "(default impl)")
    conform.add_argument("--against", default="upstream", metavar="NAME",
                         help="the reference system (default upstream, i.e. vLLM 0.32.0)")
    _common(conform)
    conform.set_defaults(handler=_conform)

    gate = subparsers.add_parser(
        "gate", help="the default conformance suite, impl against upstream (the PR gate)",
        description="Run the default suite and every regression file (impl against upstream "
                    "vLLM 0.32.0) at --level; exit 0 only if every workload reaches it.")
    gate.add_argument("--regressions", type=Path, default=REGRESSIONS_DIR, metavar="DIR",
                      help="also run every *.jsonl here (default conformance/regressions)")
    _common(gate)
    gate.set_defaults(handler=_gate)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--level", default="exact", metavar="LEVEL",
                        help=f"one of {', '.join(LEVELS)} (default exact)")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the JSON here")
    parser.add_argument("--report", type=Path, default=DEFAULT_REPORT_DIR, metavar="DIR",
                        help=f"report directory (default {DEFAULT_REPORT_DIR})")
    parser.add_argument("--known", type=Path, default=DEFAULT_PATH, metavar="FILE",
                        help="known-divergences file (default conformance/divergences.toml)")
    parser.add_argument("--traces", action="store_true",
                        help="write per-step trace JSONL for both systems under DIR/traces")
    parser.add_argument("--integrity-every", type=int, default=None, metavar="N",
                        help="check the twin's integrity every N steps (default: per workload)")
    parser.add_argument("--max-steps", type=int, default=None, metavar="N",
                        help="give up on a workload after N steps (default: generous)")
    parser.add_argument("--progress-every", type=int, default=500, metavar="N",
                        help="print a progress line every N steps (default 500)")
    parser.add_argument("--emit-regression", type=Path, default=None, metavar="DIR",
                        help="write every failed or errored workload to DIR as a regression "
                             "file (move it to conformance/regressions/ to gate it forever)")


def _conform(args: argparse.Namespace) -> int:
    return _run(args, args.workloads or list(suite_names()), args.system, args.against)


def _gate(args: argparse.Namespace) -> int:
    return _run(args, list(gate_workloads(args.regressions)), "impl", "upstream")


def _run(args: argparse.Namespace, workloads: Sequence[str], system: str, against: str) -> int:
    level = check_level(args.level)
    for flag, value in (("--integrity-every", args.integrity_every),
                        ("--max-steps", args.max_steps), ("--progress-every",
                                                          args.progress_every)):
        if value is not None and value < (0 if flag == "--integrity-every" else 1):
            raise UserError(f"{flag} must be a positive integer, got {value}")
    known = load_known(args.known)
    run = run_conform(
        workloads, system=system, against=against, level=level, known=known,
        trace_dir=args.report / "traces" if args.traces else None,
        integrity_every=args.integrity_every, max_steps=args.max_steps,
        progress_every=args.progress_every,
    )
    page = write_report(run, args.report, args.json)
    if args.emit_regression is not None:
        for outcome in run.outcomes:
            path = emit_regression(outcome, args.emit_regression)
            if path is not None:
                print(f"vtwin conform: wrote regression {path}", file=sys.stderr)
    print(_summary(run, page), file=sys.stderr)
    return 0 if run.ok else 1


def emit_regression(outcome: WorkloadOutcome, directory: Path) -> Path | None:
    """A failed or errored workload as a regression file in `directory` (None otherwise)."""
    if outcome.verdict not in ("failed", "error") or outcome.source is None:
        return None
    divergence = outcome.divergence
    if divergence is not None and outcome.verdict == "failed":
        return write_regression(outcome.source, divergence, directory)
    result = outcome.result
    error = result.error or "error"
    if result.stall is not None:
        stalled = result.stall.left or result.stall.right
        tag = f"stalled {result.stall.side} {stalled.reason if stalled else ''}"
    else:
        raised = re.search(r" raised (\w+)", error)
        tag = f"error {raised.group(1) if raised else ''}"
    return write_regression(outcome.source, f"{tag.strip()}: {error}", directory)


def _summary(run: ConformRun, page: Path) -> str:
    good = sum(o.verdict in ("passed", "known") for o in run.outcomes)
    stale = f", {len(run.stale)} stale known divergences" if run.stale else ""
    return (f"vtwin conform: {good}/{len(run.outcomes)} workloads reach {run.level} "
            f"({run.left} vs {run.right}){stale}; report: {page}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.sched_cli")
    register(parser.add_subparsers(dest="command", metavar="COMMAND"))
    args = parser.parse_args(argv)
    if getattr(args, "handler", None) is None:
        parser.print_help()
        return 2
    try:
        code: int = args.handler(args)
    except UserError as err:
        print(f"vtwin: error: {err}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
