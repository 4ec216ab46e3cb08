"""pytest plugin for mutation runs (`-p conformance.mutation.plugin`, set in `[tool.mutmut]`).

Four jobs, all inert outside a mutation run except the profile registration:

- registers the Hypothesis profile `mutation` (HYPOTHESIS_PROFILE=mutation): few (20 per
  test, `VTWIN_MUTATION_EXAMPLES`), derandomized examples (the stats run and every mutant run
  see the same operation sequences), no example database (a kill must not leak into the next
  mutant's run) and no shrinking (a kill needs one failing example, not the minimal one). It
  is registered here because `-p` plugins load before conftest.py, which loads the profile
  named in HYPOTHESIS_PROFILE.
- orders the selected tests fastest first (durations from mutmut's stats run), so `-x` stops a
  mutant's run after the cheapest failing test.
- bounds a mutant's process: address space and CPU time (`VTWIN_MUTANT_MAX_GIB`, default 6;
  `VTWIN_MUTANT_MAX_CPU_S`, default 900). A mutant that turns a loop into an endless one
  (`start += size` into `start = size` in the hasher) otherwise grows a list until the machine
  swaps: two such mutants held both cores and grew past 3 GB each until stopped by hand.
  Hitting a bound fails the test (MemoryError) or ends the process (SIGXCPU): killed.
- records what killed each mutant: the first failing test of a run with MUTANT_UNDER_TEST set
  to a mutant name is appended to `mutmut-killers.jsonl` (in mutmut's working directory).
"""

from __future__ import annotations

import json
import os
import resource
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

from conformance.mutation.results import KILLERS_FILE

STATS_FILE = "mutmut-stats.json"
# Values mutmut puts in MUTANT_UNDER_TEST that name no mutant.
_NOT_A_MUTANT = {"", "fail", "stats", "list_all_tests", "mutant_generation"}

settings.register_profile(
    "mutation",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    stateful_step_count=40,
    max_examples=int(os.environ.get("VTWIN_MUTATION_EXAMPLES", "20")),
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
)


def lowered(current: tuple[int, int], bound: int) -> tuple[int, int]:
    """(soft, hard) limits at most `bound` and never above `current`'s: a process may lower its
    hard limit but not raise it. mutmut 3.8 already puts each mutant's process under a CPU
    limit of its own (soft, soft + 1) from its tests' durations, often seconds; asking for 900
    then raised ValueError in `pytest_configure`, pytest ended with an internal error (exit 3)
    before any test ran, and mutmut counted that as a kill: 165 of 335 "kills" in one run."""
    soft, hard = current
    infinite = resource.RLIM_INFINITY
    new_hard = bound if hard == infinite else min(hard, bound)
    new_soft = new_hard if soft == infinite else min(soft, new_hard)
    return new_soft, new_hard


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("MUTANT_UNDER_TEST", "") in _NOT_A_MUTANT:
        return
    gib = float(os.environ.get("VTWIN_MUTANT_MAX_GIB", "6"))
    cpu_s = int(os.environ.get("VTWIN_MUTANT_MAX_CPU_S", "900"))
    for kind, bound in ((resource.RLIMIT_AS, int(gib * (1 << 30))),
                        (resource.RLIMIT_CPU, cpu_s)):
        resource.setrlimit(kind, lowered(resource.getrlimit(kind), bound))


def _durations() -> dict[str, float]:
    try:
        data = json.loads(Path(STATS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    raw = data.get("duration_by_test", {}) if isinstance(data, dict) else {}
    return {str(k): float(v) for k, v in raw.items()}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    durations = _durations()
    if durations:
        items.sort(key=lambda item: durations.get(item.nodeid, 0.0))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    if not report.failed or mutant in _NOT_A_MUTANT:
        return
    line = json.dumps({"mutant": mutant, "test": report.nodeid, "when": report.when})
    with open(KILLERS_FILE, "a", encoding="utf-8") as out:
        out.write(line + "\n")
