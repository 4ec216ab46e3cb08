"""Write the conformance report (JSON + a self-contained HTML page) from a pytest junit file.

`python -m conformance.ci.report JUNIT --out DIR [--index]` exits 0 only if every differential
test passed and every lockstep workload in `DIR/conform.json` reached its level, so the nox
session's exit code is the verdict. `DIR` is one run's directory (`reports/conformance/<run
id>/`, shared with `vtwin gate --run-id`), so `index.html` here links the `conform.html` of the
same run; `--index` then repoints `latest` and rebuilds the index of runs one level up.
Tests are grouped by area (KV core, scheduler lockstep, runner, ...) with what each group checks,
because a flat JUnit table of 300 rows says nothing about what passing means.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from conformance.ci.hypothesis_counts import EXAMPLES, INVALID
from vtwin.errors import UserError


@dataclass(frozen=True, slots=True)
class CaseResult:
    suite: str
    name: str
    outcome: str  # passed | failed | error | skipped
    seconds: float
    detail: str
    examples: int | None = None
    """Hypothesis examples the test ran (None: not a Hypothesis test, or not counted);
    `conformance.ci.hypothesis_counts` writes them into junit."""
    invalid: int | None = None


def read_junit(path: Path) -> list[CaseResult]:
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError) as err:
        raise UserError(f"{path}: cannot read junit results: {err}") from None
    results = []
    for case in root.iter("testcase"):
        outcome, detail = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = "failed" if tag == "failure" else tag
                detail = (node.get("message") or "") + "\n" + (node.text or "")
                break
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        results.append(CaseResult(
            suite=case.get("classname", ""), name=case.get("name", ""), outcome=outcome,
            seconds=float(case.get("time", "0") or 0), detail=detail.strip(),
            examples=_int(props.get(EXAMPLES)), invalid=_int(props.get(INVALID)),
        ))
    return results


def _int(value: str | None) -> int | None:
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


AREAS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("KV core", ("test_kv_",), "block pool, hashing and KV-cache manager against upstream in "
     "Hypothesis state machines, one per cache family (full, window, chunked, mamba, hybrids)"),
    ("Scheduler lockstep", ("test_sched_", "test_generated_", "test_request_queue_"),
     "the scheduler twin and upstream's, step by step: generated workloads, the suite, "
     "regressions, planted bugs the comparer must catch, liveness, traces, multimodal "
     "requests and operator controls; the waiting queues call by call"),
    ("Mutation killers", ("test_mutation",), "workloads that kill known mutants of impl/"),
    ("Runner and engine", ("test_runner_",),
     "greedy tokens equal Hugging Face and upstream's engine; Triton kernel vs torch"),
    ("KV-cache planning", ("test_plan_",),
     "the planner (model layers to groups, block and page sizes, pool, tensors) against "
     "upstream's: the model catalogue over budgets and block sizes, random layer mixes and "
     "refusals; vtwin kv plan; workloads that name a model"),
    ("Versions and hashing", ("none_hash", "test_hash"),
     "NONE_HASH and hash functions derived like upstream 0.32.0"),
    ("Reports and CLI", ("test_report_", "test_cli_", "test_browser_", "test_nightly",
                         "test_docs"),
     "the vtwin command line, per-run report directories, pages in a headless browser, the "
     "README and the documentation site (links, the command-line reference)"),
    ("Releases and drift", ("test_release_", "test_drift"),
     "every claimed vLLM release builds and runs as a System (fields by capability, a build "
     "failure an error, never a difference); drift between releases names what changed"),
    ("Upstream coverage", ("test_coverage",),
     "how much of upstream the gate executes: missed lines by feature, the ratchet"),
    ("Connectors and the CPU offload tier", ("test_offload_", "test_offloading_",
                                             "test_transfers", "test_job_worker", "test_pd_",
                                             "test_connector_"),
     "the suite with the CPU offload tier on against upstream's connector, the played "
     "transfer worker, planted load failures, any connector's scheduler side (connector-check), "
     "P/D pairs (two instances behind the router, the worker between them), "
     "the OffloadingConnector's CPU manager (LRU, ARC) in lockstep with upstream's"),
    ("Forks and plugins", ("test_continuum_", "test_plugin_"),
     "the Continuum fork (seed 002) as a System against the twin's policy, the FCFS/Continuum "
     "study, a --scheduler-cls plugin under drift"),
    ("Systems, workers and recordings", ("test_specs", "test_worker", "test_record_",
                                         "test_conform_startup", "test_pool_watch"),
     "system specs, out-of-process workers over the wire protocol, start-up, upstream's pool "
     "states kept from its calls, traces recorded alone and compared offline"),
    ("Campaigns and guided search", ("test_campaign", "test_guided"),
     "generated-workload campaigns on Ray: families, shrinking, the store, resume, a killed "
     "worker, the budget; the coverage-guided search: mutation operators, the corpus, both "
     "strategies against upstream, a planted bug found"),
    ("Upstream bugs", ("test_upstream_bugs", "test_divergences_"),
     "upstream's own failures reproduced by the twin, and known divergences per pair"),
)


def area_of(result: CaseResult) -> str:
    """The area whose module name matches; the narrow "versions" match wins over
    "test_sched_" (test_sched_none_hash is about hashing across versions, not scheduling)."""
    ordered = sorted(AREAS, key=lambda area: area[0] != "Versions and hashing")
    for name, needles, _ in ordered:
        if any(needle in result.suite for needle in needles):
            return name
    return "Other"


def render_html(results: list[CaseResult], generated: str) -> str:
    counts = {k: sum(r.outcome == k for r in results)
              for k in ("passed", "failed", "error", "skipped")}
    groups: dict[str, list[CaseResult]] = {}
    for r in results:
        groups.setdefault(area_of(r), []).append(r)
    what = {name: text for name, _, text in AREAS}
    sections = "".join(
        _group(name, what.get(name, ""), groups[name])
        for name in [*what, "Other"] if name in groups)
    summary = ", ".join(f"{v} {k}" for k, v in counts.items())
    examples = _examples_line(results)
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>vtwin conformance</title><style>
body{{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em}}
table{{border-collapse:collapse;width:100%;table-layout:fixed}}
td,th{{border:1px solid #ddd;padding:4px 8px;vertical-align:top;overflow-wrap:anywhere}}
pre{{white-space:pre-wrap;overflow-wrap:anywhere}} th{{background:#f6f8fa;text-align:left}}
col.o{{width:6em}} col.t{{width:5em}} col.x{{width:9em}} td.n{{text-align:right}}
.checks{{color:#57606a}} .examples{{color:#0969da}} .inv{{color:#57606a;font-size:90%}}
summary{{padding:4px 0}}
</style></head><body>
<h1>vtwin conformance against upstream vLLM 0.32.0</h1>
<p>Generated {generated}. {summary}. {examples} Hypothesis profile
<code>{html.escape(os.environ.get("HYPOTHESIS_PROFILE", "default"))}</code> (examples per
property test: default 200, nightly 5,000, quick 25); the counts are what ran, per test.</p>
<p>Step-by-step lockstep results of this run's workload suite (levels reached, first
divergences, block and queue charts): <a href="conform.html">conform.html</a>.
All runs: <a href="../index.html">index of runs</a>.</p>
{sections}</body></html>
"""


