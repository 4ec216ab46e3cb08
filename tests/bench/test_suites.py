"""The asv suites keep numpy's conventions: system first, one-line timed bodies, setup-only
allocation; and `benchmarks.common` loads the harness from this checkout."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SUITES = sorted(BENCHMARKS.glob("bench_*.py"))
PREFIXES = ("time_", "peakmem_", "track_", "timeraw_")


def benchmark_classes(path: Path) -> list[ast.ClassDef]:
    tree = ast.parse(path.read_text())
    return [node for node in tree.body if isinstance(node, ast.ClassDef)
            and not node.name.startswith("_")]


def test_there_are_suites() -> None:
    names = {p.stem for p in SUITES}
    assert {"bench_block_pool", "bench_hashing", "bench_scheduler", "bench_replay",
            "bench_import"} <= names


@pytest.mark.parametrize("path", SUITES, ids=lambda p: p.stem)
def test_time_methods_are_one_line(path: Path) -> None:
    for cls in benchmark_classes(path):
        for node in cls.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("time_"):
                assert len(node.body) == 1, f"{cls.name}.{node.name} has more than one line"


@pytest.mark.parametrize("path", SUITES, ids=lambda p: p.stem)
def test_every_benchmark_is_parametrized_by_system_first(path: Path) -> None:
    source = path.read_text()
    classes = benchmark_classes(path)
    assert classes, f"{path.name} defines no benchmark class"
    assert "param_names = [\"system\"" in source
    for cls in classes:
        methods = [n.name for n in cls.body if isinstance(n, ast.FunctionDef)]
        assert any(m.startswith(PREFIXES) for m in methods) or cls.bases, cls.name


def test_common_loads_the_harness_from_the_tree() -> None:
    from benchmarks import common

    scenarios = common.submodule("scenarios")
    assert scenarios.__name__ == "vtwin_bench.scenarios"
    assert Path(scenarios.__file__).resolve().parent == common.HARNESS_DIR
    assert common.SYSTEMS == ["impl", "upstream"]
    assert common.memo("k", lambda: object()) is common.memo("k", lambda: object())


def test_suites_import_without_vllm_outside_asv() -> None:
    """The upstream preload is asv-only; importing every suite elsewhere stays cold."""
    import subprocess
    import sys

    code = ("import sys, importlib\n"
            "for name in ('bench_block_pool', 'bench_hashing', 'bench_scheduler',\n"
            "             'bench_replay', 'bench_import', 'bench_engine'):\n"
            "    importlib.import_module('benchmarks.' + name)\n"
            "assert 'vllm' not in sys.modules, 'vllm was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120,
                   cwd=BENCHMARKS.parent)
