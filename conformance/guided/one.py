"""One strategy's search in this process, written to a directory (`run.py` starts one per
strategy, each in its own process: a traced run must not share a process with another
strategy's, whose first runs would have imported and built everything already).

``python -m conformance.guided.one --strategy S --families F,.. --out DIR [...]`` writes:

- ``DIR/search.json``: the settings, the counts, the rare states reached, the timeline (one
  point per run), the corpus
  (file, origin, what it added) and each failure signature found (when, by what);
- ``DIR/corpus/NNNN.jsonl``: each corpus workload, a file `vtwin conform` and `--corpus` read;
- ``DIR/failures/SIGNATURE.jsonl``: the first workload of each failure signature, shrunk
  (`campaign.shrink`, same signature kept) when ``--shrink-runs`` > 0, with the original as
  ``SIGNATURE.original.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict
from pathlib import Path

from conformance.campaign.shrink import Budget, shrink
from conformance.campaign.task import pair_signature
from conformance.guided.features import TWIN, UPSTREAM
from conformance.guided.runner import PairRunner
from conformance.guided.search import STRATEGIES, Found, Search, Settings
from conformance.guided.state import STATE
from vtwin.errors import UserError
from workloads import dumps, load_file
from workloads.model import Workload


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m conformance.guided.one")
    parser.add_argument("--strategy", choices=STRATEGIES, required=True)
    parser.add_argument("--families", required=True)
    parser.add_argument("--left", default="impl")
    parser.add_argument("--right", default="upstream")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seconds", type=float)
    parser.add_argument("--runs", type=int)
    parser.add_argument("--seed-runs", type=int, default=16)
    parser.add_argument("--corpus", type=Path, action="append", default=[])
    parser.add_argument("--stop-on-failure", action="store_true")
    parser.add_argument("--shrink-runs", type=int, default=60)
    parser.add_argument("--out", type=Path, required=True)
    return parser.parse_args(argv)


def corpus_files(directories: list[Path]) -> list[tuple[Workload, str]]:
    """The workload files of earlier corpora, in name order (a directory holding a run's
    `corpus/` may be given for it)."""
    found = []
    for directory in directories:
        inner = directory / "corpus"
        where = inner if inner.is_dir() else directory
        if not where.is_dir():
            raise UserError(f"--corpus {directory}: not a directory")
        found += [(load_file(path), f"corpus {path.name}")
                  for path in sorted(where.glob("*.jsonl"))]
    return found


def main(argv: list[str]) -> int:
    args = parse(argv)
    settings = Settings(args.strategy, tuple(args.families.split(",")), args.seed,
                        args.seconds, args.runs, args.seed_runs,
                        stop_on_failure=args.stop_on_failure)
    runner = PairRunner.of(args.left, args.right)
    search = Search(settings, runner, seen=set(runner.warm_up()),
                    replay=corpus_files(args.corpus))
    warm = (search.arcs(TWIN), search.arcs(UPSTREAM))
    try:
        search.run()
    except KeyboardInterrupt:  # interrupted: what was found so far is still written
        write(search, runner, args.out, 0, warm)
        return 130
    write(search, runner, args.out, args.shrink_runs, warm)
    return 0


def write(search: Search, runner: PairRunner, out: Path, shrink_runs: int,
          warm: tuple[int, int]) -> None:
    """`warm`: the twin and upstream arcs of the warm-up run (`PairRunner.warm_up`)."""
    (out / "corpus").mkdir(parents=True, exist_ok=True)
    (out / "failures").mkdir(exist_ok=True)
    corpus = []
    for index, entry in enumerate(search.corpus):
        name = f"{index:04d}.jsonl"
        (out / "corpus" / name).write_text(dumps(entry.workload), encoding="utf-8")
        corpus.append({"file": f"corpus/{name}", "origin": entry.origin, "added": entry.added,
                       "picked": entry.picked})
    found = [_write_failure(f, runner, out, shrink_runs) for f in search.found.values()]
    settings = search.settings
    data = {
        "strategy": settings.strategy, "left": runner.left, "right": runner.right,
        "settings": asdict(settings), "runs": search.runs, "replayed": search.replayed,
        "fresh": search.fresh, "mutants": search.mutants, "invalid": search.invalid,
        "errors": search.errors, "twin_arcs": search.arcs(TWIN),
        "upstream_arcs": search.arcs(UPSTREAM), "warm_up_arcs": list(warm),
        "yields": search.yields, "corpus": corpus, "found": found,
        # The rare states reached (a hole per manager, hybrid searches asked again: `state`).
        "states": sorted({f"{name}={count}" if count else name
                          for kind, name, count, _ in search.seen if kind == STATE}),
        "timeline": [[p.seconds, p.runs, p.twin_arcs, p.upstream_arcs, p.corpus, p.failures]
                     for p in search.timeline],
    }
    (out / "search.json").write_text(json.dumps(data, indent=1), encoding="utf-8")


def _write_failure(found: Found, runner: PairRunner, out: Path,
                   shrink_runs: int) -> dict[str, object]:
    comparison = found.comparison
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", comparison.signature).strip("-") or "failure"
    workload = found.workload
    runs = 0
    if shrink_runs > 0:
        names = (runner.left, runner.right)

        def fails(candidate: Workload) -> bool:
            again = pair_signature(candidate, runner.left_factory, runner.right_factory, names)
            return again.failed and again.signature == comparison.signature

        (out / "failures" / f"{stem}.original.jsonl").write_text(dumps(workload),
                                                                  encoding="utf-8")
        workload, runs = shrink(workload, fails, Budget(runs=shrink_runs, seconds=240.0))
    (out / "failures" / f"{stem}.jsonl").write_text(dumps(workload), encoding="utf-8")
    return {"signature": comparison.signature, "outcome": comparison.outcome,
            "detail": comparison.detail, "step": comparison.step, "seconds": found.seconds,
            "run": found.run, "origin": found.origin, "file": f"failures/{stem}.jsonl",
            "shrink_runs": runs, "requests": len(workload.requests)}


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
