"""`vtwin conform` / `vtwin gate` from the outside: exit codes, one-line errors, the report,
and the known-divergences file (waivers, malformed entries, stale entries). Runs the twin
against itself or a planted variant, so no upstream vLLM is needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cli.conform import main
from conformance.sched.divergences import load_known
from conformance.tests.test_sched_planted import FREE_ORDER
from workloads import dump

VARIANT = "conformance.tests.test_sched_planted:ForwardFreeImpl"


def conform(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["conform", *args])
    return code, capsys.readouterr().err


def known_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "known.toml"
    path.write_text(text)
    return path


def test_a_clean_run_exits_0_and_writes_json_html_and_traces(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "extra.json"
    code, err = conform(capsys, "--workload", "preemption-storm", "--system", "impl",
                        "--against", "impl", "--report", str(tmp_path), "--json", str(out),
                        "--traces", "--progress-every", "100")
    assert code == 0, err
    assert "[1/1] preemption-storm: " in err and " steps, passed at exact" in err
    assert "preemption-storm: step 200" in err  # progress line
    data = json.loads((tmp_path / "conform.json").read_text())
    assert data == json.loads(out.read_text()) and data["ok"] is True
    [w] = data["workloads"]
    assert (w["verdict"], w["level_reached"]) == ("passed", "exact") and w["steps"] > 200
    assert len(w["series"]["left"]["active"]) == w["steps"]
    page = (tmp_path / "conform.html").read_text()
    # Self-contained: charts drawn by plotly.js embedded once, nothing loaded from elsewhere.
    assert "class='chart'" in page and page.count("<script src") == 0
    traces = sorted(p.name for p in (tmp_path / "traces").iterdir())
    assert traces == ["preemption-storm.left-impl.trace.jsonl",
                      "preemption-storm.right-impl.trace.jsonl"]


def test_a_divergence_exits_1_and_shows_up_side_by_side(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "free-order.jsonl"
    dump(FREE_ORDER, path)  # also checks that workload files are accepted
    code, err = conform(capsys, "--workload", str(path), "--system", VARIANT,
                        "--against", "impl", "--report", str(tmp_path))
    assert code == 1
    assert "failed at exact (reached: schedule" in err and "field free_head[0]" in err
    [w] = json.loads((tmp_path / "conform.json").read_text())["workloads"]
    first = w["divergences"][0]
    assert (first["level"], first["step"], first["field"]) == ("exact", 0, "free_head[0]")
    assert first["left_record"]["step"] == 0 and first["preceding"] == []
    assert 'class="diff"' in (tmp_path / "conform.html").read_text()
    # The same run at the schedule level passes.
    code, _ = conform(capsys, "--workload", str(path), "--system", VARIANT,
                      "--against", "impl", "--report", str(tmp_path), "--level", "schedule")
    assert code == 0


def test_a_known_divergence_waives_and_a_stale_one_fails(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "free-order.jsonl"
    dump(FREE_ORDER, path)
    waiver = known_file(tmp_path, '[[divergence]]\nid = "planted:free_head"\n'
                                  'level = "renamed"\nreason = "planted for the test"\n')
    common = ["--workload", str(path), "--system", VARIANT, "--against", "impl",
              "--report", str(tmp_path), "--known", str(waiver)]
    code, err = conform(capsys, *common)
    assert code == 0, err
    assert "known at exact" in err and "planted for the test" in err
    # Against itself the twin does not diverge: the entry matches nothing and fails the run.
    code, err = conform(capsys, "--workload", str(path), "--system", "impl",
                        "--against", "impl", "--report", str(tmp_path), "--known", str(waiver))
    assert code == 1 and "stale known divergence 'planted:free_head'" in err
    # At the schedule level the entry (weakest level: renamed) cannot apply, so it is not stale.
    code, _ = conform(capsys, *common, "--level", "schedule")
    assert code == 0


@pytest.mark.parametrize(("args", "message"), [
    (["--workload", "no-such-workload"], "no workload file or bundled workload named "
                                         "'no-such-workload'"),
    (["--workload", "preemption-storm", "--level", "fuzzy"], "unknown level 'fuzzy'"),
    (["--workload", "preemption-storm", "--system", "nope"], "unknown system 'nope'"),
    (["--workload", "preemption-storm", "--system", "no.such.module:make"],
     "cannot import 'no.such.module'"),
    (["--workload", "preemption-storm", "--max-steps", "0"], "--max-steps must be"),
])
def test_user_errors_are_one_line(args: list[str], message: str, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    code, err = conform(capsys, *args, "--report", str(tmp_path))
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("vtwin: error: ") and message in err


def test_a_malformed_workload_file_names_file_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    code, err = conform(capsys, "--workload", str(bad), "--report", str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and f"{bad}:1" in err


@pytest.mark.parametrize(("text", "message"), [
    ("[[divergence]\n", "not valid TOML"),
    ('[[divergence]]\nid = "w:f"\nlevel = "exact"\n', "field 'reason' must be a non-empty"),
    ('[[divergence]]\nid = "w"\nlevel = "exact"\nreason = "r"\n', "must look like WORKLOAD:FIELD"),
    ('[[divergence]]\nid = "w:f"\nlevel = "close"\nreason = "r"\n', "field 'level' must be one"),
    ('[[divergence]]\nid = "w:f"\nlevel = "exact"\nreason = "r"\nstep = 3\n', "unknown field"),
    ('[[divergence]]\nid = "w:f"\nlevel = "exact"\nreason = "r"\n' * 2, "duplicate id"),
    ('title = "x"\n', "unknown top-level key 'title'"),
])
def test_malformed_known_divergences_are_one_line_errors(
        text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = known_file(tmp_path, text)
    code, err = conform(capsys, "--workload", "preemption-storm", "--known", str(path),
                        "--report", str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and str(path) in err and message in err


def test_the_shipped_known_divergences_file_is_valid() -> None:
    load_known(Path(__file__).resolve().parents[1] / "divergences.toml")


def test_gate_and_conform_are_registered_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["gate", "--help"])
    assert "--level" in capsys.readouterr().out
