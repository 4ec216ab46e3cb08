"""Meta-tests of the comparer on hand-made step records: each level catches what it should,
ignores what it should, and reports the right step, field path, values and requests."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from conformance.sched.compare import LEVELS, Comparer, check_level
from conformance.sched.record import StepRecord, cached_digest
from conformance.systems.protocol import BlockCounts, CacheStats, EncoderCacheCounts, TokenOutput
from vtwin.errors import UserError


def record(step: int = 0, **changes: Any) -> StepRecord:
    base = StepRecord(
        step=step, scheduled=True, scheduled_new=("a", "b"), scheduled_cached=(),
        scheduled_resumed=(), num_scheduled_tokens=(("a", 20), ("b", 17)),
        total_num_scheduled_tokens=37, num_computed_tokens=(("a", 0), ("b", 0)),
        num_output_tokens=(), spec_tokens=(),
        new_block_ids=(("a", ((1, 2),)), ("b", ((3, 4),))),
        block_tables=(("a", ((1, 2),)), ("b", ((3, 4),))),
        new_block_hashes=(("a", ("aa01",)), ("b", ("bb01",))),
        preempted=(), finished=(), aborted=(), num_common_prefix_blocks=(),
        applied_step=step,
        outputs=(TokenOutput("a", (7,), None, None), TokenOutput("b", (9,), None, None)),
        blocks=BlockCounts(4, 0, 11), num_running=2, num_waiting=0,
        prefix_cache=CacheStats(2, 37, 0, 0, 0, 0),
    )
    return replace(base, **changes)


def first(left: list[StepRecord], right: list[StepRecord], level: str) -> Any:
    comparer = Comparer("w", level, context=2)
    for a, b in zip(left, right, strict=True):
        found = comparer.feed(a, b)
        if found is not None:
            return found
    return None


@pytest.mark.parametrize("level", LEVELS)
def test_identical_streams_never_diverge(level: str) -> None:
    records = [record(i) for i in range(5)]
    assert first(records, list(records), level) is None


def test_block_counts_are_caught_by_exact_and_renamed_only() -> None:
    left = [record(0), record(1, blocks=BlockCounts(4, 1, 10))]
    right = [record(0), record(1)]
    for level in ("exact", "renamed"):
        d = first(left, right, level)
        assert (d.step, d.field, d.left, d.right) == (1, "blocks.cached", 1, 0)
    assert first(left, right, "schedule") is None


def test_the_free_queue_is_compared_at_exact_only_and_where_both_see_it() -> None:
    """Which blocks the pool hands out next and which cached ones survived eviction: an
    eviction-order bug shows here steps before it reaches a block table."""
    base = record(0, free_head=(3, 4, 5), cached_digest=cached_digest((7, 9)))
    other_head = replace(base, free_head=(4, 3, 5))
    d = first([base], [other_head], "exact")
    assert (d.field, d.left, d.right) == ("free_head[0]", 3, 4)
    other_cached = replace(base, cached_digest=cached_digest((9, 8)))
    assert first([base], [other_cached], "exact").field == "cached_digest"
    assert first([base], [replace(base, cached_digest=cached_digest((9, 7)))], "exact") is None
    for level in ("renamed", "schedule"):
        assert first([base], [other_head], level) is None
    unseen = replace(base, free_head=None, cached_digest=None)  # e.g. an older adapter
    assert first([base], [unseen], "exact") is None
    assert StepRecord.from_json(base.to_json()) == base


def test_a_consistent_renaming_passes_renamed_but_not_exact() -> None:
    renamed = {"new_block_ids": (("a", ((11, 12),)), ("b", ((13, 14),))),
               "block_tables": (("a", ((11, 12),)), ("b", ((13, 14),)))}
    left = [record(0), record(1, new_block_ids=(("a", ((1, 2, 5),)),),
                                block_tables=(("a", ((1, 2, 5),)),))]
    right = [record(0, **renamed), record(1, new_block_ids=(("a", ((11, 12, 15),)),),
                                         block_tables=(("a", ((11, 12, 15),)),))]
    d = first(left, right, "exact")
    assert (d.step, d.field, d.left, d.right) == (0, "new_block_ids.a[0][0]", 1, 11)
    assert first(left, right, "renamed") is None
    assert first(left, right, "schedule") is None


def test_renamed_needs_one_bijection_for_the_whole_run() -> None:
    # Step 0 pairs 1<->1 ... 4<->4; step 1 gives 5 to a on the left and 3 on the right: 3 is
    # already the image of 3, so no bijection explains both steps.
    left = [record(0), record(1, new_block_ids=(("a", ((1, 2, 5),)),))]
    right = [record(0), record(1, new_block_ids=(("a", ((1, 2, 3),)),))]
    d = first(left, right, "renamed")
    assert (d.step, d.field, d.left, d.right) == (1, "new_block_ids.a[0][2]", 5, 3)
    assert d.requests == ("a",)


def test_token_counts_diverge_at_every_level_with_the_request_named() -> None:
    left = [record(0), record(1, num_scheduled_tokens=(("a", 1), ("b", 16)))]
    right = [record(0), record(1, num_scheduled_tokens=(("a", 1), ("b", 17)))]
    for level in LEVELS:
        d = first(left, right, level)
        assert (d.step, d.field, d.left, d.right) == (1, "num_scheduled_tokens.b", 16, 17)
        assert d.requests == ("b",)
        assert d.id == "w:num_scheduled_tokens"


def test_preemptions_and_missing_keys() -> None:
    left = [record(0, preempted=("b",))]
    right = [record(0)]
    d = first(left, right, "schedule")
    assert (d.field, d.left, d.right, d.requests) == ("preempted[0]", "b", "<absent>", ("b",))
    left = [record(0, num_scheduled_tokens=(("a", 20),))]
    d = first(left, [record(0)], "schedule")
    assert (d.field, d.left, d.right) == ("num_scheduled_tokens.b", "<absent>", 17)


def test_finish_reasons_schedule_level_and_exact_outputs() -> None:
    stop = (TokenOutput("a", (2,), "stop", None), TokenOutput("b", (9,), None, None))
    length = (TokenOutput("a", (2,), "length", None), TokenOutput("b", (9,), None, None))
    left, right = [record(0, outputs=stop)], [record(0, outputs=length)]
    d = first(left, right, "exact")
    assert (d.field, d.left, d.right) == ("outputs.a.finish_reason", "stop", "length")
    d = first(left, right, "schedule")
    assert (d.field, d.left, d.right) == ("finish_reasons.a", "stop", "length")


def test_tokens_and_block_tables_are_not_schedule_fields() -> None:
    left = [record(0, outputs=(TokenOutput("a", (8,), None, None),
                               TokenOutput("b", (9,), None, None)),
                   block_tables=(("a", ((1, 2),)),))]
    assert first(left, [record(0)], "schedule") is None
    assert first(left, [record(0)], "exact").field == "block_tables.b"


def test_one_side_ending_first_is_a_divergence() -> None:
    comparer = Comparer("w", "schedule")
    assert comparer.feed(record(0), record(0)) is None
    d = comparer.feed(None, record(1))
    assert d is not None and (d.step, d.field, d.left, d.right) == (1, "ended", True, False)
    assert comparer.feed(None, record(2)) is None  # reported once
    assert comparer.feed(None, None) is None


def test_preceding_records_and_json_form() -> None:
    left = [record(i) for i in range(4)] + [record(4, num_waiting=1)]
    right = [record(i) for i in range(5)]
    d = first(left, right, "exact")
    assert d.step == 4 and [p[0]["step"] for p in d.preceding] == [2, 3]
    data = d.to_json()
    assert data["id"] == "w:num_waiting" and data["left_record"]["num_waiting"] == 1
    assert "step 4" in d.summary()


def test_records_round_trip_through_json() -> None:
    r = record(3, new_block_ids=(("a", None),), spec_tokens=(("a", (5, -1)),))
    assert StepRecord.from_json(r.to_json()) == r


def test_connector_stats_round_trip_and_are_compared_only_when_present() -> None:
    """Beside a connector the record carries its lookups and hits by source (a dashboard's
    external prefix-cache hit rate per tier); without one it writes no key, so older traces
    keep their bytes."""
    plain = record(1)
    assert "connector_prefix_cache" not in plain.to_json()
    with_connector = replace(plain, connector_prefix_cache=CacheStats(
        1, 13, 12, 0, 0, 0, hits_by_source=(("external_unspecified", 4), ("host", 8))))
    assert StepRecord.from_json(with_connector.to_json()) == with_connector
    disk = replace(with_connector, connector_prefix_cache=CacheStats(
        1, 13, 12, 0, 0, 0, hits_by_source=(("disk", 8), ("external_unspecified", 4))))
    found = first([with_connector], [disk], "exact")
    assert (found.field, found.left, found.right) == (
        "connector_prefix_cache.hits_by_source.host", 8, "<absent>")
    found = first([with_connector], [plain], "exact")
    assert (found.field, found.right) == ("connector_prefix_cache", "<absent>")


def test_unknown_level_is_a_one_line_user_error() -> None:
    with pytest.raises(UserError, match="unknown level 'fuzzy'"):
        check_level("fuzzy")


def test_encoder_and_control_fields_round_trip_and_are_compared_only_when_present() -> None:
    """A multimodal run's encoder fields and a run's controls are part of the record (and of
    the comparison); a text-only run without controls writes none of their keys, so older
    traces and golden files keep their bytes."""
    plain = record(2)
    assert not {"encoder_inputs", "encoder_cache", "controls"} & set(plain.to_json())
    mm = replace(plain, encoder_inputs=(("a", (0, 2)),), freed_encoder_ids=("img-1",),
                 encoder_cache=EncoderCacheCounts(10, 30, ("img-0",)),
                 controls=(("reset_prefix_cache", False), ("pause", None)))
    assert StepRecord.from_json(mm.to_json()) == mm
    other = replace(mm, encoder_cache=EncoderCacheCounts(10, 20, ("img-0",)))
    assert first([mm], [other], "exact").field == "encoder_cache.freeable"
    refused = replace(mm, controls=(("reset_prefix_cache", True), ("pause", None)))
    assert first([mm], [refused], "exact").field == "controls[0][1]"
    assert first([mm], [replace(mm, encoder_inputs=(("a", (0,)),))],
                 "exact").field.startswith("encoder_inputs.a")
