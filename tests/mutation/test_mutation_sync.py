"""`conformance.mutation.sync`: mutmut's copies of non-Python files are refreshed and copies
without a source removed before each run (mutmut itself copies a file only once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.mutation.sync import source_paths, sync_copies
from vtwin.errors import UserError


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_stale_and_missing_copies_are_refreshed_and_orphans_removed(tmp_path: Path) -> None:
    source, mutants = tmp_path / "src", tmp_path / "mutants"
    write(source / "impl/core/native/blockhash.c", "int v2;")
    write(source / "impl/core/_blockhash.pyi", "def f() -> int: ...")
    write(source / "impl/core/new.txt", "new")
    write(source / "impl/core/kept.py", "x = 1")
    write(source / "impl/core/same.dat", "same")
    write(mutants / "impl/core/native/blockhash.c", "int v1;")  # stale
    write(mutants / "impl/core/kept.py", "x = 1  # mutated")  # mutmut's: left alone
    write(mutants / "impl/core/kept.py.meta", "{}")
    write(mutants / "impl/core/kept.py.spans", "{}")
    write(mutants / "impl/core/same.dat", "same")
    write(mutants / "impl/core/gone.py", "y = 2")  # source deleted
    write(mutants / "impl/core/gone.py.meta", "{}")
    write(mutants / "impl/core/gone.py.spans", "{}")
    write(mutants / "impl/core/old.c", "int old;")
    write(mutants / "impl/core/__pycache__/kept.cpython-311.pyc", "")
    write(mutants / "workloads/other.py", "z = 3")  # not a source path: untouched

    result = sync_copies(mutants, source, ["impl"])

    assert result.refreshed == ("impl/core/_blockhash.pyi", "impl/core/native/blockhash.c",
                                "impl/core/new.txt")
    assert result.removed == ("impl/core/gone.py", "impl/core/gone.py.meta",
                              "impl/core/gone.py.spans", "impl/core/old.c")
    assert (mutants / "impl/core/native/blockhash.c").read_text() == "int v2;"
    assert (mutants / "impl/core/new.txt").read_text() == "new"
    assert (mutants / "impl/core/kept.py").read_text() == "x = 1  # mutated"
    assert (mutants / "impl/core/kept.py.meta").is_file()
    assert (mutants / "impl/core/kept.py.spans").is_file()
    assert (mutants / "impl/core/__pycache__/kept.cpython-311.pyc").is_file()
    assert (mutants / "workloads/other.py").is_file()
    assert "refreshed 3 non-Python copies, removed 4" in result.line()
    again = sync_copies(mutants, source, ["impl"])
    assert again.refreshed == () and again.removed == ()


def test_a_path_mutmut_has_not_copied_yet_is_left_to_it(tmp_path: Path) -> None:
    write(tmp_path / "src/impl/a.c", "int a;")
    result = sync_copies(tmp_path / "mutants", tmp_path / "src", ["impl"])
    assert (result.refreshed, result.removed) == ((), ())
    assert not (tmp_path / "mutants").exists()


def test_source_paths_come_from_pyproject(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    write(pyproject, '[tool.mutmut]\nsource_paths = ["impl", "lib"]\n')
    assert source_paths(pyproject) == ["impl", "lib"]
    write(pyproject, "[tool.other]\n")
    assert source_paths(pyproject) == ["src"]
    write(pyproject, "[tool.mutmut]\nsource_paths = 3\n")
    with pytest.raises(UserError, match="source_paths must be a list of strings"):
        source_paths(pyproject)
    write(pyproject, "[tool.mutmut\n")
    with pytest.raises(UserError, match="cannot read"):
        source_paths(pyproject)
    assert source_paths(Path(__file__).parents[2] / "pyproject.toml") == ["impl"]
