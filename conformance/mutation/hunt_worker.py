"""The child process of `conformance.mutation.hunt`: one mutant, one search, one JSON line.

Run with `impl` resolving to mutmut's trampolined copy and `MUTANT_UNDER_TEST` set (the parent
arranges both). Prints `{"outcome": ..., "detail": ..., "path": ...}` as its last line.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import replace
from pathlib import Path

from hypothesis import HealthCheck, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from conformance.paths import HYPOTHESIS_REGRESSIONS_DIR
from conformance.sched.lockstep import run_lockstep
from conformance.sched.strategies.offload import offload_workloads
from conformance.sched.strategies.workloads import workloads
from conformance.sched.suite import write_regression
from conformance.systems.registry import resolve_system
from workloads.model import Workload

CONNECTOR_MODULES = ("impl.connector.", "impl.sched.connector_paths.")
"""Modules only a workload with a KV connector reaches: their mutants are hunted over the
offload family (CPU pools, transfer latencies, planned load failures), which the wide space
alone never draws."""


def strategy_for(mutant: str) -> st.SearchStrategy[Workload]:
    """The generated space that reaches the mutated code."""
    if mutant.startswith(CONNECTOR_MODULES):
        return offload_workloads()
    return workloads()


def divergence_of(workload: Workload) -> str | None:
    """What differs between the (possibly mutated) twin and upstream on `workload`, or None."""
    try:
        result = run_lockstep(workload, resolve_system("impl"), resolve_system("upstream"))
    except Exception as err:  # noqa: BLE001 - a mutant may break the twin anywhere
        return f"raised {type(err).__name__}: {err}"
    if result.error is not None:
        return f"error: {result.error.splitlines()[0] if result.error else ''}"
    divergence = result.divergence_at("exact")
    return None if divergence is None else divergence.summary()


def short_name(mutant: str) -> str:
    """A file-name slug: `impl.sched.scheduler.xǁSchedulerǁ_admit_waiting__mutmut_36` gives
    `scheduler-admit-waiting-36`."""
    module, _, rest = mutant.partition(".x")
    function, _, number = rest.rpartition("__mutmut_")
    function = function.split("ǁ")[-1] or function
    slug = re.sub(r"[^a-z0-9]+", "-", f"{module.split('.')[-1]}-{function}".lower()).strip("-")
    return f"{slug}-{number}"


def main(argv: list[str]) -> int:
    mutant, examples, out_dir = argv[0], int(argv[1]), Path(argv[2])
    options = settings(max_examples=examples, database=None, deadline=None,
                       suppress_health_check=list(HealthCheck))
    try:
        found = find(strategy_for(mutant), lambda w: divergence_of(w) is not None,
                     settings=options)
    except NoSuchExample:
        print(json.dumps({"outcome": "not found", "detail": f"{examples} workloads exact"}))
        return 0
    what = divergence_of(found) or "no longer diverges after shrinking"
    os.environ["MUTANT_UNDER_TEST"] = ""  # the trampolines read it on every call
    if (real := divergence_of(found)) is not None:
        # Not the mutant's doing: the twin and upstream differ on this workload as they are.
        # Kept where the random Hypothesis tests keep theirs, to be fixed or waived.
        found_dir = HYPOTHESIS_REGRESSIONS_DIR
        path = write_regression(replace(found, name="hunted"), real, found_dir)
        print(json.dumps({"outcome": "real divergence", "detail": real, "path": str(path)}))
        return 0
    name = f"mutant-{short_name(mutant)}"
    workload = replace(found, name=name, description=(
        f"found by `python -m conformance.mutation hunt` against {mutant} ({what})"))
    path = write_regression(workload, f"kills: {mutant}", out_dir)
    print(json.dumps({"outcome": "killed", "detail": what[:160], "path": str(path)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
