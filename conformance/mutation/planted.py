"""Planted semantic bugs: realistic mistakes in the twin, each a patch, run against the gate.

mutmut's mutants are syntactic (an operator swapped, a constant moved, a call dropped); the
bugs that slip through review are semantic: a scan that goes on past a miss, a fixed point cut
to one pass, tokens not given back to a budget, an order reversed, a boundary moved by one.
Each file `conformance/mutation/semantic/NAME.patch` is one such bug in `impl/`, written by
hand for a behaviour when it is added: a few `# ` lines saying what it plants and why it is
realistic, then a unified diff against the current code.

`python -m conformance.mutation planted [NAME ...]` applies each patch to a scratch copy of the
checkout (the working tree is never touched) and runs what the PR gate runs there, in stages,
cheapest first, stopping at the first failing test: the unit tests, then the differential
tests against upstream (their Hypothesis examples random, as in CI). A patch that no longer
applies is *stale* (the code moved: port it). The score is killed / (killed + survived),
reported apart from mutmut's, under reports/mutation/planted-RUN_ID/ (planted.json).
`--stages differential` skips the unit tests: what the differential tests kill on their own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from conformance.paths import REPO_ROOT, SEMANTIC_MUTANTS_DIR
from vtwin.errors import UserError

SEMANTIC_DIR = SEMANTIC_MUTANTS_DIR
REPO = REPO_ROOT

STAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("unit", ("tests",)),
    ("differential", ("conformance/tests/test_kv_differential.py",
                      "conformance/tests/test_sched_suite.py",
                      "conformance/tests/test_sched_regressions.py",
                      "conformance/tests/test_sched_hypothesis.py",
                      "conformance/tests/test_offload_suite.py",
                      "conformance/tests/test_offloading_manager.py",
                      "conformance/tests/test_request_queue_differential.py",
                      "conformance/tests/test_plan_differential.py")),
)
"""The gate's tests, cheapest first: `pytest tests` (what `nox -s tests` runs), then the
differential tests of `nox -s ci` that judge behaviour against upstream."""



def stages_named(names: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The stages named in a comma list, in the gate's order; an unknown name is one line."""
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    known = dict(STAGES)
    unknown = [n for n in wanted if n not in known]
    if unknown or not wanted:
        raise UserError(f"--stages: unknown stage {', '.join(unknown) or '(none given)'} "
                        f"(known: {', '.join(known)})")
    return tuple((name, tests) for name, tests in STAGES if name in wanted)


_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Planted:
    name: str
    about: str  # the patch's `# ` header: what it plants and why it is realistic
    diff: str


@dataclass(frozen=True, slots=True)
class Verdict:
    name: str
    about: str
    verdict: str  # killed | survived | stale | error (the killer fails without the bug too)
    stage: str | None  # the stage that killed it
    killer: str | None  # the first failing test
    seconds: float


def load_planted(names: Sequence[str] = (), directory: Path = SEMANTIC_DIR
                 ) -> list[Planted]:
    """The patches, by name (all of them when `names` is empty)."""
    found = {p.stem: p for p in sorted(directory.glob("*.patch"))}
    unknown = [n for n in names if n not in found]
    if unknown:
        raise UserError(f"no planted bug named {', '.join(unknown)} in {directory} (known: "
                        f"{', '.join(found) or 'none'})")
    planted = []
    for name in names or list(found):
        text = found[name].read_text(encoding="utf-8")
        header = [line[2:] for line in text.splitlines() if line.startswith("# ")]
        start = text.find("--- a/")
        if not header or start < 0:
            raise UserError(f"{found[name]}: a planted bug needs `# ` lines saying what it "
                            "plants, then a unified diff (--- a/PATH, +++ b/PATH)")
        planted.append(Planted(name, " ".join(header), text[start:]))
    return planted


