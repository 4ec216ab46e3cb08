"""The hunt draws a survivor's workloads from the space that reaches its code: connector
mutants from the offload family (a KV connector on every workload, load failures among the
draws), everything else from the wide scheduler space."""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, find, settings

from conformance.mutation.hunt_worker import strategy_for

FAST = settings(max_examples=200, database=None, deadline=None, phases=[Phase.generate],
                suppress_health_check=list(HealthCheck))  # the first find, not shrunk


def test_connector_mutants_are_hunted_with_a_connector_and_load_failures() -> None:
    """Load failures are a rare draw (about one workload in sixty): 200 examples missed them
    for about one seed in twenty (measured over 60 seeds each), a flaky failure; `find` stops
    at the first hit, so a larger budget costs nothing when the strategy is right."""
    for mutant in ("impl.sched.connector_paths.xǁConnectorPathsǁ_truncate_at_invalid__mutmut_3",
                   "impl.connector.cpu_offload.xǁCPUOffloadConnectorǁbuild__mutmut_1"):
        found = find(strategy_for(mutant),
                     lambda w: w.config.kv_connector is not None
                     and bool(w.config.kv_connector.load_failures),
                     settings=settings(FAST, max_examples=2000))
        assert found.config.kv_connector is not None


def test_other_mutants_are_hunted_in_the_wide_space() -> None:
    mutant = "impl.core.mamba_align.xǁMambaAlignManagerǁ__init____mutmut_3"
    found = find(strategy_for(mutant), lambda w: w.config.kv_connector is None, settings=FAST)
    assert found.config.kv_connector is None
