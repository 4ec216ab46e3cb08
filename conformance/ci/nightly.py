"""The nightly run: the differential Hypothesis tests, fresh examples, for a time budget.

``python -m conformance.ci.nightly --minutes N`` (what ``nox -s nightly -- --minutes N`` runs)
repeats pytest rounds over the differential tests (the KV families and the scheduler lockstep)
under ``HYPOTHESIS_PROFILE=nightly`` until N minutes are used, each round with a fresh random
seed (printed, and passed as ``VTWIN_HYPOTHESIS_SEED`` so a round can be replayed). A fixed
number of examples cannot fit a time budget, so each round caps the examples per test (this
module is also a pytest plugin, ``-p conformance.ci.nightly``, that loads the nightly profile with
that cap) and the cap grows with the time left: small first (to measure), then doubling, never
past the profile's 5,000, and sized so a round fits what remains. A round still running at the
deadline is stopped and counts nothing.

Counts come from Hypothesis' own statistics, which its pytest plugin writes into each round's
junit XML; failures come from the same XML, with everything Hypothesis printed (the minimal
example, the `note`d workload). Everything goes to ``reports/nightly/nightly.json`` and
``index.html``: examples per family, and each failure. Failures land in the example database
``.hypothesis/examples`` (the path ``nox -s ci`` uses, relative to the repository root), so
the next run, nightly or CI, replays them first. Exit status 1 if any test failed or errored,
or if no example ran at all (the oracle missing, say).
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import os
import random
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

TESTS = ("conformance/tests/test_kv_differential.py",
         "conformance/tests/test_sched_hypothesis.py")
OUT_DIR = Path("reports") / "nightly"
EXAMPLES_ENV = "VTWIN_NIGHTLY_EXAMPLES"
MAX_EXAMPLES = 5000  # the nightly profile's (conformance/tests/conftest.py)
ORACLE_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
              "OMP_NUM_THREADS": "1", "VLLM_LOGGING_LEVEL": "WARNING",
              "TOKENIZERS_PARALLELISM": "false"}
_PHASE = re.compile(r"- during (\w+) phase .*?\n.*?\n\s*- (\d+) passing, (\d+) failing, "
                    r"and (\d+) invalid")
_COUNTED_PHASES = ("explicit", "reuse", "generate")  # shrinking re-runs found examples


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    """Plugin hook: cap examples per test for this round, on top of the loaded profile.

    After the initial conftest.py has loaded HYPOTHESIS_PROFILE, before the test modules are
    imported (`@given` takes the current profile when it decorates)."""
    cap = os.environ.get(EXAMPLES_ENV)
    if cap:
        from hypothesis import settings

        parent = settings.get_profile(settings.get_current_profile_name())
        settings.register_profile("vtwin-nightly-round", parent=parent, max_examples=int(cap))
        settings.load_profile("vtwin-nightly-round")


@dataclass
class Family:
    """Counts for one test (a KV family, or the scheduler's generated workloads)."""

    examples: int = 0
    invalid: int = 0
    failing: int = 0
    rounds: int = 0
    failed_rounds: int = 0


@dataclass
class Nightly:
    minutes: float
    rounds: list[dict[str, Any]] = field(default_factory=list)
    families: dict[str, Family] = field(default_factory=dict)
    failures: list[dict[str, Any]] = field(default_factory=list)

    @property
    def examples(self) -> int:
        return sum(f.examples for f in self.families.values())

    @property
    def ok(self) -> bool:
        return not self.failures and self.examples > 0

    def to_json(self) -> dict[str, Any]:
        return {"format": "vtwin-nightly/1", "profile": "nightly", "minutes": self.minutes,
                "ok": self.ok, "examples": self.examples, "rounds": self.rounds,
                "families": {k: vars(v) for k, v in sorted(self.families.items())},
                "failures": self.failures}


def family_of(nodeid: str) -> str:
    """`kv/full_bs16` for TestKVLockstep_full_bs16, `sched/...` for the scheduler test."""
    parts = nodeid.split("::")
    group = "kv" if "kv" in parts[0] else "sched" if "sched" in parts[0] else Path(parts[0]).stem
    name = parts[1] if len(parts) > 1 else parts[0]
    return f"{group}/{name.removeprefix('TestKVLockstep_').removeprefix('test_')}"


def _nodeid(classname: str, name: str) -> str:
    """junit's `conformance.tests.test_x.TestY` + `runTest` back to a pytest node id."""
    parts = classname.split(".")
    if parts[-1][:1].isupper():
        return f"{'/'.join(parts[:-1])}.py::{parts[-1]}::{name}"
    return f"{'/'.join(parts)}.py::{name}"


def read_round(junit: Path, nightly: Nightly, round_info: dict[str, Any]) -> None:
    """Add one round's statistics and failures (from its junit XML) to `nightly`."""
    root = ET.parse(junit).getroot()
    for prop in root.iter("property"):
        name = prop.get("name", "")
        if not name.startswith("hypothesis-statistics-"):
            continue
        family = nightly.families.setdefault(
            family_of(name.removeprefix("hypothesis-statistics-")), Family())
        family.rounds += 1
        text = base64.b64decode(prop.get("value", "")).decode()
        for phase, passing, failing, invalid in _PHASE.findall(text):
            if phase in _COUNTED_PHASES:
                family.examples += int(passing) + int(failing)
                family.invalid += int(invalid)
                family.failing += int(failing)
    for case in root.iter("testcase"):
        problem = case.find("failure")
        problem = case.find("error") if problem is None else problem
        if problem is None:
            continue
        nodeid = _nodeid(case.get("classname", ""), case.get("name", ""))
        family = nightly.families.setdefault(family_of(nodeid), Family())
        family.failed_rounds += 1
        message = problem.get("message", "")
        seen = next((f for f in nightly.failures
                     if (f["test"], f["message"]) == (nodeid, message)), None)
        if seen is not None:  # the database replays it every round: one entry, its rounds
            seen["rounds"].append(round_info["round"])
            continue
        nightly.failures.append({
            "round": round_info["round"], "rounds": [round_info["round"]],
            "seed": round_info["seed"], "test": nodeid, "message": message,
            "text": (problem.text or "")[-20000:]})


def run_round(index: int, examples: int, seed: int, tests: Sequence[str], out: Path,
              timeout: float, cwd: Path | None = None) -> tuple[Path, int | None]:
    """One pytest round; returns its junit path and exit code (None: stopped at the deadline)."""
    junit = (out / "rounds" / f"round-{index}.xml").resolve()
    env = {**ORACLE_ENV, **os.environ, "HYPOTHESIS_PROFILE": "nightly",
           "VTWIN_HYPOTHESIS_SEED": str(seed), EXAMPLES_ENV: str(examples)}
    cmd = [sys.executable, "-m", "pytest", *tests, "-q", "-p", "conformance.ci.nightly",
           f"--junitxml={junit}", "-o", "junit_family=xunit2"]
    try:
        code = subprocess.run(cmd, env=env, timeout=max(timeout, 1.0), check=False,
                              cwd=cwd).returncode
    except subprocess.TimeoutExpired:
        return junit, None
    return junit, code


def run(minutes: float, tests: Sequence[str] = TESTS, out: Path = OUT_DIR,
        first: int = 10, seed: int | None = None, cwd: Path | None = None) -> Nightly:
    """Rounds until `minutes` are used; see the module docstring. `cwd`: where pytest runs
    (the example database is `.hypothesis/examples` under it; default: here)."""
    out.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + 60 * minutes
    rng = random.Random(seed)
    nightly = Nightly(minutes)
    examples, last = first, None
    while (left := deadline - time.monotonic()) > 1:
        if last is not None:  # (examples, seconds) of the previous round
            fit = int(last[0] * 0.6 * left / max(last[1], 1e-3))
            examples = min(MAX_EXAMPLES, 2 * last[0], fit)
            if examples < 1 or left < last[1] / 2:  # start-up alone would not fit
                break
        round_seed = rng.getrandbits(32)
        info: dict[str, Any] = {"round": len(nightly.rounds) + 1, "seed": round_seed,
                                "examples_per_test": examples}
        print(f"nightly: round {info['round']}: seed {round_seed} "
              f"(VTWIN_HYPOTHESIS_SEED={round_seed}), {examples} examples per test, "
              f"{left:.0f}s left", file=sys.stderr, flush=True)
        started = time.monotonic()
        junit, code = run_round(info["round"], examples, round_seed, tests, out, left, cwd)
        info.update(seconds=round(time.monotonic() - started, 1), exit_code=code,
                    stopped_at_deadline=code is None)
        nightly.rounds.append(info)
        if code is None:
            break
        if junit.exists():
            read_round(junit, nightly, info)
        if code not in (0, 1):
            nightly.failures.append({"round": info["round"], "rounds": [info["round"]],
                                     "seed": round_seed, "test": "(pytest)",
                                     "message": f"pytest exited {code}", "text": ""})
            break
        last = (examples, info["seconds"])
    write(nightly, out)
    return nightly


def write(nightly: Nightly, out: Path) -> None:
    data = nightly.to_json()
    (out / "nightly.json").write_text(json.dumps(data, indent=1), encoding="utf-8")
    (out / "index.html").write_text(render(data), encoding="utf-8")


def render(data: dict[str, Any]) -> str:
    e = html.escape
    rows = "".join(
        f"<tr><td>{e(name)}</td><td>{f['examples']}</td><td>{f['invalid']}</td>"
        f"<td>{f['rounds']}</td><td>{f['failed_rounds']}</td></tr>"
        for name, f in data["families"].items())
    rounds = "".join(
        f"<tr><td>{r['round']}</td><td>{r['seed']}</td><td>{r['examples_per_test']}</td>"
        f"<td>{r['seconds']}s</td><td>{e(str(r['exit_code']))}</td></tr>" for r in data["rounds"])
    failures = "".join(
        f"<h3>{e(f['test'])} (rounds {e(str(f['rounds']))}, first with "
        f"VTWIN_HYPOTHESIS_SEED={f['seed']})</h3>"
        f"<p>{e(f['message'])}</p><pre>{e(f['text'])}</pre>" for f in data["failures"])
    verdict = "ok" if data["ok"] else "FAILED"
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>vtwin nightly</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em}}td,th{{border:1px solid #d0d7de;
padding:3px 8px}}table{{border-collapse:collapse}}pre{{white-space:pre-wrap}}</style></head>
<body><h1>vtwin nightly: {verdict}</h1><p>{data['examples']} examples in
{len(data['rounds'])} rounds, budget {data['minutes']} minutes, profile nightly.</p>
<h2>Examples per family</h2><table><tr><th>family</th><th>examples</th><th>invalid</th>
<th>rounds</th><th>failed rounds</th></tr>{rows}</table>
<h2>Rounds</h2><table><tr><th>round</th><th>seed</th><th>examples per test</th><th>time</th>
<th>pytest exit</th></tr>{rounds}</table>
<h2>Failures</h2>{failures or '<p>none</p>'}</body></html>
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.ci.nightly", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="time budget (default 30)")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help=f"default {OUT_DIR}")
    parser.add_argument("--first", type=int, default=10,
                        help="examples per test in the first round (default 10)")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed for the round seeds (default: random)")
    parser.add_argument("tests", nargs="*", default=list(TESTS),
                        help="test files (default: the differential Hypothesis tests)")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.first < 1:
        parser.error("--minutes and --first must be positive")
    nightly = run(args.minutes, args.tests, args.out, args.first, args.seed)
    print(f"nightly: {nightly.examples} examples in {len(nightly.rounds)} rounds, "
          f"{len(nightly.failures)} failures -> {args.out / 'index.html'}", file=sys.stderr)
    for name, family in sorted(nightly.families.items()):
        print(f"nightly:   {name}: {family.examples} examples", file=sys.stderr)
    return 0 if nightly.ok else 1


if __name__ == "__main__":
    sys.exit(main())
