"""The verdict store (`conformance.mutation.store`): mutmut's verdicts kept in the repository
and given back to a fresh machine, under mutmut's own rule for which verdicts stay valid."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from conformance.mutation.results import read_killers
from conformance.mutation.store import load, restore, save
from vtwin.errors import UserError

MODULE = "impl/core/pool.py"
TOUCH, DOUBLE = "xǁPoolǁtouch", "x_double"


def name(function: str, number: int) -> str:
    return f"impl.core.pool.{function}__mutmut_{number}"


def write_meta(mutants: Path, verdicts: dict[str, int | None], hashes: dict[str, str]) -> None:
    meta = {"exit_code_by_key": verdicts, "hash_by_function_name": hashes,
            "type_check_error_by_key": {}, "durations_by_key": {},
            "estimated_durations_by_key": {}}
    (mutants / "impl" / "core").mkdir(parents=True, exist_ok=True)
    (mutants / f"{MODULE}.meta").write_text(json.dumps(meta), encoding="utf-8")
    (mutants / MODULE).write_text("# mutmut's mutated copy\n", encoding="utf-8")


def read_verdicts(mutants: Path) -> dict[str, int | None]:
    data = json.loads((mutants / f"{MODULE}.meta").read_text(encoding="utf-8"))
    verdicts: dict[str, int | None] = data["exit_code_by_key"]
    return verdicts


@pytest.fixture
def machine(tmp_path: Path) -> Path:
    """A checkout with judged mutants: touch 1 killed, touch 2 survived (accepted as
    equivalent), touch 3 survived, double 1 killed, double 2 not run yet."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_pool.py").write_text("def test(): pass\n")
    (tmp_path / "equivalents.toml").write_text(
        f'[[mutant]]\nid = "{name(TOUCH, 2)}"\nreason = "the same arithmetic"\n')
    mutants = tmp_path / "mutants"
    write_meta(mutants, {name(TOUCH, 1): 1, name(TOUCH, 2): 0, name(TOUCH, 3): 0,
                         name(DOUBLE, 1): 1, name(DOUBLE, 2): None},
               {TOUCH: "aaaa", DOUBLE: "bbbb"})
    (mutants / "mutmut-killers.jsonl").write_text(
        json.dumps({"mutant": name(TOUCH, 1), "test": "tests/test_pool.py::test"}) + "\n")
    return tmp_path


def test_save_keeps_every_judged_verdict_with_its_hash_killer_and_equivalence(
        machine: Path) -> None:
    store = machine / "verdicts.jsonl"
    assert save(machine / "mutants", machine, machine / "equivalents.toml", store) == 4
    _, functions = load(store)
    by_name = {f.function: f for f in functions}
    assert by_name[TOUCH].hash == "aaaa"
    assert by_name[TOUCH].exit_codes == {1: 1, 2: 0, 3: 0}
    assert by_name[TOUCH].killers == {1: "tests/test_pool.py::test"}
    assert by_name[TOUCH].equivalent == frozenset({2})
    assert by_name[DOUBLE].exit_codes == {1: 1}  # not run: nothing to keep
    # Saved twice from the same state: the same bytes (a store diff is a verdict change).
    first = store.read_bytes()
    save(machine / "mutants", machine, machine / "equivalents.toml", store)
    assert store.read_bytes() == first


def test_a_fresh_machine_gets_the_verdicts_and_mutmut_regenerates_the_module(
        machine: Path) -> None:
    store = machine / "verdicts.jsonl"
    save(machine / "mutants", machine, machine / "equivalents.toml", store)
    shutil.rmtree(machine / "mutants")
    result = restore(machine / "mutants", machine, store)
    assert (result.restored, result.survivors_dropped) == (4, 0)
    assert read_verdicts(machine / "mutants") == {
        name(TOUCH, 1): 1, name(TOUCH, 2): 0, name(TOUCH, 3): 0, name(DOUBLE, 1): 1}
    data = json.loads((machine / "mutants" / f"{MODULE}.meta").read_text())
    assert data["hash_by_function_name"] == {TOUCH: "aaaa", DOUBLE: "bbbb"}
    assert not (machine / "mutants" / MODULE).exists()  # mutmut re-hashes the source
    assert read_killers(machine / "mutants") == {name(TOUCH, 1): "tests/test_pool.py::test"}
    # Restoring again adds nothing.
    assert restore(machine / "mutants", machine, store).restored == 0


def test_survivors_are_tested_again_after_the_tests_change_but_kills_and_equivalents_stay(
        machine: Path) -> None:
    store = machine / "verdicts.jsonl"
    save(machine / "mutants", machine, machine / "equivalents.toml", store)
    shutil.rmtree(machine / "mutants")
    (machine / "tests" / "test_pool.py").write_text("def test(): assert True\n")
    result = restore(machine / "mutants", machine, store)
    assert (result.restored, result.survivors_dropped) == (3, 1)
    assert "1 stored survivors to test again" in result.line()
    assert read_verdicts(machine / "mutants") == {
        name(TOUCH, 1): 1, name(TOUCH, 2): 0, name(DOUBLE, 1): 1}


