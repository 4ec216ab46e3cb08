"""`vtwin drift`: every difference class, not only the first. Runs the twin against planted
variants of itself (no upstream vLLM needed): a cosmetic field that differs from step 0 must
not hide a later behavioural difference, `--ignore-field` moves the first difference on, a
planted free order is named by its hint, and bad input is one line."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main
from conformance.drift.diff import drift_workload
from conformance.drift.run import PROBES_DIR, default_workloads, run_drift
from conformance.sched.divergences import load_known
from conformance.systems.protocol import RunnerOutput, Scheduled, Update
from conformance.systems.twin import ImplSystem
from conformance.tests.test_sched_planted import FREE_ORDER, ForwardFreeImpl
from workloads import dump, load

PLANTED = "conformance.tests.test_drift:PlantedImpl"


class PlantedImpl(ImplSystem):
    """The twin reporting a common-prefix count nobody asked for (cosmetic, every step) and
    one more prefix-cache query in each update from step 3 on (a stats rule)."""

    name = "impl-planted"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.updates = 0

    def schedule(self) -> Scheduled:
        return dataclasses.replace(super().schedule(), num_common_prefix_blocks=(7,))

    def update(self, scheduled: Scheduled, output: RunnerOutput) -> Update:
        update = super().update(scheduled, output)
        self.updates += 1
        stats = update.prefix_cache
        if stats is None or self.updates < 4:
            return update
        return dataclasses.replace(update, prefix_cache=dataclasses.replace(
            stats, queries=stats.queries + 1))


def test_a_cosmetic_difference_does_not_hide_the_next_one(tmp_path: Path) -> None:
    data = run_drift(PLANTED, "impl", ["decode-heavy"])
    classes = {c["class"]: c for c in data["classes"]}
    assert set(classes) == {"num_common_prefix_blocks", "prefix_cache.queries"}
    cosmetic = classes["num_common_prefix_blocks"]
    assert cosmetic["effect"] == "cosmetic" and cosmetic["example"]["step"] == 0
    assert cosmetic["example"]["left"] == 7 and cosmetic["example"]["right"] == "<absent>"
    stats = classes["prefix_cache.queries"]
    assert stats["example"]["step"] == 3 and stats["root_in"] == ["decode-heavy"]
    assert stats["example"]["left"] == stats["example"]["right"] + 1
    (workload,) = data["workloads"]
    assert workload["first"] == "num_common_prefix_blocks"
    assert workload["hidden"] == ["prefix_cache.queries"]
    assert workload["schedule_parted_at"] is None
    assert workload["left"]["end"] == workload["right"]["end"] == "finished"
    assert data["timing"]["ms_per_step"]["left"] > 0


def test_ignore_field_reveals_what_it_hid() -> None:
    data = run_drift(PLANTED, "impl", ["decode-heavy"], ignore=["num_common_prefix_blocks"])
    assert [c["class"] for c in data["classes"]] == ["prefix_cache.queries"]
    assert data["workloads"][0]["first"] == "prefix_cache.queries"
    steps = data["ignored"]["steps_differing"]["num_common_prefix_blocks"]
    assert steps == data["workloads"][0]["left"]["steps"]  # every step (all schedule)


def test_a_planted_free_order_is_named_by_its_hint() -> None:
    found: dict[str, Any] = {}
    result = drift_workload(FREE_ORDER, (ForwardFreeImpl, ImplSystem), found)
    # (Where the records carry the free queue's head, that differs first, at free time.)
    assert result.first in ("new_block_ids", "free_head")
    assert found["new_block_ids"].occurrences[FREE_ORDER.name].first_step == 2
    assert result.parted_at is None  # the schedule never changes
    hints = found["new_block_ids"].hints
    assert any("freed" in hint for hint in hints), hints


def test_identical_systems_show_no_drift_and_exit_0(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drift", "--left", "impl", "--right", "impl", "--workload",
                 "preemption-storm", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["classes"] == [] and data["summary"]["workloads_differing"] == 0
    assert "0 difference classes" in err and "start-up" in err
    [timing] = [line for line in err.splitlines() if "per step" in line]
    assert timing.startswith("vtwin drift: start-up impl ") and "{" not in timing  # not a dict


def test_cli_json_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["drift", "--left", PLANTED, "--right", "impl", "--workload", "decode-heavy",
                 "--report", str(tmp_path / "r"), "--json", str(tmp_path / "d.json")])
    assert code == 1
    err = capsys.readouterr().err
    assert "2 difference classes (0 behavioural, 2 cosmetic)" in err
    assert json.loads((tmp_path / "d.json").read_text())["summary"]["classes"] == 2
    assert (tmp_path / "r" / "drift.json").is_file()
    assert "prefix_cache.queries" in (tmp_path / "r" / "drift.txt").read_text()
    page = (tmp_path / "r" / "drift.html").read_text()
    assert "<h1>Drift: conformance.tests.test_drift:PlantedImpl vs impl</h1>" in page
    assert "2 difference classes (0 behavioural, 2 cosmetic) in 1 of 1 workloads" in page
    # one row per class, the root class (first to differ) before the downstream one
    rows = [r for r in page.split("<tr>") if r.startswith("<td class='class'><code>")]
    assert [r.split("</code>")[0][len("<td class='class'><code>"):] for r in rows] == [
        "num_common_prefix_blocks", "prefix_cache.queries"]


@pytest.mark.parametrize(("args", "message"), [
    (["--ignore-field", "colour"], "--ignore-field colour: not a record field"),
    (["--left", "nope"], "unknown system 'nope'"),
    (["--workload", "no-such-workload"], "no-such-workload"),
    (["--max-steps", "0"], "--max-steps must be a positive integer"),
])
def test_bad_input_is_one_line(args: list[str], message: str,
                               capsys: pytest.CaptureFixture[str]) -> None:
    base = {"--left": "impl", "--right": "impl", "--workload": "decode-heavy"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    argv = ["drift", *[x for pair in base.items() for x in pair]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("vtwin: error:") and message in err[0], err


def test_the_probes_load_and_run_by_default(tmp_path: Path) -> None:
    probes = sorted(PROBES_DIR.glob("*.jsonl"))
    assert len(probes) >= 3 and all(str(p) in default_workloads() for p in probes)
    for probe in probes:
        workload = load(probe)
        assert workload.name.startswith("drift-")
        dump(workload, tmp_path / probe.name)  # round-trips


def test_known_entries_of_the_pair_mark_classes(tmp_path: Path) -> None:
    known = tmp_path / "known.toml"
    known.write_text('[[divergence]]\nid = "decode-heavy:prefix_cache"\nlevel = "exact"\n'
                     f'reason = "planted"\nsystems = ["impl", "{PLANTED}"]\n'
                     '[[divergence]]\nid = "decode-heavy:num_common_prefix_blocks"\n'
                     'level = "exact"\nreason = "other pair"\nsystems = ["impl", "upstream"]\n')
    data = run_drift(PLANTED, "impl", ["decode-heavy"], known=load_known(known))
    classes = {c["class"]: c for c in data["classes"]}
    assert classes["prefix_cache.queries"]["known"] is True
    assert classes["prefix_cache.queries"]["per_workload"]["decode-heavy"]["known"] == "planted"
    assert classes["num_common_prefix_blocks"]["known"] is False