def scratch_copy(destination: Path, source: Path = REPO) -> Path:
    """What a fresh clone of the working tree holds (tracked files and new ones git does not
    ignore): nothing built, cached or generated."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=source, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        path = source / name
        if path.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    return destination


def apply(planted: Planted, root: Path) -> bool:
    """Apply the patch in `root`; False when it does not apply (stale)."""
    done = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], cwd=root,
                          input=planted.diff, text=True, capture_output=True)
    return done.returncode == 0


def run_stage(root: Path, tests: Sequence[str], env: dict[str, str],
              timeout: float, workers: int = 2) -> str | None:
    """The first failing test of `tests` in `root` (None: all passed), on `workers` pytest
    workers (0: in one process)."""
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
               *(["-n", str(workers)] if workers else []), *tests]
    try:
        done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"(timed out after {timeout:.0f} s)"
    if done.returncode in (0, 5):  # passed, or nothing collected
        return None
    failed = _FAILED.search(done.stdout)
    return failed.group(1) if failed else f"(pytest exit {done.returncode})"


def judge(planted: Planted, stages: Sequence[tuple[str, Sequence[str]]] = STAGES,
          timeout: float = 1800.0, workers: int = 2) -> Verdict:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"vtwin-planted-{planted.name}-") as tmp:
        root = scratch_copy(Path(tmp))
        if not apply(planted, root):
            return Verdict(planted.name, planted.about, "stale", None, None, 0.0)
        env = {**os.environ, "PYTHONPATH": str(root), "VTWIN_COMPILED": "0",
               "VTWIN_HEARTBEAT_SECONDS": "0"}
        env.pop("HYPOTHESIS_PROFILE", None)  # CI's default profile: random examples
        for stage, tests in stages:
            killer = run_stage(root, tests, env, timeout, workers)
            if killer is not None:
                verdict = "killed" if _passes_unpatched(killer, env, timeout) else "error"
                return Verdict(planted.name, planted.about, verdict, stage, killer,
                               time.monotonic() - started)
    return Verdict(planted.name, planted.about, "survived", None, None,
                   time.monotonic() - started)


def _passes_unpatched(killer: str, env: dict[str, str], timeout: float) -> bool:
    """Whether the killing test passes without the bug: a test that fails on the real code too
    (a broken environment, a missing file) killed nothing."""
    if killer.startswith("("):
        return True  # a timeout or an exit without a named test: the bug's doing
    with tempfile.TemporaryDirectory(prefix="vtwin-planted-control-") as tmp:
        root = scratch_copy(Path(tmp))
        clean = {**env, "PYTHONPATH": str(root)}
        return run_stage(root, [killer], clean, timeout, workers=0) is None


def write_report(verdicts: Sequence[Verdict], out: Path,
                 stages: Sequence[str] = ("unit", "differential")) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    killed = sum(v.verdict == "killed" for v in verdicts)
    judged = sum(v.verdict in ("killed", "survived") for v in verdicts)
    report = {"killed": killed, "judged": judged, "stages": list(stages),
              "score": round(100.0 * killed / judged, 1) if judged else None,
              "planted": [asdict(v) for v in verdicts]}
    path = out / "planted.json"
    path.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return path


def main_planted(names: Sequence[str], out: Path, target: float,
                 stages: Sequence[tuple[str, Sequence[str]]] = STAGES) -> int:
    """Judge the planted bugs against `stages` (default the whole gate); exit 1 below `target`
    percent or on a stale patch."""
    verdicts = []
    for planted in load_planted(names):
        print(f"mutation planted: {planted.name} ...", flush=True)
        verdict = judge(planted, stages)
        where = f" by {verdict.killer} ({verdict.stage})" if verdict.killer else ""
        print(f"mutation planted: {planted.name}: {verdict.verdict}{where} "
              f"[{verdict.seconds:.0f} s]", flush=True)
        verdicts.append(verdict)
    path = write_report(verdicts, out, [name for name, _ in stages])
    report = json.loads(path.read_text(encoding="utf-8"))
    stale = [v.name for v in verdicts if v.verdict in ("stale", "error")]
    print(f"mutation planted: {report['killed']}/{report['judged']} killed "
          f"({report['score']}%), {len(stale)} stale; report {path}")
    if stale:
        print("mutation planted: stale (port them to the current code) or killed by a test "
              f"that fails without them too: {', '.join(stale)}")
    return 0 if not stale and (report["score"] or 0.0) >= target else 1
