"""The conformance page a reviewer acts on: engine config, the divergence id with a ready
entry, one diff per distinct divergence, the records before it in full, a block timeline, a
marker at the divergence step on every chart, trace links, and plotly.js embedded once.
The twin runs against a planted variant of itself: no upstream vLLM needed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from conformance.cli.conform import main
from conformance.sched.report.charts import plotly_js
from conformance.tests.test_sched_planted import FREE_ORDER
from workloads import dump

VARIANT = "conformance.tests.test_sched_planted:ForwardFreeImpl"


def failing_report(tmp_path: Path, *extra: str) -> tuple[str, dict[str, Any]]:
    path = tmp_path / "free-order.jsonl"
    dump(FREE_ORDER, path)
    out = tmp_path / "report"
    code = main(["conform", "--workload", str(path), "--system", VARIANT, "--against", "impl",
                 "--report", str(out), *extra])
    assert code == 1
    return (out / "conform.html").read_text(), json.loads((out / "conform.json").read_text())


def test_the_failing_page_shows_what_to_act_on(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    page, data = failing_report(tmp_path, "--traces")
    capsys.readouterr()
    assert "<code class='divergence-id'>planted:free_head</code>" in page
    assert 'id = &quot;planted:free_head&quot;' in page  # the entry to paste
    assert "Engine config" in page and "<th>max_num_seqs</th><td><code>4</code>" in page
    # exact breaks at step 0 on the free queue (A's blocks freed head first); renamed, blind
    # to physical free order, only at step 2 where B gets other blocks: one diff each, and
    # renamed's preceding records shown in full (they differ in the free queue), not as
    # "No Differences Found".
    assert "free_head[0]" in page and "new_block_ids.B[0][0]" in page
    assert "No Differences Found" not in page and "step 1: records differ" in page
    # Every chart carries the marker at the (first) divergence step.
    assert page.count("class='chart'") == 2 and page.count("data-marker-step='0'") == 2
    # Block timeline from the traces, and links to them.
    [w] = data["workloads"]
    assert w["timeline"]["sides"][0]["source"] == "trace"
    assert "Block timeline up to step 0" in page
    assert "href='traces/planted.left-impl-forward-free.trace.jsonl'" in page
    # Each system's free queue head and cached ids before the step (from the traces) and right
    # after the divergent step: the planted bug frees blocks head first.
    left, right = w["timeline"]["sides"]
    assert [c["step"] for c in left["columns"]] == [0, 0] and left["columns"][-1]["after"]
    assert left["columns"][0]["free_head"] == right["columns"][0]["free_head"] == [
        1, 2, 3, 4, 5, 6, 7, 8]
    assert left["columns"][1]["free_head"] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert right["columns"][1]["free_head"] == [4, 3, 2, 1, 5, 6, 7, 8]
    assert all(c["cached_ids"] == "" for c in left["columns"])
    assert "<th>free queue head</th>" in page and "<th>cached block ids</th>" in page
    assert "<th>after step 0</th>" in page
    assert page.count("<td class='differs'><code>4, 3, 2, 1, 5, 6, 7, 8, ...</code>") == 1


def test_without_traces_the_timeline_uses_the_records(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    page, data = failing_report(tmp_path)
    capsys.readouterr()
    [w] = data["workloads"]
    assert w["timeline"]["sides"][1]["source"] == "records"
    assert "run with --traces for whole tables" in page and "No traces for this run" in page
    # Without traces the state right after the divergent step is still shown, read then.
    after = [side["columns"][-1] for side in w["timeline"]["sides"]]
    assert [(c["after"], c["free_head"]) for c in after] == [
        (True, [1, 2, 3, 4, 5, 6, 7, 8]), (True, [4, 3, 2, 1, 5, 6, 7, 8])]
    assert w["divergence_states"]["exact"]["step"] == 0
    assert w["divergence_states"]["renamed"]["step"] == 2
    assert "<td class='differs'><code>4, 3, 2, 1, 5, 6, 7, 8, ...</code></td>" in page


def test_plotly_js_is_embedded_exactly_once(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    js = plotly_js()
    if not js:
        pytest.skip("the plotly package is not installed (pip install plotly)")
    out = tmp_path / "r"
    assert main(["conform", "--workload", "decode-heavy", "--workload", "spec-decode",
                 "--system", "impl", "--against", "impl", "--report", str(out)]) == 0
    capsys.readouterr()
    page = (out / "conform.html").read_text()
    assert page.count(js[:200]) == 1 and page.count("class='chart'") == 4
    assert not re.search(r"<script[^>]+src=", page)
    print(f"report size with 2 workloads: {len(page) / 1e6:.2f} MB")


def test_suite_entries_show_what_they_cover_not_their_base(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r"
    assert main(["conform", "--workload", "hybrid-mamba", "--system", "impl",
                 "--against", "impl", "--report", str(out)]) == 0
    capsys.readouterr()
    page = (out / "conform.html").read_text()
    assert "<b>Covers:</b> hybrid full + mamba, cache mode " in page


def test_cached_ids_read_as_runs() -> None:
    from conformance.sched.report.timeline import ranges
    from conformance.sched.trace import id_ranges, parse_id_ranges

    assert ranges([9, 3, 4, 5, 12, 7, 8]) == "3-5, 7-9, 12"
    assert ranges(list(range(0, 40, 2)), most=3) == "0, 2, 4, ... (20 ids)"
    assert id_ranges([9, 3, 4, 5, 12, 7, 8]) == "3-5,7-9,12" and id_ranges([]) == ""
    assert parse_id_ranges("3-5,7-9,12") == [3, 4, 5, 7, 8, 9, 12] and parse_id_ranges("") == []