def test_a_function_judged_here_on_another_source_keeps_this_machines_verdicts(
        machine: Path) -> None:
    store = machine / "verdicts.jsonl"
    save(machine / "mutants", machine, machine / "equivalents.toml", store)
    write_meta(machine / "mutants", {name(TOUCH, 1): None, name(DOUBLE, 1): None,
                                     name(DOUBLE, 2): 0}, {TOUCH: "cccc", DOUBLE: "bbbb"})
    result = restore(machine / "mutants", machine, store)
    assert result.restored == 1  # double 1 only: touch was stored for another source
    assert read_verdicts(machine / "mutants") == {
        name(TOUCH, 1): None, name(DOUBLE, 1): 1, name(DOUBLE, 2): 0}
    assert (machine / "mutants" / MODULE).exists()  # its hashes were this machine's


@pytest.mark.parametrize(("text", "message"), [
    ('{"format": "other"}\n', "verdicts.jsonl:1: not a verdict store"),
    ('{"format": "vtwin-mutation-verdicts"}\n{"module": "m"}\n',
     "verdicts.jsonl:2: missing field 'function'"),
    ('{"format": "vtwin-mutation-verdicts"}\n{"module": "m", "function": "f", "hash": "h", '
     '"exit_codes": {"x": 1}}\n', "verdicts.jsonl:2: malformed entry"),
    ('{"format": "vtwin-mutation-verdicts"}\nnot json\n', "verdicts.jsonl:2: not JSON"),
])
def test_a_damaged_store_is_named_with_its_line(tmp_path: Path, text: str,
                                                message: str) -> None:
    store = tmp_path / "verdicts.jsonl"
    store.write_text(text)
    with pytest.raises(UserError, match=message):
        load(store)


def test_no_store_restores_nothing(tmp_path: Path) -> None:
    result = restore(tmp_path / "mutants", tmp_path, tmp_path / "verdicts.jsonl")
    assert (result.restored, result.survivors_dropped) == (0, 0)


TINY_SOURCE = '''def double(x: int) -> int:
    return x * 2


def clamp(x: int, hi: int) -> int:
    if x > hi:
        return hi
    return x
'''
STRONG_TESTS = '''from impl.calc import clamp, double


def test_double() -> None:
    assert double(3) == 6


def test_clamp() -> None:
    assert clamp(5, 3) == 3
'''
# Kills nothing: a mutant judged again under these tests survives.
WEAK_TESTS = '''from impl.calc import clamp, double


def test_both() -> None:
    assert double(3) is not None and clamp(5, 3) is not None
'''


def tiny_project(root: Path) -> None:
    (root / "impl").mkdir()
    (root / "impl" / "__init__.py").write_text("")
    (root / "impl" / "calc.py").write_text(TINY_SOURCE)
    (root / "tests").mkdir()
    (root / "tests" / "test_calc.py").write_text(STRONG_TESTS)
    (root / "conformance" / "mutation").mkdir(parents=True)
    (root / "equivalents.toml").write_text("")
    (root / "pyproject.toml").write_text(
        '[tool.mutmut]\nsource_paths = ["impl"]\n'
        'pytest_add_cli_args = ["-p", "no:cacheprovider"]\n')


def run_mutation(root: Path, run_id: str) -> dict[str, int | None]:
    from conformance.mutation.run import main
    main(["run", "--equivalents", str(root / "equivalents.toml"), "--target", "0",
          "--out", str(root / "reports" / run_id)])
    data = json.loads((root / "mutants" / "impl" / "calc.py.meta").read_text())
    return dict(data["exit_code_by_key"])


def test_a_second_run_on_a_fresh_clone_reuses_the_stored_verdicts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real mutmut, three runs of a tiny project through `python -m conformance.mutation run`.
    Between runs `mutants/` is deleted (a fresh clone) and the tests are weakened so that a
    mutant judged again survives: a kill that is still there was taken from the store."""
    if shutil.which("mutmut") is None and not (Path(sys.executable).with_name("mutmut")).exists():
        pytest.skip("mutmut is not installed (pip install -e .[mutation])")
    monkeypatch.chdir(tmp_path)
    tiny_project(tmp_path)
    first = run_mutation(tmp_path, "first")
    double_kills = {k for k, v in first.items() if "x_double" in k and v == 1}
    clamp_survivors = {k for k, v in first.items() if "x_clamp" in k and v == 0}
    assert double_kills and clamp_survivors
    assert (tmp_path / "conformance" / "mutation" / "verdicts.jsonl").is_file()

    shutil.rmtree(tmp_path / "mutants")
    (tmp_path / "tests" / "test_calc.py").write_text(WEAK_TESTS)
    second = run_mutation(tmp_path, "second")
    assert all(second[k] == 1 for k in double_kills)  # reused, not judged again
    assert all(second[k] == 0 for k in clamp_survivors)  # judged again: still survive

    shutil.rmtree(tmp_path / "mutants")
    (tmp_path / "impl" / "calc.py").write_text(TINY_SOURCE.replace("x * 2", "x + x"))
    third = run_mutation(tmp_path, "third")
    # double changed: mutmut dropped its stored verdicts and judged its new mutants (the
    # weak tests kill none of them); clamp is unchanged and keeps its verdicts.
    assert [v for k, v in third.items() if "x_double" in k] and all(
        v == 0 for k, v in third.items() if "x_double" in k)
    assert all(third[k] == 0 for k in clamp_survivors)
