"""`vtwin study continuum`: both policies on the twin, the JSON numbers, the page's charts."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.cli import main


def test_study_on_agentic_under_pressure(tmp_path: Path, capsys: object) -> None:
    out = tmp_path / "study"
    assert main(["study", "continuum", "--workload", "agentic", "--num-blocks", "200",
                 "--report", str(out)]) == 0
    data = json.loads((out / "study.json").read_text())
    fcfs, cont = data["runs"]
    assert (fcfs["policy"], cont["policy"]) == ("fcfs", "continuum")
    assert (fcfs["steps"], cont["steps"], cont["run_steps"]) == (671, 671, 672)
    assert (fcfs["tokens_computed"], cont["tokens_computed"]) == (5094, 4998)
    assert (fcfs["preemptions"], cont["preemptions"]) == (0, 0)
    assert fcfs["max_pinned_blocks"] == 0 and cont["max_pinned_blocks"] > 0
    assert cont["prefix_hit_rate"] > fcfs["prefix_hit_rate"]
    # Almost no pressure on time: one turn whose prefix a pin kept ends a step sooner.
    # (Equal for every job until the harness's runner stopped sampling at the prefill chunks
    # of closed-loop turns, whose prompts it took from the file instead of the scheduler.)
    assert data["jct_steps"]["continuum"] == {**data["jct_steps"]["fcfs"], "job003": 481}
    assert data["jct_steps"]["fcfs"]["job003"] == 482
    assert data["verdict"][0].startswith("Continuum wins on mean job completion time")
    page = (out / "study.html").read_text()
    for chart in ("blocks-fcfs", "blocks-continuum", "queues", "pinned", "jct"):
        assert f"id='{chart}'" in page
    assert "Plotly.newPlot" in page
    first = json.loads((out / "trace-continuum.jsonl").read_text().splitlines()[0])
    assert first["kind"] == "step_snapshot" and first["step"] == 10


def test_study_refuses_a_workload_without_step_ms(tmp_path: Path) -> None:
    assert main(["study", "continuum", "--workload", "decode-heavy",
                 "--report", str(tmp_path / "s")]) == 2
