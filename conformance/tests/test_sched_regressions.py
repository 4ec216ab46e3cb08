"""Regression files: `write_regression` / `--emit-regression` write a divergent workload as a
standalone file that reproduces the divergence, and `vtwin gate` runs every file in the
regressions directory. The twin runs against itself or a planted variant: no vLLM needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import conformance.cli.conform as sched_cli
from conformance.cli.conform import main
from conformance.paths import REGRESSIONS_DIR
from conformance.sched import suite
from conformance.sched.conform import ConformRun, run_conform
from conformance.sched.lockstep import run_lockstep
from conformance.sched.suite import gate_workloads, regression_files, write_regression
from conformance.systems.twin import ImplSystem
from conformance.tests.test_sched_liveness import OVERSIZED
from conformance.tests.test_sched_planted import FREE_ORDER, ForwardFreeImpl
from vtwin.errors import UserError
from workloads import dump, load

VARIANT = "conformance.tests.test_sched_planted:ForwardFreeImpl"


def test_a_written_divergence_reproduces_when_read_back(tmp_path: Path) -> None:
    divergence = run_lockstep(FREE_ORDER, ForwardFreeImpl, ImplSystem).divergence_at("exact")
    assert divergence is not None
    path = write_regression(FREE_ORDER, divergence, tmp_path)
    assert path == tmp_path / "planted.free_head.jsonl"
    again = load(str(path))
    assert again.name == "regression-planted" and again.requests == FREE_ORDER.requests
    assert again.description.startswith(
        f"regression (exact divergence at step {divergence.step}, field {divergence.field}); "
        "was: hand-made")
    replay = run_lockstep(again, ForwardFreeImpl, ImplSystem).divergence_at("exact")
    assert replay is not None and (replay.step, replay.field) == (
        divergence.step, divergence.field)
    assert replay.id == "regression-planted:free_head"
    # Writing a regression of a regression keeps the name (no regression-regression-...).
    assert load(str(write_regression(again, replay, tmp_path))).name == "regression-planted"


def test_a_reason_names_the_file_and_the_description(tmp_path: Path) -> None:
    path = write_regression(FREE_ORDER, "error KeyError: left system impl raised KeyError",
                            tmp_path)
    assert path.name == "planted.error-KeyError.jsonl"
    assert load(str(path)).description.startswith(
        "regression (error KeyError: left system impl raised KeyError); was:")


def test_emit_regression_names_a_stall(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["conform", "--workload", "decode-heavy", "--system",
                 "conformance.tests.test_sched_liveness:StallingImpl", "--against", "impl",
                 "--report", str(tmp_path / "report"), "--emit-regression", str(tmp_path)])
    assert code == 1, capsys.readouterr().err
    path = tmp_path / "decode-heavy.stalled-left-no-progress.jsonl"
    assert load(str(path)).description.startswith(
        "regression (stalled left no-progress: left system impl-stalling stalled at step 20")


def test_a_workload_no_file_can_hold_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="regression regression-oversized: cannot be written"):
        write_regression(OVERSIZED, "stalled", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_gate_workloads_are_the_suite_then_every_regression_file(tmp_path: Path) -> None:
    assert regression_files(tmp_path / "missing") == ()
    dump(FREE_ORDER, tmp_path / "b.jsonl")
    dump(FREE_ORDER, tmp_path / "a.jsonl")
    (tmp_path / "README.md").write_text("not a workload")
    names = gate_workloads(tmp_path)
    assert names == suite.suite_names() + (str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"))


def test_the_bundled_regressions_directory_loads() -> None:
    assert (REGRESSIONS_DIR / "README.md").is_file()
    for name in regression_files():
        load(name)


def test_gate_runs_the_regression_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = write_regression(FREE_ORDER, "seen once", tmp_path / "regressions")
    seen: dict[str, Any] = {}

    def spy(workloads: list[str], **options: Any) -> ConformRun:
        seen.update(options, workloads=workloads)
        return run_conform([str(path)], system="impl", against="impl",
                           stream=options.get("stream"))

    monkeypatch.setattr(sched_cli, "run_conform", spy)
    code = main(["gate", "--regressions", str(tmp_path / "regressions"),
                 "--report", str(tmp_path / "report")])
    assert code == 0, capsys.readouterr().err
    assert seen["workloads"] == [*suite.suite_names(), str(path)]
    assert (seen["system"], seen["against"]) == ("impl", "upstream")


def test_emit_regression_writes_failed_workloads_only(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump(FREE_ORDER, tmp_path / "free-order.jsonl")
    out = tmp_path / "emitted"
    code = main(["conform", "--workload", str(tmp_path / "free-order.jsonl"),
                 "--workload", "decode-heavy", "--system", VARIANT, "--against", "impl",
                 "--report", str(tmp_path / "report"), "--emit-regression", str(out)])
    err = capsys.readouterr().err
    assert code == 1
    written = sorted(p.name for p in out.iterdir())
    assert written == ["planted.free_head.jsonl"]  # decode-heavy frees nothing early
    assert f"wrote regression {out / written[0]}" in err
    again = load(str(out / written[0]))
    result = run_lockstep(again, ForwardFreeImpl, ImplSystem)
    assert result.divergence_at("exact") is not None
