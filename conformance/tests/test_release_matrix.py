"""Every release stays a working System: fields go only to releases that have them, a build
failure is an error (never a difference) in conform, drift, campaign and record, and a timed
campaign that judged too little fails.

The capability checks and the planted failing factory need no vLLM; the drift between real
releases runs where their managed environments are built (`nox -s releases` builds them)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from conformance.campaign.task import UNBUILT, Task, run_task
from conformance.cli import main
from conformance.drift.run import run_drift
from conformance.systems.registry import resolve_system
from conformance.systems.upstream.capabilities import check_members, fields_of, honour
from conformance.tests.reference import needs_reference
from vtwin.errors import UserError
from workloads.model import EngineConfig

UNBUILDABLE = "conformance.tests.campaign_planted:unbuildable"
REASON = "ValueError: planted: this system cannot be built"


@dataclass
class OldSchedulerConfig:
    """A release's scheduler config from before `prefill_schedule_interval`."""

    max_num_seqs: int = 8


def test_a_field_the_release_lacks_is_left_out_at_its_default() -> None:
    config = EngineConfig()
    kwargs = honour(OldSchedulerConfig, {"max_num_seqs": 4, "prefill_schedule_interval": 1},
                    config, "0.19.1", owner="SchedulerConfig")
    assert kwargs == {"max_num_seqs": 4}
    assert "prefill_schedule_interval" not in fields_of(OldSchedulerConfig)


def test_a_field_the_release_lacks_set_by_the_workload_is_one_line() -> None:
    config = EngineConfig()
    with pytest.raises(UserError) as raised:
        honour(OldSchedulerConfig, {"max_num_seqs": 4, "prefill_schedule_interval": 3},
               config, "0.19.1", owner="SchedulerConfig")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("config.prefill_schedule_interval=3: vLLM 0.19.1 cannot honour")
    assert "SchedulerConfig has no field 'prefill_schedule_interval'" in message


def test_a_release_whose_class_has_the_field_gets_it() -> None:
    @dataclass
    class NewSchedulerConfig(OldSchedulerConfig):
        prefill_schedule_interval: int = 1

    kwargs = honour(NewSchedulerConfig, {"prefill_schedule_interval": 3}, EngineConfig(),
                    "0.33.0", owner="SchedulerConfig")
    assert kwargs == {"prefill_schedule_interval": 3}


def test_a_scheduler_member_the_adapter_calls_is_checked_when_built() -> None:
    class OldScheduler:
        def schedule(self) -> None: ...

    with pytest.raises(UserError, match=r"vLLM 0\.1\.0: OldScheduler has no update_from_output"):
        check_members(OldScheduler(), ("schedule", "update_from_output"), "0.1.0")


