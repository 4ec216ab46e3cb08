"""`vtwin guide` end to end against upstream: both strategies in their own processes, the
report, a corpus a later run resumes from, and a planted bug found and shrunk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workloads import load_file

pytestmark = pytest.mark.oracle
ENV = {"HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1",
       "VLLM_LOGGING_LEVEL": "ERROR", "PYTHONHASHSEED": "0"}


def guide(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "VTWIN_COMPILED"}
    env.update(ENV)
    return subprocess.run([sys.executable, "-m", "conformance.cli", "guide", *args],
                          capture_output=True, text=True, timeout=900, env=env)


def test_both_strategies_report_and_a_corpus_resumes(tmp_path: Path) -> None:
    done = guide("--runs", "6", "--seed-runs", "3", "--families", "prefix-sharing,bursty",
                 "--out", str(tmp_path), "--run-id", "first")
    assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "first"
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["strategies"]) == {"guided", "uniform"}
    for name, numbers in summary["strategies"].items():
        assert numbers["runs"] == 6, name
        assert numbers["twin_arcs"] > 1000 and numbers["upstream_arcs"] > 1000
        assert numbers["found"] == []
    guided = json.loads((run / "guided" / "search.json").read_text())
    assert guided["fresh"] >= 3 and guided["fresh"] + guided["mutants"] == 6
    files = sorted((run / "guided" / "corpus").glob("*.jsonl"))
    assert len(files) == len(guided["corpus"]) >= 1
    for path in files:
        load_file(path)  # every corpus entry is a workload file
    assert "data-figure" in (run / "index.html").read_text()
    assert (tmp_path / "latest.txt").read_text().strip() == "first"
    runs = json.loads((tmp_path / "runs.json").read_text())["runs"]
    assert [r["id"] for r in runs] == ["first"] and runs[0]["strategies"]["guided"]["runs"] == 6

    again = guide("--strategy", "guided", "--runs", str(len(files) + 1), "--corpus",
                  str(run / "guided"), "--families", "prefix-sharing", "--out",
                  str(tmp_path), "--run-id", "second")
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = json.loads((tmp_path / "second" / "guided" / "search.json").read_text())
    assert resumed["replayed"] == len(files)


def test_a_planted_bug_is_found_in_a_scratch_copy_and_shrunk(tmp_path: Path) -> None:
    """The bug lives only in the scratch copy: the checkout's twin passes the found workload."""
    from conformance.sched.lockstep import run_lockstep
    from conformance.systems.registry import resolve_system

    done = guide("--runs", "6", "--seed-runs", "2", "--families", "long-context",
                 "--planted", "threshold-when-alone", "--stop-on-failure", "--shrink-runs",
                 "10", "--out", str(tmp_path), "--run-id", "planted")
    assert done.returncode == 1, done.stderr[-3000:]
    run = tmp_path / "planted"
    assert (run / "planted.txt").read_text().startswith("threshold-when-alone: ")
    summary = json.loads((run / "summary.json").read_text())
    for name, numbers in summary["strategies"].items():
        assert numbers["found"], name
        found = numbers["found"][0]
        assert found["signature"].startswith("exact:"), found
        shrunk = load_file(run / found["file"])
        original = load_file(run / found["file"].replace(".jsonl", ".original.jsonl"))
        assert len(shrunk.requests) <= len(original.requests)
        result = run_lockstep(shrunk, resolve_system("impl"), resolve_system("upstream"))
        assert result.error is None and result.divergence_at("exact") is None
