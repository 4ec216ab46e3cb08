"""Known divergences per pair of systems: an entry with `systems` holds only for runs of that
pair (either order, any spelling of the same spec), is never stale in a run of another pair,
and is stale (an error) in a run of its own pair that it does not match. Twin against a planted
variant of itself (`test_drift.PlantedImpl`), so no upstream vLLM is needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.cli.conform import main
from conformance.sched.divergences import load_known
from vtwin.errors import UserError

VARIANT = "conformance.tests.test_drift:PlantedImpl"  # num_common_prefix_blocks from step 0
ENTRY = ('[[divergence]]\nid = "decode-heavy:num_common_prefix_blocks"\nlevel = "renamed"\n'
         'reason = "r"\n')


def known(tmp_path: Path, *entries: str) -> Path:
    path = tmp_path / "known.toml"
    path.write_text("".join(entries))
    return path


def test_an_entry_holds_for_its_pair_only(tmp_path: Path) -> None:
    (entry,) = load_known(known(tmp_path, ENTRY + 'systems = ["impl", "upstream-0.32.0"]\n'))
    assert entry.systems == ("impl", "upstream-0.32.0")
    assert entry.for_pair("impl", "upstream") and entry.for_pair("upstream", "impl")
    assert not entry.for_pair("impl", "vllm==0.33.0")
    assert not entry.for_pair("impl", "impl")
    (anywhere,) = load_known(known(tmp_path, ENTRY))
    assert anywhere.systems is None and anywhere.for_pair("impl", "vllm==0.33.0")


def test_one_id_may_be_known_for_two_pairs_but_not_twice_for_one(tmp_path: Path) -> None:
    a = ENTRY + 'systems = ["impl", "vllm==0.33.0"]\n'
    b = ENTRY + 'systems = ["impl", "vllm==0.19.1"]\n'
    assert len(load_known(known(tmp_path, a, b))) == 2
    with pytest.raises(UserError, match="duplicate id 'decode-heavy:num_common_prefix_blocks' "
                                        "for systems"):
        load_known(known(tmp_path, a, ENTRY + 'systems = ["vllm==0.33.0", "impl"]\n'))


@pytest.mark.parametrize(("systems", "message"), [
    ('"impl"', "field 'systems' must be two system specs"),
    ('["impl"]', "field 'systems' must be two system specs"),
    ('["impl", "nope"]', "field 'systems': unknown system 'nope'"),
])
def test_a_bad_systems_field_is_one_line(tmp_path: Path, systems: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        load_known(known(tmp_path, ENTRY + f"systems = {systems}\n"))


def test_entries_waive_and_go_stale_per_pair(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    def conform(known_path: Path, system: str) -> tuple[int, str]:
        code = main(["conform", "--workload", "decode-heavy", "--system", system,
                     "--against", "impl", "--report", str(tmp_path / "r"),
                     "--known", str(known_path)])
        return code, capsys.readouterr().err

    other_pair = known(tmp_path, ENTRY + 'systems = ["impl", "vllm==0.33.0"]\n')
    # Another pair's entry neither waives this run's divergence nor goes stale in it.
    code, err = conform(other_pair, VARIANT)
    assert code == 1 and "failed at exact" in err and "stale" not in err
    code, err = conform(other_pair, "impl")
    assert code == 0 and "stale" not in err
    this_pair = known(tmp_path, ENTRY + f'systems = ["impl", "{VARIANT}"]\n')
    code, err = conform(this_pair, VARIANT)
    assert code == 0 and "known at exact" in err
    # The same entry in a run of its own pair that it does not match is stale.
    stale = known(tmp_path, '[[divergence]]\nid = "decode-heavy:preempted"\nlevel = "exact"\n'
                            f'reason = "r"\nsystems = ["{VARIANT}", "impl"]\n')
    code, err = conform(stale, VARIANT)
    assert code == 1 and "stale known divergence 'decode-heavy:preempted'" in err
