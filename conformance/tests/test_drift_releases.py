"""`vtwin drift` between vLLM 0.32.0 (installed here) and 0.33.0 (its managed environment)
names what changed under 0.33's new or changed options, each at the workload that pins the
twin's switch for it (`impl.behaviour`). CI runs it after building the 0.33.0 environment;
elsewhere it skips, naming the command that builds it."""

from __future__ import annotations

import pytest

from conformance.drift.run import run_drift
from conformance.tests.reference import needs_reference

pytestmark = pytest.mark.oracle
NEW = "vllm==0.33.0"
REGRESSIONS = "conformance/regressions"


def test_drift_0_32_to_0_33_names_each_switch_at_its_workload() -> None:
    needs_reference("upstream")
    needs_reference(NEW)
    workloads = [f"{REGRESSIONS}/prefill-interval-0.33.jsonl",
                 f"{REGRESSIONS}/priority-self-preemption-0.33.jsonl",
                 f"{REGRESSIONS}/lora-limit-0.33.jsonl",
                 f"{REGRESSIONS}/mamba-align-boundary-0.33.jsonl",
                 "spec-decode", "hybrid-mamba-none"]
    drift = run_drift("upstream", NEW, workloads)
    roots = {c["class"]: set(c["root_in"]) for c in drift["classes"]}
    # prefill_schedule_interval held b back (local_prefill_interval)
    assert "prefill-interval-0.33" in roots["scheduled_new"]
    # b admitted beside a's adapter only by 0.32 (lora_limit_counts_running)
    assert "lora-limit-0.33" in roots["scheduled_new"]
    # b still scheduled after a preempted itself (priority_self_preemption_continues)
    assert "priority-self-preemption-0.33" in roots["scheduled_cached"]
    # a verified block stored one step earlier (cache_verified_blocks_on_output)
    assert roots["events"] == {"spec-decode"}
    # b hits a's prompt-boundary state a step earlier (mamba_align_skips_keyed_boundary)
    assert "mamba-align-boundary-0.33" in roots["scheduled_new"]
    # mamba prefix caching refused (mamba_prefix_caching_requires_align): 0.33 cannot be
    # built for that config, an error drift names apart from its classes
    [refused] = drift["unbuilt"]
    assert refused["workloads"] == ["hybrid-mamba-none"]
    assert refused["reason"].startswith(f"{NEW} could not be built: AssertionError: Mamba "
                                        "prefix caching requires mamba_cache_mode='align'")
    assert "hybrid-mamba-none" not in roots.get("end", set())
