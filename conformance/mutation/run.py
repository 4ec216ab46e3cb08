"""`python -m conformance.mutation run|report|hunt`: a bounded mutmut run, then the report
(`hunt`: search for workloads that kill surviving mutants, see `conformance.mutation.hunt`).

Before `mutmut run`, the verdicts kept in the repository (`conformance/mutation/store.py`) are
restored into `mutants/` where this machine has none, and written back after it, so a fresh
clone starts where the last committed run ended. `run --max-minutes N` starts `mutmut run` and,
N minutes later, interrupts it (SIGINT: mutmut stops its workers and keeps every verdict it
has; the mutants it did not reach stay "not run" and are reported as such). mutmut caches
verdicts in `mutants/` with a hash per function, so the next run tests only mutants it has not
judged yet or whose function changed (`--rerun-survivors` also retests the survivors: after
new killer tests). The killer tests and options are `[tool.mutmut]` in pyproject.toml; the
oracle's environment is set here.
Exit status: 0 when the score reaches `--target` and no equivalent-mutant entry is stale.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from conformance.mutation import runs
from conformance.mutation.equivalents import DEFAULT_PATH, classify, load_equivalents
from conformance.mutation.hunt import main_hunt
from conformance.mutation.planted import STAGES, main_planted, stages_named
from conformance.mutation.report import judge, write_report
from conformance.mutation.results import (
    NO_TESTS,
    SURVIVED,
    SUSPICIOUS,
    read_mutants,
    status_of,
)
from conformance.mutation.store import STORE_PATH, restore, save
from conformance.mutation.sync import source_paths, sync_copies
from conformance.paths import REGRESSIONS_DIR
from vtwin.errors import UserError

ORACLE_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
              "OMP_NUM_THREADS": "1", "VLLM_LOGGING_LEVEL": "WARNING",
              "TOKENIZERS_PARALLELISM": "false", "HYPOTHESIS_PROFILE": "mutation"}
GRACE_S = 60.0


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_mutmut(max_minutes: float, max_children: int, mutants: Sequence[str] = ()) -> float:
    """Run mutmut for at most `max_minutes` (then interrupt it); returns the minutes taken."""
    # A full stats pass every run (it was about a minute; with this stop's killer selection,
    # stats plus mutmut's clean run take 10-15 minutes here): mutmut 3.8.1 maps tests to functions
    # once and later adds only new tests, so after a refactor moves code into a new function
    # that function's mutants would meet only the tests added since (measured: 15 of 55).
    Path("mutants", "mutmut-stats.json").unlink(missing_ok=True)
    mutmut = shutil.which("mutmut") or str(Path(sys.executable).with_name("mutmut"))
    if not Path(mutmut).exists():
        raise UserError("mutmut is not installed: pip install -e .[mutation]")
    env = {**os.environ, **ORACLE_ENV}
    command = [mutmut, "run", "--max-children", str(max_children), *mutants]
    started = time.monotonic()
    deadline = started + max_minutes * 60.0
    # SIGINT back to its default: a background launch (`cmd &`) ignores it, and then mutmut
    # would never see the KeyboardInterrupt that makes it stop cleanly.
    process = subprocess.Popen(command, env=env, start_new_session=True,
                               preexec_fn=_default_sigint)
    try:
        while process.poll() is None and time.monotonic() < deadline:
            time.sleep(1.0)
        if process.poll() is None:
            print(f"\nmutation: --max-minutes {max_minutes:g} reached, stopping mutmut; the "
                  "mutants it did not reach are reported as not run", flush=True)
            process.send_signal(signal.SIGINT)
            try:
                process.wait(GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    except KeyboardInterrupt:
        os.killpg(process.pid, signal.SIGINT)
        process.wait()
        raise
    return (time.monotonic() - started) / 60.0


def reset_survivors(mutants_dir: Path, equivalents: Path, source_root: Path = Path(".")) -> int:
    """Forget the verdicts of survivors ("survived", "no tests", and "suspicious": a mutant
    process ended by a signal, e.g. stopped by hand), so the next run tests them
    again: after new killer tests or workloads, which mutmut's cache does not track. Mutants
    accepted as equivalent keep theirs: no test can kill them, and each would cost a full run
    of the killers."""
    accepted, _ = classify(read_mutants(mutants_dir, source_root), load_equivalents(equivalents))
    count = 0
    for meta in sorted((mutants_dir / "impl").rglob("*.py.meta")):
        data = json.loads(meta.read_text(encoding="utf-8"))
        verdicts = data["exit_code_by_key"]
        for name, exit_code in verdicts.items():
            if status_of(exit_code) in (SURVIVED, NO_TESTS, SUSPICIOUS) and name not in accepted:
                verdicts[name] = None
                count += 1
        meta.write_text(json.dumps(data, indent=4), encoding="utf-8")
    return count


RUNS_FILE = "mutation-runs.jsonl"


def record_run(mutants_dir: Path, minutes: float) -> None:
    """Each bounded run's length, so the report can state the time all cached verdicts took."""
    with open(mutants_dir / RUNS_FILE, "a", encoding="utf-8") as out:
        out.write(json.dumps({"minutes": round(minutes, 2), "at": time.time()}) + "\n")


