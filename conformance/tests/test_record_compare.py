"""`vtwin record` and `vtwin compare`: two runs recorded apart and compared offline agree with
what lockstep would say: impl against impl is exact, and a planted difference is found at the
step and field where it was planted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.sched.recorded import compare_recorded, read_recorded


def _record(tmp_path: Path, name: str, system: str = "impl",
            workload: str = "preemption-storm") -> Path:
    out = tmp_path / f"{name}.trace.jsonl"
    assert main(["record", "--system", system, "--workload", workload, "-o", str(out)]) == 0
    return out


def test_impl_against_impl_is_exact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _record(tmp_path, "a"), _record(tmp_path, "b", "impl+worker")
    verdict = tmp_path / "verdict.json"
    assert main(["compare", str(a), str(b), "--json", str(verdict)]) == 0
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "preemption-storm:" in line and "passed at exact (reached: exact" in line
    data = json.loads(verdict.read_text())
    assert data["verdict"] == "passed" and data["divergences"] == []
    assert data["left"]["end"]["end"] == "finished"
    recorded = read_recorded(a)
    assert recorded.none_hash is not None and len(recorded.records) == data["steps"]


def _plant(path: Path, step: int) -> None:
    """Give one request of `step` another computed-token count (an off-by-one twin)."""
    lines = path.read_text().splitlines()
    for index, line in enumerate(lines):
        data = json.loads(line)
        if data.get("step") == step:
            computed = data["after"]["num_computed_tokens"]
            first = next(iter(computed))
            computed[first] += 1
            lines[index] = json.dumps(data, separators=(",", ":"))
    path.write_text("\n".join(lines) + "\n")


def test_a_planted_difference_is_found_at_its_step(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _record(tmp_path, "a"), _record(tmp_path, "b")
    _plant(b, 7)
    assert main(["compare", str(a), str(b), "--level", "exact"]) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert "failed at exact" in line and "step 7, field num_computed_tokens." in line
    result = compare_recorded(read_recorded(a), read_recorded(b))
    exact = result.divergence_at("exact")
    assert exact is not None and (exact.step, exact.top_field) == (7, "num_computed_tokens")
    # The schedule level does not look at computed tokens: it still passes.
    assert result.divergence_at("schedule") is None
    assert main(["compare", str(a), str(b), "--level", "schedule"]) == 0


def test_compare_refuses_different_workloads_and_non_traces(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    a = _record(tmp_path, "a")
    b = _record(tmp_path, "b", workload="decode-heavy")
    assert main(["compare", str(a), str(b)]) == 2
    assert "different workloads" in capsys.readouterr().err
    junk = tmp_path / "junk.jsonl"
    junk.write_text('{"hello": 1}\n')
    assert main(["compare", str(a), str(junk)]) == 2
    assert "not a trace" in capsys.readouterr().err


def test_record_to_standard_output_is_the_same_trace(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`-o -` writes the trace to stdout (the summary line stays on stderr), byte for byte the
    file `-o FILE` writes."""
    path = _record(tmp_path, "file", workload="decode-heavy")
    capsys.readouterr()
    assert main(["record", "--workload", "decode-heavy", "-o", "-"]) == 0
    captured = capsys.readouterr()
    assert captured.out == path.read_text() and "-> -" in captured.err
