"""A P/D pair run end to end (`conformance.sched.pd_pair`): the router sends a request on to
the decode instance when its prefill hands it on, drops one the client aborted first (the
prefill side then frees its blocks), the decode instance pulls, the prefill side frees once
the pull landed, nothing leaks; one driver alone refuses a pair; and a twin bug on the decode
side is reported on the decode instance, with upstream as the reference."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from conformance.sched.driver import Driver
from conformance.sched.pd_pair import run_instances, run_pd_pair
from conformance.sched.record import StepRecord
from conformance.sched.trace import read_trace
from conformance.systems.registry import resolve_system
from conformance.tests.reference import Pair
from vtwin.errors import UserError
from workloads import Workload, loads
from workloads.pd_pair import decode_side, prefill_side

HEADER = {"type": "header", "format": "vtwin-workload", "version": 1, "name": "pair",
          "config": {"block_size": 16, "num_blocks": 24, "max_model_len": 256,
                     "max_num_batched_tokens": 256,
                     "kv_connector": {"type": "nixl", "load_latency_steps": 1}},
          "pd_pair": {"router_latency_steps": 2, "decode": {"num_blocks": 20}}}
REQUESTS = [
    {"type": "request", "request_id": "a", "arrival_step": 0, "prompt": {"length": 40},
     "max_tokens": 4},
    {"type": "request", "request_id": "b", "arrival_step": 0, "prompt": {"length": 40},
     "max_tokens": 4},
    {"type": "abort", "request_id": "b", "step": 1},  # held on the prefill side by then
]


def pair_workload() -> Workload:
    return loads("\n".join(json.dumps(r) for r in [HEADER, *REQUESTS]) + "\n")


def scheduled(records: list[StepRecord], rid: str) -> list[int]:
    return [r.step for r in records if rid in dict(r.num_scheduled_tokens)]


def test_the_router_hands_prefills_on_and_drops_what_the_client_aborted() -> None:
    twin = resolve_system("impl")
    result = run_pd_pair(pair_workload(), twin, twin)
    for instance in result.results:
        assert instance.error is None and instance.stall is None, instance
        assert instance.divergences == ()  # the twin against itself
    prefill, decode = result.prefill, result.decode
    assert (prefill.workload, decode.workload) == ("pair@prefill", "pair@decode")
    # Both prefills run in step 0 and are held; "a" reaches the decode side at step 2 (the
    # router's latency), pulls there, and the prefill side frees it after the pull landed.
    assert prefill.activity.stores == 2 and decode.activity.loads == 1
    assert decode.left_series.waiting[:5] == (0, 0, 1, 1, 0)  # a waits for its pull, 2-3
    assert prefill.left_series.active[0] == 6  # two prompts of three blocks, held
    assert prefill.left_series.active[-1] == 0 and decode.left_series.active[-1] == 0


def test_the_decode_instance_never_sees_a_request_aborted_before_it_arrived() -> None:
    from conformance.sched.pd_pair import _Instance, _run_side

    twin, workload = resolve_system("impl"), pair_workload()
    instances = (_Instance("prefill", twin(prefill_side(workload).config)),
                 _Instance("decode", twin(decode_side(workload).config)))
    prefill, decode = _run_side(workload, instances, 1, None)
    assert prefill.records is not None and decode.records is not None
    assert scheduled(prefill.records, "b") == [0]
    assert scheduled(decode.records, "b") == []
    assert [r.step for r in decode.records if "a" in dict(r.external_hits)] == [2]
    sends = {rid: r.step for r in prefill.records if r.connector_report is not None
             for rid in r.connector_report.finished_sends}
    # b: dropped at step 1, heard at 2; a: pulled at 2, landed at 3, heard at 4.
    assert sends == {"b": 2, "a": 4}


def test_one_driver_refuses_a_pair() -> None:
    with pytest.raises(UserError, match="is a P/D pair"):
        Driver(resolve_system("impl")(pair_workload().config), pair_workload())


@pytest.mark.oracle
def test_a_decode_side_bug_is_reported_on_the_decode_instance(
        pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    from impl.connector.nixl import NixlConnectorScheduler

    claim = NixlConnectorScheduler.get_num_new_matched_tokens

    def one_short(self: NixlConnectorScheduler, request: object,
                  num_computed_tokens: int) -> tuple[int | None, bool]:
        count, load = claim(self, request, num_computed_tokens)  # type: ignore[arg-type]
        return (count - 1 if count else count), load

    monkeypatch.setattr(NixlConnectorScheduler, "get_num_new_matched_tokens", one_short)
    prefill, decode = run_instances(pair_workload(), pair.twin, pair.reference)
    assert prefill.divergence_at("exact") is None  # the prefill side is not where it is
    divergence = decode.divergence_at("exact")
    assert divergence is not None and divergence.step == 2, decode.divergences


def test_each_instance_of_each_side_writes_its_trace(tmp_path: Path) -> None:
    twin = resolve_system("impl")
    result = run_pd_pair(pair_workload(), twin, twin, trace_dir=tmp_path)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(f"pair_{kind}.{side}-impl.trace.jsonl" for kind in ("prefill",
                                                                              "decode")
                           for side in ("left", "right")), names
    lines = read_trace(tmp_path / "pair_decode.left-impl.trace.jsonl")
    assert lines[0]["workload"] == "pair@decode"
    assert len(lines) - 1 == result.decode.steps  # the header, then one line per step


def test_conform_reports_each_instance_with_its_own_config(tmp_path: Path) -> None:
    from conformance.sched.conform import run_conform
    from workloads.writer import dumps

    path = tmp_path / "pair.jsonl"
    path.write_text(dumps(pair_workload()))
    run = run_conform([str(path)], system="impl", against="impl", stream=io.StringIO())
    prefill, decode = run.outcomes
    assert (prefill.workload, decode.workload) == ("pair@prefill", "pair@decode")
    assert (prefill.instance, decode.instance) == ("prefill", "decode")
    assert prefill.config is not None and decode.config is not None
    assert (prefill.config.num_blocks, decode.config.num_blocks) == (24, 20)
    assert prefill.source is decode.source and decode.source is not None
    assert decode.source.pd_pair is not None  # --emit-regression writes the whole pair
    assert run.ok


def test_a_hybrid_pair_reports_a_failed_transfer_by_request(pair: Pair) -> None:
    """A pair on full attention + a sliding window: the decode side's failed transfer is
    reported by request alone (NIXL reports invalid blocks only where every group is full
    attention), so both instances run to the end; reported by blocks, upstream's scheduler
    would raise on the two groups (release check `block-level-failures-multi-group`)."""
    from conformance.sched.suite import SUITE

    workload = SUITE["pd-pair-hybrid"].make()
    assert any(r.kv_transfer is not None and r.kv_transfer.load_fails
               for r in workload.requests)
    for result in run_instances(workload, pair.twin, pair.reference):
        assert result.error is None and result.same_failure is None, result.same_failure
        assert result.divergence_at("exact") is None
        assert result.stall is None or result.stall.agreed