def _examples_line(results: list[CaseResult]) -> str:
    """`N Hypothesis examples in M property tests.` (empty when nothing was counted)."""
    counted = [r for r in results if r.examples is not None]
    if not counted:
        return ""
    total = sum(r.examples or 0 for r in counted)
    return (f"{total:,} Hypothesis examples in {len(counted)} property "
            f"test{'s' if len(counted) != 1 else ''}.")


def _group(name: str, checks: str, results: list[CaseResult]) -> str:
    bad = sum(r.outcome in ("failed", "error") for r in results)
    passed = sum(r.outcome == "passed" for r in results)
    skipped = sum(r.outcome == "skipped" for r in results)
    rows = []
    for r in results:
        color = {"passed": "#1a7f37", "skipped": "#9a6700"}.get(r.outcome, "#cf222e")
        detail = (f"<details><summary>details</summary><pre>{html.escape(r.detail)}</pre>"
                  "</details>" if r.detail else "")
        examples = "" if r.examples is None else f"{r.examples:,}" + (
            f" <span class='inv'>(+{r.invalid:,} invalid)</span>" if r.invalid else "")
        rows.append(
            f"<tr><td>{html.escape(r.suite)}</td><td>{html.escape(r.name)}</td>"
            f"<td style='color:{color};font-weight:bold'>{r.outcome}</td>"
            f"<td class='n'>{examples}</td><td>{r.seconds:.1f}s</td><td>{detail}</td></tr>"
        )
    state = "open" if bad else ""
    examples_line = _examples_line(results)
    counted = (f" <span class='examples'>{examples_line}</span>" if examples_line else "")
    return (f"<details {state}><summary><b>{html.escape(name)}</b>: {passed} passed, {bad} "
            f"failed, {skipped} skipped of {len(results)}.{counted}<br><span "
            "class='checks'>Checks: "
            f"{html.escape(checks)}</span></summary><table><colgroup>"
            "<col><col><col class='o'><col class='x'><col class='t'><col></colgroup><tr>"
            "<th>module</th><th>test</th><th>outcome</th><th>examples</th><th>time</th>"
            f"<th></th></tr>{''.join(rows)}</table></details>")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.ci.report")
    parser.add_argument("junit", type=Path)
    parser.add_argument("--out", type=Path, default=Path("reports/conformance"))
    parser.add_argument("--index", action="store_true",
                        help="--out is a run directory: repoint latest and rebuild the index "
                             "of runs in its parent")
    args = parser.parse_args(argv)
    try:
        results = read_junit(args.junit)
    except UserError as err:
        print(f"conformance.ci.report: error: {err}", file=sys.stderr)
        return 2
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(
        {"generated": generated, "results": [asdict(r) for r in results]}, indent=2))
    (args.out / "index.html").write_text(render_html(results, generated))
    if args.index:
        from conformance.sched.report.writer import point_latest, update_runs_index

        point_latest(args.out.parent, args.out)
        update_runs_index(args.out.parent)
    failed = [r for r in results if r.outcome in ("failed", "error")]
    print(f"conformance report: {len(results)} tests, {len(failed)} failed -> "
          f"{args.out / 'index.html'}")
    diverged = gate_failures(args.out / "conform.json")
    if diverged:
        print(f"conformance report: workloads not at their level: {', '.join(diverged)} -> "
              f"{args.out / 'conform.html'}")
    return 1 if failed or diverged or not results else 0


def gate_failures(conform_json: Path) -> list[str]:
    """Workloads the lockstep gate did not pass (none if the gate did not run)."""
    if not conform_json.exists():
        return []
    try:
        data = json.loads(conform_json.read_text())
        return [w["workload"] for w in data["workloads"] if w["verdict"] != "passed"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        return [f"<unreadable {conform_json}: {err}>"]


if __name__ == "__main__":
    sys.exit(main())
