"""``vtwin workloads``: list, show, validate, generate and convert traces to workload files.

Handlers return the exit code; bad input raises `UserError`, which the top-level CLI prints as
one line (``vtwin: error: FILE:LINE: field 'x': ...``) and turns into exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vtwin.errors import UserError
from workloads.generators import FAMILIES, generate
from workloads.loader import load_file
from workloads.registry import BUNDLED, load
from workloads.stats import format_summary, summarize
from workloads.traces import TRACE_FORMATS, ReplayOptions, from_trace
from workloads.traces.replay import DEFAULT_BLOCK_SIZE, DEFAULT_STEP_MS
from workloads.writer import dump


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "workloads",
        help="list, show, generate and convert workloads",
        description="Workload files: bundled workloads, generator families and trace replays.",
    )
    commands = parser.add_subparsers(dest="workloads_command", metavar="ACTION")
    parser.set_defaults(handler=lambda _args: _help(parser))

    lister = commands.add_parser("list", help="list bundled workloads and generator families")
    lister.set_defaults(handler=_list)

    show = commands.add_parser(
        "show", help="summarize a bundled workload, a gate suite entry or a workload file")
    show.add_argument("workload", metavar="NAME|FILE")
    show.add_argument("--json", action="store_true", help="print the summary as JSON")
    show.set_defaults(handler=_show)

    check = commands.add_parser(
        "validate", help="check workload files, one line each; exit 2 if any is bad")
    check.add_argument("files", metavar="FILE", nargs="+")
    check.set_defaults(handler=_validate)

    gen = commands.add_parser("generate", help="write a workload from a generator family")
    gen.add_argument("family", metavar="FAMILY", help=f"one of: {', '.join(FAMILIES)}")
    gen.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    gen.add_argument("--scale", type=float, default=1.0, help="multiplies the request count")
    gen.add_argument("-o", "--output", required=True, metavar="FILE", help="'-' for stdout")
    gen.set_defaults(handler=_generate)

    trace = commands.add_parser(
        "from-trace",
        help="write a workload that replays a Mooncake or Azure trace",
        description="arrival_step = floor((t - t_first) / (step_ms * scale)); see "
        "workloads/traces/replay.py for the time model.",
    )
    trace.add_argument("path", metavar="PATH")
    trace.add_argument("--format", required=True, choices=sorted(TRACE_FORMATS))
    trace.add_argument("--limit", type=int, help="keep the first N selected rows")
    trace.add_argument("--every", type=int, default=1, help="keep every K-th row (default 1)")
    trace.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="arrival-rate multiplier: 2 replays twice as fast (default 1)",
    )
    trace.add_argument(
        "--step-ms",
        type=float,
        default=DEFAULT_STEP_MS,
        help=f"milliseconds per engine step (default {DEFAULT_STEP_MS:g})",
    )
    trace.add_argument(
        "--block-size",
        type=int,
        default=DEFAULT_BLOCK_SIZE,
        help=f"KV block size (default {DEFAULT_BLOCK_SIZE})",
    )
    trace.add_argument(
        "--num-blocks",
        type=int,
        help="KV blocks incl. the null block (default: derived from lengths)",
    )
    trace.add_argument("--name", help="workload name (default: the trace file's stem)")
    trace.add_argument("-o", "--output", required=True, metavar="FILE", help="'-' for stdout")
    trace.set_defaults(handler=_from_trace)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _list(_args: argparse.Namespace) -> int:
    width = max(len(name) for name in BUNDLED)
    print("bundled workloads (vtwin workloads show NAME):")
    for name, bundled in BUNDLED.items():
        print(f"  {name:<{width}}  {bundled.summary}")
    print("generator families (vtwin workloads generate FAMILY --seed S --scale X -o FILE):")
    print(f"  {', '.join(FAMILIES)}")
    print("trace formats (vtwin workloads from-trace --format F PATH -o FILE):")
    print(f"  {', '.join(TRACE_FORMATS)}")
    return 0


def _resolve(name: str) -> Any:
    """A bundled workload or file, else an entry of `vtwin gate`'s suite (imported lazily:
    `workloads` does not depend on the conformance harness, only this command looks there)."""
    _not_a_directory(name)
    try:
        return load(name)
    except UserError:
        try:
            from conformance.sched.suite import SUITE
        except ImportError:
            raise
        entry = SUITE.get(name)
        if entry is None:
            raise
        return entry.make()


def _not_a_directory(name: str) -> None:
    path = Path(name)
    if path.is_dir():
        files = sorted(path.glob("*.jsonl"))
        hint = f"e.g. {files[0]}" if files else "it holds no *.jsonl files"
        raise UserError(f"{name}: is a directory, not a workload file ({hint})")


def _show(args: argparse.Namespace) -> int:
    summary = summarize(_resolve(args.workload))
    if args.json:
        print(json.dumps(summary.to_dict(), sort_keys=True, indent=2))
    else:
        print(format_summary(summary))
    return 0


def _validate(args: argparse.Namespace) -> int:
    """Every file is checked, so one run lists every bad file, not only the first."""
    bad = 0
    for path in args.files:
        try:
            _not_a_directory(path)
            workload = load_file(path)
        except UserError as err:
            bad += 1
            print(f"bad: {err}", file=sys.stderr)
            continue
        print(f"ok: {path}: {workload.name}, {len(workload.requests)} requests")
    if bad:
        print(f"vtwin: error: {bad} of {len(args.files)} workload files are bad",
              file=sys.stderr)
    return 2 if bad else 0


def _wrote(path: str, details: dict[str, Any]) -> None:
    if path != "-":
        text = ", ".join(f"{v} {k}" for k, v in details.items())
        print(f"wrote {path} ({text})")


def _generate(args: argparse.Namespace) -> int:
    workload = generate(args.family, args.seed, args.scale)
    dump(workload, args.output)
    _wrote(args.output, {"requests": len(workload.requests), "aborts": len(workload.aborts)})
    return 0


def _from_trace(args: argparse.Namespace) -> int:
    options = ReplayOptions(
        limit=args.limit,
        every=args.every,
        scale=args.scale,
        step_ms=args.step_ms,
        block_size=args.block_size,
        num_blocks=args.num_blocks,
        name=args.name,
    )
    workload = from_trace(args.format, args.path, options)
    dump(workload, args.output)
    _wrote(args.output, {"requests": len(workload.requests)})
    return 0
