"""Campaigns without Ray: families, the task runner, the shrinker, the store and its report.

The Ray side (workers, retries, resume across runs) is in `test_campaign_ray.py`; everything
here runs in process, with the twin and planted variants of it as the systems.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from conformance.campaign.families import draw_config, family_names, parse_families, workload_for
from conformance.campaign.report import render, throughput
from conformance.campaign.shrink import Budget, ddmin, shrink
from conformance.campaign.store import Store, merge
from conformance.campaign.task import Comparison, Task, TaskResult, pair_signature, run_task
from conformance.campaign.worker import ensure_env
from conformance.cli.campaign import parse_seeds, parse_systems
from conformance.systems.registry import resolve_system
from conformance.systems.remote import envs
from conformance.tests.campaign_planted import LONG_PROMPT
from vtwin.errors import UserError
from workloads import dumps, loads
from workloads.model import Workload

PLANTED = "conformance.tests.campaign_planted:planted"
TWIN_AGAIN = "conformance.systems.twin:ImplSystem"


def test_every_family_draws_the_same_valid_workload_twice() -> None:
    for family in family_names():
        for seed in (0, 7):
            first, draw = workload_for(family, seed)
            again, _ = workload_for(family, seed)
            assert first == again and first.name == f"{family}-seed{seed}"
            back = loads(dumps(first), source=first.name)  # the format's checks accept it
            assert (back.config, back.requests, back.plans) == (
                first.config, first.requests, first.plans)
    assert workload_for("hypothesis", 1)[0] != workload_for("hypothesis", 2)[0]


def test_config_draws_vary_the_config_and_keep_upstreams_rules() -> None:
    base, _ = workload_for("spec-decode", 0)
    seen: set[str] = set()
    for seed in range(200):
        config, changes = draw_config(base.config, random.Random(seed))
        seen.update(changes)
        assert config.max_num_batched_tokens >= config.max_num_seqs
        threshold = config.long_prefill_token_threshold
        assert threshold == 0 or threshold >= 1 + config.num_spec_tokens
        if not config.enable_chunked_prefill:
            assert config.max_num_batched_tokens >= config.max_model_len
    assert {"hash_algo", "async_scheduling", "num_blocks", "enable_chunked_prefill"} <= seen


def test_a_familys_own_policy_keeps_its_scheduling_mode() -> None:
    """Continuum refuses async scheduling and is the agentic family's point: a draw changes
    neither (it would only make both systems refuse the config)."""
    base = replace(workload_for("decode-heavy", 0)[0].config, policy="continuum",
                   async_scheduling=False)
    for seed in range(100):
        config, changes = draw_config(base, random.Random(seed))
        assert (config.policy, config.async_scheduling) == ("continuum", False), changes


@pytest.mark.parametrize("bad", ["3", "5:2", "-1:4", "a:b"])
def test_bad_seeds_are_one_line(bad: str) -> None:
    with pytest.raises(UserError, match="--seeds"):
        parse_seeds(bad)


def test_families_and_systems_are_checked() -> None:
    assert parse_families("all") == family_names()
    assert parse_families("bursty, hypothesis") == ("bursty", "hypothesis")
    with pytest.raises(UserError, match="unknown family nope"):
        parse_families("bursty,nope")
    assert parse_systems("impl, vllm==0.32.0") == ("impl", "vllm==0.32.0")
    for bad in ("impl", "impl,impl", "impl,nonsense"):
        with pytest.raises(UserError):
            parse_systems(bad)


def test_ddmin_finds_a_one_minimal_subset() -> None:
    assert ddmin(list(range(30)), lambda xs: 4 in xs and 17 in xs) == [4, 17]
    assert ddmin([1, 2, 3], lambda xs: True) == []


def test_run_task_judges_two_and_three_systems() -> None:
    specs = ("impl", PLANTED, TWIN_AGAIN)
    factories = {s: resolve_system(s) for s in specs}
    pair = run_task(Task(specs[:2], "decode-heavy", 1), factories)
    assert [(c.outcome, c.signature, c.step) for c in pair.comparisons] == [
        ("diverged", "exact:block_tables", 0)]
    three = run_task(Task(specs, "decode-heavy", 1), factories)
    assert [(c.right, c.outcome, c.signature) for c in three.comparisons] == [
        (PLANTED, "diverged", "exact:block_tables"), (TWIN_AGAIN, "passed", "")]
    assert three.steps == pair.steps or three.steps > 0


def test_a_config_both_refuse_is_agreement_one_refusing_is_unbuilt() -> None:
    refuser, again = (f"conformance.tests.campaign_planted:{name}"
                      for name in ("refuses_async", "refuses_async_too"))
    specs = (refuser, again, "impl")
    factories = {s: resolve_system(s) for s in specs}
    seed = next(s for s in range(50) if workload_for("bursty", s)[0].config.async_scheduling)
    result = run_task(Task(specs, "bursty", seed), factories)
    assert [(c.right, c.outcome, c.signature) for c in result.comparisons] == [
        (again, "refused", ""), ("impl", "unbuilt", "unbuilt")]
    assert result.comparisons[1].detail.startswith(f"{refuser} could not be built: ValueError")
    assert "both systems refuse the config" in result.comparisons[0].detail


def test_shrink_keeps_the_signature_and_reaches_one_request() -> None:
    left, right = resolve_system("impl"), resolve_system(PLANTED)
    workload, _ = workload_for("decode-heavy", 1)
    assert len(workload.requests) > 5

    def fails(candidate: Workload) -> bool:
        got = pair_signature(candidate, left, right, ("impl", PLANTED))
        return got.failed and got.signature == "exact:block_tables"

    small, runs = shrink(workload, fails, Budget(runs=100))
    assert [(r.prompt_len, r.max_tokens) for r in small.requests] == [(LONG_PROMPT + 1, 1)]
    assert 0 < runs <= 100 and fails(small)
    assert shrink(workload, fails, Budget(runs=1))[1] == 1  # the budget bounds the runs


def _result(family: str, seed: int, outcome: str, signature: str = "") -> TaskResult:
    task = Task(("impl", "upstream"), family, seed)
    return TaskResult(task, f"{family}-seed{seed}", "{}", 3, 40, 0.5,
                      (Comparison("impl", "upstream", outcome, None, signature, 2, "x"),),
                      "host", 1)


def test_store_resume_keys_failure_classes_and_merge(tmp_path: Path) -> None:
    a = Store.of(tmp_path / "a")
    a.start_run("r1", "2026-01-01T00:00:00", "impl,upstream", "bursty", None, "c0de")
    a.add_result(_result("bursty", 0, "passed"), "r1")
    a.add_result(_result("bursty", 1, "diverged", "exact:events"), "r1")
    a.add_result(_result("bursty", 2, "diverged", "exact:events"), "r1")
    a.finish_run("r1", workers=2, tasks=3, seconds=70.0, startup_seconds=10.0,
                 status="finished")
    assert a.done("impl,upstream") == {("bursty", 0), ("bursty", 1), ("bursty", 2)}
    assert a.done("impl,vllm==0.33.0") == set()
    [failure] = a.unshrunk("impl,upstream")
    assert (failure.family, failure.signature, failure.seed) == ("bursty", "exact:events", 1)
    a.add_regression(failure, "f.jsonl", "{}", (3, 1), 9, 1.0, "3 -> 1", "r1")
    assert a.unshrunk("impl,upstream") == []
    page = render(a, "r1")
    assert "bursty" in page and "f.jsonl" in page and "<b>1.5</b>" in page  # 3 in a minute, 2 cores
    a.close()
    b = Store.of(tmp_path / "b")
    b.add_result(_result("bursty", 2, "passed"), "r2")  # judged differently: a conflict
    b.add_result(_result("bursty", 3, "passed"), "r2")
    b.close()
    counts = merge([tmp_path / "a", tmp_path / "b"], tmp_path / "c")
    assert counts == {"results": 4, "regressions": 1, "runs": 1, "conflicts": 1}
    c = Store.of(tmp_path / "c")
    assert len(c.done("impl,upstream")) == 4
    c.close()


def test_throughput_is_per_core_and_excludes_start_up() -> None:
    assert throughput({"tasks": 120, "workers": 2, "seconds": 70, "startup_seconds": 10}) == 60
    assert throughput({"tasks": 0, "workers": 2, "seconds": 70, "startup_seconds": 10}) is None


def test_a_failed_environment_build_is_reported_not_repeated(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers of one machine need the same missing release: one builds (here: fails
    after a while), the other waits on the lock and reports that failure instead of failing
    the same build again."""
    builds: list[str] = []

    def failing_create(text: str, out: object, **_: object) -> Path:
        builds.append(text)
        time.sleep(0.3)
        raise UserError(f"env {text!r}: stage 'vllm' failed (exit 1): no such release")

    monkeypatch.setenv("VTWIN_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(envs, "create", failing_create)
    errors: list[str] = []

    def worker() -> None:
        try:
            ensure_env("vllm==9.9.9")
        except UserError as err:
            errors.append(str(err))

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert builds == ["vllm==9.9.9"]
    assert errors == ["env 'vllm==9.9.9': stage 'vllm' failed (exit 1): no such release"] * 2
    ensure_env("impl")  # nothing to build for a system without an environment


def test_agentic_runs_under_fcfs_unless_the_continuum_fork_is_compared() -> None:
    """Upstream releases refuse the continuum policy: against them the agentic family's
    closed-loop sessions run under FCFS; against continuum-fork they keep continuum."""
    released, draw = workload_for("agentic", 0, ("impl", "vllm==0.32.0"))
    assert (released.config.policy, released.config.continuum, draw["policy"]) == (
        "fcfs", None, "fcfs")
    forked, draw = workload_for("agentic", 0, ("impl", "continuum-fork"))
    assert forked.config.policy == "continuum" and "policy" not in draw
    assert forked.requests == released.requests
