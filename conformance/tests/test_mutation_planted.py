"""The planted semantic bugs (`conformance.mutation.planted`): every patch still applies to the
code, and a planted bug is judged killed by the first failing test, or survived."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from conformance.mutation.planted import (
    STAGES,
    Planted,
    apply,
    judge,
    load_planted,
    scratch_copy,
    stages_named,
    write_report,
)
from vtwin.errors import UserError

POOLING_TESTS = (("unit", ("tests/sched/test_pooling.py",)),)


def test_every_planted_bug_applies_to_the_current_code() -> None:
    """A stale patch (the code it plants into moved) fails here, not hours into a run."""
    planted = load_planted()
    assert len(planted) >= 10
    with tempfile.TemporaryDirectory() as tmp:
        root = scratch_copy(Path(tmp))
        stale = [p.name for p in planted if not apply(p, root) or not _revert(p, root)]
    assert stale == []


def _revert(planted: Planted, root: Path) -> bool:
    import subprocess

    return subprocess.run(["git", "apply", "-R", "-"], cwd=root, input=planted.diff,
                          text=True, capture_output=True).returncode == 0


def test_a_planted_bug_is_killed_by_the_first_failing_test() -> None:
    (planted,) = load_planted(["pooling-keeps-a-token-slot"])
    verdict = judge(planted, POOLING_TESTS, timeout=300, workers=0)
    assert verdict.verdict == "killed" and verdict.stage == "unit"
    assert verdict.killer is not None and "test_pooling.py::" in verdict.killer


def test_a_bug_no_test_sees_survives_and_a_moved_one_is_stale(tmp_path: Path) -> None:
    harmless = Planted("comment", "a comment", (
        "--- a/impl/sched/grammar.py\n+++ b/impl/sched/grammar.py\n"
        "@@ -1,1 +1,2 @@\n"
        '+# planted: nothing changes\n'
        ' """Structured output as the scheduler sees it: a request\'s grammar, compiled in the '
        'background.\n'))
    assert judge(harmless, POOLING_TESTS, timeout=300, workers=0).verdict == "survived"
    moved = Planted("moved", "context gone", (
        "--- a/impl/sched/grammar.py\n+++ b/impl/sched/grammar.py\n"
        "@@ -1,1 +1,1 @@\n-no such line\n+something\n"))
    stale = judge(moved, POOLING_TESTS)
    assert stale.verdict == "stale"
    report = write_report([stale], tmp_path)
    assert '"judged": 0' in report.read_text()


def test_an_unknown_or_headless_patch_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no planted bug named nope"):
        load_planted(["nope"])
    (tmp_path / "bare.patch").write_text("--- a/x\n+++ b/x\n", encoding="utf-8")
    with pytest.raises(UserError, match="needs `# ` lines"):
        load_planted([], tmp_path)


def test_stages_are_chosen_by_name_in_the_gates_order() -> None:
    """`--stages differential` measures the differential tests alone; names keep the gate's
    order whatever order they are given in; an unknown name is one line naming the known."""
    assert stages_named("differential") == (STAGES[1],)
    assert stages_named("differential, unit") == STAGES
    with pytest.raises(UserError, match=r"^--stages: unknown stage lint \(known: unit, "
                       r"differential\)$"):
        stages_named("unit,lint")
