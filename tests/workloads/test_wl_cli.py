"""`vtwin workloads ...` through `conformance.cli.app`: exit codes and output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import workloads
from conformance.cli import main
from workloads.registry import MOONCAKE_TRACE

Capture = pytest.CaptureFixture[str]


def test_list(capsys: Capture) -> None:
    assert main(["workloads", "list"]) == 0
    out = capsys.readouterr().out
    for name in workloads.list_workloads():
        assert f"  {name} " in out
    assert {"mooncake", "azure", "mooncake-full", "azure-full"} <= set(workloads.list_workloads())
    assert set(workloads.FAMILIES) <= set(workloads.list_workloads())


def test_generate_then_show(tmp_path: Path, capsys: Capture) -> None:
    out = tmp_path / "w.jsonl"
    args = ["workloads", "generate", "agent-sessions", "--seed", "2", "--scale", "0.5"]
    assert main([*args, "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    first = out.read_bytes()
    assert main([*args, "-o", str(out)]) == 0
    assert out.read_bytes() == first
    assert workloads.load(out) == workloads.generate("agent-sessions", 2, 0.5)

    assert main(["workloads", "show", str(out)]) == 0
    text = capsys.readouterr().out
    for label in ("requests:", "prompt tokens:", "prefix sharing:", "arrivals:", "p50=", "p99="):
        assert label in text


def test_generate_to_stdout(capsys: Capture) -> None:
    assert main(["workloads", "generate", "bursty", "-o", "-"]) == 0
    out = capsys.readouterr().out
    assert workloads.loads(out) == workloads.generate("bursty", 0, 1.0)


def test_show_json_of_bundled_name(capsys: Capture) -> None:
    assert main(["workloads", "show", "prefix-sharing", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    workload = workloads.load("prefix-sharing")
    assert summary["requests"] == len(workload.requests)
    assert summary["prompt_tokens"] == sum(r.prompt_len for r in workload.requests)
    assert 0 < summary["sharing_ratio"] < 1
    assert summary["prompt_len"]["p50"] <= summary["prompt_len"]["p99"]


def test_from_trace_mooncake(tmp_path: Path, capsys: Capture) -> None:
    out = tmp_path / "m.jsonl"
    args = ["workloads", "from-trace", "--format", "mooncake", str(MOONCAKE_TRACE)]
    assert main([*args, "--limit", "30", "--every", "2", "--scale", "2", "-o", str(out)]) == 0
    capsys.readouterr()
    workload = workloads.load(out)
    assert len(workload.requests) == 30
    assert workload.name == "mooncake_synthetic_trace"
    assert workload.step_ms == 20.0
    assert main(["workloads", "show", str(out)]) == 0
    assert "requests/s" in capsys.readouterr().out
    assert main(["workloads", "validate", str(out)]) == 0
    assert "ok:" in capsys.readouterr().out


def test_user_errors_exit_2(tmp_path: Path, capsys: Capture) -> None:
    assert main(["workloads", "show", "no-such-workload"]) == 2
    assert (
        "no workload file or bundled workload named 'no-such-workload'" in capsys.readouterr().err
    )
    assert main(["workloads", "generate", "nope", "-o", str(tmp_path / "x")]) == 2
    assert "unknown generator family" in capsys.readouterr().err
    missing_dir = tmp_path / "no" / "dir" / "w.jsonl"
    assert main(["workloads", "generate", "bursty", "-o", str(missing_dir)]) == 2
    assert "cannot write file" in capsys.readouterr().err
    assert main(["workloads"]) == 2
