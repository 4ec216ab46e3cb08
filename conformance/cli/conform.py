"""``vtwin conform`` and ``vtwin gate``: the scheduler-level lockstep harness from the shell.

``vtwin conform --workload NAME|FILE [--against upstream] [--level L] [--json OUT]
[--report DIR]`` runs the twin (or ``--system``) and another system side by side on each
workload and exits 0 only when every workload reaches the level (or its first divergence is a
known one), 1 on a difference or an error, 2 when a system could not be built for a workload
("SYSTEM could not be built: REASON", a configuration to change, never a difference).
``vtwin gate`` runs the default suite the same way; CI runs it on pull requests.
Both write ``conform.json`` and ``conform.html`` into a directory of their own,
``reports/conformance/<run id>/`` (or exactly ``--report DIR``), with upstream's logs in
``upstream.log`` beside them; see `conformance.sched.report.writer`. Every argument that can be
checked without running (levels, counts, files, the known-divergences file, systems, the report
directory) is checked before the first workload starts. ``vtwin gate`` also
runs every ``*.jsonl`` in ``conformance/regressions/``; ``--emit-regression DIR`` writes each
failed or errored workload there as a standalone regression file (`suite.write_regression`).
Also runnable as ``python -m conformance.cli.conform`` before the subcommands are registered in
`conformance.cli`.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from conformance.paths import REGRESSIONS_DIR
from conformance.rundirs import check_output_file
from conformance.sched.compare import LEVELS, check_level
from conformance.sched.conform import ConformRun, WorkloadOutcome, run_conform
from conformance.sched.divergences import DEFAULT_PATH, load_known
from conformance.sched.offload_suite import OFFLOAD_MODES
from conformance.sched.report.writer import (
    DEFAULT_REPORT_DIR,
    check_report_dir,
    check_run_id,
    new_run_dir,
    point_latest,
    update_runs_index,
    write_report,
)
from conformance.sched.startup import log_counts
from conformance.sched.suite import (
    gate_workloads,
    suite_names,
    write_regression,
)
from vtwin.errors import UserError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    conform = subparsers.add_parser(
        "conform", help="run two systems in lockstep on workloads, report the first divergence",
        description="Run the twin and upstream vLLM (or any two systems) side by side on each "
                    "workload; exit 0 only if every workload reaches --level.")
    conform.add_argument("--workload", action="append", metavar="NAME|FILE", dest="workloads",
                         help="a suite entry, bundled workload or workload file (repeatable; "
                              "default: the default suite)")
    forms = ("a spec: impl, upstream (the vLLM installed here), vllm==X.Y.Z, vllm@PATH "
             "(a worker under `vtwin env create`'s environment), module:factory, "
             "SPEC+sched=module:Class (a plugged-in scheduler class), SPEC+worker")
    conform.add_argument("--system", default="impl", metavar="SPEC",
                         help=f"the system under test, {forms} (default impl)")
    conform.add_argument("--against", default="upstream", metavar="SPEC",
                         help="the reference system, a spec as for --system (default upstream, "
                              "i.e. the installed vLLM 0.32.0)")
    conform.add_argument("--offload", choices=OFFLOAD_MODES, default=None,
                         help="turn a CPU offload tier on for every workload, with the GPU "
                              "pool cut to an eighth so prefixes come back from the CPU: "
                              "SimpleCPUOffloadConnector (eager | lazy, the latter on its "
                              "disk backend) or the "
                              "OffloadingConnector (offloading: LRU, 2-block chunks; "
                              "offloading-arc: ARC, self-describing KV events, a sync-load "
                              "budget); pd: the NIXL "
                              "prefill/decode connector, "
                              "requests taking turns as decodes pulling their prompt and "
                              "prefills held for a peer's read "
                              "(`conformance.sched.offload_suite`)")
    _common(conform)
    conform.set_defaults(handler=_conform)

    gate = subparsers.add_parser(
        "gate", help="the default conformance suite, impl against upstream (the PR gate)",
        description="Run the default suite and every regression file (impl against upstream "
                    "vLLM 0.32.0) at --level; exit 0 only if every workload reaches it.")
    gate.add_argument("--against", default="upstream", metavar="SPEC",
                      help="the reference (default upstream; e.g. vllm==0.33.0: the twin then "
                           "follows that release)")
    gate.add_argument("--regressions", type=Path, default=REGRESSIONS_DIR, metavar="DIR",
                      help="also run every *.jsonl here (default conformance/regressions)")
    _common(gate)
    gate.set_defaults(handler=_gate)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--level", default="exact", metavar="LEVEL",
                        help=f"one of {', '.join(LEVELS)} (default exact)")
    parser.add_argument("--json", type=Path, metavar="OUT",
                        help="also write the JSON here ('-' for stdout)")
    parser.add_argument("--report", type=Path, default=None, metavar="DIR",
                        help="write the report exactly here (default: a new run directory "
                             f"{DEFAULT_REPORT_DIR}/RUN_ID, with a 'latest' link and index.html)")
    parser.add_argument("--run-id", default=None, metavar="ID",
                        help="name of the run directory (default: UTC time and command); an "
                             "existing run is never overwritten")
    parser.add_argument("--known", type=Path, default=DEFAULT_PATH, metavar="FILE",
                        help="known-divergences file (default conformance/divergences.toml)")
    parser.add_argument("--traces", action="store_true",
                        help="write per-step trace JSONL for both systems under DIR/traces")
    parser.add_argument("--integrity-every", type=int, default=None, metavar="N",
                        help="check the twin's integrity every N steps, 0 never "
                             "(default: per workload)")
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
    if args.regressions.exists() and not args.regressions.is_dir():
        raise UserError(f"--regressions {args.regressions}: not a directory")
    return _run(args, list(gate_workloads(args.regressions)), "impl", args.against)


def check_arguments(args: argparse.Namespace, workloads: Sequence[str]) -> str:
    """Everything that can fail without running, checked before any work; returns the level."""
    level = check_level(args.level)
    for flag, value, least in (("--integrity-every", args.integrity_every, 0),
                               ("--max-steps", args.max_steps, 1),
                               ("--progress-every", args.progress_every, 1)):
        if value is not None and value < least:
            what = "a non-negative integer (0: never)" if least == 0 else "a positive integer"
            raise UserError(f"{flag} must be {what}, got {value}")
    for name in workloads:
        path = Path(name)
        if path.is_dir():
            files = sorted(path.glob("*.jsonl"))
            hint = (f"pass its files: --workload {files[0]} ..." if files
                    else "it holds no *.jsonl workload files")
            raise UserError(f"--workload {name}: is a directory, not a workload file; {hint}")
    check_output_file(args.json, "--json")
    if args.run_id is not None:
        if args.report is not None:
            raise UserError("--run-id names a run directory under the default root; it does "
                            "not combine with --report DIR")
        check_run_id(args.run_id)
    return level


def _run(args: argparse.Namespace, workloads: Sequence[str], system: str, against: str) -> int:
    level = check_arguments(args, workloads)
    known = load_known(args.known)
    command = args.command or "conform"
    if args.report is not None:
        note = check_report_dir(args.report)
        if note is not None:
            print(f"vtwin {command}: {note}", file=sys.stderr)
        report_dir, root = args.report, None
    else:
        root = DEFAULT_REPORT_DIR
        report_dir = new_run_dir(root, command, args.run_id)
    log_path = report_dir / "upstream.log"
    try:
        run = run_conform(
            workloads, system=system, against=against, level=level, known=known,
            trace_dir=report_dir / "traces" if args.traces else None,
            integrity_every=args.integrity_every, max_steps=args.max_steps,
            progress_every=args.progress_every, log_path=log_path,
            offload=getattr(args, "offload", None),
        )
    except UserError:
        if root is not None:  # a run refused before it ran leaves no empty run directory
            remove_if_empty(report_dir)
        raise
    page = write_report(run, report_dir, args.json,
                        meta={"command": command, "run_id": report_dir.name})
    if root is not None:
        point_latest(root, report_dir)
        update_runs_index(root)
    if args.emit_regression is not None:
        for outcome in run.outcomes:
            path = emit_regression(outcome, args.emit_regression)
            if path is not None:
                print(f"vtwin conform: wrote regression {path}", file=sys.stderr)
    if run.log_counts:
        print(_log_line(run, log_path), file=sys.stderr)
    print(_summary(run, page), file=sys.stderr)
    for line in run.unbuilt:  # the verdict of a setup that cannot run, never a difference
        print(f"vtwin {command}: error: {line}", file=sys.stderr)
    return run.exit_code


def _log_line(run: ConformRun, log_path: Path) -> str:
    """One line for everything upstream said: counts by level and where the full text is;
    the errors that are upstream's own line for a load failure a workload planned are said
    to be expected (they are the failure working, not a fault of the run)."""
    counts = run.log_counts
    if not counts:
        return ""
    planned = sum(len(o.source.config.kv_connector.load_failures) for o in run.outcomes
                  if o.source is not None and o.source.config.kv_connector is not None)
    note = (f" (expected: upstream logs each of the {planned} planned load failures as an "
            "error)" if planned and counts.get("error") else "")
    return f"vtwin conform: upstream logs: {log_counts(counts)}{note} -> {log_path}"


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


def remove_if_empty(directory: Path) -> None:
    """Remove `directory` if nothing but empty folders is in it (a refused run's)."""
    if directory.is_dir() and not any(p.is_file() for p in directory.rglob("*")):
        shutil.rmtree(directory)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.cli.conform")
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

