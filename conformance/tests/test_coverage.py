"""Upstream coverage's own machinery, on a planted upstream file and coverage.json: missed lines
grouped by function and mapped to features (unmapped ones listed), the ratchet failing with the
regions that stopped being reached, a bad map refused in one line. No vLLM needed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conformance.coverage.baseline import check, make_baseline
from conformance.coverage.features import Feature, classify, load_features, regions
from conformance.coverage.summary import focus_table, render_page, summarize
from conformance.coverage.targets import FOCUS_FILES
from conformance.paths import HARNESS_DIR
from vtwin.errors import UserError

SOURCE = '''\
class Scheduler:
    def schedule(self):
        a = 1
        if a:
            return 2
        return 3

    def grammar(self):
        x = 1
        return x


def helper():
    return 4
'''
FILE = "vllm/v1/core/sched/scheduler.py"


def planted(tmp_path: Path, executed: list[int]) -> tuple[dict[str, Any], Path]:
    """A fake installed vllm with one focus file and coverage.json data for it."""
    root = tmp_path / "vllm"
    path = root / "v1" / "core" / "sched" / "scheduler.py"
    path.parent.mkdir(parents=True)
    path.write_text(SOURCE, encoding="utf-8")
    statements = [1, 2, 3, 4, 5, 6, 8, 9, 10, 13, 14]
    missing = [line for line in statements if line not in executed]
    data = {"files": {str(path): {
        "executed_lines": executed, "missing_lines": missing,
        "summary": {"num_statements": len(statements), "covered_lines": len(executed),
                    "num_branches": 2, "covered_branches": 1 if 5 in executed else 0}}}}
    return data, root


GRAMMAR = Feature("grammars", "no grammar workload yet", FILE, frozenset({"Scheduler.grammar"}))


def test_missed_lines_are_grouped_by_function_and_mapped_to_features() -> None:
    found = regions(FILE, SOURCE, [5, 9, 10, 14])
    assert [(r.function, r.lines) for r in found] == [
        ("Scheduler.schedule", [5]), ("Scheduler.grammar", [9, 10]), ("helper", [14])]
    mapped, unmapped = classify(found, [GRAMMAR])
    assert [(r.function, r.span) for r in mapped["grammars"]] == [("Scheduler.grammar", "9-10")]
    assert [r.function for r in unmapped] == ["Scheduler.schedule", "helper"]


def test_a_line_range_maps_code_outside_functions() -> None:
    module_level = Feature("setup", "why", FILE, lines=((1, 1),))
    mapped, unmapped = classify(regions(FILE, SOURCE, [1, 14]), [module_level])
    assert list(mapped) == ["setup"] and [r.function for r in unmapped] == ["helper"]


def test_summary_page_and_table(tmp_path: Path) -> None:
    data, root = planted(tmp_path, executed=[1, 2, 3, 4, 6, 8, 13])
    summary = summarize(data, root, (GRAMMAR,), "0.32.0")
    [row] = summary["focus"]
    assert row["file"] == FILE and row["statement_pct"] == round(100 * 7 / 11, 1)
    assert summary["features"][0]["name"] == "grammars"
    assert summary["features"][0]["missed_lines"] == 2
    assert {r["function"] for r in summary["unmapped"]} == {"Scheduler.schedule", "helper"}
    assert f"`{FILE}`" in focus_table(summary)
    page = render_page(summary, "run")
    assert "Unmapped" in page and "Scheduler.schedule" in page and "grammars" in page


def test_the_ratchet_fails_naming_what_stopped_being_reached(tmp_path: Path) -> None:
    before, root = planted(tmp_path / "a", executed=[1, 2, 3, 4, 5, 6, 8, 9, 10, 13])
    base = make_baseline(summarize(before, root, (), "0.32.0"), before, root, "gate")
    after, root_after = planted(tmp_path / "b", executed=[1, 2, 3, 4, 6, 8, 13])
    now = summarize(after, root_after, (), "0.32.0")
    [drop] = check(now, after, root_after, base, "gate")
    assert drop.startswith(f"{FILE}: statements 63.6% (baseline 90.9%)")
    assert "no longer reached: Scheduler.schedule (5-5), Scheduler.grammar (9-10)" in drop
    assert check(summarize(before, root, (), "0.32.0"), before, root, base, "gate") == []
    with pytest.raises(UserError, match="compare like with like"):
        check(now, after, root_after, base, "full")


def test_a_bad_feature_map_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "features.toml"
    bad.write_text('[[feature]]\nname = "x"\nfile = "f.py"\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"feature #1: field 'reason' must be a non-empty"):
        load_features(bad)


def test_the_committed_map_and_baseline_are_well_formed() -> None:
    features = load_features(HARNESS_DIR / "coverage_features.toml")
    assert features and all(f.file.startswith("vllm/") for f in features)
    import json

    baseline = json.loads((HARNESS_DIR / "coverage_baseline.json").read_text(encoding="utf-8"))
    assert baseline["mode"] == "gate" and set(baseline["files"]) <= set(FOCUS_FILES)


def test_line_ranges_belong_to_one_release(tmp_path: Path) -> None:
    ranged = Feature("setup", "why", FILE, lines=((13, 14),), release="0.32.0")
    data, root = planted(tmp_path, executed=[1, 2, 3, 4, 5, 6, 8, 9, 10])
    assert [f["name"] for f in summarize(data, root, (ranged,), "0.32.0")["features"]] == [
        "setup"]
    assert summarize(data, root, (ranged,), "0.33.0")["features"] == []
    bad = tmp_path / "features.toml"
    bad.write_text('[[feature]]\nname = "x"\nreason = "y"\nfile = "f.py"\nlines = [[1, 2]]\n',
                   encoding="utf-8")
    with pytest.raises(UserError, match="line ranges need the release"):
        load_features(bad)


def test_under_another_release_an_entry_keeps_its_functions_and_drops_its_lines(
        tmp_path: Path) -> None:
    both = Feature("grammars", "why", FILE, frozenset({"Scheduler.grammar"}),
                   lines=((13, 14),), release="0.32.0")
    data, root = planted(tmp_path, executed=[1, 2, 3, 4, 5, 6, 8])
    on_032 = summarize(data, root, (both,), "0.32.0")
    assert [f["name"] for f in on_032["features"]] == ["grammars"]
    assert not any(r["function"] == "helper" for r in on_032["unmapped"])
    on_033 = summarize(data, root, (both,), "0.33.0")
    assert [f["name"] for f in on_033["features"]] == ["grammars"]  # its function still maps
    assert [r["function"] for r in on_033["unmapped"]] == ["helper"]  # its lines do not


def test_a_worker_runs_under_coverage_when_asked() -> None:
    from conformance.systems.remote.proxy import WORKER_COVERAGE_ENV, worker_argv

    assert worker_argv("py", {}) == ["py", "-m", "conformance.systems.remote"]
    assert worker_argv("py", {WORKER_COVERAGE_ENV: "/r/coveragerc"}) == [
        "py", "-m", "coverage", "run", "--rcfile=/r/coveragerc", "-m",
        "conformance.systems.remote"]
