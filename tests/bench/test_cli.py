"""`vtwin bench`: registration, listing, and refusing to measure without the oracle."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from conformance import bench_cli
from conformance.bench import quick
from conformance.errors import UserError


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


def test_selection_by_glob_or_substring() -> None:
    cases, _ = quick.all_cases()
    assert [c.name for c in quick.select(cases, ["replay.*"])] == ["replay.mooncake",
                                                                    "replay.azure"]
    assert len(quick.select(cases, ["sha256_cbor"])) == 3
    assert quick.select(cases, []) == cases


def test_harness_imports_without_vllm() -> None:
    """Importing every harness module and listing the cases must not import vLLM."""
    code = ("import sys\n"
            "import conformance.bench_cli, conformance.bench.quick, conformance.bench.report\n"
            "conformance.bench.quick.all_cases()\n"
            "assert 'vllm' not in sys.modules, 'vllm was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
