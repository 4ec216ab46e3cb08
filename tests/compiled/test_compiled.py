"""impl.compiled without compiling: the manifest, staleness, the finder and the switch.

Compiling takes a minute, so the build itself runs in `nox -s ci` (then the scheduler suite
runs against it); these tests pin the rules that decide which build a process gets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from impl.compiled import (
    FORMAT,
    MANIFEST,
    NATIVE_MODULES,
    Build,
    CompiledFinder,
    activate,
    build_dir,
    describe,
    module_source,
    source_digest,
)
from impl.compiled.build import NOT_COMPILED, sources, up_to_date


def make_build(tmp_path: Path, text: str = "X = 1\n") -> tuple[Build, Path]:
    """A source tree with one module `impl.core.fake` and a manifest vouching for it."""
    source_root = tmp_path / "src"
    module = source_root / "impl" / "core" / "fake.py"
    module.parent.mkdir(parents=True)
    module.write_text(text)
    directory = tmp_path / "build"
    directory.mkdir()
    (directory / MANIFEST).write_text(json.dumps({
        "format": FORMAT, "compiler": "mypyc", "shared": "vtwin_impl__mypyc",
        "modules": {"impl.core.fake": source_digest(module)}}))
    build = Build.read(directory)
    assert build is not None
    return build, source_root


def test_a_build_is_fresh_until_its_source_changes(tmp_path: Path) -> None:
    build, source_root = make_build(tmp_path)
    assert build.modules == {"impl.core.fake": source_digest(source_root / "impl/core/fake.py")}
    assert build.stale(source_root) == []
    (source_root / "impl/core/fake.py").write_text("X = 2\n")
    assert build.stale(source_root) == ["impl.core.fake"]
    (source_root / "impl/core/fake.py").unlink()
    assert build.stale(source_root) == ["impl.core.fake"]


def test_a_manifest_of_another_format_is_no_build(tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_text(json.dumps({"format": "other/1", "modules": {}}))
    assert Build.read(tmp_path) is None
    assert Build.read(tmp_path / "missing") is None


def test_the_finder_answers_only_for_compiled_modules_that_exist(tmp_path: Path) -> None:
    build, _ = make_build(tmp_path)
    finder = CompiledFinder(build)
    assert finder.find_spec("impl.core.block_pool") is None  # not in the manifest
    assert finder.find_spec("impl.core.fake") is None  # in it, but no extension file
    extension = build.extension("impl.core.fake")
    assert extension.parent == tmp_path / "build" / "impl" / "core"
    assert extension.name.startswith("fake.") and extension.name.endswith(".so")
    extension.parent.mkdir(parents=True)
    extension.write_bytes(b"")
    spec = finder.find_spec("impl.core.fake")
    assert spec is not None and spec.origin == str(extension)
    assert build.extension("vtwin_impl__mypyc") == tmp_path / "build" / extension.name.replace(
        "fake", "vtwin_impl__mypyc")


def test_the_switch_off_changes_nothing(monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    monkeypatch.delenv("VTWIN_COMPILED", raising=False)
    activate(tmp_path / "nothing-here")  # no error: the switch is off
    assert describe().startswith("pure Python")


def test_the_switch_on_without_a_build_names_the_fix(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    monkeypatch.setenv("VTWIN_COMPILED", "1")
    with pytest.raises(ImportError, match=r"VTWIN_COMPILED=1: no compiled build in .*"
                                          r"run `python -m impl.compiled.build`"):
        activate(tmp_path / "nothing-here")


def test_the_build_compiles_core_and_sched_scheduler_mixins_included() -> None:
    modules = sources()
    assert "impl.core.block_pool" in modules and "impl.sched.scheduler" in modules
    assert module_source("impl.core.block_pool") == modules["impl.core.block_pool"]
    # The mixins are traits: compiled with the class, so update_from_output is native too.
    mixins = {"impl.sched.updates", "impl.sched.admission_rules", "impl.sched.preemption",
              "impl.sched.connector_paths"}
    assert mixins <= set(modules)
    assert not set(NOT_COMPILED) & set(modules)
    assert not any(name.endswith("__init__") for name in modules)
    assert build_dir().parent.name == "mypyc"


def test_a_native_module_is_stale_when_its_c_source_changes(tmp_path: Path) -> None:
    build, source_root = make_build(tmp_path)
    c_source = source_root / NATIVE_MODULES["impl.core._blockhash"].source
    c_source.parent.mkdir(parents=True)
    c_source.write_text("/* v1 */\n")
    native = Build(build.directory, build.modules, build.shared, build.compiler,
                   {"impl.core._blockhash": source_digest(c_source)})
    assert native.stale(source_root) == []
    c_source.write_text("/* v2 */\n")
    assert native.stale(source_root) == ["impl.core._blockhash"]
    unknown = Build(build.directory, build.modules, build.shared, build.compiler,
                    {"impl.core._gone": "0" * 64})
    assert unknown.stale(source_root) == ["impl.core._gone"]  # no longer a native module


def test_the_manifest_records_native_modules_and_why_one_is_missing(tmp_path: Path) -> None:
    (tmp_path / MANIFEST).write_text(json.dumps({
        "format": FORMAT, "compiler": "mypyc", "shared": "vtwin_impl__mypyc", "modules": {},
        "native": {"impl.core._blockhash": "ab"},
        "native_missing": {"impl.core._other": "fatal error: openssl/sha.h: No such file"}}))
    build = Build.read(tmp_path)
    assert build is not None and build.native == {"impl.core._blockhash": "ab"}
    assert build.native_missing == {"impl.core._other": "fatal error: openssl/sha.h: No such file"}
    finder = CompiledFinder(build)
    assert finder.find_spec("impl.core._blockhash") is None  # recorded, but no file
    extension = build.extension("impl.core._blockhash")
    extension.parent.mkdir(parents=True)
    extension.write_bytes(b"")
    spec = finder.find_spec("impl.core._blockhash")
    assert spec is not None and spec.origin == str(extension)
    assert finder.find_spec("impl.core._other") is None


def test_up_to_date_needs_every_native_module_built_from_its_source_or_missing() -> None:
    build = Build(Path("b"), {"impl.core.x": "1"}, "shared", "mypyc",
                  {"impl.core._blockhash": "c1"}, {"impl.core._other": "no compiler"})
    native = {"impl.core._blockhash": "c1", "impl.core._other": "o1"}
    assert up_to_date(build, {"impl.core.x": "1"}, native)
    assert not up_to_date(build, {"impl.core.x": "2"}, native)  # a Python source changed
    assert not up_to_date(build, {"impl.core.x": "1"}, {**native, "impl.core._blockhash": "c2"})
    assert not up_to_date(build, {"impl.core.x": "1"}, {**native, "impl.core._new": "n1"})
    assert not up_to_date(None, {"impl.core.x": "1"}, native)
