"""The mutation report: mutmut's files read back, equivalents applied, score, HTML (no vllm)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from conformance.mutation.equivalents import DEFAULT_PATH, Equivalent, load_equivalents
from conformance.mutation.report import judge, to_html, write_report
from conformance.mutation.results import KILLED, NOT_RUN, SURVIVED, Mutant, read_mutants
from conformance.mutation.run import main, record_run, reset_survivors, total_minutes
from vtwin.errors import UserError

SOURCE = '''"""A module."""


class Pool:
    def touch(self, blocks: list[int]) -> int:
        total = 0
        for block in blocks:
            total += block
        return total


def double(x: int) -> int:
    return x * 2
'''

MUTATED = '''class Pool:
    def touch(self, blocks):
        pass

    def xǁPoolǁtouch__mutmut_orig(self, blocks: list[int]) -> int:
        total = 0
        for block in blocks:
            total += block
        return total

    def xǁPoolǁtouch__mutmut_1(self, blocks: list[int]) -> int:
        total = 1
        for block in blocks:
            total += block
        return total

    def xǁPoolǁtouch__mutmut_2(self, blocks: list[int]) -> int:
        total = 0
        for block in blocks:
            total -= block
        return total


def x_double__mutmut_orig(x: int) -> int:
    return x * 2


def x_double__mutmut_1(x: int) -> int:
    return x / 2
'''

TOUCH = "impl.core.pool.xǁPoolǁtouch"


def make_tree(root: Path, verdicts: dict[str, int | None]) -> Path:
    (root / "impl" / "core").mkdir(parents=True)
    (root / "impl" / "core" / "pool.py").write_text(SOURCE)
    mutants = root / "mutants"
    (mutants / "impl" / "core").mkdir(parents=True)
    (mutants / "impl" / "core" / "pool.py").write_text(MUTATED)
    meta = {"exit_code_by_key": verdicts, "hash_by_function_name": {},
            "type_check_error_by_key": {}, "durations_by_key": {},
            "estimated_durations_by_key": {}}
    (mutants / "impl" / "core" / "pool.py.meta").write_text(json.dumps(meta))
    killer = {"mutant": f"{TOUCH}__mutmut_1", "when": "call",
              "test": "conformance/tests/test_mutation_killers.py::test_suite_workload[bursty]"}
    (mutants / "mutmut-killers.jsonl").write_text(json.dumps(killer) + "\n")
    return mutants


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return make_tree(tmp_path, {f"{TOUCH}__mutmut_1": 1, f"{TOUCH}__mutmut_2": 0,
                                "impl.core.pool.x_double__mutmut_1": None})


def by_id(mutants: list[Mutant]) -> dict[str, Mutant]:
    return {m.id: m for m in mutants}


def test_mutants_read_back_with_status_line_diff_and_killer(tree: Path) -> None:
    mutants = by_id(read_mutants(tree, tree.parent))
    killed, survivor = mutants[f"{TOUCH}__mutmut_1"], mutants[f"{TOUCH}__mutmut_2"]
    assert (killed.status, killed.line, killed.qualname) == (KILLED, 6, "Pool.touch")
    assert killed.killed_by == "workload bursty"
    assert (survivor.status, survivor.line, survivor.killer) == (SURVIVED, 8, None)
    assert "-        total += block" in survivor.diff
    assert "+        total -= block" in survivor.diff
    assert "def touch(self" in survivor.diff and "mutmut" not in survivor.diff
    assert mutants["impl.core.pool.x_double__mutmut_1"].status == NOT_RUN


def test_score_is_killed_over_total_minus_equivalent_minus_not_run(tree: Path) -> None:
    mutants = read_mutants(tree, tree.parent)
    plain = judge(mutants, []).summary
    assert (plain.total, plain.killed, plain.survived, plain.not_run) == (3, 1, 1, 1)
    assert plain.score == pytest.approx(50.0)
    waived = judge(mutants, [Equivalent("mutant", f"{TOUCH}__mutmut_2", "same")]).summary
    assert (waived.equivalent, waived.considered, waived.score) == (1, 1, 100.0)
    assert waived.passes(95.0) and not plain.passes(95.0)


def test_an_entry_that_matches_no_mutant_is_stale(tree: Path) -> None:
    mutants = read_mutants(tree, tree.parent)
    entries = [Equivalent("mutant", f"{TOUCH}__mutmut_2", "same"),
               Equivalent("mutant", f"{TOUCH}__mutmut_9", "gone"),
               Equivalent("function", "impl.core.pool.x_gone", "gone too")]
    summary = judge(mutants, entries).summary
    assert summary.stale == (f"[[mutant]] {TOUCH}__mutmut_9", "[[function]] impl.core.pool.x_gone")
    assert summary.score == 100.0 and not summary.passes(95.0)


def test_an_entry_for_a_killed_mutant_or_a_changed_mutation_is_stale(tree: Path) -> None:
    mutants = read_mutants(tree, tree.parent)
    survivor = by_id(mutants)[f"{TOUCH}__mutmut_2"]
    killed = Equivalent("mutant", f"{TOUCH}__mutmut_1", "not really")
    moved = Equivalent("mutant", survivor.id, "other mutation", sha="0" * 12)
    pinned = Equivalent("mutant", survivor.id, "this mutation", sha=survivor.sha)
    assert judge(mutants, [killed]).summary.stale == (killed.describe(),)
    assert judge(mutants, [moved]).summary.stale == (moved.describe(),)
    assert judge(mutants, [pinned]).summary.stale == ()


def test_a_pinned_entry_follows_its_mutation_to_a_new_number(tree: Path) -> None:
    """An edit elsewhere in the function renumbers its mutants: the sha still finds the same
    mutation (same function, same changed lines), under its new id."""
    mutants = read_mutants(tree, tree.parent)
    survivor = by_id(mutants)[f"{TOUCH}__mutmut_2"]
    renumbered = Equivalent("mutant", f"{TOUCH}__mutmut_7", "same mutation", sha=survivor.sha)
    verdict = judge(mutants, [renumbered])
    assert verdict.summary.stale == () and verdict.summary.equivalent == 1
    elsewhere = Equivalent("mutant", "impl.core.pool.x_double__mutmut_2", "other function",
                           sha=survivor.sha)
    assert judge(mutants, [elsewhere]).summary.stale == (elsewhere.describe(),)


def test_a_function_entry_waives_only_its_survivors(tree: Path) -> None:
    verdict = judge(read_mutants(tree, tree.parent), [Equivalent("function", TOUCH, "debug")])
    assert verdict.summary.equivalent == 1 and verdict.summary.killed == 1
    assert verdict.summary.stale == ()


def test_html_shows_each_survivor_with_file_line_and_diff(tree: Path) -> None:
    page = to_html(judge(read_mutants(tree, tree.parent), []), 95.0, 1.5)
    assert "impl/core/pool.py:8" in page
    assert "<span class=\"add\">+        total -= block</span>" in page
    assert "workload bursty" in page and "score 50.0%" in page


def test_report_files_and_exit_status(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tree.parent)
    out = tree.parent / "report"
    empty = tree.parent / "eq.toml"
    empty.write_text("")
    assert main(["report", "--out", str(out), "--equivalents", str(empty)]) == 1
    data = json.loads((out / "mutation.json").read_text())
    assert data["summary"]["score"] == 50.0 and data["killers"] == {"workload bursty": 1}
    assert (out / "index.html").is_file()
    eq = tree.parent / "eq2.toml"
    eq.write_text(f'[[mutant]]\nid = "{TOUCH}__mutmut_2"\nreason = "same"\n')
    assert main(["report", "--out", str(out), "--equivalents", str(eq)]) == 0
    write_report(judge(read_mutants(tree, tree.parent), []), out, 40.0)
    assert json.loads((out / "mutation.json").read_text())["summary"]["passed"] is True


@pytest.mark.parametrize("text, message", [
    ('[[mutant]]\nid = "a.x_f__mutmut_1"\n', "needs a reason"),
    ('[[mutant]]\nreason = "r"\n', "needs a non-empty id"),
    ('[[mutant]]\nid = "a"\nreason = "r"\nwhy = 1\n', "unknown keys"),
    ('[[other]]\nid = "a"\n', "unknown tables"),
    ('[[function]]\nname = "a"\nreason = "r"\n[[function]]\nname = "a"\nreason = "s"\n',
     "listed twice"),
])
def test_malformed_equivalents_are_user_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "eq.toml"
    path.write_text(text)
    with pytest.raises(UserError, match=message):
        load_equivalents(path)


def test_the_project_equivalents_file_loads() -> None:
    for entry in load_equivalents(DEFAULT_PATH):
        assert entry.reason


def test_rerun_survivors_forgets_only_survivor_verdicts(tmp_path: Path) -> None:
    mutants = make_tree(tmp_path, {f"{TOUCH}__mutmut_1": 1, f"{TOUCH}__mutmut_2": 0,
                                   "impl.core.pool.x_double__mutmut_1": 33})
    none = tmp_path / "none.toml"
    none.write_text("")
    assert reset_survivors(mutants, none, mutants.parent) == 2
    meta = json.loads((mutants / "impl" / "core" / "pool.py.meta").read_text())
    assert meta["exit_code_by_key"] == {f"{TOUCH}__mutmut_1": 1, f"{TOUCH}__mutmut_2": None,
                                        "impl.core.pool.x_double__mutmut_1": None}


def test_rerun_survivors_keeps_the_verdicts_of_accepted_equivalents(tmp_path: Path) -> None:
    mutants = make_tree(tmp_path, {f"{TOUCH}__mutmut_1": 1, f"{TOUCH}__mutmut_2": 0,
                                   "impl.core.pool.x_double__mutmut_1": 33})
    accepted = tmp_path / "eq.toml"
    accepted.write_text(f'[[mutant]]\nid = "{TOUCH}__mutmut_2"\nreason = "same"\n')
    assert reset_survivors(mutants, accepted, mutants.parent) == 1
    meta = json.loads((mutants / "impl" / "core" / "pool.py.meta").read_text())
    assert meta["exit_code_by_key"][f"{TOUCH}__mutmut_2"] == 0


def test_minutes_add_up_over_runs(tmp_path: Path) -> None:
    assert total_minutes(tmp_path) is None
    record_run(tmp_path, 12.5)
    record_run(tmp_path, 3.25)
    assert total_minutes(tmp_path) == pytest.approx(15.75)


def test_runs_get_directories_latest_and_an_index(tree: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tree.parent)
    root = tree.parent / "reports" / "mutation"
    root.mkdir(parents=True)
    # A report written straight into reports/mutation/ before run directories existed.
    (root / "mutation.json").write_text(json.dumps({"summary": {"score": 12.5, "total": 8}}))
    (root / "index.html").write_text("<p>the earlier report</p>")
    empty = tree.parent / "eq.toml"
    empty.write_text("")
    assert main(["report", "--equivalents", str(empty), "--run-id", "one"]) == 1
    assert main(["report", "--equivalents", str(empty)]) == 1
    runs = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    assert len(runs) == 3 and "one" in runs
    earlier = next(r for r in runs if r.endswith("-mutation-earlier"))
    assert (root / earlier / "index.html").read_text() == "<p>the earlier report</p>"
    newest = next(r for r in runs if r.endswith("-mutation-report"))
    assert (root / "latest.txt").read_text().strip() == newest
    assert json.loads((root / "latest" / "mutation.json").read_text())["summary"]["score"] == 50
    index = json.loads((root / "runs.json").read_text())
    assert {r["id"] for r in index["runs"]} == set(runs)
    assert {r["id"]: r["score"] for r in index["runs"]}[earlier] == 12.5
    page = (root / "index.html").read_text()
    assert all(f"{r}/index.html" in page for r in runs)
    out = capsys.readouterr().out
    assert f"-> reports/mutation/{newest}/index.html" in out and "moved the report" in out
    # An id in use is refused before any work; an explicit --out says what it replaces.
    assert main(["report", "--equivalents", str(empty), "--run-id", "one"]) == 2
    assert "already has a report" in capsys.readouterr().err
    mine = tree.parent / "mine"
    for _ in range(2):
        main(["report", "--equivalents", str(empty), "--out", str(mine)])
    assert capsys.readouterr().out.count(f"replacing the report in {mine}") == 1


def test_hunt_reads_the_newest_run(tmp_path: Path) -> None:
    from conformance.mutation.runs import latest_report

    root = tmp_path / "mutation"
    with pytest.raises(UserError, match="no mutation report"):
        latest_report(None, root)
    (root / "r7").mkdir(parents=True)
    (root / "latest.txt").write_text("r7\n")
    assert latest_report(None, root) == root / "r7" / "mutation.json"
    assert latest_report(tmp_path / "x", root) == tmp_path / "x" / "mutation.json"


def test_a_pinned_entry_under_its_own_id_does_not_claim_a_twin_mutation(tree: Path) -> None:
    """Two mutants can change identical lines (the same statement twice in a function); an
    entry still at its id and sha is about that one only, not its twin elsewhere."""
    mutants = read_mutants(tree, tree.parent)
    survivor = by_id(mutants)[f"{TOUCH}__mutmut_2"]
    twin = replace(survivor, id=f"{TOUCH}__mutmut_5", status=KILLED)
    entry = Equivalent("mutant", survivor.id, "this one", sha=survivor.sha)
    verdict = judge([*mutants, twin], [entry])
    assert verdict.summary.stale == () and verdict.summary.equivalent == 1