def total_minutes(mutants_dir: Path) -> float | None:
    path = mutants_dir / RUNS_FILE
    if not path.is_file():
        return None
    return sum(float(json.loads(line)["minutes"])
               for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def report(mutants_dir: Path, source_root: Path, equivalents: Path, out: Path, target: float,
           minutes: float | None) -> bool:
    verdict = judge(read_mutants(mutants_dir, source_root), load_equivalents(equivalents))
    write_report(verdict, out, target, minutes, total_minutes(mutants_dir))
    s = verdict.summary
    print(f"mutation: {s.total} mutants: {s.killed} killed, {s.survived} survived, "
          f"{s.equivalent} equivalent, {s.not_run} not run; score {s.score:.1f}% "
          f"(target {target:g}%) -> {out / 'index.html'}")
    for entry in s.stale:
        print(f"mutation: stale equivalent-mutant entry (matches no surviving mutant): {entry}")
    return s.passes(target)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.mutation",
                                     description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("command", choices=("run", "report", "hunt", "planted"),
                        help="run: mutmut (bounded), then the report; report: the report only; "
                        "hunt: search workloads that kill surviving mutants; planted: the "
                        "hand-planted semantic bugs of conformance/mutation/semantic/ "
                        "(`conformance.mutation.planted`)")
    parser.add_argument("mutants", nargs="*",
                        help="run (or hunt) only these mutants (mutmut names, * globs); "
                        "planted: only these planted bugs (patch names)")
    parser.add_argument("--examples", type=int, default=300,
                        help="hunt: workloads drawn per mutant (default 300)")
    parser.add_argument("--hunt-timeout", type=float, default=900.0,
                        help="hunt: seconds per mutant before giving up (default 900)")
    parser.add_argument("--regressions", type=Path, default=REGRESSIONS_DIR,
                        help="hunt: where found workloads go (default conformance/regressions)")
    parser.add_argument("--max-minutes", type=float, default=60.0,
                        help="stop launching mutants after this long (default 60)")
    parser.add_argument("--max-children", type=int, default=2,
                        help="mutants tested at once (default 2: one per core here)")
    parser.add_argument("--rerun-survivors", action="store_true",
                        help="test surviving mutants again (after adding killer tests), "
                             "except those accepted as equivalent")
    parser.add_argument("--target", type=float, default=95.0,
                        help="lowest passing score in percent (default 95)")
    parser.add_argument("--equivalents", type=Path, default=DEFAULT_PATH)
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="write the report exactly here (default: a new run directory "
                             "reports/mutation/RUN_ID, with a 'latest' link and index.html)")
    parser.add_argument("--run-id", default=None, metavar="ID",
                        help="name of the run directory (default: UTC time and command); an "
                             "existing run is never overwritten")
    parser.add_argument("--stages", default=",".join(name for name, _ in STAGES),
                        metavar="S,..",
                        help="planted: the gate's stages to run, cheapest first (default "
                        f"{','.join(name for name, _ in STAGES)}; `differential` alone "
                        "measures what the differential tests kill without the unit tests)")
    parser.add_argument("--mutants-dir", type=Path, default=Path("mutants"))
    parser.add_argument("--no-store", action="store_true",
                        help=f"run: neither restore verdicts from {STORE_PATH} nor write "
                        "them back (a run from scratch, or on an experiment)")
    args = parser.parse_intermixed_args(argv)
    try:
        minutes = None
        if args.command == "planted":
            stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
            return main_planted(args.mutants, args.out or Path(
                "reports", "mutation", f"planted-{args.run_id or stamp}"), args.target,
                stages_named(args.stages))
        if args.command == "hunt":
            return main_hunt(args.mutants, runs.latest_report(args.out), args.mutants_dir,
                             args.examples, args.regressions, args.hunt_timeout)
        load_equivalents(args.equivalents)  # a malformed file fails before the long run
        out, root, note = runs.out_dir(args.command, args.out, args.run_id)
        if note is not None:
            print(f"mutation: {note}")
        try:
            if args.command == "run":
                # mutmut copies a non-Python file once and never removes a copy: refresh them
                # (a stale C source was once tested in its old form).
                synced = sync_copies(args.mutants_dir, Path("."),
                                     source_paths(Path("pyproject.toml")))
                print(synced.line())
                if not args.no_store:
                    print(restore(args.mutants_dir, Path(".")).line())
                if args.rerun_survivors:
                    count = reset_survivors(args.mutants_dir, args.equivalents)
                    print(f"mutation: {count} survivors to test again")
                minutes = run_mutmut(args.max_minutes, args.max_children, args.mutants)
                record_run(args.mutants_dir, minutes)
                if not args.no_store:
                    count = save(args.mutants_dir, Path("."), args.equivalents)
                    print(f"mutation: {count} verdicts kept in {STORE_PATH} (commit it to "
                          "share them with the next machine)")
            ok = report(args.mutants_dir, Path("."), args.equivalents, out, args.target,
                        minutes)
        finally:
            if root is not None and out.is_dir() and not any(out.iterdir()):
                out.rmdir()  # nothing written (interrupted, or an error): no empty run
        index = runs.finish(out, root)
        if index is not None:
            print(f"mutation: every run: {index}")
    except UserError as err:
        print(f"mutation: {err}", file=sys.stderr)
        return 2
    return 0 if ok else 1
