"""coverage.py's JSON, read into what the reports show: numbers per upstream file, the missed
regions grouped by feature, and the page (`index.html`) beside coverage.py's own HTML."""

from __future__ import annotations

import html
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from conformance.coverage.features import Feature, Region, classify, regions
from conformance.coverage.targets import FOCUS_FILES, relative_name


@dataclass(frozen=True, slots=True)
class FileRow:
    file: str
    statements: int
    covered: int
    branches: int
    covered_branches: int

    @property
    def statement_pct(self) -> float:
        return round(100 * self.covered / self.statements, 1) if self.statements else 100.0

    @property
    def branch_pct(self) -> float:
        return (round(100 * self.covered_branches / self.branches, 1) if self.branches
                else 100.0)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "statement_pct": self.statement_pct,
                "branch_pct": self.branch_pct, "focus": self.file in FOCUS_FILES}


def file_rows(data: dict[str, Any], root: Path) -> list[FileRow]:
    rows = []
    for path, entry in data["files"].items():
        s = entry["summary"]
        rows.append(FileRow(relative_name(path, root), s["num_statements"], s["covered_lines"],
                            s.get("num_branches", 0), s.get("covered_branches", 0)))
    return sorted(rows, key=lambda r: r.file)


def summarize(data: dict[str, Any], root: Path, features: tuple[Feature, ...],
              version: str) -> dict[str, Any]:
    """The run's summary: totals, per file, per feature, unmapped."""
    rows = file_rows(data, root)
    found: list[Region] = []
    for path, entry in data["files"].items():
        name = relative_name(path, root)
        source = Path(path).read_text(encoding="utf-8")
        found += regions(name, source, entry["missing_lines"])
    features = tuple(g for f in features if (g := f.for_release(version)) is not None)
    mapped, unmapped = classify(found, features)
    reasons = {f.name: f.reason for f in features}
    total = FileRow("total", sum(r.statements for r in rows), sum(r.covered for r in rows),
                    sum(r.branches for r in rows), sum(r.covered_branches for r in rows))
    focus = [r for r in rows if r.file in FOCUS_FILES]
    focus_total = FileRow("focus files", sum(r.statements for r in focus),
                          sum(r.covered for r in focus), sum(r.branches for r in focus),
                          sum(r.covered_branches for r in focus))
    return {
        "vllm": version,
        "total": total.to_json(),
        "focus_total": focus_total.to_json(),
        "files": [r.to_json() for r in rows],
        "focus": [r.to_json() for r in focus],
        "features": [{"name": name, "reason": reasons[name],
                      "missed_lines": sum(len(g.lines) for g in groups),
                      "regions": [_region(g) for g in groups]}
                     for name, groups in sorted(mapped.items(),
                                                key=lambda kv: -sum(len(g.lines)
                                                                    for g in kv[1]))],
        "unmapped": [_region(g) for g in sorted(unmapped, key=lambda g: -len(g.lines))],
    }


def _region(region: Region) -> dict[str, Any]:
    return {"file": region.file, "function": region.function, "span": region.span,
            "missed_lines": len(region.lines)}


def focus_table(summary: dict[str, Any]) -> str:
    """The markdown table `docs/gate.md` shows (the coverage tables): focus files, statements
    and branches."""
    lines = [f"| upstream {summary['vllm']} file | statements | hit | branches | hit |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for r in summary["focus"]:
        lines.append(f"| `{r['file']}` | {r['statements']} | {r['statement_pct']}% | "
                     f"{r['branches']} | {r['branch_pct']}% |")
    for label, key in (("the focus files", "focus_total"), ("every measured file", "total")):
        t = summary[key]
        lines.append(f"| {label} | {t['statements']} | {t['statement_pct']}% | "
                     f"{t['branches']} | {t['branch_pct']}% |")
    return "\n".join(lines) + "\n"


def render_page(summary: dict[str, Any], run_id: str) -> str:
    e = html.escape
    rows = "".join(
        f"<tr{' class=focus' if r['focus'] else ''}><td>{e(r['file'])}</td>"
        f"<td>{r['statements']}</td><td>{r['statement_pct']}%</td><td>{r['branches']}</td>"
        f"<td>{r['branch_pct']}%</td></tr>"
        for r in sorted(summary["files"], key=lambda r: (not r["focus"], r["file"])))
    features = "".join(
        f"<tr><td>{e(f['name'])}</td><td>{f['missed_lines']}</td><td>{e(f['reason'])}</td>"
        f"<td>{e(', '.join(sorted({r['function'] for r in f['regions']})))}</td></tr>"
        for f in summary["features"])
    focus_files = {r["file"] for r in summary["focus"]}
    unmapped = "".join(
        f"<tr><td>{e(r['file'])}</td><td>{e(r['function'])}</td><td>{r['span']}</td>"
        f"<td>{r['missed_lines']}</td></tr>" for r in summary["unmapped"]
        if r["file"] in focus_files)
    elsewhere: dict[str, int] = {}
    for r in summary["unmapped"]:
        if r["file"] not in focus_files:
            elsewhere[r["file"]] = elsewhere.get(r["file"], 0) + r["missed_lines"]
    unmapped += "".join(
        f"<tr><td>{e(file)}</td><td>(whole file, not a focus file)</td><td></td><td>{n}</td>"
        "</tr>" for file, n in sorted(elsewhere.items(), key=lambda kv: -kv[1]))
    t, f = summary["total"], summary["focus_total"]
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>upstream coverage {e(run_id)}</title><style>"
        "body{font-family:system-ui,sans-serif;max-width:1240px;margin:0 auto;padding:1.5em}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #d0d7de;"
        "padding:.25em .6em;text-align:left}tr.focus td:first-child{font-weight:600}"
        "</style></head><body>"
        f"<h1>Upstream coverage: vLLM {e(summary['vllm'])}</h1>"
        f"<p>Run {e(run_id)} ({e(summary.get('mode', ''))}): the focus files "
        f"{f['statement_pct']}% of {f['statements']} statements and {f['branch_pct']}% of "
        f"{f['branches']} branches; every measured file {t['statement_pct']}% and "
        f"{t['branch_pct']}% (most connectors are never imported). Upstream's source with "
        "hit and missed lines: "
        "<a href='html/index.html'>coverage.py's report</a>; the numbers: "
        "<a href='coverage.json'>coverage.json</a>.</p>"
        "<h2>Files (the focus files first, in bold)</h2><table><tr><th>file</th><th>statements</th>"
        f"<th>hit</th><th>branches</th><th>hit</th></tr>{rows}</table>"
        "<h2>Missed lines by feature</h2><table><tr><th>feature</th><th>missed lines</th>"
        f"<th>why</th><th>functions</th></tr>{features}</table>"
        "<h2>Unmapped (no entry in conformance/coverage_features.toml)</h2><table><tr>"
        "<th>file</th><th>function</th><th>lines</th><th>missed</th></tr>"
        f"{unmapped}</table></body></html>")
