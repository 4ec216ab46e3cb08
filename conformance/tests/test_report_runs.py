"""Per-run report directories: a run never replaces another one's report, `latest` follows the
newest run, the index of runs lists them all, and the test report of a run links the lockstep
page of the same run. The twin runs against itself: no upstream vLLM needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.ci import report as tests_report
from conformance.cli.conform import main

IMPL = ["--system", "impl", "--against", "impl"]
JUNIT = """<testsuite><testcase classname="conformance.tests.test_kv_differential"
name="test_full" time="1.5"/><testcase classname="conformance.tests.test_sched_none_hash"
name="test_seed" time="0.1"><failure message="boom">trace</failure></testcase></testsuite>"""


def test_runs_get_directories_of_their_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "reports" / "conformance"
    assert main(["conform", "--workload", "decode-heavy", *IMPL, "--run-id", "one"]) == 0
    assert main(["conform", "--workload", "spec-decode", *IMPL]) == 0
    err = capsys.readouterr().err
    runs = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    assert runs[-1] == "one" and runs[0].endswith("-conform") and len(runs) == 2
    first = json.loads((root / "one" / "conform.json").read_text())
    assert first["workloads"][0]["workload"] == "decode-heavy" and first["run_id"] == "one"
    latest = (root / "latest.txt").read_text().strip()
    assert latest == runs[0] and (root / "latest").resolve() == (root / runs[0]).resolve()
    assert f"report: reports/conformance/{runs[0]}/conform.html" in err
    index = json.loads((root / "runs.json").read_text())
    assert {r["id"] for r in index["runs"]} == {"one", runs[0]}
    page = (root / "index.html").read_text()
    assert "one/conform.html" in page and f"{runs[0]}/conform.html" in page
    # A given id is never reused: the second run with it is refused before any work.
    assert main(["conform", "--workload", "decode-heavy", *IMPL, "--run-id", "one"]) == 2
    assert "already has a report" in capsys.readouterr().err


def test_an_explicit_report_dir_says_it_replaces(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for _ in range(2):
        assert main(["conform", "--workload", "decode-heavy", *IMPL,
                     "--report", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert err.count(f"replacing the report in {tmp_path}") == 1


def test_the_test_report_links_its_own_run(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "conformance"
    assert main(["conform", "--workload", "decode-heavy", *IMPL,
                 "--report", str(root / "r1")]) == 0
    junit = root / "r1" / "junit.xml"
    junit.write_text(JUNIT)
    assert tests_report.main([str(junit), "--out", str(root / "r1"), "--index"]) == 1
    page = (root / "r1" / "index.html").read_text()
    assert "href=\"conform.html\"" in page and "href=\"../index.html\"" in page
    # Grouped by area, the failing group open, hashing tests under versions, not scheduler.
    assert "<b>KV core</b>: 1 passed, 0 failed" in page
    assert "<details open><summary><b>Versions and hashing</b>: 0 passed, 1 failed" in page
    assert (root / "latest.txt").read_text().strip() == "r1"
    runs = json.loads((root / "runs.json").read_text())["runs"]
    assert runs[0]["tests"]["failed"] == 1 and runs[0]["workloads"] == 1
    capsys.readouterr()
