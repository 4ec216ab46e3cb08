"""Write the conformance report (JSON + a self-contained HTML page) from a pytest junit file.

`python -m conformance.report JUNIT --out DIR` exits 0 only if every differential test passed,
so the nox session's exit code is the verdict.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from conformance.errors import UserError


@dataclass(frozen=True, slots=True)
class CaseResult:
    suite: str
    name: str
    outcome: str  # passed | failed | error | skipped
    seconds: float
    detail: str


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
        results.append(CaseResult(
            suite=case.get("classname", ""), name=case.get("name", ""), outcome=outcome,
            seconds=float(case.get("time", "0") or 0), detail=detail.strip(),
        ))
    return results


def render_html(results: list[CaseResult], generated: str) -> str:
    counts = {k: sum(r.outcome == k for r in results)
              for k in ("passed", "failed", "error", "skipped")}
    rows = []
    for r in results:
        color = {"passed": "#1a7f37", "skipped": "#9a6700"}.get(r.outcome, "#cf222e")
        detail = (f"<details><summary>details</summary><pre>{html.escape(r.detail)}</pre>"
                  "</details>" if r.detail else "")
        rows.append(
            f"<tr><td>{html.escape(r.suite)}</td><td>{html.escape(r.name)}</td>"
            f"<td style='color:{color};font-weight:bold'>{r.outcome}</td>"
            f"<td>{r.seconds:.1f}s</td><td>{detail}</td></tr>"
        )
    summary = ", ".join(f"{v} {k}" for k, v in counts.items())
    return f"""<!doctype html><html><head><meta charset="utf-8">
<title>vtwin conformance</title><style>
body{{font-family:system-ui,sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ddd;padding:4px 8px;vertical-align:top}} pre{{white-space:pre-wrap}}
</style></head><body>
<h1>vtwin conformance against upstream vLLM 0.32.0</h1>
<p>Generated {generated}. {summary}.</p>
<p>Step-by-step lockstep results of the default workload suite (levels reached, first
divergences, block and queue plots): <a href="conform.html">conform.html</a>.</p>
<table><tr><th>suite</th><th>test</th><th>outcome</th><th>time</th><th></th></tr>
{''.join(rows)}</table></body></html>
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.report")
    parser.add_argument("junit", type=Path)
    parser.add_argument("--out", type=Path, default=Path("reports/conformance"))
    args = parser.parse_args(argv)
    try:
        results = read_junit(args.junit)
    except UserError as err:
        print(f"conformance.report: error: {err}", file=sys.stderr)
        return 2
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(
        {"generated": generated, "results": [asdict(r) for r in results]}, indent=2))
    (args.out / "index.html").write_text(render_html(results, generated))
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
