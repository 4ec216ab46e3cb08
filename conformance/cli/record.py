"""``vtwin record`` and ``vtwin compare``: any vLLM as a system, one at a time.

``vtwin record --system SPEC --workload W -o W.trace.jsonl`` runs one system alone to the end and
writes its trace (the lockstep trace format, plus a settings
line after the header with the system's NONE_HASH and the workload's config, and an end line
saying how the run ended). ``vtwin compare A B --level L`` compares two recorded runs offline
with the lockstep comparer, at every level at once, and prints the verdict line `vtwin conform`
prints (``--json OUT`` writes the same per-workload JSON as its report). Recording lets two
systems that cannot run side by side (two releases on two machines, a run from last month) be
compared; the trace files are the only thing they share.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from conformance.sched.compare import LEVELS, check_level
from conformance.sched.conform import WorkloadOutcome, _line, judge
from conformance.sched.recorded import compare_recorded, read_recorded, record_run
from conformance.sched.startup import log_counts, upstream_log_path, upstream_logs
from vtwin.errors import UserError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    record = subparsers.add_parser(
        "record", help="run one system alone on a workload and write its trace",
        description="Run one system on one workload to the end; write a trace that "
                    "`vtwin compare` can compare with another system's.")
    record.add_argument("--system", default="impl", metavar="SPEC",
                        help="a spec: impl, upstream, vllm==X.Y.Z, vllm@PATH, "
                             "module:factory, SPEC+sched=module:Class, SPEC+worker "
                             "(default impl)")
    record.add_argument("--workload", required=True, metavar="NAME|FILE")
    record.add_argument("-o", "--output", type=Path, required=True, metavar="OUT",
                        help="the trace file (- for standard output)")
    record.add_argument("--integrity-every", type=int, default=None, metavar="N")
    record.add_argument("--max-steps", type=int, default=None, metavar="N")
    record.set_defaults(handler=_record)

    compare = subparsers.add_parser(
        "compare", help="compare two recorded traces, as `vtwin conform` would",
        description="Compare two traces from `vtwin record` step by step; exit 0 only if "
                    "they agree at --level.")
    compare.add_argument("left", type=Path, metavar="A.trace.jsonl")
    compare.add_argument("right", type=Path, metavar="B.trace.jsonl")
    compare.add_argument("--level", default="exact", metavar="LEVEL",
                         help=f"one of {', '.join(LEVELS)} (default exact)")
    compare.add_argument("--json", type=Path, metavar="OUT",
                         help="write the verdict JSON here ('-' for stdout)")
    compare.set_defaults(handler=_compare)


# -- record -----------------------------------------------------------------------------------


def _record(args: argparse.Namespace) -> int:
    from conformance.sched.suite import resolve_workload

    for flag, value in (("--integrity-every", args.integrity_every),
                        ("--max-steps", args.max_steps)):
        if value is not None and value < 1:
            raise UserError(f"{flag} must be a positive integer, got {value}")
    workload, every = resolve_workload(args.workload)
    started = time.monotonic()
    log_path = upstream_log_path("record")
    with upstream_logs(log_path) as counts:  # upstream's warnings to a file, as conform does
        system_name, steps, end = record_run(args.system, workload, args.output,
                                             integrity_every=args.integrity_every or every,
                                             max_steps=args.max_steps)
    if counts:
        print(f"vtwin record: upstream logs: {log_counts(dict(counts))} -> {log_path}",
              file=sys.stderr)
    print(f"vtwin record: {workload.name}: {steps} steps on {system_name}, {end['end']} "
          f"({time.monotonic() - started:.1f}s) -> {args.output}", file=sys.stderr)
    return 0 if end["end"] != "error" else 1


# -- compare ----------------------------------------------------------------------------------


def _compare(args: argparse.Namespace) -> int:
    from conformance.sched.report.writer import outcome_json

    level = check_level(args.level)
    left, right = read_recorded(args.left), read_recorded(args.right)
    if left.workload != right.workload:
        raise UserError(f"the traces record different workloads: {left.workload!r} "
                        f"({args.left}) and {right.workload!r} ({args.right})")
    result = compare_recorded(left, right)
    verdict, _ = judge(result, level, ())
    outcome = WorkloadOutcome(left.workload, "", 0, level, verdict, result, None)
    line = f"vtwin compare: {_line(outcome)} ({left.system} vs {right.system})"
    print(line, file=sys.stderr)
    if args.json is not None:
        data = {"left": {"system": left.system, "trace": str(args.left), "end": left.end},
                "right": {"system": right.system, "trace": str(args.right), "end": right.end},
                **outcome_json(outcome)}
        text = json.dumps(data, indent=1, default=str)
        if str(args.json) == "-":
            print(text)
        else:
            args.json.write_text(text + "\n", encoding="utf-8")
    return 0 if verdict == "passed" else 1