def test_conform_reports_an_unbuildable_system_as_its_verdict(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["conform", "--system", "impl", "--against", UNBUILDABLE, "--workload",
                 "decode-heavy", "--report", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"error: {UNBUILDABLE} could not be built: {REASON}" in err
    report = json.loads((tmp_path / "conform.json").read_text(encoding="utf-8"))
    [workload] = report["workloads"]
    assert workload["verdict"] == "unbuilt" and workload["divergences"] == []
    assert report["unbuilt"] == [f"{UNBUILDABLE} could not be built: {REASON}"]


def test_drift_never_counts_a_build_failure_as_a_class(
        capsys: pytest.CaptureFixture[str]) -> None:
    data = run_drift("impl", UNBUILDABLE, ["decode-heavy"])
    assert data["classes"] == [] and data["summary"]["behavioural"] == 0
    assert data["unbuilt"] == [{"reason": f"{UNBUILDABLE} could not be built: {REASON}",
                                "workloads": ["decode-heavy"]}]
    from conformance.drift.html import render_drift

    page = render_drift(data)
    assert f"error: {UNBUILDABLE} could not be built" in page and "No difference" in page
    code = main(["drift", "--left", "impl", "--right", UNBUILDABLE, "--workload",
                 "decode-heavy"])
    err = capsys.readouterr().err
    assert code == 2
    assert "0 difference classes" in err and "could not be built" in err


def test_campaign_task_and_summary_report_an_unbuildable_system() -> None:
    specs = ("impl", UNBUILDABLE)
    result = run_task(Task(specs, "decode-heavy", 0), {s: resolve_system(s) for s in specs})
    [comparison] = result.comparisons
    assert comparison.outcome == UNBUILT and not comparison.failed
    assert comparison.detail == f"{UNBUILDABLE} could not be built: {REASON}"


def test_record_reports_an_unbuildable_system(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.trace.jsonl"
    code = main(["record", "--system", UNBUILDABLE, "--workload", "decode-heavy", "-o",
                 str(out)])
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        f"vtwin: error: {UNBUILDABLE} could not be built: {REASON}")
    assert not out.exists()


def _summary(tasks: int, workers: int = 2, unbuilt: tuple[tuple[str, int], ...] = ()) -> object:
    from conformance.campaign.driver import RunSummary

    return RunSummary("run", Path("."), workers, tasks, 0, (), 90.0, 30.0, "finished", unbuilt)


def _run_and_print(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, summary: object,
                   minutes: float | None) -> int:
    from conformance.campaign import driver
    from conformance.campaign.plan import Plan
    from conformance.cli.campaign import run_and_print

    monkeypatch.setattr(driver, "run_campaign", lambda plan: summary)
    return run_and_print(Plan(("impl", "impl"), ("decode-heavy",), tmp_path, minutes=minutes))


def test_a_timed_campaign_that_judged_nothing_fails_saying_why(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _run_and_print(monkeypatch, tmp_path, _summary(0), minutes=1.0) == 3
    err = capsys.readouterr().err
    assert "vtwin campaign: failed: judged 0 workloads, fewer than the floor of 2" in err
    assert "start-up took 30s outside the budget" in err


def test_a_campaign_at_its_floor_passes_and_seeded_runs_have_none(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert _run_and_print(monkeypatch, tmp_path, _summary(2), minutes=1.0) == 0
    assert _run_and_print(monkeypatch, tmp_path, _summary(0), minutes=None) == 0


def test_a_campaign_with_an_unbuildable_system_exits_2(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    reason = f"{UNBUILDABLE} could not be built: {REASON}"
    code = _run_and_print(monkeypatch, tmp_path, _summary(5, unbuilt=((reason, 5),)), 1.0)
    assert code == 2
    assert f"vtwin campaign: error: {reason} (5 workloads not run)" in capsys.readouterr().err


OLD = "vllm==0.19.1"


@pytest.mark.oracle
def test_drift_0_19_to_0_32_names_the_four_known_changes() -> None:
    """The changes between the release the seeds describe and the oracle, each by itself."""
    needs_reference("upstream")
    needs_reference(OLD)
    probes = "workloads/data/drift"
    drift = run_drift(OLD, "upstream", ["decode-heavy", f"{probes}/free-queue-unhashed.jsonl",
                                        f"{probes}/threshold-alone.jsonl",
                                        f"{probes}/prefix-stats-unadmitted.jsonl"])
    assert drift["unbuilt"] == []
    classes = {c["class"]: c for c in drift["classes"]}
    roots = {name: set(c["root_in"]) for name, c in classes.items()}
    # 0.19.1 fills num_common_prefix_blocks; 0.32 leaves it empty
    assert "decode-heavy" in roots["num_common_prefix_blocks"]
    hints = {name: " ".join(h["hint"] for h in c["hints"]) for name, c in classes.items()}
    # 0.32 puts freed blocks without a hash at the front of the free queue
    assert "drift-free-queue-unhashed" in roots["free_head"]
    assert "the free-queue position of freed blocks without a hash" in hints["new_block_ids"]
    # 0.32 applies long_prefill_token_threshold only when more than one request is unfinished
    assert "drift-threshold-alone" in roots["num_scheduled_tokens"]
    assert "long_prefill_token_threshold" in hints["num_scheduled_tokens"]
    # 0.32 counts prefix-cache stats only for admitted lookups
    assert "drift-prefix-stats-unadmitted" in roots["prefix_cache.queries"]
    assert "a waiting request that was not" in hints["prefix_cache.queries"]


def test_every_claimed_release_has_an_install_recipe() -> None:
    from conformance.ci.releases import RELEASES
    from conformance.systems.remote.envs import RECIPES

    assert set(RELEASES) <= set(RECIPES), "a claimed release without a recipe in envs.py"


@pytest.mark.oracle
@pytest.mark.parametrize("release", ["0.19.1", "0.32.0", "0.33.0"])
def test_each_release_whose_environment_is_built_runs_a_smoke_workload(
        release: str, tmp_path: Path) -> None:
    """CI's smoke check: a release whose environment is cached here builds as a System and
    runs a workload to its end (`nox -s releases` builds them all)."""
    from conformance.ci.releases import RELEASES
    from conformance.sched.recorded import read_recorded, record_run
    from conformance.sched.suite import resolve_workload

    assert release in RELEASES
    needs_reference(f"vllm=={release}")
    workload, _ = resolve_workload("decode-heavy")
    out = tmp_path / "smoke.trace.jsonl"
    name, steps, end = record_run(f"vllm=={release}", workload, out, integrity_every=0,
                                  max_steps=None)
    assert name == f"upstream-{release}" and steps > 0
    assert end["end"] == "finished", end
    assert len(read_recorded(out).records) == steps


def test_the_matrix_tells_a_deliberate_refusal_from_a_broken_release() -> None:
    from conformance.ci.releases import deliberate_refusal

    assert deliberate_refusal("vllm==0.19.1 could not be built: config.prefill_schedule_"
                              "interval=2: vLLM 0.19.1 cannot honour it (...)")
    assert deliberate_refusal("vllm==0.33.0 could not be built: AssertionError: Mamba prefix "
                              "caching requires mamba_cache_mode='align'")
    assert not deliberate_refusal("vllm==0.19.1 could not be built: ValidationError: 1 "
                                  "validation error for SchedulerConfig")


def test_a_constructor_passing_kwargs_up_accepts_what_its_base_names() -> None:
    """0.19.1's AsyncScheduler takes `**kwargs` for its Scheduler base, which has no
    `hash_block_size`: the capability is read from the base, so it is left out."""

    class Base:
        def __init__(self, vllm_config: object, block_size: int) -> None: ...

    class Async(Base):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    assert fields_of(Async) == {"self", "vllm_config", "block_size"}
    kwargs = honour(Async, {"block_size": 16, "hash_block_size": 16},
                    EngineConfig(block_size=16), "0.19.1", owner="Scheduler")
    assert kwargs == {"block_size": 16}
