"""JSON records, the markdown report and the asv results reader."""

from __future__ import annotations

import json
from pathlib import Path

from conformance.bench.measure import Result
from conformance.bench.report import asv_rows, render_markdown, write_json

RESULTS = [
    Result("scheduler.decode[64]", "ms/step", 0.5, 2.5, 0.2, 5.0, True, "<= 1/5", True),
    Result("block_pool.touch[100000]", "Mblocks/s", 2.0, 2.5, 0.8, 0.8, False, ">= 5x", False),
]
ENV = {"date": "today", "commit": "abc", "python": "3.11", "machine": "m", "rounds": 5,
       "seconds": 1.0}


def test_json_records_carry_the_required_fields(tmp_path: Path) -> None:
    out = tmp_path / "quick.json"
    write_json(RESULTS, out)
    records = json.loads(out.read_text())
    assert [r["name"] for r in records] == [r.name for r in RESULTS]
    for record in records:
        assert {"name", "impl", "upstream", "unit", "ratio"} <= set(record)


def test_markdown_names_every_ratio_and_where_the_twin_is_slower() -> None:
    text = render_markdown(RESULTS, ENV, left_out=["engine end to end: missing"])
    assert "| scheduler.decode[64] |" in text and "| block_pool.touch[100000] |" in text
    slower = text.split("## Where the twin is slower than upstream")[1].split("##")[0]
    assert "block_pool.touch[100000]" in slower and "decode" not in slower
    assert "**NOT met**: `block_pool.touch[100000]`" in text
    assert "engine end to end: missing" in text


def test_markdown_says_so_when_the_twin_is_nowhere_slower() -> None:
    assert "nowhere in this run" in render_markdown(RESULTS[:1], ENV)


def test_asv_rows_pair_impl_and_upstream(tmp_path: Path) -> None:
    machine = tmp_path / "box"
    machine.mkdir()
    (machine / "machine.json").write_text("{}")
    (tmp_path / "benchmarks.json").write_text(json.dumps({
        "bench_replay.Replay.track_steps_per_second": {"unit": "steps/s"}, "version": 2}))
    (machine / "abcdef12-env.json").write_text(json.dumps({
        "commit_hash": "abcdef1234", "date": 2,
        "result_columns": ["result", "params", "version"],
        "results": {
            "bench_scheduler.Decode.time_step": [
                [1.0, 2.0, 4.0, 10.0], [["'impl'", "'upstream'"], ["16", "64"]], "v"],
            "bench_block_pool.PoolMemory.peakmem_pool_1m": [
                [100.0, 200.0], [["'impl'", "'upstream'"]], "v"],
            "bench_replay.Replay.track_steps_per_second": [
                [30.0, 10.0], [["'impl'", "'upstream'"]], "v"],
            "other.no_system": [[1.0], [["'x'"]], "v"],
        },
    }))
    commit, rows = asv_rows(tmp_path)
    assert commit == "abcdef12"
    decode = [r for r in rows if r.name.endswith("time_step")]
    assert [(r.params, r.impl, r.upstream) for r in decode] == [("16", 1.0, 4.0),
                                                                 ("64", 2.0, 10.0)]
    memory = [r for r in rows if "peakmem" in r.name]
    assert memory[0].unit == "bytes" and memory[0].ratio == 0.5 and memory[0].gain == 2.0
    assert not [r for r in rows if r.name == "other.no_system"]
    rate = [r for r in rows if r.name.endswith("track_steps_per_second")][0]
    assert rate.unit == "steps/s" and rate.gain == 3.0  # a rate: higher is better
