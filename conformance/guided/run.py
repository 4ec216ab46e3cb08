"""`vtwin guide`: the strategies, each in its own process, then one report.

Each strategy runs `one.py` in a child process (one per core at most, `jobs`), all with the
same families, seed and time budget, so the report compares like with like. With `planted`,
the children run in a scratch copy of the checkout with that planted bug applied
(`conformance/mutation/semantic/NAME.patch`): the report then says how long each strategy took
to find it, which is how guidance is judged on the rare-state bug classes (the checkout itself
is never touched).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conformance.guided.report import update_runs_index, write_summary
from conformance.guided.search import Strategy
from conformance.mutation.hunt import HUNT_ENV
from conformance.mutation.planted import apply, load_planted, scratch_copy
from conformance.paths import REPO_ROOT
from conformance.rundirs import new_run_dir, point_latest
from vtwin.errors import UserError

REPORT_ROOT = Path("reports") / "guided"


@dataclass(frozen=True, slots=True)
class GuideOptions:
    strategies: tuple[Strategy, ...]
    families: tuple[str, ...]
    left: str = "impl"
    right: str = "upstream"
    seed: int = 0
    minutes: float | None = None
    runs: int | None = None
    seed_runs: int = 16
    corpus: tuple[Path, ...] = ()
    planted: str | None = None
    stop_on_failure: bool = False
    shrink_runs: int = 60
    jobs: int = 2
    out: Path = REPORT_ROOT
    run_id: str | None = None


def child_command(options: GuideOptions, strategy: Strategy, out: Path) -> list[str]:
    command = [sys.executable, "-m", "conformance.guided.one", "--strategy", strategy,
               "--families", ",".join(options.families), "--left", options.left,
               "--right", options.right, "--seed", str(options.seed),
               "--seed-runs", str(options.seed_runs), "--shrink-runs",
               str(options.shrink_runs), "--out", str(out)]
    if options.minutes is not None:
        command += ["--seconds", str(options.minutes * 60)]
    if options.runs is not None:
        command += ["--runs", str(options.runs)]
    if options.stop_on_failure:
        command.append("--stop-on-failure")
    if strategy == "guided":  # an earlier corpus is guidance: uniform draws start afresh
        for directory in options.corpus:
            command += ["--corpus", str(directory.resolve())]
    return command


def run_guide(options: GuideOptions) -> tuple[Path, dict[str, Any]]:
    """Run every strategy, write the report; returns the run directory and its summary
    (`interrupted` set when Ctrl-C stopped it: the report holds what the strategies had)."""
    if options.minutes is None and options.runs is None:
        raise UserError("vtwin guide needs a budget: --minutes, --runs or both")
    for module, why in (("coverage", "measures branch arcs with coverage.py"),
                        ("hypothesis", "draws the campaign's `hypothesis` family")):
        if importlib.util.find_spec(module) is None:
            raise UserError(f"vtwin guide {why}, which is not installed: "
                            "pip install -e '.[test]'")
    planted = load_planted([options.planted])[0] if options.planted else None
    run_dir = new_run_dir(options.out, "guided", options.run_id).resolve()
    env = {k: v for k, v in os.environ.items() if k != "VTWIN_COMPILED"}
    with tempfile.TemporaryDirectory(prefix="vtwin-guided-") as tmp:
        root = REPO_ROOT
        if planted is not None:
            root = scratch_copy(Path(tmp))
            if not apply(planted, root):
                raise UserError(f"planted bug {planted.name} does not apply to this checkout "
                                "(stale: port it)")
            (run_dir / "planted.txt").write_text(f"{planted.name}: {planted.about}\n",
                                                  encoding="utf-8")
        env.update(HUNT_ENV, PYTHONPATH=str(root))
        interrupted = False
        try:
            _run_children(options, run_dir, root, env)
        except KeyboardInterrupt:  # the children got it too: each writes what it has
            interrupted = True
    summary = write_summary(run_dir)
    summary["interrupted"] = interrupted
    point_latest(options.out, run_dir)
    update_runs_index(options.out)
    return run_dir, summary


def _run_children(options: GuideOptions, run_dir: Path, root: Path,
                  env: dict[str, str]) -> None:
    pending = list(options.strategies)
    running: list[tuple[Strategy, subprocess.Popen[bytes]]] = []
    failed: list[str] = []
    try:
        _wait_for(options, run_dir, root, env, pending, running, failed)
    except KeyboardInterrupt:
        for _, process in running:
            process.wait()
        raise
    if failed:
        raise UserError(f"the search failed for {', '.join(failed)}; logs under {run_dir}")


def _wait_for(options: GuideOptions, run_dir: Path, root: Path, env: dict[str, str],
              pending: list[Strategy],
              running: list[tuple[Strategy, subprocess.Popen[bytes]]],
              failed: list[str]) -> None:
    while pending or running:
        while pending and len(running) < max(1, options.jobs):
            strategy = pending.pop(0)
            out = run_dir / strategy
            out.mkdir()
            with (out / "search.log").open("wb") as log:  # the child keeps its own handle
                running.append((strategy, subprocess.Popen(
                    child_command(options, strategy, out), cwd=root, env=env, stdout=log,
                    stderr=subprocess.STDOUT)))
        time.sleep(0.5)
        for item in list(running):
            strategy, process = item
            if process.poll() is not None:
                running.remove(item)
                if process.returncode != 0:
                    failed.append(f"{strategy} (exit {process.returncode}: "
                                  f"{_last_line(run_dir / strategy / 'search.log')})")


def _last_line(path: Path) -> str:
    lines = path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
    return lines[-1] if lines else "no output"
