"""`vtwin study continuum`: FCFS vs Continuum on one workload, a page with plots and a JSON.

```
vtwin study continuum --workload agentic [--num-blocks N] [--estimator fixed|learned]
                      [--ttl-ms MS] [--verify] [--report DIR] [--run-id ID]
```

Writes `study.html`, `study.json` and the seed 002 traces of both runs (`trace-POLICY.jsonl`)
into a run directory of its own under `reports/study/` (or exactly `--report DIR`), and prints
the verdict. `--verify` also runs the twin against the rebuilt fork (`continuum-fork`, needs
upstream vLLM) on the same workload and says whether it is exact.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from conformance.rundirs import check_writable_dir, new_run_dir, point_latest, write_text
from vtwin.errors import UserError

DEFAULT_ROOT = Path("reports") / "study"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("study", help="policy studies on the twin (continuum)")
    studies = parser.add_subparsers(dest="study", metavar="STUDY")
    cont = studies.add_parser("continuum", help="FCFS vs Continuum (seed 002) on one workload")
    cont.add_argument("--workload", required=True, help="bundled name (e.g. agentic) or file")
    cont.add_argument("--num-blocks", type=int, help="override the pool size (counts block 0)")
    cont.add_argument("--estimator", choices=("fixed", "learned"))
    cont.add_argument("--ttl-ms", type=float)
    cont.add_argument("--verify", action="store_true",
                      help="also check the twin against continuum-fork (needs vLLM)")
    cont.add_argument("--report", type=Path, help="write exactly here")
    cont.add_argument("--run-id", help="the run directory's name under reports/study/")
    cont.set_defaults(handler=run)
    parser.set_defaults(handler=lambda _args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def run(args: argparse.Namespace) -> int:
    from conformance.study.continuum import run_study
    from conformance.study.html import render
    from workloads import load

    workload = load(args.workload)
    if args.num_blocks is not None:
        if args.num_blocks < 2:
            raise UserError(f"--num-blocks: must be >= 2 (got {args.num_blocks})")
        workload = dataclasses.replace(workload, config=dataclasses.replace(
            workload.config, num_blocks=args.num_blocks))
    if args.report is not None:
        check_writable_dir(args.report, "--report")
        out = args.report
    else:
        DEFAULT_ROOT.mkdir(parents=True, exist_ok=True)
        out = new_run_dir(DEFAULT_ROOT, "continuum", args.run_id)
    study = run_study(workload, verify=args.verify, estimator=args.estimator,
                      ttl_ms=args.ttl_ms)
    write_text(out / "study.json", json.dumps(study.to_json(), indent=1, sort_keys=True) + "\n")
    write_text(out / "study.html", render(study))
    for name, lines in study.traces.items():
        write_text(out / f"trace-{name}.jsonl", "".join(json.dumps(line) + "\n"
                                                         for line in lines))
    if args.report is None:
        point_latest(DEFAULT_ROOT, out)
    for line in study.verdict():
        print(line)
    print(f"report: {out / 'study.html'}")
    return 0
