"""`python -m conformance.mutation hunt`: search the workload space for what kills a survivor.

A mutant that survives the killer suite is either equivalent or a hole in the suite. Reasoning
tells the two apart only sometimes; a search tells more: with the mutant switched on (mutmut's
`MUTANT_UNDER_TEST`, read on every call by the trampolines in `mutants/impl`), Hypothesis
draws workloads from the wide space (`conformance.sched.strategies.workloads`) and runs the mutated
twin in lockstep against upstream until one diverges, then shrinks it. A found workload is checked
on the unmutated twin (it must be exact there; if not, it is a real divergence, reported and
written under `.hypothesis/regressions/` like the random tests' finds) and written as a
regression (`conformance/regressions/mutant-*.jsonl`), which the gate, CI and
the mutation killers run from then on. A mutant the search cannot kill in `--examples` draws is
reported as such: evidence for an equivalence entry, not proof.

Each mutant is hunted in its own process: `mutants/impl` (the trampolined copy mutmut made) is
put first on the path through a temporary directory holding only an `impl` link, so the
harness, workloads and strategies are this checkout's.
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from conformance.paths import REPO_ROOT
from vtwin.errors import UserError

HUNT_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "OMP_NUM_THREADS": "1", "VLLM_LOGGING_LEVEL": "ERROR",
            "TOKENIZERS_PARALLELISM": "false", "PYTHONHASHSEED": "0"}


@dataclass(frozen=True, slots=True)
class HuntResult:
    mutant: str
    outcome: str            # "killed" (file written), "not found", "real divergence", "error"
    detail: str
    path: str | None = None


def survivors(report: Path) -> list[str]:
    """The ids of surviving mutants not listed as equivalent in a mutation report's JSON."""
    if not report.is_file():
        raise UserError(f"{report}: no mutation report (run `nox -s mutation` first)")
    data = json.loads(report.read_text(encoding="utf-8"))
    return [m["id"] for m in data["mutants"] if m["outcome"] == "survived"]


def select(patterns: Sequence[str], candidates: Sequence[str]) -> list[str]:
    chosen = [c for c in candidates if any(fnmatch.fnmatchcase(c, p) for p in patterns)]
    if not chosen:
        raise UserError(f"no surviving mutant matches {' '.join(patterns)}")
    return chosen


def hunt_one(mutant: str, mutants_dir: Path, examples: int, out_dir: Path,
             timeout_s: float) -> HuntResult:
    """Hunt one mutant in a child process (see the module docstring)."""
    repo = REPO_ROOT
    with tempfile.TemporaryDirectory(prefix="vtwin-hunt-") as shim:
        os.symlink((mutants_dir / "impl").resolve(), Path(shim) / "impl")
        env = {**os.environ, **HUNT_ENV, "MUTANT_UNDER_TEST": mutant,
               "PYTHONPATH": os.pathsep.join([shim, str(repo)])}
        command = [sys.executable, "-m", "conformance.mutation.hunt_worker", mutant,
                   str(examples), str(out_dir.resolve())]
        try:
            done = subprocess.run(command, env=env, cwd=shim, capture_output=True, text=True,
                                  timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return HuntResult(mutant, "error", f"timed out after {timeout_s:g} s")
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return HuntResult(mutant, "error", " | ".join(tail) or f"exit {done.returncode}")
    data = json.loads(lines[-1])
    return HuntResult(mutant, data["outcome"], data["detail"], data.get("path"))


def main_hunt(patterns: Sequence[str], report: Path, mutants_dir: Path, examples: int,
              out_dir: Path, timeout_s: float) -> int:
    chosen = select(patterns or ["*"], survivors(report))
    print(f"hunt: {len(chosen)} surviving mutants, up to {examples} workloads each", flush=True)
    killed = 0
    for index, mutant in enumerate(chosen, 1):
        result = hunt_one(mutant, mutants_dir, examples, out_dir, timeout_s)
        killed += result.outcome == "killed"
        where = f" -> {result.path}" if result.path else ""
        print(f"hunt [{index}/{len(chosen)}] {mutant}: {result.outcome}{where} "
              f"({result.detail})", flush=True)
    print(f"hunt: {killed} of {len(chosen)} killed by a new regression workload")
    return 0
