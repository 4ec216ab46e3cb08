"""`vtwin bench`: registration, listing, refusing to measure without the oracle, a directory
per run with `latest` and an index, and `-` for stdout."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.bench import quick
from conformance.bench.measure import Result
from conformance.cli import bench as bench_cli
from vtwin.errors import UserError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="vtwin")
    bench_cli.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["bench", *argv])


def test_register_adds_bench_with_a_handler() -> None:
    args = parse("--quick", "--json", "out.json", "--only", "hashing", "--rounds", "3")
    assert args.handler is bench_cli.run and args.quick and args.rounds == 3
    assert args.only == ["hashing"] and str(args.json) == "out.json"


def test_list_names_cases_without_measuring(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_cli.run(parse("--list", "--only", "scheduler.decode*")) == 0
    names = capsys.readouterr().out.split()
    assert names == [f"scheduler.decode[{n}]" for n in (16, 64, 256, 1024)]


def test_measuring_needs_quick() -> None:
    with pytest.raises(UserError, match="--quick"):
        bench_cli.run(parse())


def test_measuring_needs_upstream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quick, "upstream_available", lambda: False)
    with pytest.raises(UserError, match="upstream vLLM is not installed"):
        bench_cli.run(parse("--quick"))


def test_dropin_needs_upstream_and_names_the_twin_it_runs(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(quick, "upstream_available", lambda: False)
    with pytest.raises(UserError, match="the drop-in runs inside its engine"):
        bench_cli.run(parse("--dropin"))
    assert "vtwin bench: twin: pure Python" in capsys.readouterr().err


def test_dropin_timing_reports_the_scheduling_share() -> None:
    from conformance.bench.dropin import DropInTiming

    timing = DropInTiming("impl", steps=10, tokens_per_second=100.0, sched_ms_per_step=0.5,
                          step_ms=10.0)
    assert timing.sched_share == pytest.approx(5.0)
    assert timing.to_json()["sched_share_percent"] == pytest.approx(5.0)
    assert "0.500 ms/step (5.0% of the step)" in timing.line()


def test_selection_by_glob_or_substring() -> None:
    cases, _ = quick.all_cases()
    assert [c.name for c in quick.select(cases, ["replay.*"])] == ["replay.mooncake",
                                                                    "replay.azure"]
    assert len(quick.select(cases, ["sha256_cbor"])) == 3
    assert quick.select(cases, []) == cases


def test_harness_imports_without_vllm() -> None:
    """Importing every harness module and listing the cases must not import vLLM."""
    code = ("import sys\n"
            "import conformance.cli.bench, conformance.bench.quick, conformance.bench.report\n"
            "conformance.bench.quick.all_cases()\n"
            "assert 'vllm' not in sys.modules, 'vllm was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# -- run directories and '-' for stdout ---------------------------------------------------------
RESULTS = [
    Result("scheduler.decode[64]", "ms/step", 0.5, 2.5, 0.2, 5.0, True, "<= 1/5", True),
    Result("block_pool.touch[100000]", "Mblocks/s", 2.0, 2.5, 0.8, 0.8, False, ">= 5x", False),
]


@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[int]:
    """A quick pass that measures nothing (no upstream needed); counts the passes run."""
    calls: list[int] = []

    def fake_run(patterns: object, rounds: int, progress: object = None) -> quick.QuickRun:
        calls.append(rounds)
        return quick.QuickRun(results=list(RESULTS), seconds=1.0)

    monkeypatch.setattr(quick, "upstream_available", lambda: True)
    monkeypatch.setattr(quick, "run_quick", fake_run)
    monkeypatch.chdir(tmp_path)
    return calls


def test_each_run_gets_a_directory_latest_and_an_index(
        measured: list[int], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_cli.run(parse("--quick", "--run-id", "first")) == 0
    assert bench_cli.run(parse("--quick")) == 0
    root = tmp_path / "reports" / "benchmarks"
    runs = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    assert runs[-1] == "first" and runs[0].endswith("-bench") and len(runs) == 2
    for run in runs:
        assert {"benchmarks.json", "benchmarks.md", "run.json"} <= {
            p.name for p in (root / run).iterdir()}
    assert (root / "latest.txt").read_text().strip() == runs[0]
    assert (root / "latest").resolve() == (root / runs[0]).resolve()
    index = json.loads((root / "runs.json").read_text())
    assert index["latest"] == runs[0] and {r["id"] for r in index["runs"]} == set(runs)
    first = next(r for r in index["runs"] if r["id"] == "first")
    assert first["slower"] == ["block_pool.touch[100000]"] and first["targets_met"] == 1
    page = (root / "index.html").read_text()
    assert "first/benchmarks.md" in page and f"{runs[0]}/benchmarks.md" in page
    # A given id is never reused, and the refusal comes before anything is measured.
    with pytest.raises(UserError, match="already has a report"):
        bench_cli.run(parse("--quick", "--run-id", "first"))
    assert len(measured) == 2
    capsys.readouterr()


def test_an_explicit_report_dir_says_it_replaces(
        measured: list[int], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mine"
    for _ in range(2):
        assert bench_cli.run(parse("--quick", "--report", str(out))) == 0
    assert capsys.readouterr().err.count(f"replacing the report in {out}") == 1
    assert not (tmp_path / "reports").exists()


@pytest.mark.parametrize("flag", ["--json", "--markdown"])
def test_dash_means_stdout(measured: list[int], flag: str,
                           capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_cli.run(parse("--quick", flag, "-")) == 0
    out, err = capsys.readouterr()
    assert not Path("-").exists()
    if flag == "--json":
        assert [r["name"] for r in json.loads(out)] == [r.name for r in RESULTS]
    else:
        assert out.startswith("# vtwin benchmarks") and "| scheduler.decode[64] |" in out
    assert "scheduler.decode[64]" in err  # the table moved to stderr, stdout stays clean


@pytest.mark.parametrize("argv, message", [
    (("--json", "-", "--markdown", "-"), "share stdout"),
    (("--json", "."), "is a directory"),
    (("--run-id", "latest"), "--run-id"),
    (("--asv-results", "nowhere"), "not a directory"),
])
def test_bad_outputs_fail_before_measuring(measured: list[int], argv: tuple[str, ...],
                                           message: str) -> None:
    with pytest.raises(UserError, match=message):
        bench_cli.run(parse("--quick", *argv))
    assert measured == [] and not Path("reports").exists()
